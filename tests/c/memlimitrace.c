/* The memory limit under racing threads and forks (tests/run/test_memory_race.py): ROUNDS
 * rounds, in each T threads that allocate and free near the limit by every route of
 * shimgen/shim/memroutes.py at random (sizes, routes, the order of frees, yields), through
 * whatever libcuda the loader gives (the shim, over the FAKE driver
 * tests/c/fake_ledger_libcuda.c, which keeps its own books: the most it held at once). In
 * every FORK-th round the main thread forks while the threads allocate; the child (a
 * ledger and books of its own) makes STEPS random allocations and frees alone, prints its
 * books ("child PID {...}") and ends. At the end each thread has freed all it held; the
 * books are printed ("parent {...}").
 *   memlimitrace ROUNDS T FORK STEPS SEED */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*fn_t)();
typedef unsigned long long u64;

static fn_t get(const char *name)
{
    fn_t f = (fn_t)dlsym(RTLD_DEFAULT, name);
    if (!f) {
        fprintf(stderr, "memlimitrace: no %s\n", name);
        exit(3);
    }
    return f;
}

/* What a thread holds: the key and how it is given back. */
enum { ADDR, ASYNC, HANDLE, ARRAY, MIPMAP, HOST };
struct held {
    u64 key;
    int kind, refs;
};
#define HOLD 6

static u64 pool; /* device 0's default pool */

/* One allocation by a route picked at random; 0 when the driver (or the limit) refused. */
static int allocate(unsigned *seed, struct held *h)
{
    size_t n = 1 + (size_t)(rand_r(seed) % (256 << 10));
    unsigned char prop[32] = {0};
    int loc[2] = {1, 0}; /* CUmemLocation: device 0 */
    memcpy(prop + 8, loc, sizeof loc);
    size_t d2[3] = {1 + (size_t)(rand_r(seed) % 256), (size_t)(rand_r(seed) % 64), 0};
    size_t d3[5] = {d2[0], d2[1], (size_t)(rand_r(seed) % 4), 0, 0};
    int fmt[2] = {0x20, 1}; /* 4-byte elements, one channel */
    memcpy(&d2[2], fmt, sizeof fmt);
    memcpy(&d3[3], fmt, sizeof fmt);
    size_t pitch = 0;
    *h = (struct held){0, ADDR, 1};
    switch (rand_r(seed) % 15) {
    case 0: return !get("cuMemAlloc_v2")(&h->key, n);
    case 1: return !get("cuMemAllocManaged")(&h->key, n, 1u);
    case 2:
        return !get("cuMemAllocPitch_v2")(&h->key, &pitch, 1 + (size_t)(rand_r(seed) % 2048),
                                          1 + (size_t)(rand_r(seed) % 128), 4u);
    case 3: return h->kind = ASYNC, !get("cuMemAllocAsync")(&h->key, n, NULL);
    case 4: return h->kind = ASYNC, !get("cuMemAllocAsync_ptsz")(&h->key, n, NULL);
    case 5: return h->kind = ASYNC, !get("cuMemAllocFromPoolAsync")(&h->key, n, pool, NULL);
    case 6:
        return h->kind = ASYNC, !get("cuMemAllocFromPoolAsync_ptsz")(&h->key, n, pool, NULL);
    case 7: return h->kind = HANDLE, !get("cuMemCreate")(&h->key, n, prop, 0ull);
    case 8: return h->kind = HANDLE, !get("cuMemImportFromShareableHandle")(&h->key, NULL, 1);
    case 9: return h->kind = ARRAY, !get("cuArrayCreate_v2")(&h->key, d2);
    case 10: return h->kind = ARRAY, !get("cuArray3DCreate_v2")(&h->key, d3);
    case 11:
        return h->kind = MIPMAP,
               !get("cuMipmappedArrayCreate")(&h->key, d3, 1u + (unsigned)(rand_r(seed) % 4));
    case 12: return h->kind = HOST, !get("cuMemHostAlloc")(&h->key, n, 0u);
    case 13: return h->kind = HOST, !get("cuMemAllocHost_v2")(&h->key, n);
    default: return !get("cuMemAlloc_v2")(&h->key, n / 16 + 1);
    }
}

/* One reference of it given back by its route's free (an address by one of three). */
static int give_back(unsigned *seed, struct held *h)
{
    void *a = (void *)(uintptr_t)h->key;
    h->refs--;
    switch (h->kind) {
    case ADDR:
        switch (rand_r(seed) % 3) {
        case 0: return get("cuMemFree_v2")(h->key);
        case 1: return get("cuMemFreeAsync")(h->key, NULL);
        default: return get("cuMemFreeAsync_ptsz")(h->key, NULL);
        }
    case ASYNC: return get("cuMemFreeAsync")(h->key, NULL) || get("cuStreamSynchronize")(NULL);
    case HANDLE: return get("cuMemRelease")(h->key);
    case ARRAY: return get("cuArrayDestroy")(a);
    case MIPMAP: return get("cuMipmappedArrayDestroy")(a);
    default: return get("cuMemFreeHost")(a);
    }
}

/* `steps` random steps: an allocation, a retained handle, or one of those held given back;
 * then all given back. Nonzero when a free failed. */
static int steps(unsigned seed, int n)
{
    struct held h[HOLD];
    int held = 0, bad = 0;
    get("cuCtxSetCurrent")((void *)1);
    for (int i = 0; i < n; i++) {
        int r = rand_r(&seed) % 8;
        if (r < 4 && held < HOLD) {
            held += allocate(&seed, &h[held]);
        } else if (r == 4 && held && h[held - 1].kind == HANDLE) {
            u64 again = 0;
            if (!get("cuMemRetainAllocationHandle")(&again, (void *)(uintptr_t)h[held - 1].key))
                h[held - 1].refs++;
        } else if (held) {
            int k = rand_r(&seed) % held;
            bad |= give_back(&seed, &h[k]);
            if (!h[k].refs)
                h[k] = h[--held];
        }
        if (rand_r(&seed) % 4 == 0)
            sched_yield();
    }
    while (held) {
        bad |= give_back(&seed, &h[held - 1]);
        if (!h[held - 1].refs)
            held--;
    }
    return bad;
}

static int nsteps;
static void *thread_steps(void *arg)
{
    return (void *)(uintptr_t)steps((unsigned)(uintptr_t)arg, nsteps);
}

static void totals(const char *who)
{
    char buf[8192];
    get("fake_ledger_totals")(buf, sizeof buf);
    printf("%s %s\n", who, buf);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    int rounds = atoi(argv[1]), nthreads = atoi(argv[2]), every = atoi(argv[3]);
    nsteps = atoi(argv[4]);
    unsigned seed = (unsigned)strtoul(argv[5], NULL, 10);
    int bad = get("cuInit")(0u);
    get("cuCtxSetCurrent")((void *)1);
    bad |= get("cuDeviceGetDefaultMemPool")(&pool, 0);
    pthread_t t[64];
    for (int round = 0; round < rounds && !bad; round++) {
        for (int i = 0; i < nthreads; i++)
            pthread_create(&t[i], NULL, thread_steps, (void *)(uintptr_t)rand_r(&seed));
        if (every && round % every == 0) {
            for (int spin = rand_r(&seed) % 2000; spin > 0; spin--)
                __asm__ volatile("" ::: "memory");
            pid_t pid = fork();
            if (pid == 0) {
                char who[32];
                int rc = steps(rand_r(&seed), nsteps);
                snprintf(who, sizeof who, "child %d", (int)getpid());
                totals(who);
                _exit(rc);
            }
            int st = 0;
            bad |= pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st);
        }
        for (int i = 0; i < nthreads; i++) {
            void *r = NULL;
            pthread_join(t[i], &r);
            bad |= r != NULL;
        }
    }
    totals("parent");
    printf("memlimitrace rc %d\n", bad);
    return bad;
}
