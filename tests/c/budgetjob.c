/* The shared memory budget's test program (tests/run/test_budget.py): one process of a job,
 * its driver calls through whatever libcuda the loader gives (the shim, over the FAKE driver
 * tests/c/fake_budget_libcuda.c). Its arguments, in order:
 *   alloc:N     an allocation of N bytes, its result printed ("alloc:N rc R")
 *   free        the last allocation kept given back
 *   palloc:N    an allocation of N bytes from the device's pool (cuMemAllocAsync), printed
 *               as alloc: is; pfree the last kept given back to it (cuMemFreeAsync)
 *   trim  sync  query  the pool trimmed to nothing (cuMemPoolTrimTo), a synchronisation
 *               (cuStreamSynchronize), a stream's query (cuStreamQuery): "trim rc R" ...
 *   graph:N     a graph of one allocation node of N bytes on device 0 made, instantiated
 *               and uploaded; graphfree its instance destroyed and the device's graph
 *               memory trimmed (cuDeviceGraphMemTrim): "graph:N rc R", "graphfree rc R"
 *   hold        "holding" printed, then waits to be killed
 *   trapped:N   an allocation of N bytes with every fcntl(F_OFD_GETLK) trapped (a seccomp
 *               filter, SIGSYS): the first trap's handler allocates 1000 bytes, so that it
 *               runs inside the shim's update of the books when the budget is short (its
 *               repair looks at the other slots' liveness locks): "trapped:N rc R handler H"
 *   info        cuMemGetInfo_v2 and cuDeviceTotalMem_v2 of device 0: "info F T D" printed
 *   line        waits for a line on stdin
 *   fork        the child runs the rest ("child PID" printed first); the parent waits and ends
 *   job:R:M:S   R random steps (seed S): an allocation of 1 to M bytes (kept while fewer
 *               than 16 are), or a free of one kept; "job refused N kept K" printed. What
 *               is kept at the end is left to the driver (the process ends holding it).
 *   pjob:R:M:S  the same, half the allocations from the pool (cuMemAllocAsync, given back
 *               by cuMemFreeAsync), and one step in 16 a synchronisation too
 *   churn:N:SIZE N times an allocation of SIZE bytes and its free (what the budget costs:
 *               docs/performance.md, "The shared memory budget"); allocs:N:SIZE the
 *               allocations alone (none freed) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*fn_t)();
typedef unsigned long long u64;

static fn_t alloc_fn, free_fn;
static fn_t pool_fn[3]; /* pjob's: cuMemAllocAsync, cuMemFreeAsync, cuStreamSynchronize */
static void *exec; /* the graph's instance */
static u64 kept[4096];
static char kept_pooled[4096];
static int nkept;

static int alloc(u64 n, fn_t fn)
{
    u64 p = 0;
    int rc = fn == alloc_fn ? fn(&p, (size_t)n) : fn(&p, (size_t)n, NULL);
    if (rc == 0 && nkept < 4096)
        kept_pooled[nkept] = fn != alloc_fn, kept[nkept++] = p;
    return rc;
}

/* (with pool_fn set: half the allocations from the pool, and now and then a sync) */
static void job(int rounds, u64 most, unsigned seed)
{
    int refused = 0;
    srand(seed);
    for (int r = 0; r < rounds; r++) {
        if (nkept < 16 && (rand() & 1)) {
            fn_t fn = pool_fn[0] && (rand() & 1) ? pool_fn[0] : alloc_fn;
            refused += alloc(1 + (u64)rand() % most, fn) != 0;
        } else if (nkept) {
            int i = rand() % nkept;
            if (kept_pooled[i])
                pool_fn[1](kept[i], NULL);
            else
                free_fn(kept[i]);
            kept[i] = kept[nkept - 1], kept_pooled[i] = kept_pooled[--nkept];
        }
        if (pool_fn[2] && rand() % 16 == 0)
            pool_fn[2](NULL);
        if (rand() % 8 == 0)
            usleep((unsigned)(rand() % 200));
    }
    printf("job refused %d kept %d\n", refused, nkept);
}

static volatile int handler_rc = -1;

static void trap(int sig)
{
    (void)sig;
    if (handler_rc == -1) {
        u64 p = 0;
        handler_rc = alloc_fn(&p, (size_t)1000);
    }
}

/* fcntl(_, F_OFD_GETLK, _) answered with SIGSYS (trap); every other system call allowed. */
static void trap_getlk(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fcntl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_OFD_GETLK, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    signal(SIGSYS, trap);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        perror("budgetjob: seccomp"), exit(4);
}

static fn_t sym(void *h, const char *name)
{
    fn_t f = (fn_t)dlsym(h, name);
    if (!f)
        fprintf(stderr, "no %s\n", name), exit(2);
    return f;
}

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return fprintf(stderr, "%s\n", dlerror()), 2;
    fn_t init = (fn_t)dlsym(h, "cuInit"), set = (fn_t)dlsym(h, "cuCtxSetCurrent");
    alloc_fn = (fn_t)dlsym(h, "cuMemAlloc_v2"), free_fn = (fn_t)dlsym(h, "cuMemFree_v2");
    init(0);
    set((void *)1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (!strncmp(a, "alloc:", 6)) {
            printf("%s rc %d\n", a, alloc(strtoull(a + 6, NULL, 10), alloc_fn));
        } else if (!strncmp(a, "palloc:", 7)) {
            printf("%s rc %d\n", a, alloc(strtoull(a + 7, NULL, 10), sym(h, "cuMemAllocAsync")));
        } else if (!strcmp(a, "free") && nkept) {
            printf("free rc %d\n", free_fn(kept[--nkept]));
        } else if (!strcmp(a, "pfree") && nkept) {
            printf("pfree rc %d\n", sym(h, "cuMemFreeAsync")(kept[--nkept], NULL));
        } else if (!strcmp(a, "trim")) {
            u64 pool = 0;
            int rc = sym(h, "cuDeviceGetMemPool")(&pool, 0);
            printf("trim rc %d\n", rc ? rc : sym(h, "cuMemPoolTrimTo")(pool, (size_t)0));
        } else if (!strncmp(a, "graph:", 6)) {
            char params[128] = {0}; /* CUDA_MEM_ALLOC_NODE_PARAMS: device 0, the size */
            int device[2] = {1, 0};
            u64 size = strtoull(a + 6, NULL, 10);
            void *g = NULL, *node = NULL;
            memcpy(params + 8, device, sizeof device);
            memcpy(params + 104, &size, sizeof size);
            int rc = sym(h, "cuGraphCreate")(&g, 0);
            rc = rc ? rc : sym(h, "cuGraphAddMemAllocNode")(&node, g, NULL, (size_t)0, params);
            rc = rc ? rc : sym(h, "cuGraphInstantiateWithFlags")(&exec, g, 0ull);
            printf("%s rc %d\n", a, rc ? rc : sym(h, "cuGraphUpload")(exec, NULL));
        } else if (!strcmp(a, "graphfree")) {
            int rc = sym(h, "cuGraphExecDestroy")(exec);
            printf("graphfree rc %d\n", rc ? rc : sym(h, "cuDeviceGraphMemTrim")(0));
        } else if (!strcmp(a, "sync") || !strcmp(a, "query")) {
            fn_t f = sym(h, a[0] == 's' ? "cuStreamSynchronize" : "cuStreamQuery");
            printf("%s rc %d\n", a, f(NULL));
        } else if (!strcmp(a, "info")) {
            size_t f = 0, t = 0, d = 0;
            fn_t info = (fn_t)dlsym(h, "cuMemGetInfo_v2");
            fn_t tm = (fn_t)dlsym(h, "cuDeviceTotalMem_v2");
            int rc = info(&f, &t) | tm(&d, 0);
            printf("info %zu %zu %zu rc %d\n", f, t, d, rc);
        } else if (!strncmp(a, "trapped:", 8)) {
            trap_getlk();
            int rc = alloc(strtoull(a + 8, NULL, 10), alloc_fn);
            printf("%s rc %d handler %d\n", a, rc, handler_rc);
        } else if (!strcmp(a, "hold")) {
            printf("holding\n");
            for (;;)
                pause();
        } else if (!strcmp(a, "fork")) {
            pid_t child = fork();
            if (child > 0) {
                int status = 0;
                waitpid(child, &status, 0);
                return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
            }
            printf("child %d\n", (int)getpid());
        } else if (!strcmp(a, "line")) {
            char buf[64];
            if (!fgets(buf, sizeof buf, stdin))
                return 3;
        } else if (!strncmp(a, "churn:", 6) || !strncmp(a, "allocs:", 7)) {
            char *e;
            long n = strtol(strchr(a, ':') + 1, &e, 10);
            size_t size = (size_t)strtoull(e + 1, NULL, 10);
            for (long k = 0; k < n; k++) {
                u64 p = 0;
                if (alloc_fn(&p, size) == 0 && a[0] == 'c')
                    free_fn(p);
            }
        } else if (!strncmp(a, "job:", 4) || !strncmp(a, "pjob:", 5)) {
            if (a[0] == 'p') {
                pool_fn[0] = sym(h, "cuMemAllocAsync"), pool_fn[1] = sym(h, "cuMemFreeAsync");
                pool_fn[2] = sym(h, "cuStreamSynchronize");
                a++;
            }
            char *e;
            int rounds = (int)strtol(a + 4, &e, 10);
            u64 most = strtoull(e + 1, &e, 10);
            job(rounds, most, (unsigned)strtoul(e + 1, NULL, 10));
        }
    }
    printf("budgetjob rc 0\n");
    return 0;
}
