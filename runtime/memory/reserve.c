/*
 * reserve.c: what memory pools and graphs hold reserved on each device (docs/memory.md),
 * asked of the driver's own attributes and handed to the ledger (ledger.c). A pool keeps
 * memory its allocations gave back, up to its release threshold, and the driver reserves
 * memory for graphs when a graph with memory nodes is launched: neither passes through an
 * exported function when it changes, but the driver says how much (cuMemPoolGetAttribute's
 * RESERVED_MEM_CURRENT, _HIGH, USED_MEM_CURRENT, _HIGH, cuDeviceGetGraphMemAttribute's).
 * The hooks (hooks_memory.c) call here after each function at which a reservation can
 * change: a pool allocation, a trim, a pool's destruction, a graph's launch, upload or
 * destruction, a synchronisation (where a pool gives back what is above its threshold).
 *
 * The pools the ledger knows (cuMemPoolCreate, cuDeviceGetDefaultMemPool,
 * cuDeviceGetMemPool, cuDeviceSetMemPool; a device's current pool asked once with
 * cuDeviceGetMemPool) and their devices are in a small table under a short spinlock, never
 * held over a driver call; the driver is asked from the calling thread after its own call
 * returned, as the program itself could ask. A forked child starts with no pools.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "memory.h"
#include "base/base.h"

#define MAX_POOLS 64
#define DEVICES SHIMGEN_MEM_DEVICES

static struct pool_known {
    uint64_t handle, v[4]; /* the driver's four numbers (runenv.MEM_RESERVE_FIELDS) */
    int column;
} known[MAX_POOLS];
static unsigned npools;
static uint64_t current_pool[DEVICES]; /* each device's current pool; 0: not known yet */
static uint32_t graph_columns;         /* the devices with graph memory seen */
static int captures;                   /* stream captures begun and not ended */
static uintptr_t lock; /* 0, or the thread pointer of the thread holding it */
static int said_full;
int shimgen_reserve_any; /* a pool or a graph allocation seen: worth asking at a sync */

/* While any stream captures, the driver is not asked (a capture in the global mode forbids
 * the other threads' unsafe calls; these queries are not among them, but a broken capture
 * is too high a price to find out): the next watched call after it asks. */
static int capturing(void)
{
    return __atomic_load_n(&captures, __ATOMIC_RELAXED) > 0;
}

/* A forked child (fork.c, after the ledger): no pools of its own yet (its ledger
 * starts empty), the lock free. */
void shimgen_reserve_after_fork(void)
{
    memset(known, 0, sizeof known);
    memset(current_pool, 0, sizeof current_pool);
    npools = 0, graph_columns = 0, captures = 0, lock = 0, shimgen_reserve_any = 0;
}

/* 0: held by this very thread (a signal handler inside its own section: not waited for,
 * its call not followed). */
static int lock_pools(void)
{
    uintptr_t me = (uintptr_t)__builtin_thread_pointer(), was = 0;
    while (!__atomic_compare_exchange_n(&lock, &was, me, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
        if (was == me)
            return 0;
        was = 0;
        sched_yield();
    }
    return 1;
}

static void unlock_pools(void) { __atomic_store_n(&lock, 0, __ATOMIC_RELEASE); }

static struct pool_known *find(uint64_t handle)
{
    for (unsigned i = 0; i < npools; i++)
        if (known[i].handle == handle)
            return &known[i];
    return NULL;
}

/* A column's pools summed, handed to the ledger (the lock held: the ledger sees the sums
 * in the order they were made; the shared budget is told after it is let go). */
static void hand_over(int column)
{
    uint64_t sum[4] = {0, 0, 0, 0};
    for (unsigned i = 0; i < npools; i++)
        for (int k = 0; k < 4 && known[i].column == column; k++)
            sum[k] += known[i].v[k];
    shimgen_ledger_reservation(0, column, sum);
    shimgen_ledger_counts(npools, 0);
}

int shimgen_pool_column(uint64_t handle)
{
    if (!__atomic_load_n(&npools, __ATOMIC_RELAXED) || !lock_pools())
        return -1;
    struct pool_known *p = find(handle);
    int c = p ? p->column : -1;
    unlock_pools();
    return c;
}

void shimgen_pool_gone(uint64_t handle)
{
    if (!handle || !lock_pools())
        return;
    struct pool_known *p = find(handle);
    int was = p ? p->column : -1;
    if (p) { /* its reservation gone with it */
        *p = known[--npools];
        hand_over(was);
    }
    unlock_pools();
    shimgen_ledger_charge(was);
}

void shimgen_pool_seen(uint64_t handle, int column, int is_current)
{
    if (!handle || column < 0 || !lock_pools())
        return;
    struct pool_known *p = find(handle);
    if (!p && npools < MAX_POOLS) {
        known[npools++] = (struct pool_known){.handle = handle, .column = column};
        __atomic_store_n(&shimgen_reserve_any, 1, __ATOMIC_RELAXED);
        shimgen_ledger_counts(npools, 0);
    } else if (!p && !said_full++) {
        shimgen_say("shimgen: more than %d memory pools: the others' reservations are not "
                    "followed\n", MAX_POOLS);
    }
    if (is_current && column < (int)DEVICES)
        current_pool[column] = handle;
    unlock_pools();
}

uint64_t shimgen_device_pool(int column)
{
    if (column < 0 || column >= (int)DEVICES || capturing())
        return 0;
    uint64_t h = __atomic_load_n(&current_pool[column], __ATOMIC_RELAXED);
#ifdef SHIMGEN_IDX_cuDeviceGetMemPool
    if (!h && REAL(cuDeviceGetMemPool, uint64_t *, int)(&h, column) == SHIMGEN_CUDA_SUCCESS)
        shimgen_pool_seen(h, column, 1);
#endif
    return h;
}

/* (never below 0: a capture ended that began before the hooks were in place) */
void shimgen_capture(int delta)
{
    int was = __atomic_load_n(&captures, __ATOMIC_RELAXED);
    while (was + delta >= 0 && !__atomic_compare_exchange_n(&captures, &was, was + delta, 1,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

int shimgen_in_capture(void *stream)
{
    if (__atomic_load_n(&captures, __ATOMIC_RELAXED) <= 0)
        return 0;
    int status = 0;
#ifdef SHIMGEN_IDX_cuStreamIsCapturing
    if (REAL(cuStreamIsCapturing, void *, int *)(stream, &status) != SHIMGEN_CUDA_SUCCESS)
        return 0;
#else
    (void)stream;
#endif
    return status == SHIMGEN_CAPTURE_ACTIVE;
}

void shimgen_graph_alloc(int column)
{
    if (column >= 0 && column < (int)DEVICES)
        __atomic_fetch_or(&graph_columns, 1u << column, __ATOMIC_RELAXED);
    __atomic_store_n(&shimgen_reserve_any, 1, __ATOMIC_RELAXED);
    shimgen_ledger_counts(__atomic_load_n(&npools, __ATOMIC_RELAXED), 1);
}

void shimgen_pool_refresh(uint64_t handle)
{
#ifdef SHIMGEN_IDX_cuMemPoolGetAttribute
    static const int attrs[4] = SHIMGEN_MEMPOOL_ATTRS;
    uint64_t v[4];
    if (capturing())
        return;
    for (int k = 0; k < 4; k++)
        if (!handle || REAL(cuMemPoolGetAttribute, uint64_t, int, uint64_t *)(
                           handle, attrs[k], &v[k]) != SHIMGEN_CUDA_SUCCESS)
            return;
    if (!lock_pools())
        return;
    struct pool_known *p = find(handle);
    int column = p ? p->column : -1;
    if (p) {
        for (int k = 0; k < 4; k++)
            p->v[k] = v[k];
        hand_over(column);
    }
    unlock_pools();
    shimgen_ledger_charge(column);
#else
    (void)handle;
#endif
}

void shimgen_graph_refresh(int column)
{
#ifdef SHIMGEN_IDX_cuDeviceGetGraphMemAttribute
    static const int attrs[4] = SHIMGEN_GRAPH_MEM_ATTRS;
    uint32_t mask = capturing() ? 0 : __atomic_load_n(&graph_columns, __ATOMIC_RELAXED);
    if (column >= 0 && column < (int)DEVICES)
        mask &= 1u << column;
    for (int c = 0; mask; c++, mask >>= 1) {
        uint64_t v[4];
        int k = 0;
        while (k < 4 && (mask & 1) &&
               REAL(cuDeviceGetGraphMemAttribute, int, int, uint64_t *)(c, attrs[k], &v[k]) ==
                   SHIMGEN_CUDA_SUCCESS)
            k++;
        if (k == 4)
            shimgen_ledger_reservation(1, c, v), shimgen_ledger_charge(c);
    }
#else
    (void)column;
#endif
}

void shimgen_reserve_refresh(void)
{
    uint64_t handles[MAX_POOLS];
    unsigned n = 0;
    if (!__atomic_load_n(&npools, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&graph_columns, __ATOMIC_RELAXED))
        return; /* (no pool and no graph memory seen: nothing to ask) */
    if (lock_pools()) {
        for (; n < npools; n++)
            handles[n] = known[n].handle;
        unlock_pools();
    }
    for (unsigned i = 0; i < n; i++)
        shimgen_pool_refresh(handles[i]);
    if (__atomic_load_n(&graph_columns, __ATOMIC_RELAXED))
        shimgen_graph_refresh(-1);
}

int shimgen_reserve_or_refresh(int column, uint64_t size, uint64_t reserved[2])
{
    if (shimgen_ledger_reserve(column, size, reserved, 0))
        return 1;
    if (shimgen_ledger_extra(column)) /* (pools and graphs asked again before a refusal) */
        shimgen_reserve_refresh();
    return shimgen_ledger_reserve(column, size, reserved, 1);
}
