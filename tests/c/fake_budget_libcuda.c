/* A FAKE libcuda for the shared memory budget's tests: not NVIDIA's driver. cuMemAlloc_v2
 * hands out fake addresses (no memory behind them) and cuMemFree_v2 takes them back; the
 * fake keeps its books in a file every process of a test maps (FAKE_BUDGET_BOOKS, made
 * zero-filled and of the right size by the test), so that what "the driver" holds for all
 * of them at once is known: each process's bytes, and at each allocation the sum over the
 * processes still there (a process gone or a zombie has given back its memory, as a driver
 * does when a process's files close). With FAKE_BUDGET_LIMIT, an allocation that takes the
 * sum past it is counted in `over` (and still made); `peak` is the most the sum was.
 *
 * One device, of UUID FAKE_BUDGET_UUID's 16 bytes (default "fake-budget-dev0"), or none
 * (cuDeviceGetUuid fails) when FAKE_BUDGET_NO_UUID is set. With FAKE_BUDGET_DIE_LOCKED set,
 * the Nth allocation (its value, from 1) takes the shim's books' lock (SHIMGEN_BUDGET_FILE,
 * runtime/budget/view.h), leaves an update half-done (a device's `used` at 0, the sequence
 * odd) and kills its own process with SIGKILL: a process that dies holding the lock.
 * cuMemGetInfo_v2 answers 96 GiB total and FAKE_BUDGET_FREE bytes free (default 80 GiB).
 *
 * The device has one memory pool (cuDeviceGetMemPool's, cuMemAllocAsync's), a process's
 * own: it reserves memory in chunks of 64 KiB as its allocations need it and keeps what
 * cuMemFreeAsync gives back until a synchronisation (its release threshold is 0),
 * cuMemPoolTrimTo, or cuStreamQuery (which the shim does not watch: a pool that gives
 * memory back where nobody asks it); cuMemPoolGetAttribute says its reserved and used
 * bytes and their highs. What it reserves is the process's in the fake's books (its
 * allocations are in it). A graph's memory allocation nodes (cuGraphAddMemAllocNode; one
 * graph, one instance) take their memory from the device's graph reservation at the
 * instance's upload, in chunks of 64 KiB, kept until cuDeviceGraphMemTrim after the
 * instance is gone (cuDeviceGetGraphMemAttribute says it): the process's too.
 * Built with SONAME libcuda.so.1. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../runtime/budget/view.h"

#define EXPORT __attribute__((visibility("default")))
#define PROCS 512
#define ALLOCS 4096

typedef int CUresult;
typedef unsigned long long u64;

struct fake_books {
    u64 peak, over, allocs, frees;
    struct {
        int pid, unused;
        u64 start, held;
    } proc[PROCS];
};

static struct fake_books *fb;
static int fb_fd = -1, me = -1;
static u64 limit, next_address = 0x7f0000000000ull, die_at, nallocs;
static pthread_mutex_t local = PTHREAD_MUTEX_INITIALIZER;
static struct {
    u64 key, size;
    int pooled; /* an allocation from the pool */
} live[ALLOCS];

#define POOL 0x100ull
#define CHUNK 65536ull
#define UP(n) (((n) + CHUNK - 1) / CHUNK * CHUNK)
static u64 pool_reserved, pool_reserved_high, pool_used, pool_used_high;
static u64 graph_mem[4], graph_size; /* reserved, its high, used, its high; the nodes' */
static int uploaded;

/* The process `pid` of start time `start` still there (not gone, not a zombie). */
static int there(int pid, u64 start)
{
    int zombie = 0;
    u64 now = books_start_time(pid, &zombie);
    return now && !zombie && now == start;
}

static void lock_fake(void)
{
    pthread_mutex_lock(&local);
    flock(fb_fd, LOCK_EX);
}

static void unlock_fake(void)
{
    flock(fb_fd, LOCK_UN);
    pthread_mutex_unlock(&local);
}

/* This process's entry in the fake's books (its own, a forked child's anew). */
static int open_books(void)
{
    static int for_pid;
    if (fb && for_pid == getpid())
        return 1;
    const char *path = getenv("FAKE_BUDGET_BOOKS");
    if (!path)
        return 0;
    if (fb_fd >= 0)
        close(fb_fd);
    fb_fd = open(path, O_RDWR | O_CLOEXEC);
    if (fb_fd < 0)
        return 0;
    if (!fb)
        fb = mmap(NULL, sizeof *fb, PROT_READ | PROT_WRITE, MAP_SHARED, fb_fd, 0);
    const char *l = getenv("FAKE_BUDGET_LIMIT");
    limit = l ? strtoull(l, NULL, 10) : 0;
    const char *d = getenv("FAKE_BUDGET_DIE_LOCKED");
    die_at = d ? strtoull(d, NULL, 10) : 0;
    for_pid = getpid();
    memset(live, 0, sizeof live);
    pool_reserved = pool_reserved_high = pool_used = pool_used_high = 0;
    memset(graph_mem, 0, sizeof graph_mem);
    graph_size = 0, uploaded = 0;
    me = -1;
    int zombie = 0;
    u64 start = books_start_time(for_pid, &zombie);
    lock_fake();
    for (int i = 0; i < PROCS && me < 0; i++)
        if (!fb->proc[i].pid || (fb->proc[i].pid == for_pid && fb->proc[i].start != start))
            me = i;
    if (me >= 0) {
        fb->proc[me].pid = for_pid, fb->proc[me].start = start, fb->proc[me].held = 0;
    }
    unlock_fake();
    return me >= 0;
}

/* The shim's books' lock taken as this process's (its slot's), an update left half-done (a
 * device's `used` at 0, the sequence odd), and this process killed. */
static void die_locked(void)
{
    int fd = open(getenv("SHIMGEN_BUDGET_FILE"), O_RDWR);
    struct books *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unsigned i = 0;
    while (i < BOOKS_SLOTS && b->slot[i].pid != getpid())
        i++;
    uint64_t free_word = 0;
    while (!__atomic_compare_exchange_n(&b->lock, &free_word,
                                        BOOKS_HOLDER(i, __builtin_thread_pointer()), 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        free_word = 0;
    b->seq |= 1;
    b->device[0].used = 0;
    kill(getpid(), SIGKILL);
}

/* An allocation of n bytes (`pooled`: from the pool, the process holding what its
 * reserve grows by). */
static u64 add(u64 n, int pooled)
{
    if (!open_books())
        return next_address += n + 4096;
    if (die_at && ++nallocs == die_at)
        die_locked();
    lock_fake();
    u64 more = n;
    if (pooled) {
        pool_used += n;
        u64 to = UP(pool_used);
        more = to > pool_reserved ? to - pool_reserved : 0;
        pool_reserved += more;
        pool_used_high = pool_used > pool_used_high ? pool_used : pool_used_high;
        pool_reserved_high = pool_reserved > pool_reserved_high ? pool_reserved
                                                                : pool_reserved_high;
    }
    u64 sum = more;
    for (int i = 0; i < PROCS; i++)
        if (fb->proc[i].pid && i != me && there(fb->proc[i].pid, fb->proc[i].start))
            sum += fb->proc[i].held;
    sum += fb->proc[me].held;
    if (limit && sum > limit)
        fb->over++;
    if (sum > fb->peak)
        fb->peak = sum;
    fb->proc[me].held += more;
    fb->allocs++;
    u64 key = next_address += n + 4096;
    for (int i = 0; i < ALLOCS; i++)
        if (!live[i].key) {
            live[i].key = key, live[i].size = n, live[i].pooled = pooled;
            break;
        }
    unlock_fake();
    return key;
}

static CUresult drop(u64 key)
{
    if (!open_books())
        return 0;
    lock_fake();
    int found = 0;
    for (int i = 0; i < ALLOCS && !found; i++)
        if (live[i].key == key) { /* (a pool's bytes kept in the pool, reserved) */
            *(live[i].pooled ? &pool_used : &fb->proc[me].held) -= live[i].size;
            live[i].key = 0;
            fb->frees++;
            found = 1;
        }
    unlock_fake();
    return found ? 0 : 1;
}

EXPORT CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
EXPORT CUresult cuDriverGetVersion(int *v) { return v ? (*v = 12040, 0) : 1; }
EXPORT CUresult cuDeviceGet(int *dev, int ordinal) { return dev ? (*dev = ordinal, 0) : 1; }
EXPORT CUresult cuDeviceGetCount(int *n) { return n ? (*n = 1, 0) : 1; }
EXPORT CUresult cuDeviceGetUuid(char *uuid, int dev)
{
    const char *u = getenv("FAKE_BUDGET_UUID");
    if (dev != 0 || getenv("FAKE_BUDGET_NO_UUID"))
        return 101;
    u = u ? u : "fake-budget-dev0";
    memset(uuid, 0, 16);
    memcpy(uuid, u, strnlen(u, 16));
    return 0;
}
EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev)
{
    (void)attribute, (void)dev;
    return value ? (*value = 0, 0) : 1;
}
EXPORT CUresult cuMemGetHandleForAddressRange(void *h, u64 d, size_t s, int t, u64 f)
{
    (void)h, (void)d, (void)s, (void)t, (void)f;
    return 801;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx) { return (void)ctx, 0; }
EXPORT CUresult cuCtxGetDevice(int *dev) { return dev ? (*dev = 0, 0) : 1; }
EXPORT CUresult cuMemAlloc_v2(u64 *p, size_t n)
{
    if (!p || !n)
        return 1;
    *p = add(n, 0);
    return 0;
}
EXPORT CUresult cuMemFree_v2(u64 p) { return drop(p); }
EXPORT CUresult cuMemAllocAsync(u64 *p, size_t n, void *s)
{
    (void)s;
    if (!p || !n)
        return 1;
    *p = add(n, 1);
    return 0;
}
EXPORT CUresult cuMemFreeAsync(u64 p, void *s) { return (void)s, drop(p); }
EXPORT CUresult cuDeviceGetMemPool(u64 *pool, int dev) { return dev ? 1 : (*pool = POOL, 0); }

/* A reservation set to `to` bytes, the process's bytes with it (the lock held). */
static void reserve_locked(u64 *reserved, u64 *high, u64 to)
{
    fb->proc[me].held += to - *reserved; /* (modulo 2^64: less when it shrinks) */
    *reserved = to;
    *high = to > *high ? to : *high;
}

/* The pool keeps at least `keep` (and what is used), in whole chunks. */
static CUresult trim(u64 pool, u64 keep)
{
    if (pool != POOL || !open_books())
        return 1;
    lock_fake();
    u64 to = UP(pool_used > keep ? pool_used : keep);
    if (to < pool_reserved)
        reserve_locked(&pool_reserved, &pool_reserved_high, to);
    unlock_fake();
    return 0;
}
EXPORT CUresult cuMemPoolTrimTo(u64 pool, size_t keep) { return trim(pool, keep); }
EXPORT CUresult cuStreamSynchronize(void *s) { return (void)s, trim(POOL, 0); }
/* (gives back as a synchronisation does, where the shim does not look) */
EXPORT CUresult cuStreamQuery(void *s) { return (void)s, trim(POOL, 0); }
EXPORT CUresult cuGraphCreate(void **graph, unsigned flags)
{
    return (void)flags, *graph = (void *)1, 0;
}
/* params: CUDA_MEM_ALLOC_NODE_PARAMS (bytesize at 104) */
EXPORT CUresult cuGraphAddMemAllocNode(void **node, void *graph, const void *deps, size_t n,
                                       const void *params)
{
    (void)graph, (void)deps, (void)n;
    u64 size;
    memcpy(&size, (const char *)params + 104, sizeof size);
    graph_size += size;
    return *node = (void *)1, 0;
}
EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, u64 flags)
{
    return (void)graph, (void)flags, *exec = (void *)2, 0;
}
EXPORT CUresult cuGraphUpload(void *exec, void *s)
{
    (void)exec, (void)s;
    if (uploaded || !open_books())
        return 0;
    lock_fake();
    uploaded = 1;
    graph_mem[2] += graph_size;
    graph_mem[3] = graph_mem[2] > graph_mem[3] ? graph_mem[2] : graph_mem[3];
    if (UP(graph_mem[2]) > graph_mem[0])
        reserve_locked(&graph_mem[0], &graph_mem[1], UP(graph_mem[2]));
    unlock_fake();
    return 0;
}
EXPORT CUresult cuGraphExecDestroy(void *exec)
{
    (void)exec;
    graph_mem[2] -= uploaded ? graph_size : 0;
    uploaded = 0;
    return 0;
}
EXPORT CUresult cuDeviceGraphMemTrim(int dev)
{
    if (dev || !open_books())
        return 1;
    lock_fake();
    reserve_locked(&graph_mem[0], &graph_mem[1], UP(graph_mem[2]));
    unlock_fake();
    return 0;
}
/* attributes 0 to 3: used, its high, reserved, its high */
EXPORT CUresult cuDeviceGetGraphMemAttribute(int dev, int attr, u64 *v)
{
    static const int at[4] = {2, 3, 0, 1};
    if (dev || attr < 0 || attr > 3)
        return 1;
    *v = graph_mem[at[attr]];
    return 0;
}

/* attributes 5 to 8: reserved, its high, used, its high */
EXPORT CUresult cuMemPoolGetAttribute(u64 pool, int attr, u64 *v)
{
    pthread_mutex_lock(&local);
    u64 all[4] = {pool_reserved, pool_reserved_high, pool_used, pool_used_high};
    pthread_mutex_unlock(&local);
    if (pool != POOL || attr < 5 || attr > 8)
        return 1;
    *v = all[attr - 5];
    return 0;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    const char *f = getenv("FAKE_BUDGET_FREE"); /* (default 80 GiB of 96) */
    *free_bytes = f ? strtoull(f, NULL, 10) : 80ull << 30, *total = 96ull << 30;
    return 0;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
    (void)dev;
    *bytes = 96ull << 30;
    return 0;
}
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags,
                                    int *status)
{
    (void)symbol, (void)version, (void)flags;
    *pfn = NULL;
    if (status)
        *status = 1;
    return 0;
}
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
