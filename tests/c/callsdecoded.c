/*
 * callsdecoded.c: driver calls with known arguments for SHIMGEN_TRACE=calls
 * (tests/runtime/test_calls.py), made through every route: dlsym by name and by _v2 name,
 * cuGetProcAddress at several versions, cuGetProcAddress_v2. Each call is printed as
 * "name result [output]" in order, so the test compares the decoded records with what the
 * program saw. Modes: "routes" (the calls once), "long" (cuModuleLoad of a 100-byte name,
 * longer than its capture slot, then cuDeviceGetAttribute with attrib = 8, which has an
 * alias, and dev = -2), "loop N" (cuDeviceGetAttribute with
 * attrib = 7, dev = i for i < N, for the ring's wrap), "forever" (the same loop without end,
 * "ready" after 10000 calls, then each 1000th i on stdout, for SIGKILL), "threads N K" (N
 * threads alive at once, each K calls of cuDeviceGetAttribute(&pi, attrib = thread, dev = i)
 * after one with dev = -1).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_t)();
static void *h;

static fn_t sym(const char *name)
{
    fn_t f = (fn_t)dlsym(h, name);
    if (!f) {
        fprintf(stderr, "no %s\n", name);
        exit(2);
    }
    return f;
}

struct memcpy2d { /* CUDA_MEMCPY2D, as cuda.h lays it out on x86-64 */
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    unsigned long long srcDevice;
    void *srcArray;
    size_t srcPitch, dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    unsigned long long dstDevice;
    void *dstArray;
    size_t dstPitch, WidthInBytes, Height;
};

static void routes(void)
{
    int v = 0, pi = -1, r, status = -1;
    unsigned long long dptr = 0;
    void *pfn = NULL;
    const char *s = NULL;
    void *mod = NULL, *fun = NULL;
    char name[64] = "";

    /* handles the driver never gave: before cuInit, which the driver checks first */
    r = sym("cuLaunchKernel")((void *)0x1234, 1u, 2u, 3u, 4u, 5u, 6u, 7u, (void *)0x5678,
                              (void **)0x1110, (void **)0x2220);
    printf("cuLaunchKernel %d\n", r);
    r = sym("cuStreamQuery")((void *)0x5678);
    printf("cuStreamQuery %d\n", r);
    r = sym("cuStreamQuery")((void *)0x9abc);
    printf("cuStreamQuery %d\n", r);
    r = sym("cuInit")(0);
    printf("cuInit %d\n", r);
    r = sym("cuDriverGetVersion")(&v);
    printf("cuDriverGetVersion %d %d\n", r, v);
    r = sym("cuDeviceGetAttribute")(&pi, 124, 0);
    printf("cuDeviceGetAttribute %d\n", r);
    r = sym("cuMemAlloc")(&dptr, (unsigned)268435456);
    printf("cuMemAlloc %d\n", r);
    r = sym("cuMemAlloc_v2")(&dptr, (size_t)4096);
    printf("cuMemAlloc_v2 %d\n", r);
    r = sym("cuGetProcAddress")("cuMemAlloc", &pfn, 3000, 0ull);
    printf("cuGetProcAddress %d\n", r);
    r = ((fn_t)pfn)(&dptr, (unsigned)1000);
    printf("cuMemAlloc %d\n", r);
    r = sym("cuGetProcAddress")("cuMemAlloc", &pfn, 3020, 0ull);
    printf("cuGetProcAddress %d\n", r);
    r = ((fn_t)pfn)(&dptr, (size_t)2000);
    printf("cuMemAlloc_v2 %d\n", r);
    r = sym("cuGetProcAddress_v2")("cuDriverGetVersion", &pfn, 12000, 0ull, &status);
    printf("cuGetProcAddress_v2 %d %d\n", r, status);
    r = ((fn_t)pfn)(&v);
    printf("cuDriverGetVersion %d %d\n", r, v);
    r = sym("cuGetErrorName")(2, &s);
    printf("cuGetErrorName %d\n", r);
    r = sym("cuGetErrorString")(100, &s);
    printf("cuGetErrorString %d\n", r);
    r = sym("cuModuleLoad")(&mod, "/nonexistent/kernel.cubin");
    printf("cuModuleLoad %d\n", r);
    r = sym("cuModuleGetFunction")(&fun, (void *)0, "my_kernel");
    printf("cuModuleGetFunction %d\n", r);
    struct memcpy2d c;
    memset(&c, 0, sizeof c);
    c.srcXInBytes = 1, c.srcY = 2, c.srcMemoryType = 1, c.srcHost = (void *)0x1000;
    c.srcPitch = 64, c.dstMemoryType = 2, c.dstDevice = 0x2000, c.WidthInBytes = 32;
    c.Height = 4;
    r = sym("cuMemcpy2D_v2")(&c);
    printf("cuMemcpy2D_v2 %d\n", r);
    r = sym("cuDeviceGetName")(name, 64, 0);
    printf("cuDeviceGetName %d\n", r);
    r = ((int (*)(long, long, long, long, long, long))sym("cuGLInit"))(1, 2, 3, 4, 5, 6);
    printf("cuGLInit %d\n", r);
    int dev = -1, n = -1;
    void *ctx = NULL, *host = NULL;
    size_t fr = 0, total = 0;
    r = sym("cuDeviceGet")(&dev, 0);
    printf("cuDeviceGet %d\n", r);
    r = sym("cuDeviceGetCount")(&n);
    printf("cuDeviceGetCount %d\n", r);
    r = sym("cuCtxGetCurrent")(&ctx);
    printf("cuCtxGetCurrent %d\n", r);
    r = sym("cuMemGetInfo_v2")(&fr, &total);
    printf("cuMemGetInfo_v2 %d\n", r);
    r = sym("cuCtxSynchronize")();
    printf("cuCtxSynchronize %d\n", r);
    r = sym("cuDeviceTotalMem_v2")(&total, 0);
    printf("cuDeviceTotalMem_v2 %d\n", r);
    r = sym("cuMemFree_v2")(0x1000ull);
    printf("cuMemFree_v2 %d\n", r);
    r = sym("cuMemsetD8_v2")(0x1000ull, (unsigned char)0xab, (size_t)100);
    printf("cuMemsetD8_v2 %d\n", r);
    r = sym("cuMemHostAlloc")(&host, (size_t)100, 3u);
    printf("cuMemHostAlloc %d\n", r);
    r = sym("cuDevicePrimaryCtxRetain")(&ctx, 0);
    printf("cuDevicePrimaryCtxRetain %d\n", r);
}

static pthread_barrier_t all_alive; /* every thread alive at once: none reuses a block */
static int per_thread;

static void *thread_main(void *arg)
{
    int t = (int)(intptr_t)arg, pi;
    fn_t attr = sym("cuDeviceGetAttribute");
    attr(&pi, t, -1); /* the thread's block, before the barrier */
    pthread_barrier_wait(&all_alive);
    for (int i = 0; i < per_thread; i++)
        attr(&pi, t, i);
    return NULL;
}

int main(int argc, char **argv)
{
    h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    const char *mode = argc > 1 ? argv[1] : "routes";
    int pi;
    if (strcmp(mode, "routes") == 0)
        routes();
    else if (strcmp(mode, "long") == 0) {
        char s[101];
        void *mod = NULL;
        for (int i = 0; i < 100; i++)
            s[i] = (char)('a' + i % 26);
        s[100] = 0;
        printf("cuModuleLoad %d\n", sym("cuModuleLoad")(&mod, s));
        printf("cuDeviceGetAttribute %d\n", sym("cuDeviceGetAttribute")(&pi, 8, -2));
    } else if (strcmp(mode, "loop") == 0) {
        long n = argc > 2 ? atol(argv[2]) : 0;
        fn_t attr = sym("cuDeviceGetAttribute");
        for (long i = 0; i < n; i++)
            attr(&pi, 7, (int)i);
    } else if (strcmp(mode, "forever") == 0) {
        fn_t attr = sym("cuDeviceGetAttribute");
        for (long i = 0;; i++) {
            attr(&pi, 7, (int)i);
            if (i == 10000)
                printf("ready\n"), fflush(stdout);
        }
    } else if (strcmp(mode, "threads") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 2;
        per_thread = argc > 3 ? atoi(argv[3]) : 2000;
        pthread_t t[64];
        pthread_barrier_init(&all_alive, NULL, (unsigned)(n < 64 ? n : 64) + 1);
        for (int k = 0; k < n && k < 64; k++)
            pthread_create(&t[k], NULL, thread_main, (void *)(intptr_t)(k + 1));
        pthread_barrier_wait(&all_alive);
        for (int k = 0; k < n && k < 64; k++)
            pthread_join(t[k], NULL);
    }
    return 0;
}
