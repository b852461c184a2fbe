/* Kernel handles and launches for the kernels' tests (tests/runtime/test_kernels.py), run
 * against the fake driver of tests/c/fake_kernels_libcuda.c. One operation a word; handles
 * are numbered from 0 in the order made:
 *   mod:NAME lib:NAME         cuModuleGetFunction, cuLibraryGetKernel of NAME
 *   kfunc:K                   cuKernelGetFunction of handle K
 *   enumf:NAME enumk:NAME     a handle the shim never saw made (the fake names it NAME)
 *   R:K:S:GX:BX:N             N launches of handle K on stream S (a number) with a grid of
 *                             GX and a block of BX, by route R: launch, launchptsz, coop,
 *                             coopptsz, ex, exptsz
 *   capture:S endcapture:S    a stream capture begun, ended
 *   sync:S                    "ready" printed, then cuStreamSynchronize (FAKE_KERN_HANG: it
 *                             never returns)
 *   query:S ctxsync: ctxdestroy:  cuStreamQuery of stream S, cuCtxSynchronize,
 *                             cuCtxDestroy_v2 of the current context
 *   racers:T:N:K              T threads, let go at once, each making N launches of handle K
 *                             (grid 1) on a stream of its own (t + 1), a random short spin
 *                             between two and each launch followed by cuStreamQuery,
 *                             while this thread asks cuStreamQuery until they are done
 *                             (GPU time's pairs taken and resolved at once, by many)
 *   fork:                     the rest in a forked child; the parent waits for it and exits
 *   host:S:N graph:S:N        N launches of kern_host_cb (cuLaunchHostFunc), of a graph
 *                             (cuGraphLaunch) the shim never saw instantiated, on stream S
 *   inst:K:O:C:Q              an executable graph (numbered from 0 in the order made) of the
 *                             fake's graph of K kernel nodes, O others, a child graph of C
 *                             kernel nodes (none when 0) and Q conditional nodes, by
 *                             cuGraphInstantiateWithFlags; instp: and instv2: the same by
 *                             cuGraphInstantiateWithParams, cuGraphInstantiate_v2
 *   glaunch:E:S:N gdestroy:E  N launches of executable graph E on stream S; E destroyed
 *   names:T:N:LEN             T threads, let go at once, each making N handles (not kept)
 *                             by cuModuleGetFunction of names of LEN bytes: "_Zt<t>_<i>_"
 *                             then x's, a random short spin between two
 * Each failed call prints "rc NAME R". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
struct launch_config {
    unsigned grid[3], block[3], shmem;
    void *stream;
    void *attrs;
    unsigned nattrs;
};

static void *lib;

/* The host function launched (exported: the shim names it by its symbol) */
__attribute__((visibility("default"))) void kern_host_cb(void *data);
void kern_host_cb(void *data)
{
    (void)data;
}
static void *handles[256];
static int nhandles;
static void *execs[64];
static int nexecs;

static void *fn(const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "no %s\n", name);
        exit(2);
    }
    return f;
}

static void check(const char *what, CUresult r)
{
    if (r)
        printf("rc %s %d\n", what, r);
}

/* names:T:N:LEN: each thread's handles, made at once with the others' */
static pthread_barrier_t names_start;
static unsigned names_n, names_len;

static void *names_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg, seed = t * 7919u + (unsigned)getpid();
    char *name = malloc(names_len + 1);
    void *h = NULL;
    pthread_barrier_wait(&names_start);
    for (unsigned i = 0; i < names_n; i++) {
        int at = snprintf(name, names_len + 1, "_Zt%u_%u_", t, i);
        memset(name + at, 'x', names_len - (unsigned)at);
        name[names_len] = 0;
        for (volatile unsigned spin = rand_r(&seed) % 2000; spin; spin--)
            ;
        check("names", ((CUresult(*)(void **, void *, const char *))fn("cuModuleGetFunction"))(
                           &h, (void *)1, name));
    }
    free(name);
    return NULL;
}

static int names(const char *arg)
{
    unsigned n;
    pthread_t th[64];
    if (sscanf(arg, "%u:%u:%u", &n, &names_n, &names_len) != 3 || !n || n > 64 ||
        names_len < 32)
        return 3;
    pthread_barrier_init(&names_start, NULL, n);
    for (unsigned t = 0; t < n; t++)
        pthread_create(&th[t], NULL, names_thread, (void *)(uintptr_t)t);
    for (unsigned t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    return 0;
}

typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, void *, void **, void **);

/* racers:T:N:K: launches from T threads while the main thread resolves */
static unsigned racers_n, racers_k, racers_left;

static void *racer(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg, seed = t * 104729u + (unsigned)getpid();
    launch_fn launch = (launch_fn)fn("cuLaunchKernel");
    CUresult (*query)(void *) = (CUresult(*)(void *))fn("cuStreamQuery");
    pthread_barrier_wait(&names_start);
    for (unsigned i = 0; i < racers_n; i++) {
        for (volatile unsigned spin = rand_r(&seed) % 100; spin; spin--)
            ;
        check("racers", launch(handles[racers_k], 1, 1, 1, 1, 1, 1, 0,
                               (void *)(uintptr_t)(t + 1), NULL, NULL));
        check("racers query", query((void *)(uintptr_t)(t + 1)));
    }
    __atomic_fetch_sub(&racers_left, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int racers(const char *arg)
{
    unsigned n;
    pthread_t th[64];
    if (sscanf(arg, "%u:%u:%u", &n, &racers_n, &racers_k) != 3 || !n || n > 64 ||
        racers_k >= (unsigned)nhandles)
        return 3;
    CUresult (*query)(void *) = (CUresult(*)(void *))fn("cuStreamQuery");
    racers_left = n;
    pthread_barrier_init(&names_start, NULL, n + 1);
    for (unsigned t = 0; t < n; t++)
        pthread_create(&th[t], NULL, racer, (void *)(uintptr_t)t);
    pthread_barrier_wait(&names_start);
    while (__atomic_load_n(&racers_left, __ATOMIC_ACQUIRE)) {
        check("racers query", query(NULL));
        sched_yield();
    }
    for (unsigned t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    return 0;
}
typedef CUresult (*coop_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, void *, void **);
typedef CUresult (*ex_fn)(const struct launch_config *, void *, void **, void **);

static void launches(const char *route, char *rest)
{
    unsigned k, gx, bx, n;
    unsigned long s;
    if (sscanf(rest, "%u:%lu:%u:%u:%u", &k, &s, &gx, &bx, &n) != 5 || k >= (unsigned)nhandles)
        exit(3);
    void *stream = (void *)(uintptr_t)s;
    for (unsigned i = 0; i < n; i++) {
        CUresult r;
        if (!strcmp(route, "launch") || !strcmp(route, "launchptsz"))
            r = ((launch_fn)fn(route[6] ? "cuLaunchKernel_ptsz" : "cuLaunchKernel"))(
                handles[k], gx, 1, 1, bx, 1, 1, 0, stream, NULL, NULL);
        else if (!strcmp(route, "coop") || !strcmp(route, "coopptsz"))
            r = ((coop_fn)fn(route[4] ? "cuLaunchCooperativeKernel_ptsz"
                                      : "cuLaunchCooperativeKernel"))(
                handles[k], gx, 1, 1, bx, 1, 1, 0, stream, NULL);
        else {
            struct launch_config c = {{gx, 1, 1}, {bx, 1, 1}, 0, stream, NULL, 0};
            r = ((ex_fn)fn(route[2] ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx"))(
                &c, handles[k], NULL, NULL);
        }
        check(route, r);
    }
}

int main(int argc, char **argv)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib)
        return 2;
    check("cuInit", ((CUresult(*)(unsigned))fn("cuInit"))(0));
    for (int i = 1; i < argc; i++) {
        char *colon = strchr(argv[i], ':');
        if (!colon)
            return 3;
        *colon = 0;
        char *op = argv[i], *arg = colon + 1;
        void **h = &handles[nhandles];
        typedef CUresult (*get_fn)(void **, void *, const char *);
        typedef CUresult (*enum_fn)(void **, unsigned, void *);
        if (!strcmp(op, "mod"))
            check(op, ((get_fn)fn("cuModuleGetFunction"))(h, (void *)1, arg)), nhandles++;
        else if (!strcmp(op, "lib"))
            check(op, ((get_fn)fn("cuLibraryGetKernel"))(h, (void *)1, arg)), nhandles++;
        else if (!strcmp(op, "kfunc"))
            check(op, ((CUresult(*)(void **, void *))fn("cuKernelGetFunction"))(
                          h, handles[atoi(arg)])),
                nhandles++;
        else if (!strcmp(op, "enumf"))
            check(op, ((enum_fn)fn("cuModuleEnumerateFunctions"))(h, 1, arg)), nhandles++;
        else if (!strcmp(op, "enumk"))
            check(op, ((enum_fn)fn("cuLibraryEnumerateKernels"))(h, 1, arg)), nhandles++;
        else if (!strcmp(op, "capture"))
            check(op, ((CUresult(*)(void *, int))fn("cuStreamBeginCapture_v2"))(
                          (void *)(uintptr_t)strtoul(arg, NULL, 10), 0));
        else if (!strcmp(op, "endcapture"))
            check(op, ((CUresult(*)(void *, void **))fn("cuStreamEndCapture"))(
                          (void *)(uintptr_t)strtoul(arg, NULL, 10), NULL));
        else if (!strcmp(op, "host") || !strcmp(op, "graph")) {
            unsigned long st, n;
            if (sscanf(arg, "%lu:%lu", &st, &n) != 2)
                return 3;
            void *stream = (void *)(uintptr_t)st;
            for (unsigned long k = 0; k < n; k++)
                check(op, op[0] == 'h'
                              ? ((CUresult(*)(void *, void (*)(void *), void *))fn(
                                    "cuLaunchHostFunc"))(stream, kern_host_cb, NULL)
                              : ((CUresult(*)(void *, void *))fn("cuGraphLaunch"))(
                                    (void *)0x1234, stream));
        } else if (!strncmp(op, "inst", 4)) {
            unsigned k, o, c, q;
            if (sscanf(arg, "%u:%u:%u:%u", &k, &o, &c, &q) != 4 || nexecs == 64)
                return 3;
            void *g = (void *)(uintptr_t)(0xA000000000ull | k << 24 | o << 16 | c << 8 | q);
            void **e = &execs[nexecs++];
            if (!strcmp(op, "instp"))
                check(op, ((CUresult(*)(void **, void *, void *))fn(
                              "cuGraphInstantiateWithParams"))(e, g, NULL));
            else if (!strcmp(op, "instv2"))
                check(op, ((CUresult(*)(void **, void *, void **, char *, size_t))fn(
                              "cuGraphInstantiate_v2"))(e, g, NULL, NULL, 0));
            else
                check(op, ((CUresult(*)(void **, void *, unsigned long long))fn(
                              "cuGraphInstantiateWithFlags"))(e, g, 0));
        } else if (!strcmp(op, "glaunch")) {
            unsigned e;
            unsigned long st, n;
            if (sscanf(arg, "%u:%lu:%lu", &e, &st, &n) != 3 || e >= (unsigned)nexecs)
                return 3;
            for (unsigned long k = 0; k < n; k++)
                check(op, ((CUresult(*)(void *, void *))fn("cuGraphLaunch"))(
                              execs[e], (void *)(uintptr_t)st));
        } else if (!strcmp(op, "gdestroy")) {
            unsigned e = (unsigned)atoi(arg);
            if (e >= (unsigned)nexecs)
                return 3;
            check(op, ((CUresult(*)(void *))fn("cuGraphExecDestroy"))(execs[e]));
        } else if (!strcmp(op, "fork")) {
            pid_t pid = fork();
            if (pid < 0)
                return 4;
            if (pid > 0) {
                int st = 0;
                waitpid(pid, &st, 0);
                return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
            }
        } else if (!strcmp(op, "query")) {
            check(op, ((CUresult(*)(void *))fn("cuStreamQuery"))(
                          (void *)(uintptr_t)strtoul(arg, NULL, 10)));
        } else if (!strcmp(op, "ctxsync")) {
            check(op, ((CUresult(*)(void))fn("cuCtxSynchronize"))());
        } else if (!strcmp(op, "ctxdestroy")) {
            void *ctx = NULL;
            check("cuCtxGetCurrent", ((CUresult(*)(void **))fn("cuCtxGetCurrent"))(&ctx));
            check(op, ((CUresult(*)(void *))fn("cuCtxDestroy_v2"))(ctx));
        } else if (!strcmp(op, "names")) {
            if (names(arg))
                return 3;
        } else if (!strcmp(op, "racers")) {
            if (racers(arg))
                return 3;
        } else if (!strcmp(op, "sync")) {
            printf("ready\n");
            fflush(stdout);
            check(op, ((CUresult(*)(void *))fn("cuStreamSynchronize"))(
                          (void *)(uintptr_t)strtoul(arg, NULL, 10)));
        } else
            launches(op, arg);
    }
    return 0;
}
