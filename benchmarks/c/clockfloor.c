/* clockfloor: what reading the clock costs on this machine, next to a cheap driver call.
 *
 *   clockfloor LIB ITERS REPS
 *
 * LIB is the real driver's path (no shim). cuDriverGetVersion is called through a function
 * pointer in a tight loop, as in callbench, in three ways:
 *
 *   plain   the call alone
 *   tsc2    the call bracketed by two rdtsc, the elapsed ticks added to a total and a
 *           running maximum: the least that any per-call timer built on the TSC adds,
 *           written inline by the compiler with no shadow stack, no TLS, no trampoline
 *   tsc1    one rdtsc per call, for comparison
 *
 * Each is timed REPS times over ITERS calls, one loop after the other; the fastest
 * repetition of each is reported, in ns per call, as one JSON object on stdout. The difference tsc2 - plain is the floor for
 * SHIMGEN_TRACE=time's added cost on this machine.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

typedef int (*fn_version)(int *);
static fn_version fn;

__attribute__((noinline)) static long loop_plain(long n)
{
    long bad = 0;
    for (long i = 0; i < n; i++) {
        int v = 0;
        bad += fn(&v) != 0;
    }
    return bad;
}

static volatile uint64_t sink_total, sink_max;

__attribute__((noinline)) static long loop_tsc2(long n)
{
    long bad = 0;
    uint64_t total = 0, max = 0;
    for (long i = 0; i < n; i++) {
        int v = 0;
        uint64_t t0 = __rdtsc();
        bad += fn(&v) != 0;
        uint64_t d = __rdtsc() - t0;
        total += d;
        max = d > max ? d : max;
    }
    sink_total = total;
    sink_max = max;
    return bad;
}

__attribute__((noinline)) static long loop_tsc1(long n)
{
    long bad = 0;
    uint64_t total = 0;
    for (long i = 0; i < n; i++) {
        int v = 0;
        total += __rdtsc();
        bad += fn(&v) != 0;
    }
    sink_total = total;
    return bad;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double best(long (*loop)(long), long iters, int reps, long *bad)
{
    double min = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        *bad += loop(iters);
        double ns = (now_ns() - t0) / (double)iters;
        min = r == 0 || ns < min ? ns : min;
    }
    return min;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: clockfloor LIB ITERS REPS\n");
        return 2;
    }
    long iters = atol(argv[2]);
    int reps = atoi(argv[3]);
    if (iters < 1 || reps < 1) {
        fprintf(stderr, "clockfloor: ITERS and REPS must be positive\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "clockfloor: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    fn = (fn_version)dlsym(h, "cuDriverGetVersion");
    if (!fn) {
        fprintf(stderr, "clockfloor: dlsym(cuDriverGetVersion): %s\n", dlerror());
        return 1;
    }
    long bad = loop_plain(iters / 10 + 1); /* warm-up */
    /* The three loops one after the other, so that they see the same machine state. */
    double plain = best(loop_plain, iters, reps, &bad);
    double tsc2 = best(loop_tsc2, iters, reps, &bad);
    double tsc1 = best(loop_tsc1, iters, reps, &bad);
    printf("{\"function\": \"cuDriverGetVersion\", \"iters\": %ld, \"bad_results\": %ld, "
           "\"plain_ns\": %.4f, \"tsc2_ns\": %.4f, \"tsc1_ns\": %.4f, "
           "\"floor_added_ns\": %.4f}\n",
           iters, bad, plain, tsc2, tsc1, tsc2 - plain);
    return bad != 0;
}
