/* The cost of a capture read through runtime/base/saferead.c against a plain copy
 * (docs/performance.md, "Calls mode"): ns per capture of a 64-byte string (strnlen and
 * memcpy, as stats/calls.c did, against shimgen_safe_string) and of a 128-byte struct (memcpy
 * against shimgen_safe_read), the median of ROUNDS rounds of N captures each.
 *   cc -O2 -Iruntime/base benchmarks/c/safereadbench.c runtime/base/saferead.c -o safereadbench
 *   taskset -c 0 ./safereadbench [N] [ROUNDS]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "saferead.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *volatile name = "libcudnn_engines_precompiled.so.9:sm90_xmma_gemm_kernel";
static char volatile_struct[128] = {1, 2, 3};

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int rounds = argc > 2 ? atoi(argv[2]) : 9;
    double t[4][64];
    char dst[128];
    if (rounds > 64)
        rounds = 64;
    for (int r = 0; r < rounds; r++) {
        double a = now();
        for (long i = 0; i < n; i++) {
            size_t len = strnlen(name, 63);
            memcpy(dst, name, len);
            dst[len] = 0;
            __asm__ volatile("" ::"r"(dst) : "memory");
        }
        double b = now();
        for (long i = 0; i < n; i++) {
            shimgen_safe_string(dst, 64, name);
            __asm__ volatile("" ::"r"(dst) : "memory");
        }
        double c = now();
        for (long i = 0; i < n; i++) {
            memcpy(dst, (const char *)volatile_struct, 128);
            __asm__ volatile("" ::"r"(dst) : "memory");
        }
        double d = now();
        for (long i = 0; i < n; i++) {
            shimgen_safe_read(dst, (const char *)volatile_struct, 128);
            __asm__ volatile("" ::"r"(dst) : "memory");
        }
        double e = now();
        t[0][r] = (b - a) / n, t[1][r] = (c - b) / n, t[2][r] = (d - c) / n, t[3][r] = (e - d) / n;
    }
    const char *what[4] = {"string, strnlen + memcpy", "string, shimgen_safe_string",
                           "struct 128 B, memcpy", "struct 128 B, shimgen_safe_read"};
    for (int k = 0; k < 4; k++) {
        qsort(t[k], (size_t)rounds, sizeof t[k][0], cmp);
        printf("%-32s %8.1f ns median (%.1f-%.1f) of %d rounds of %ld\n", what[k],
               t[k][rounds / 2], t[k][0], t[k][rounds - 1], rounds, n);
    }
    return 0;
}
