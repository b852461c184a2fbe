/*
 * entries.c: the ledger's live-entry table (ledger.c has the numbers): an open-addressing
 * table of SLOTS entries (address, pointer, handle or array -> size, column, route; a
 * handle's references), mapped at the first allocation; each allocation and free of the
 * memory routes' hooks (hooks_memory.c) counted into the numbers under the ledger's lock
 * (lock.h). shimgen_ledger_add is the common path: no calls but tail calls.
 */

#define _GNU_SOURCE
#include <stddef.h>
#include <sys/mman.h>

#include "budget/budget.h"
#include "lock.h"

/* Bytes a column gave back, back to the shared budget too (budget/), when there is one. */
static inline void give_shared(unsigned c, uint64_t n)
{
    if (__builtin_expect(__atomic_load_n(&shimgen_budget_on, __ATOMIC_RELAXED), 0) && n)
        shimgen_budget_give((int)c, n);
}

/* An entry's first slot: its key's alone (keys of two kinds alike are told apart by the
 * probe, which compares the tag too). */
static inline unsigned home(uint64_t key)
{
    return (unsigned)((key * 0x9E3779B97F4A7C15ull) >> (64 - SLOT_BITS));
}

static int find(unsigned tag, uint64_t key)
{
    if (!slots)
        return -1;
    for (unsigned i = home(key);; i = (i + 1) & (SLOTS - 1)) {
        if (!slots[i].tag)
            return -1;
        if (slots[i].tag == tag && slots[i].key == key)
            return (int)i;
    }
}

/* Linear probing's deletion: the entries after it that would no longer be found move up. */
static void remove_slot(unsigned i)
{
    slots[i].tag = 0;
    room++;
    for (unsigned j = (i + 1) & (SLOTS - 1); slots[j].tag; j = (j + 1) & (SLOTS - 1)) {
        unsigned k = home(slots[j].key);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            slots[i] = slots[j];
            slots[j].tag = 0;
            i = j;
        }
    }
}

/* The most held and reserved at once: what the column holds and pools and graphs reserve
 * beyond it, now. */
static __attribute__((noinline)) void note_reserved_peak(unsigned c)
{
    uint64_t now = current[c] + extra[c];
    if (now > num->reserved_peak[c])
        num->reserved_peak[c] = now;
}

/* A column's `extra`: the pools' reservation beyond what the pool routes hold there (never
 * below 0: the ledger's view of a pool may be older than its routes'), and the graphs'. */
static void recompute_extra(unsigned c)
{
    uint64_t pooled = 0;
    for (unsigned r = 0; r < ROUTES; r++)
        if (SHIMGEN_MEM_POOL_ROUTES >> r & 1)
            pooled += num->held[c * ROUTES + r];
    uint64_t res = num->pool[c * 4];
    extra[c] = (res > pooled ? res - pooled : 0) + num->graph[c * 4];
    note_reserved_peak(c);
}

/* A column's `extra` charged to the shared budget (its reserve: budget.h), when there is
 * one, with `freed` bytes given back: after each change, outside the ledger's lock (the
 * budget may ask the driver). */
static void charge_shared(unsigned c, uint64_t freed)
{
    if (__builtin_expect(__atomic_load_n(&shimgen_budget_on, __ATOMIC_RELAXED), 0) && c < COLS)
        shimgen_budget_settle((int)c, freed, &extra[c]);
}

void shimgen_ledger_charge(int column) { charge_shared((unsigned)column, 0); }

/* A pool's or the graphs' reservation (memory/reserve.c) as the column's `extra`. */
void shimgen_ledger_reservation(int graphs, int column, const uint64_t v[4])
{
    if ((unsigned)column >= COLS || !lock_ledger())
        return;
    uint64_t *to = (graphs ? num->graph : num->pool) + column * 4;
    for (int k = 0; k < 4; k++) /* (the highs, 1 and 3, kept at their most) */
        to[k] = (k & 1) && to[k] > v[k] ? to[k] : v[k];
    recompute_extra((unsigned)column);
    unlock_ledger();
}

/* Bytes added to a column and route (an allocation: `one` 1, `taken` its bytes) or given
 * back (minus its bytes, `one` -1, `taken` 0); the reserved peak left to the caller. */
static inline __attribute__((always_inline)) void count_held(unsigned c, unsigned r, uint64_t n,
                                                            uint64_t one, uint64_t taken)
{
    struct nums *x = num;
    unsigned at = c * ROUTES + r;
    uint64_t cur = current[c] += n;
    x->held[at] += n;
    x->live[at] += one;
    x->taken[at] += taken;
    if (cur > x->peak[c])
        x->peak[c] = cur;
}

/* With pools or graphs reserving on the column, an allocation by another route is a
 * reserved peak's candidate (a pool route's is, once its pool is asked again). */
static inline int reserved_candidate(unsigned c, unsigned r, uint64_t n)
{
    (void)n; /* (a free's is harmless: nothing grew) */
    return __builtin_expect(extra[c] != 0, 0) && !(SHIMGEN_MEM_POOL_ROUTES >> r & 1);
}

static inline void count(unsigned c, unsigned r, uint64_t n, uint64_t one, uint64_t taken)
{
    count_held(c, r, n, one, taken);
    if (reserved_candidate(c, r, n))
        note_reserved_peak(c);
}

/* The reserved peak noted after the common path's update, in a call of its own (so that
 * the common path saves no registers). */
static __attribute__((noinline)) shimgen_CUresult note_after(unsigned c)
{
    if (lock_ledger()) {
        note_reserved_peak(c);
        unlock_ledger();
    }
    return SHIMGEN_CUDA_SUCCESS;
}

static __attribute__((noinline)) void map_slots(void)
{
    void *m = mmap(NULL, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
        slots = m;
        room = SLOTS_FULL;
    }
}

/* An entry whose free the ledger never saw, its key given again: its bytes given back. */
static __attribute__((noinline)) void forget(struct slot *s)
{
    count(s->column, s->route, -s->size, (uint64_t)-1, 0);
    give_shared(s->column, s->size);
    room++;
}

/* Where a new entry goes: the free slot its probe ends at; -1 when an entry of the same key
 * is there (its free never seen). */
static inline __attribute__((always_inline)) int free_slot(unsigned tag, uint64_t key)
{
    struct slot *t = slots;
    unsigned i = home(key);
    for (; t[i].tag; i = (i + 1) & (SLOTS - 1))
        if (__builtin_expect(t[i].tag == tag && t[i].key == key, 0))
            return -1;
    return (int)i;
}

/* A new entry in slot i, its bytes counted. */
static inline __attribute__((always_inline)) void put_at(unsigned i, unsigned tag, uint64_t key,
                                                        uint64_t size, unsigned column,
                                                        unsigned route, uint64_t taken)
{
    slots[i].key = key;
    slots[i].size = size;
    slots[i].meta = LEDGER_META(route, tag) | (uint64_t)column << 40;
    room--;
    count(column, route, size, 1, taken);
}

/* A new entry, in its key's place (replacing one of the same key, whose free the ledger
 * never saw: its bytes given back first), its bytes counted. The table has room. */
static void put(unsigned tag, uint64_t key, uint64_t size, unsigned column, unsigned route,
                uint64_t taken)
{
    int i = find(tag, key);
    if (i >= 0)
        forget(&slots[i]);
    put_at((unsigned)free_slot(tag, key), tag, key, size, column, route, taken);
}

/* put, mapping the table first; 0: no room, not followed. */
static int insert(unsigned tag, uint64_t key, uint64_t size, unsigned column, unsigned route,
                  uint64_t taken)
{
    if (!slots)
        map_slots();
    if (!room)
        return 0;
    put(tag, key, size, column, route, taken);
    return 1;
}

/* A reservation of the shared budget alone: what the driver did not take of it given back
 * (the reservation is at least the size: shimgen_ledger_grow), the entry counted as without
 * a limit. (An entry the table cannot take keeps its bytes in the budget: it is not
 * followed, and its free is never seen.) */
shimgen_CUresult shimgen_ledger_settle_shared(int column, uint64_t meta, uint64_t size,
                                              uint64_t key, uint64_t reserved)
{
    uint64_t back = META_TAG(meta) ? reserved - size : reserved;
    if (back)
        shimgen_budget_give(column, back);
    return META_TAG(meta) ? shimgen_ledger_add(column, meta, size, key) : SHIMGEN_CUDA_SUCCESS;
}

/* The general case: a reservation traded or given back (`meta`'s tag 0), the lock waited
 * for, the table to map or full, a column not followed, a signal handler inside this
 * thread's section. A reservation traded: the column's peak is at least what it held with
 * the reservation (less what the driver did not take of it), as other threads' allocations
 * and frees may have come and gone between the reservation and the driver's answer. */
shimgen_CUresult shimgen_ledger_settle(int column, uint64_t meta, uint64_t size, uint64_t key,
                                       const uint64_t *reserved)
{
    unsigned tag = META_TAG(meta), route = META_ROUTE(meta);
    if (reserved && reserved[1] == LEDGER_BUDGET_ONLY)
        return shimgen_ledger_settle_shared(column, meta, size, key, reserved[0]);
    if (!lock_ledger()) { /* (a reservation is never made in here) */
        if (tag)
            __atomic_fetch_add(&num->untracked, 1, __ATOMIC_RELAXED);
        return SHIMGEN_CUDA_SUCCESS;
    }
    uint64_t back = reserved ? reserved[0] : 0; /* what the shared budget gets back */
    if (back)
        current[column] -= back;
    if (tag && !((unsigned)column < COLS && insert(tag, key, size, (unsigned)column, route,
                                                   size)))
        __atomic_fetch_add(&num->untracked, 1, __ATOMIC_RELAXED); /* (also counted unlocked) */
    else if (tag && back) {
        uint64_t then = reserved[1] - back + size;
        if (then > num->peak[column])
            num->peak[column] = then;
        back -= size; /* (the reservation is at least the size: shimgen_ledger_grow) */
    }
    unlock_ledger();
    give_shared((unsigned)column, back);
    return SHIMGEN_CUDA_SUCCESS;
}

/* The common case: no calls but tail calls, so no registers to save. */
shimgen_CUresult shimgen_ledger_add(int column, uint64_t meta, uint64_t size, uint64_t key)
{
    if (__builtin_expect((unsigned)column >= COLS, 0))
        return shimgen_ledger_settle(column, meta, size, key, NULL);
    uintptr_t me = (uintptr_t)__builtin_thread_pointer(), was = 0;
    if (__builtin_expect(
            !__atomic_compare_exchange_n(&lock, &was, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED),
            0))
        return shimgen_ledger_settle(column, meta, size, key, NULL);
    unsigned tag = META_TAG(meta);
    int i = room ? free_slot(tag, key) : -1;
    if (__builtin_expect(i < 0, 0)) { /* the table to map, full, or the key there already */
        unlock_ledger();
        return shimgen_ledger_settle(column, meta, size, key, NULL);
    }
    slots[i].key = key;
    slots[i].size = size;
    slots[i].meta = meta | (uint64_t)column << 40;
    room--;
    count_held((unsigned)column, META_ROUTE(meta), size, 1, size);
    int note = reserved_candidate((unsigned)column, META_ROUTE(meta), size);
    unlock_ledger();
    if (__builtin_expect(note, 0))
        return note_after((unsigned)column);
    return SHIMGEN_CUDA_SUCCESS;
}

int shimgen_ledger_take(unsigned tag, uint64_t key, uint64_t out[3])
{
    if (!lock_ledger())
        return 0;
    int i = find(tag, key), took = 0;
    if (i >= 0 && slots[i].refs > 1) {
        slots[i].refs--;
        took = 2;
    } else if (i >= 0) {
        out[0] = slots[i].size, out[1] = slots[i].column, out[2] = slots[i].route;
        remove_slot((unsigned)i); /* (its bytes still held: the driver has not freed them) */
        took = 1;
    }
    unlock_ledger();
    return took;
}

void shimgen_ledger_given(int took, const uint64_t taken[3])
{
    if (took != 1)
        return;
    if (!lock_ledger()) { /* (a signal handler inside this thread's section: kept held) */
        __atomic_fetch_add(&num->untracked, 1, __ATOMIC_RELAXED);
        return;
    }
    count((unsigned)taken[1], (unsigned)taken[2], -taken[0], (uint64_t)-1, 0);
    int pooled = SHIMGEN_MEM_POOL_ROUTES >> taken[2] & 1;
    if (pooled) /* back to its pool, reserved */
        recompute_extra((unsigned)taken[1]);
    unlock_ledger();
    if (pooled) /* (with its pool's reserve, in one update: the pool holds them still) */
        charge_shared((unsigned)taken[1], taken[0]);
    else
        give_shared((unsigned)taken[1], taken[0]);
}

void shimgen_ledger_untake(unsigned tag, uint64_t key, int took, const uint64_t taken[3])
{
    if (!took || !lock_ledger())
        return;
    int i = find(tag, key);
    if (i >= 0 && took == 2) {
        slots[i].refs++;
    } else if (took == 1 && (i >= 0 || !slots || !room)) {
        /* (the key given again meanwhile, or no room: its bytes given back, not kept) */
        count((unsigned)taken[1], (unsigned)taken[2], -taken[0], (uint64_t)-1, 0);
        give_shared((unsigned)taken[1], taken[0]);
    } else if (took == 1) { /* (back in its place, its bytes never given) */
        unsigned at = (unsigned)free_slot(tag, key);
        slots[at].key = key;
        slots[at].size = taken[0];
        slots[at].meta = LEDGER_META(taken[2], tag) | taken[1] << 40;
        room--;
    }
    unlock_ledger();
}

void shimgen_ledger_retain(uint64_t handle)
{
    if (!lock_ledger())
        return;
    int i = find(LEDGER_HANDLE, handle);
    if (i >= 0)
        slots[i].refs++;
    unlock_ledger();
}
