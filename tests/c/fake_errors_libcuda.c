/* A FAKE libcuda for the error and histogram tests: not NVIDIA's driver. Its functions
 * return what they are told, spin a known number of TSC ticks or nanoseconds, or (cudbgFakeNoResult, a
 * name outside the driver API's, so not a CUresult function by shimgen/cuda.py's rule)
 * return a non-zero int that the trace must not count as an error. Built with SONAME
 * libcuda.so.1. */
#include <stdint.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;

static inline uint64_t ticks(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

EXPORT CUresult cuInit(unsigned flags)
{
    return flags ? 1 : 0;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    *v = 12345;
    return 0;
}

/* Nothing to look up here: every name is CUDA_ERROR_NOT_FOUND (500). */
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    (void)symbol, (void)version, (void)flags;
    if (pfn)
        *pfn = 0;
    return 500;
}

/* Returns `code`: a CUresult function's error return, as many as the test wants. */
EXPORT CUresult cuFakeReturn(int code)
{
    return code;
}

/* Spins until `n` ticks have passed since its entry; returns success. */
EXPORT CUresult cuFakeSpinTicks(uint64_t n)
{
    uint64_t t0 = ticks();
    while (ticks() - t0 < n)
        ;
    return 0;
}

/* Spins until `ns` nanoseconds of CLOCK_MONOTONIC have passed since its entry: a call of a
 * chosen length, to the nanosecond, whatever the TSC's rate. */
EXPORT CUresult cuFakeSpinNs(uint64_t ns)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec -
               (uint64_t)a.tv_nsec < ns);
    return 0;
}

/* Not a CUresult function (debugger-interface naming): its non-zero int is no error code. */
EXPORT int cudbgFakeNoResult(int v)
{
    return v;
}
