/* The memory ledger's test program (tests/run/test_memory.py): runs the driver calls its
 * arguments name, through whatever libcuda the loader gives (the shim, over the FAKE driver
 * tests/c/fake_ledger_libcuda.c), printing each result, then the fake's own totals.
 *   ctx:D  noctx                         the thread's current device (cuCtxSetCurrent)
 *   alloc:N managed:N async:N asyncptsz:N pool:N poolptsz:N pitch:W:H
 *   create:N:TYPE:ID (CUmemLocation)  retain:K (the handle of item K)  import:D
 *   array:W:H:FMT:CH  array3d:W:H:D:FMT:CH  mipmap:W:H:D:FMT:CH:LEVELS
 *   hostalloc:N  allochost:N
 *   badcreate:W badarray:W badarray3d:W badmipmap:W (the prop or descriptor at NULL, W 0;
 *   0x10, W 1; an unmapped page, W 2)
 *   free:K  freeasync:K  freeasyncptsz:K   item K given back by its own route's free
 *   threads:T:N (T threads, N random allocations each, every 7th kept: the ledger's lock)
 *   forkbusy:K (K forks while 4 threads allocate: each child's ledger its own)
 *   churn:N:SIZE (N times an allocation and its free: the cost of the ledger)
 *   ctxchurn:N  syncchurn:N (N cuCtxSetCurrent, N cuStreamSynchronize: what a watch costs)
 *   info  total:D   fork (the child runs the rest; the parent waits and ends)   kill
 * Pools and graphs (an item each: a pool, a graph, an instance):
 *   defaultpool:D  getpool:D  poolcreate:TYPE:ID  setpool:D:K  poolalloc:N:K (from pool K)
 *   threshold:K:N  trim:K:N  pooldestroy:K  sync  ctxsync
 *   graph  memnode:K:N:D (an allocation node of N bytes on device D in graph K)
 *   capture  endcapture (the graph made)  instantiate:K  launch:K  upload:K  execdestroy:K
 *   graphtrim:D
 *   push:D  pop   ctxthreads:T:N (T threads, N steps each: a random context change by
 *   cuCtxSetCurrent, push or pop, or an allocation, kept or freed)
 * Each allocation is an item, numbered from 0 in order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*fn_t)();
typedef unsigned long long u64;

static fn_t get(const char *name)
{
    fn_t f = (fn_t)dlsym(RTLD_DEFAULT, name);
    if (!f) {
        fprintf(stderr, "memledger: no %s\n", name);
        exit(3);
    }
    return f;
}

static struct item {
    u64 key;
    int kind; /* 1 address, 2 handle, 3 array, 4 host, 5 mipmapped array */
} items[1024];
static int nitems;

/* (a macro: the call is made before its result is read) */
#define keep(call, kind, key) keep_((call), (kind), &(key))
static int keep_(int rc, int kind, const void *keyp)
{
    u64 key = 0;
    memcpy(&key, keyp, sizeof key);
    if (rc == 0)
        items[nitems++] = (struct item){key, kind};
    else
        nitems++; /* numbered all the same */
    return rc;
}

/* A page mapped and unmapped again: an address no read can reach. */
static const void *unmapped_page(void)
{
    void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(m, 4096);
    return m;
}

static void totals(const char *who)
{
    char buf[8192];
    get("fake_ledger_totals")(buf, sizeof buf);
    printf("%s %s\n", who, buf);
    fflush(stdout);
}

/* threads:T:N: T threads, each N allocations of random sizes on device (thread % 2), every
 * 7th kept, the rest freed at once or after a random yield. */
static u64 churn_n;
static void *churner(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    get("cuCtxSetCurrent")((void *)((uintptr_t)arg % 2 + 1));
    fn_t alloc = get("cuMemAlloc_v2"), release = get("cuMemFree_v2");
    for (u64 i = 0; i < churn_n; i++) {
        u64 p = 0;
        if (alloc(&p, (size_t)(1 + rand_r(&seed) % 65536)) != 0)
            return (void *)1;
        if (rand_r(&seed) % 4 == 0)
            sched_yield();
        if (i % 7 && release(p) != 0)
            return (void *)1;
    }
    return NULL;
}

/* forkbusy:K: 4 threads allocate and free without pause while the main thread forks K
 * times; each child (its ledger its own, made while another thread may have held the
 * ledger's lock at the fork) allocates 100 bytes, frees them and ends. */
static volatile int busy_stop;
static void *busy(void *arg)
{
    get("cuCtxSetCurrent")((void *)1);
    fn_t alloc = get("cuMemAlloc_v2"), release = get("cuMemFree_v2");
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!busy_stop) {
        u64 p = 0;
        if (alloc(&p, (size_t)(1 + rand_r(&seed) % 4096)) == 0)
            release(p);
    }
    return NULL;
}

static int fork_busy(u64 k)
{
    pthread_t t[4];
    int bad = 0;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1));
    for (u64 i = 0; i < k && !bad; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            u64 p = 0;
            int rc = get("cuMemAlloc_v2")(&p, (size_t)100) || get("cuMemFree_v2")(p);
            _exit(rc);
        }
        int st = 0;
        bad = pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st);
    }
    busy_stop = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    return bad;
}

/* ctxthreads:T:N: each thread's steps at random: cuCtxSetCurrent, cuCtxPushCurrent_v2 or
 * cuCtxPopCurrent_v2 to a random device of 4, or an allocation of random size on whatever
 * device is current (a third kept), with random yields. */
static void *switcher(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2246822519u + (unsigned)getpid();
    fn_t set = get("cuCtxSetCurrent"), push = get("cuCtxPushCurrent_v2");
    fn_t pop = get("cuCtxPopCurrent_v2"), alloc = get("cuMemAlloc_v2");
    fn_t release = get("cuMemFree_v2");
    int depth = 0;
    set((void *)(uintptr_t)(rand_r(&seed) % 4 + 1));
    for (u64 i = 0; i < churn_n; i++) {
        unsigned r = (unsigned)rand_r(&seed) % 8;
        if (r == 0)
            set((void *)(uintptr_t)(rand_r(&seed) % 4 + 1));
        else if (r == 1 && depth < 8 && push((void *)(uintptr_t)(rand_r(&seed) % 4 + 1)) == 0)
            depth++;
        else if (r == 2 && depth && pop(NULL) == 0)
            depth--;
        else {
            u64 p = 0;
            if (alloc(&p, (size_t)(1 + rand_r(&seed) % 10000)) != 0)
                return (void *)1;
            if (rand_r(&seed) % 3 && release(p) != 0)
                return (void *)1;
        }
        if (rand_r(&seed) % 16 == 0)
            sched_yield();
    }
    return NULL;
}

static int run_threads(u64 t, u64 n, void *(*fn)(void *))
{
    pthread_t th[64];
    void *bad = NULL;
    churn_n = n;
    for (u64 i = 0; i < t && i < 64; i++)
        pthread_create(&th[i], NULL, fn, (void *)(uintptr_t)i);
    for (u64 i = 0; i < t && i < 64; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad = bad ? bad : r;
    }
    return bad != NULL;
}

/* The pool and graph ops (above); -1: not one of them. */
static int pool_op(const char *op, u64 a, u64 b, u64 c)
{
    u64 p = 0;
    u64 g = 0; /* (an int handle, in its low bytes) */
    if (!strcmp(op, "defaultpool"))
        return keep(get("cuDeviceGetDefaultMemPool")(&p, (int)a), 6, p);
    if (!strcmp(op, "getpool"))
        return keep(get("cuDeviceGetMemPool")(&p, (int)a), 6, p);
    if (!strcmp(op, "poolcreate")) {
        unsigned char props[88] = {0};
        int loc[2] = {(int)a, (int)b};
        memcpy(props + 8, loc, sizeof loc);
        return keep(get("cuMemPoolCreate")(&p, props), 6, p);
    }
    if (!strcmp(op, "setpool"))
        return get("cuDeviceSetMemPool")((int)a, items[b].key);
    if (!strcmp(op, "poolalloc"))
        return keep(get("cuMemAllocFromPoolAsync")(&p, (size_t)a, items[b].key, NULL), 1, p);
    if (!strcmp(op, "threshold"))
        return get("cuMemPoolSetAttribute")(items[a].key, 4, &b);
    if (!strcmp(op, "trim"))
        return get("cuMemPoolTrimTo")(items[a].key, (size_t)b);
    if (!strcmp(op, "pooldestroy"))
        return get("cuMemPoolDestroy")(items[a].key);
    if (!strcmp(op, "sync"))
        return get("cuStreamSynchronize")(NULL);
    if (!strcmp(op, "ctxsync"))
        return get("cuCtxSynchronize")();
    if (!strcmp(op, "graph"))
        return keep(get("cuGraphCreate")(&g, 0u), 7, g);
    if (!strcmp(op, "memnode")) {
        unsigned char params[120] = {0};
        int loc[2] = {1, (int)c};
        void *node;
        memcpy(params + 8, loc, sizeof loc);
        memcpy(params + 104, &b, sizeof b);
        return get("cuGraphAddMemAllocNode")(&node, (int)items[a].key, NULL, (size_t)0, params);
    }
    if (!strcmp(op, "capture"))
        return get("cuStreamBeginCapture_v2")(NULL, 0);
    if (!strcmp(op, "endcapture"))
        return keep(get("cuStreamEndCapture")(NULL, &g), 7, g);
    if (!strcmp(op, "instantiate"))
        return keep(get("cuGraphInstantiateWithFlags")(&g, (int)items[a].key, 0ull), 8, g);
    if (!strcmp(op, "launch"))
        return get("cuGraphLaunch")((int)items[a].key, NULL);
    if (!strcmp(op, "upload"))
        return get("cuGraphUpload")((int)items[a].key, NULL);
    if (!strcmp(op, "execdestroy"))
        return get("cuGraphExecDestroy")((int)items[a].key);
    if (!strcmp(op, "graphtrim"))
        return get("cuDeviceGraphMemTrim")((int)a);
    if (!strcmp(op, "push"))
        return get("cuCtxPushCurrent_v2")((void *)(a + 1));
    if (!strcmp(op, "pop"))
        return get("cuCtxPopCurrent_v2")(NULL);
    return -1;
}

static int run_op(char *op, const char *who)
{
    u64 a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
    char *arg = strchr(op, ':');
    if (arg) {
        *arg++ = 0;
        sscanf(arg, "%llu:%llu:%llu:%llu:%llu:%llu", &a, &b, &c, &d, &e, &f);
    }
    u64 p = 0;
    void *v = NULL;
    size_t pitch = 0;
    if (!strcmp(op, "ctx"))
        return get("cuCtxSetCurrent")((void *)(a + 1));
    if (!strcmp(op, "noctx"))
        return get("cuCtxSetCurrent")((void *)0);
    if (!strcmp(op, "alloc"))
        return keep(get("cuMemAlloc_v2")(&p, (size_t)a), 1, p);
    if (!strcmp(op, "managed"))
        return keep(get("cuMemAllocManaged")(&p, (size_t)a, 1u), 1, p);
    if (!strcmp(op, "async"))
        return keep(get("cuMemAllocAsync")(&p, (size_t)a, NULL), 1, p);
    if (!strcmp(op, "asyncptsz"))
        return keep(get("cuMemAllocAsync_ptsz")(&p, (size_t)a, NULL), 1, p);
    if (!strcmp(op, "pool"))
        return keep(get("cuMemAllocFromPoolAsync")(&p, (size_t)a, NULL, NULL), 1, p);
    if (!strcmp(op, "poolptsz"))
        return keep(get("cuMemAllocFromPoolAsync_ptsz")(&p, (size_t)a, NULL, NULL), 1, p);
    if (!strcmp(op, "pitch"))
        return keep(get("cuMemAllocPitch_v2")(&p, &pitch, (size_t)a, (size_t)b, 4u), 1, p);
    if (!strcmp(op, "create")) {
        unsigned char prop[32] = {0};
        int loc[2] = {(int)b, (int)c};
        memcpy(prop + 8, loc, sizeof loc);
        return keep(get("cuMemCreate")(&p, (size_t)a, prop, 0ull), 2, p);
    }
    if (!strcmp(op, "retain"))
        return keep(get("cuMemRetainAllocationHandle")(&p, (void *)items[a].key), 2, p);
    if (!strcmp(op, "import"))
        return keep(get("cuMemImportFromShareableHandle")(&p, (void *)a, 1), 2, p);
    if (!strcmp(op, "array") || !strcmp(op, "array3d") || !strcmp(op, "mipmap")) {
        size_t desc[5] = {0};
        int flat = !strcmp(op, "array");
        desc[0] = a, desc[1] = b;
        if (flat) {
            int fc[2] = {(int)c, (int)d};
            memcpy(&desc[2], fc, sizeof fc);
            return keep(get("cuArrayCreate_v2")(&v, desc), 3, v);
        }
        desc[2] = c;
        int fc[2] = {(int)d, (int)e};
        memcpy(&desc[3], fc, sizeof fc);
        if (!strcmp(op, "array3d"))
            return keep(get("cuArray3DCreate_v2")(&v, desc), 3, v);
        return keep(get("cuMipmappedArrayCreate")(&v, desc, (unsigned)f), 5, v);
    }
    if (!strncmp(op, "bad", 3)) { /* a struct at NULL (0), 0x10 (1), an unmapped page (2) */
        const void *bad = a == 0 ? NULL : a == 1 ? (const void *)0x10 : unmapped_page();
        if (!strcmp(op, "badcreate"))
            return get("cuMemCreate")(&p, (size_t)2 << 20, bad, 0ull);
        if (!strcmp(op, "badarray"))
            return get("cuArrayCreate_v2")(&v, bad);
        if (!strcmp(op, "badarray3d"))
            return get("cuArray3DCreate_v2")(&v, bad);
        return get("cuMipmappedArrayCreate")(&v, bad, 2u);
    }
    if (!strcmp(op, "hostalloc"))
        return keep(get("cuMemHostAlloc")(&v, (size_t)a, 0u), 4, v);
    if (!strcmp(op, "allochost"))
        return keep(get("cuMemAllocHost_v2")(&v, (size_t)a), 4, v);
    if (!strcmp(op, "free") || !strcmp(op, "freeasync") || !strcmp(op, "freeasyncptsz")) {
        struct item it = items[a];
        if (it.kind == 1)
            return !strcmp(op, "free") ? get("cuMemFree_v2")(it.key)
                   : !strcmp(op, "freeasync") ? get("cuMemFreeAsync")(it.key, NULL)
                                              : get("cuMemFreeAsync_ptsz")(it.key, NULL);
        if (it.kind == 2)
            return get("cuMemRelease")(it.key);
        if (it.kind == 3)
            return get("cuArrayDestroy")((void *)it.key);
        if (it.kind == 5)
            return get("cuMipmappedArrayDestroy")((void *)it.key);
        return get("cuMemFreeHost")((void *)it.key);
    }
    if (!strcmp(op, "churn")) { /* a times: cuMemAlloc_v2 of b bytes, then its free */
        fn_t alloc = get("cuMemAlloc_v2"), release = get("cuMemFree_v2");
        int rc = 0;
        for (u64 i = 0; i < a && !rc; i++)
            rc = alloc(&p, (size_t)b) || release(p);
        return rc;
    }
    if (!strcmp(op, "ctxchurn") || !strcmp(op, "syncchurn")) {
        fn_t f = get(!strcmp(op, "ctxchurn") ? "cuCtxSetCurrent" : "cuStreamSynchronize");
        int rc = 0;
        for (u64 i = 0; i < a && !rc; i++)
            rc = f((void *)(uintptr_t)(i % 2 + 1));
        return rc;
    }
    if (!strcmp(op, "threads")) {
        pthread_t t[64];
        void *bad = NULL;
        churn_n = b;
        for (u64 i = 0; i < a && i < 64; i++)
            pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)i);
        for (u64 i = 0; i < a && i < 64; i++) {
            void *r;
            pthread_join(t[i], &r);
            bad = bad ? bad : r;
        }
        return bad != NULL;
    }
    if (!strcmp(op, "forkbusy"))
        return fork_busy(a);
    if (!strcmp(op, "ctxthreads"))
        return run_threads(a, b, switcher);
    int rc = pool_op(op, a, b, c);
    if (rc >= 0)
        return rc;
    if (!strcmp(op, "info")) {
        size_t fr = 0, to = 0;
        int rc = get("cuMemGetInfo_v2")(&fr, &to);
        printf("%s info free %zu total %zu\n", who, fr, to);
        return rc;
    }
    if (!strcmp(op, "total")) {
        size_t to = 0;
        int rc = get("cuDeviceTotalMem_v2")(&to, (int)a);
        printf("%s total %zu\n", who, to);
        return rc;
    }
    fprintf(stderr, "memledger: unknown op %s\n", op);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *who = "parent";
    get("cuInit")(0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "fork")) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid > 0) {
                int st;
                waitpid(pid, &st, 0);
                break;
            }
            who = "child";
            continue;
        }
        if (!strcmp(argv[i], "kill")) {
            totals(who);
            raise(SIGKILL);
        }
        char op[128];
        snprintf(op, sizeof op, "%s", argv[i]);
        int rc = run_op(op, who);
        printf("%s %s rc %d\n", who, argv[i], rc);
    }
    totals(who);
    return 0;
}
