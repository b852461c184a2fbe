/* Another LD_PRELOAD interposer, as a profiler or a debugging tool would be: it wraps
 * cuDriverGetVersion and dlopen, forwards both with dlsym(RTLD_NEXT, ...) and counts them.
 * It prints "interposer dlopen <name>" per dlopen and, when unloaded,
 * "interposer cuDriverGetVersion <n> dlopen <m>" on stderr. Built by the tests as a shared
 * library (tests/test_runtime_faults.py). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

static int version_calls, dlopen_calls;

__attribute__((visibility("default"))) int cuDriverGetVersion(int *v)
{
    __atomic_fetch_add(&version_calls, 1, __ATOMIC_RELAXED);
    int (*next)(int *) = (int (*)(int *))dlsym(RTLD_NEXT, "cuDriverGetVersion");
    return next ? next(v) : 999; /* CUDA_ERROR_UNKNOWN: no libcuda after this library */
}

__attribute__((visibility("default"))) void *dlopen(const char *file, int mode)
{
    __atomic_fetch_add(&dlopen_calls, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "interposer dlopen %s\n", file ? file : "(null)");
    void *(*next)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    return next ? next(file, mode) : NULL;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "interposer cuDriverGetVersion %d dlopen %d\n", version_calls, dlopen_calls);
}
