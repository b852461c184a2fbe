/* Calls through libcuda.so.1 (the shim, or the fake driver directly) with arguments whose
 * results the fake driver checks: stack-passed arguments, floating point, a struct in
 * rax:rdx, callbacks that call the driver again, deep recursion, and callee-saved registers
 * and the stack pointer (tests/c/regcheck.S). Prints one line per
 * result; the test compares the output with and without the shim and in every trace mode.
 * argv[1]: library to dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef double (*mixed_fn)(double, int, double, double, double, double, double, double, double,
                           double, int);
struct pair {
    uint64_t lo, hi;
};
typedef struct pair (*pair_fn)(uint64_t);
typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);
typedef int (*recurse_fn)(int, int (*)(int, void *), void *);
typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);

uint64_t regcheck_call(void *fn); /* regcheck.S */

static version_fn version;
static void *entry_rsp;

/* Three calls of cuFakeEntryRsp in a row (under the shim: the first call of the process
 * or of the thread takes the slow path, the others the fast one); the masks OR-ed. */
static unsigned long regcheck_three(void)
{
    uint64_t mask = 0;
    for (int i = 0; i < 3; i++)
        mask |= regcheck_call(entry_rsp);
    return (unsigned long)mask;
}

static void *regcheck_thread(void *arg)
{
    (void)arg;
    return (void *)regcheck_three();
}
static recurse_fn recurse;
static int callback_versions;

static void host_callback(void *user)
{
    int v = 0;
    if (version(&v) == 0 && v == 12345)
        callback_versions++;
    *(int *)user += 1;
}

static int recurse_cb(int depth, void *user)
{
    int v = 0;
    version(&v);
    (*(long *)user) += v;
    return recurse(depth, recurse_cb, user);
}

static void *thread_main(void *arg)
{
    long n = (long)arg, bad = 0;
    for (long i = 0; i < n; i++) {
        int v = 0;
        if (version(&v) != 0 || v != 12345)
            bad++;
    }
    return (void *)bad;
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    launch_fn launch = (launch_fn)dlsym(h, "cuLaunchKernel");
    mixed_fn mixed = (mixed_fn)dlsym(h, "cuFakeMixedArgs");
    pair_fn pair = (pair_fn)dlsym(h, "cuFakeReturnPair");
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    host_launch_fn host = (host_launch_fn)dlsym(h, "cuLaunchHostFunc");
    recurse = (recurse_fn)dlsym(h, "cuFakeRecurse");
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    entry_rsp = dlsym(h, "cuFakeEntryRsp");
    if (!launch || !mixed || !pair || !version || !host || !recurse || !gpa || !entry_rsp)
        return 1;

    /* First: the process's first calls into the library, then a new thread's. */
    unsigned long main_mask = regcheck_three();
    pthread_t rt;
    void *thread_mask = NULL;
    pthread_create(&rt, NULL, regcheck_thread, NULL);
    pthread_join(rt, &thread_mask);
    printf("registers main %#lx thread %#lx\n", main_mask, (unsigned long)thread_mask);

    uint64_t out = 0;
    void *params[] = {&out};
    int rc = launch((void *)0x1234, 1, 2, 3, 4, 5, 6, 7, (void *)0x5678, params, (void **)0x9);
    printf("launch rc %d out %llu\n", rc, (unsigned long long)out);
    printf("mixed %.17g\n", mixed(1.25, 2, 3.5, 4.75, 5.0, 6.125, 7.5, 8.25, 9.0, 10.5, 11));
    struct pair p = pair(0x0123456789abcdefULL);
    printf("pair %llx %llx\n", (unsigned long long)p.lo, (unsigned long long)p.hi);
    int calls = 0;
    for (int i = 0; i < 5; i++)
        host(NULL, host_callback, &calls);
    printf("host callbacks %d versions %d\n", calls, callback_versions);
    long sum = 0;
    rc = recurse(300, recurse_cb, &sum);
    printf("recurse rc %d sum %ld\n", rc, sum);
    void *priv = NULL;
    int st = -1;
    gpa("cuFakePrivate", &priv, 12000, 0, &st);
    int pv = 0;
    rc = priv ? ((version_fn)priv)(&pv) : -1;
    printf("private rc %d value %d status %d\n", rc, pv, st);

    pthread_t t[16];
    long total_bad = 0;
    for (long i = 0; i < 16; i++)
        pthread_create(&t[i], NULL, thread_main, (void *)20000);
    for (int i = 0; i < 16; i++) {
        void *r;
        pthread_join(t[i], &r);
        total_bad += (long)r;
    }
    printf("threads 16 calls 320000 bad %ld\n", total_bad);
    return 0;
}
