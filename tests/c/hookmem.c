/* Allocation calls for the user-hook tests (tests/run/test_userhooks.py), run against the fake
 * driver of tests/c/fake_mem_libcuda.c under a shim built with examples/hooks/memlimit.c or
 * launchlog.c. argv[1]: "dlsym" or "procaddr" (how each function is found: dlsym on
 * libcuda.so.1, or cuGetProcAddress_v2 with the base name); then one operation a word:
 *   alloc:N async:N managed:N pitch:W:H create:N   allocate (print "alloc #k rc R")
 *   free:K freeasync:K release:K                    free the k-th allocation ("free #k rc R")
 *   info                                            cuMemGetInfo_v2 ("info rc R free F total T")
 *   churn:T:N:S    T threads, each N times: S bytes with cuMemAlloc_v2, then cuMemFree_v2
 *   launch:GX:GY:GZ:BX:BY:BZ                        cuLaunchKernel ("launch rc R")
 * Sizes may end in K, M or G (binary). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_fn)(const char *, void **, int, unsigned long long, int *);

static void *lib;
static int by_procaddr;

static void *find(const char *exported, const char *base)
{
    if (!by_procaddr)
        return dlsym(lib, exported);
    static gpa_fn gpa;
    if (!gpa)
        gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
    void *fn = NULL;
    int status = -1;
    if (!gpa || gpa(base, &fn, 12040, 0, &status) != 0 || status != 0)
        return NULL;
    return fn;
}

static unsigned long long size_of(const char *s)
{
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    return n << shift;
}

#define MAX_ALLOCS 256
static unsigned long long allocs[MAX_ALLOCS];
static int nallocs;

static void *churn(void *arg)
{
    const unsigned long long *a = arg;
    CUresult (*alloc)(CUdeviceptr *, size_t) = find("cuMemAlloc_v2", "cuMemAlloc");
    CUresult (*release)(CUdeviceptr) = find("cuMemFree_v2", "cuMemFree");
    for (unsigned long long i = 0; i < a[0]; i++) {
        CUdeviceptr p = 0;
        if (alloc(&p, a[1]) == 0 && release(p) != 0)
            abort();
    }
    return NULL;
}

static CUresult allocate(const char *op, const char *arg)
{
    CUdeviceptr p = 0;
    CUresult rc = 1;
    if (strcmp(op, "alloc") == 0) {
        CUresult (*f)(CUdeviceptr *, size_t) = find("cuMemAlloc_v2", "cuMemAlloc");
        rc = f(&p, size_of(arg));
    } else if (strcmp(op, "async") == 0) {
        CUresult (*f)(CUdeviceptr *, size_t, void *) = find("cuMemAllocAsync", "cuMemAllocAsync");
        rc = f(&p, size_of(arg), NULL);
    } else if (strcmp(op, "managed") == 0) {
        CUresult (*f)(CUdeviceptr *, size_t, unsigned) =
            find("cuMemAllocManaged", "cuMemAllocManaged");
        rc = f(&p, size_of(arg), 1);
    } else if (strcmp(op, "pitch") == 0) {
        CUresult (*f)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
            find("cuMemAllocPitch_v2", "cuMemAllocPitch");
        size_t pitch = 0;
        rc = f(&p, &pitch, size_of(arg), size_of(strchr(arg, ':') + 1), 4);
    } else if (strcmp(op, "create") == 0) {
        CUresult (*f)(unsigned long long *, size_t, const void *, unsigned long long) =
            find("cuMemCreate", "cuMemCreate");
        rc = f(&p, size_of(arg), NULL, 0);
    }
    if (nallocs < MAX_ALLOCS)
        allocs[nallocs] = rc == 0 ? p : 0;
    printf("alloc #%d rc %d\n", nallocs++, rc);
    return rc;
}

static void release(const char *op, int k)
{
    unsigned long long p = k >= 0 && k < nallocs ? allocs[k] : 0;
    CUresult rc;
    if (strcmp(op, "free") == 0)
        rc = ((CUresult (*)(CUdeviceptr))find("cuMemFree_v2", "cuMemFree"))(p);
    else if (strcmp(op, "freeasync") == 0)
        rc = ((CUresult (*)(CUdeviceptr, void *))find("cuMemFreeAsync", "cuMemFreeAsync"))(p,
                                                                                         NULL);
    else
        rc = ((CUresult (*)(unsigned long long))find("cuMemRelease", "cuMemRelease"))(p);
    printf("free #%d rc %d\n", k, rc);
}

int main(int argc, char **argv)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib || argc < 2) {
        fprintf(stderr, "hookmem: %s\n", lib ? "usage: hookmem dlsym|procaddr OP..." : dlerror());
        return 2;
    }
    by_procaddr = strcmp(argv[1], "procaddr") == 0;
    for (int a = 2; a < argc; a++) {
        char op[32];
        const char *colon = strchr(argv[a], ':');
        size_t n = colon ? (size_t)(colon - argv[a]) : strlen(argv[a]);
        snprintf(op, sizeof op, "%.*s", (int)n, argv[a]);
        const char *arg = colon ? colon + 1 : "";
        if (strcmp(op, "info") == 0) {
            size_t f = 0, t = 0;
            CUresult (*info)(size_t *, size_t *) = find("cuMemGetInfo_v2", "cuMemGetInfo");
            CUresult rc = info(&f, &t);
            printf("info rc %d free %zu total %zu\n", rc, f, t);
        } else if (!strcmp(op, "free") || !strcmp(op, "freeasync") || !strcmp(op, "release")) {
            release(op, atoi(arg));
        } else if (strcmp(op, "churn") == 0) {
            unsigned threads = (unsigned)atoi(arg);
            const char *rest = strchr(arg, ':') + 1;
            unsigned long long args[2] = {strtoull(rest, NULL, 10),
                                          size_of(strchr(rest, ':') + 1)};
            pthread_t t[64];
            for (unsigned i = 0; i < threads && i < 64; i++)
                pthread_create(&t[i], NULL, churn, args);
            for (unsigned i = 0; i < threads && i < 64; i++)
                pthread_join(t[i], NULL);
            printf("churn done\n");
        } else if (strcmp(op, "launch") == 0) {
            unsigned d[6] = {1, 1, 1, 1, 1, 1};
            sscanf(arg, "%u:%u:%u:%u:%u:%u", &d[0], &d[1], &d[2], &d[3], &d[4], &d[5]);
            CUresult (*f)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, void *, void **, void **) =
                find("cuLaunchKernel", "cuLaunchKernel");
            printf("launch rc %d\n", f((void *)0x1, d[0], d[1], d[2], d[3], d[4], d[5], 0, NULL,
                                       NULL, NULL));
        } else {
            allocate(op, arg);
        }
    }
    return 0;
}
