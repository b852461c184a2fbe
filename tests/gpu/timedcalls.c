/* Driver calls of known, measured length on a real GPU, for the accuracy of the trace's
 * times and percentiles (tests/gpu/trust_validation.sh). Each call below is measured with
 * CLOCK_MONOTONIC around it and printed as "ns FUNCTION NANOSECONDS", so the exact
 * percentiles of the same calls are known.
 *   timedcalls short N: N calls of cuDriverGetVersion, no cuInit (a process of a few ms)
 *   timedcalls copies N SEED: cuInit, a context, then N synchronous host-to-device copies
 *     (cuMemcpyHtoD_v2) of sizes log-uniform from 4 KiB to 64 MiB (random from SEED)
 *   timedcalls errors: cuDeviceGet before cuInit (CUDA_ERROR_NOT_INITIALIZED, 3), then
 *     cuInit and cuDeviceGet(ordinal 999) (CUDA_ERROR_INVALID_DEVICE, 101)
 * Loads libcuda.so.1 with dlopen: no CUDA headers are needed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*init_fn)(unsigned);
typedef int (*version_fn)(int *);
typedef int (*device_get_fn)(int *, int);
typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*mem_alloc_fn)(uint64_t *, size_t);
typedef int (*memcpy_htod_fn)(uint64_t, const void *, size_t);

static void *h;

static void *sym(const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "timedcalls: no %s\n", name);
        exit(2);
    }
    return p;
}

static int64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !(h = dlopen("libcuda.so.1", RTLD_NOW)))
        return 2;
    int v, dev, rc;
    if (strcmp(argv[1], "short") == 0 && argc == 3) {
        version_fn version = (version_fn)sym("cuDriverGetVersion");
        for (int i = 0, n = atoi(argv[2]); i < n; i++) {
            int64_t t0 = now();
            rc = version(&v);
            printf("ns cuDriverGetVersion %lld\n", (long long)(now() - t0));
            if (rc)
                return 1;
        }
        return 0;
    }
    init_fn init = (init_fn)sym("cuInit");
    device_get_fn device_get = (device_get_fn)sym("cuDeviceGet");
    if (strcmp(argv[1], "errors") == 0) {
        rc = device_get(&dev, 0);
        printf("before init rc %d\n", rc);
        if (init(0))
            return 1;
        rc = device_get(&dev, 999);
        printf("bad ordinal rc %d\n", rc);
        return 0;
    }
    if (strcmp(argv[1], "copies") != 0 || argc != 4)
        return 2;
    int64_t t0 = now();
    rc = init(0);
    printf("ns cuInit %lld\n", (long long)(now() - t0));
    void *ctx;
    if (rc || device_get(&dev, 0) || ((ctx_create_fn)sym("cuCtxCreate_v2"))(&ctx, 0, dev))
        return 1;
    size_t max = (size_t)64 << 20;
    uint64_t d;
    char *host = malloc(max);
    if (!host || ((mem_alloc_fn)sym("cuMemAlloc_v2"))(&d, max))
        return 1;
    memset(host, 1, max);
    memcpy_htod_fn copy = (memcpy_htod_fn)sym("cuMemcpyHtoD_v2");
    srand((unsigned)atoi(argv[3]));
    for (int i = 0, n = atoi(argv[2]); i < n; i++) {
        size_t size = (size_t)(4096.0 * pow(16384.0, rand() / (double)RAND_MAX));
        t0 = now();
        rc = copy(d, host, size);
        printf("ns cuMemcpyHtoD_v2 %lld\n", (long long)(now() - t0));
        if (rc)
            return 1;
    }
    return 0;
}
