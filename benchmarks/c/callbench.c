/* callbench: time one cheap libcuda function called through a function pointer.
 *
 *   callbench LIB FUNC ITERS REPS            tight loop, REPS timed repetitions
 *   callbench LIB FUNC ITERS REPS DIRECT     the same, alternating with the function of the
 *                                            real driver DIRECT, loaded with dlmopen into a
 *                                            namespace of its own (where neither LD_PRELOAD
 *                                            nor the shim's dlopen redirection applies), so
 *                                            that the shim and the driver are compared
 *                                            within one process, block by block
 *   callbench LIB FUNC ITERS threads=T       T threads at once, ITERS calls each; wall
 *                                            time per call over all threads
 *
 * With CALLBENCH_WORKSET=BYTES (a power of two), the timed loop (workset_loop) also reads 8 cache lines of a
 * working set of that size after each call, scattered over it, as a program's own data
 * between its driver calls: what a tracing mode's writes evict from the caches shows as
 * the program's own reads missing.
 *
 * LIB is what dlopen gets: the real driver's path for a direct measurement, or
 * "libcuda.so.1" under LD_PRELOAD of a shim (the shim has that SONAME, so dlopen returns
 * the shim's handle). FUNC is cuDriverGetVersion, cuCtxGetCurrent, cuGetProcAddress or
 * cuLaunchKernel (eleven arguments; never initialised, so the driver fails it at once),
 * cuLaunchKernelEx (its CUlaunchConfig in the caller's frame; calls mode reads it at entry)
 * or cuLaunchKernelEx:static (the same config in static memory).
 * The function is resolved with dlsym and called once before any timing, so the shim's
 * lazy first-call path is not measured. Output: one JSON object on stdout.
 *
 * The timed loop is bench_loop(), a separate non-inlined function, so that callgrind can
 * count its instructions alone (--collect-atstart=no --toggle-collect=bench_loop).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*fn_version)(int *);
typedef int (*fn_ctx)(void **);
typedef int (*fn_proc)(const char *, void **, int, uint64_t);
typedef int (*fn_attr)(int *, int, int);

typedef int (*fn_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

enum kind { K_VERSION, K_CTX, K_PROC, K_LAUNCH, K_ATTR, K_LAUNCHEX, K_LAUNCHEX_STATIC };

/* cuLaunchKernelEx's CUlaunchConfig (56 bytes) */
struct launch_config {
    unsigned grid[3], block[3], shmem;
    void *stream, *attrs;
    unsigned nattrs;
};
typedef int (*fn_launchex)(const struct launch_config *, void *, void **, void **);
static struct launch_config static_config = {{1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, 0};

static enum kind kind;
static void *fn, *direct_fn;

/* One call of the function under test; returns the driver's CUresult. */
static inline __attribute__((always_inline)) int call_once(void *fn)
{
    switch (kind) {
    case K_VERSION: {
        int v = 0;
        return ((fn_version)fn)(&v);
    }
    case K_CTX: {
        void *ctx = NULL;
        return ((fn_ctx)fn)(&ctx);
    }
    case K_LAUNCH: /* eleven arguments; without cuInit the driver answers 3 at once */
        return ((fn_launch)fn)((void *)0x1234, 1, 2, 3, 4, 5, 6, 7, NULL, NULL, NULL);
    case K_LAUNCHEX: { /* the config in the caller's frame, as cudart keeps it */
        struct launch_config c = {{1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, 0};
        int r = ((fn_launchex)fn)(&c, (void *)0x1234, NULL, NULL);
        __asm__ volatile("" ::"r"(&c) : "memory");
        return r;
    }
    case K_LAUNCHEX_STATIC: /* the same config in static memory */
        return ((fn_launchex)fn)(&static_config, (void *)0x1234, NULL, NULL);
    case K_ATTR: { /* arguments that differ every call */
        static int n;
        int v = 0;
        n++;
        return ((fn_attr)fn)(&v, 1 + n % 120, n);
    }
    default: {
        void *p = NULL;
        return ((fn_proc)fn)("cuDriverGetVersion", &p, 12000, 0);
    }
    }
}

/* The loop that is timed (and counted by callgrind). Returns the number of calls whose
 * result differed from `expect`. */
__attribute__((noinline)) long bench_loop(long iters, int expect)
{
    long bad = 0;
    for (long i = 0; i < iters; i++)
        bad += call_once(fn) != expect;
    return bad;
}

static unsigned char *workset;
static size_t workset_lines;

/* bench_loop with 8 scattered reads of the working set after each call (CALLBENCH_WORKSET). */
__attribute__((noinline)) long workset_loop(long iters, int expect)
{
    long bad = 0;
    unsigned sum = 0;
    for (long i = 0; i < iters; i++) {
        bad += call_once(fn) != expect;
        for (int k = 0; k < 8; k++)
            sum += workset[((((size_t)i * 8 + (size_t)k) * 2654435761u) & (workset_lines - 1)) * 64];
    }
    __asm__ volatile("" ::"r"(sum));
    return bad;
}

/* The same loop under another name, for the warm-up, which callgrind does not count. */
__attribute__((noinline)) long warm_loop(long iters, int expect)
{
    long bad = 0;
    for (long i = 0; i < iters; i++)
        bad += call_once(fn) != expect;
    return bad;
}

/* The same loop calling the real driver's function directly (paired mode). */
__attribute__((noinline)) long direct_loop(long iters, int expect)
{
    long bad = 0;
    for (long i = 0; i < iters; i++)
        bad += call_once(direct_fn) != expect;
    return bad;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct worker {
    pthread_barrier_t *barrier;
    long iters;
    int expect;
    long bad;
    double start, end;
};

static void *thread_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(w->barrier);
    w->start = now_ns();
    w->bad = bench_loop(w->iters, w->expect);
    w->end = now_ns();
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: callbench LIB FUNC ITERS REPS|threads=T [DIRECT]\n");
        return 2;
    }
    const char *lib = argv[1], *name = argv[2];
    long iters = atol(argv[3]);
    if (strcmp(name, "cuDriverGetVersion") == 0)
        kind = K_VERSION;
    else if (strcmp(name, "cuCtxGetCurrent") == 0)
        kind = K_CTX;
    else if (strcmp(name, "cuGetProcAddress") == 0)
        kind = K_PROC;
    else if (strcmp(name, "cuLaunchKernel") == 0)
        kind = K_LAUNCH;
    else if (strcmp(name, "cuDeviceGetAttribute") == 0)
        kind = K_ATTR;
    else if (strcmp(name, "cuLaunchKernelEx") == 0)
        kind = K_LAUNCHEX;
    else if (strcmp(name, "cuLaunchKernelEx:static") == 0)
        kind = K_LAUNCHEX_STATIC, name = "cuLaunchKernelEx";
    else {
        fprintf(stderr, "callbench: unsupported function %s\n", name);
        return 2;
    }
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "callbench: dlopen(%s): %s\n", lib, dlerror());
        return 1;
    }
    fn = dlsym(h, name);
    if (!fn) {
        fprintf(stderr, "callbench: dlsym(%s): %s\n", name, dlerror());
        return 1;
    }
    Dl_info info;
    const char *from = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
    const char *ws = getenv("CALLBENCH_WORKSET");
    if (ws && atol(ws) >= 64) {
        for (workset_lines = 1; workset_lines * 2 <= (size_t)atol(ws) / 64;)
            workset_lines *= 2; /* a power of two: the index is a mask */
        workset = calloc(workset_lines, 64);
        if (!workset)
            return 1;
        for (size_t i = 0; i < workset_lines; i++)
            workset[i * 64] = (unsigned char)i;
    }
    int rc = call_once(fn); /* first call: the shim loads the driver here */
    if (warm_loop(iters / 10 + 1, rc) != 0) { /* warm-up */
        fprintf(stderr, "callbench: %s does not return the same code every time\n", name);
        return 1;
    }

    if (strncmp(argv[4], "threads=", 8) == 0) {
        int nt = atoi(argv[4] + 8);
        if (nt < 1 || nt > 1024) {
            fprintf(stderr, "callbench: bad thread count\n");
            return 2;
        }
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, (unsigned)nt);
        pthread_t *t = calloc((size_t)nt, sizeof *t);
        struct worker *w = calloc((size_t)nt, sizeof *w);
        for (int i = 0; i < nt; i++) {
            w[i] = (struct worker){&barrier, iters, rc, 0, 0, 0};
            pthread_create(&t[i], NULL, thread_main, &w[i]);
        }
        /* Wall time from the first thread's start to the last one's end (main itself may
         * not run for a while: there are more threads than CPUs). */
        long bad = 0;
        double first = 0, last = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(t[i], NULL);
            bad += w[i].bad;
            first = i == 0 || w[i].start < first ? w[i].start : first;
            last = w[i].end > last ? w[i].end : last;
        }
        double wall = last - first;
        /* calls made by this process: first call + warm-up + threads */
        long total = 1 + (iters / 10 + 1) + (long)nt * iters;
        printf("{\"function\": \"%s\", \"rc\": %d, \"threads\": %d, \"calls_per_thread\": %ld, "
               "\"calls_total\": %ld, \"bad_results\": %ld, \"resolved_from\": \"%s\", "
               "\"wall_ns_per_call\": %.4f}\n",
               name, rc, nt, iters, total, bad, from, wall / ((double)nt * (double)iters));
        return bad != 0;
    }

    int reps = atoi(argv[4]);
    if (reps < 1)
        reps = 1;
    if (argc == 6) {
        /* Paired: the real driver in a namespace of its own. */
        void *dh = dlmopen(LM_ID_NEWLM, argv[5], RTLD_NOW | RTLD_LOCAL);
        if (!dh) {
            fprintf(stderr, "callbench: dlmopen(%s): %s\n", argv[5], dlerror());
            return 1;
        }
        direct_fn = dlsym(dh, name);
        if (!direct_fn || direct_fn == fn) {
            fprintf(stderr, "callbench: no separate %s in %s\n", name, argv[5]);
            return 1;
        }
        int drc = call_once(direct_fn);
        if (drc != rc || direct_loop(iters / 10 + 1, rc) != 0) {
            fprintf(stderr, "callbench: the direct %s returns %d, the library %d\n", name, drc,
                    rc);
            return 1;
        }
    }
    double *ns = calloc((size_t)reps, sizeof *ns);
    double *dns = calloc((size_t)reps, sizeof *dns);
    long bad = 0;
    for (int r = 0; r < reps; r++) {
        /* In paired mode the two loops alternate, and which one goes first alternates too. */
        for (int k = 0; k < 2; k++) {
            int lib_turn = (k == 0) == (r % 2 == 0);
            if (!lib_turn && !direct_fn)
                continue;
            double t0 = now_ns();
            bad += !lib_turn ? direct_loop(iters, rc)
                   : workset ? workset_loop(iters, rc) : bench_loop(iters, rc);
            double t1 = now_ns();
            (lib_turn ? ns : dns)[r] = (t1 - t0) / (double)iters;
        }
    }
    printf("{\"function\": \"%s\", \"rc\": %d, \"iters\": %ld, \"bad_results\": %ld, "
           "\"resolved_from\": \"%s\", \"ns_per_call\": [",
           name, rc, iters, bad, from);
    for (int r = 0; r < reps; r++)
        printf("%s%.4f", r ? ", " : "", ns[r]);
    if (direct_fn) {
        printf("], \"direct_ns_per_call\": [");
        for (int r = 0; r < reps; r++)
            printf("%s%.4f", r ? ", " : "", dns[r]);
        qsort(dns, (size_t)reps, sizeof *dns, cmp_double);
        printf("], \"direct_min\": %.4f, \"direct_median\": %.4f", dns[0], dns[reps / 2]);
    } else {
        printf("]");
    }
    qsort(ns, (size_t)reps, sizeof *ns, cmp_double);
    printf(", \"min\": %.4f, \"median\": %.4f}\n", ns[0], ns[reps / 2]);
    return bad != 0;
}
