/*
 * ledger.c: the device memory ledger of a process (docs/memory.md). The hooks of the memory
 * routes (hooks_memory.c) tell it each allocation and free; it keeps, per column (a device
 * ordinal below SHIMGEN_MEM_DEVICES, or pinned host memory) and route, the bytes held and
 * taken and the allocations held, and each column's peak, and applies SHIMGEN_LIMIT_MEMORY
 * (an allocation that would take a device past it is refused before the driver is called).
 * Live allocations are in an open-addressing table (address, pointer, handle or array ->
 * size, column, route; a handle's references), mapped at the first allocation.
 *
 * Only allocation and free routes come here, each under one short spinlock (never held over
 * a driver call); a signal handler's allocation inside the thread's own section is not
 * followed (counted as untracked), never waited for. The numbers are kept in the trace
 * file's header as they change (tracefile_header.c attaches it), so a process killed
 * leaves them (kept only there once it is attached; in memory before, or without a file).
 * A forked child starts a ledger of its own, empty, in its own file.
 *
 * What pools and graphs hold reserved (reserve.c asks the driver) comes here as four numbers
 * per column; the ledger keeps, per column, the bytes they reserve beyond what the pool
 * routes hold (`extra`): the limit counts them, and the reserved peak is the most held and
 * reserved at once.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch/cpu.h"
#include "memory.h"
#include "tracefile/tracefile.h"

#define COLS SHIMGEN_MEM_COLUMNS
#define ROUTES SHIMGEN_MEM_ROUTES
#define SLOT_BITS 17
#define SLOTS (1u << SLOT_BITS)
#define SLOTS_FULL (SLOTS / 4 * 3) /* no more entries past this: untracked */

struct slot {
    uint64_t key, size;
    union {
        struct {
            uint32_t refs; /* a handle's references (cuMemRetainAllocationHandle adds one) */
            uint8_t tag;   /* LEDGER_*; 0: a free slot */
            uint8_t column, route, unused;
        };
        uint64_t meta; /* all of them, to write a new entry's at once */
    };
};
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "slot meta: refs in the low word");
#define META_TAG(meta) ((unsigned)((meta) >> 32) & 0xff)
#define META_ROUTE(meta) ((unsigned)((meta) >> 48) & 0xff)

/* The numbers, in one place: the trace file's header once attached (its fields from
 * mem_untracked to mem_taken, this layout), here before that or without a trace file. */
struct nums {
    uint64_t untracked, refused, peak[COLS];
    uint64_t held[COLS * ROUTES], live[COLS * ROUTES], taken[COLS * ROUTES];
    uint64_t reserved_peak[COLS], pool[COLS * 4], graph[COLS * 4], pools, graph_allocs;
};
#define NUMS_AT(f, n) \
    _Static_assert(offsetof(struct tf_header, mem_##f) - offsetof(struct tf_header, \
                   mem_untracked) == offsetof(struct nums, f), "ledger header " #f);
NUMS_AT(refused, 0)
NUMS_AT(peak, 0)
NUMS_AT(held, 0)
NUMS_AT(live, 0)
NUMS_AT(taken, 0)
NUMS_AT(reserved_peak, 0)
NUMS_AT(pool, 0)
NUMS_AT(graph, 0)
NUMS_AT(pools, 0)
NUMS_AT(graph_allocs, 0)
static struct nums own;
static struct nums *num = &own;  /* where the numbers are: `own` or the header's */
static uint64_t current[COLS];   /* the bytes held per column (and reserved for the limit) */
static uint64_t extra[COLS];     /* what pools and graphs reserve beyond the pool routes' */
static pid_t led_pid;           /* the process whose numbers `led` holds */
static struct tf_header *hdr;   /* where they are kept too; NULL: no trace file */
static pid_t hdr_pid;
static struct slot *slots;      /* SLOTS entries, mapped at the first allocation */
static unsigned room;           /* entries the table takes still; 0 too before it is mapped */
static uintptr_t lock; /* 0, or the thread pointer of the thread holding it */
static int configured;  /* shimgen_ledger_config ran: the driver's load began */
uint64_t shimgen_ledger_limit;

/* The route of each function this driver has (memroutes.inc, from memroutes.py). */
static const struct {
    unsigned idx, route;
} route_fns[] = {
#define MEM_ROUTE(kind, name, index) {SHIMGEN_IDX_##name, index},
#include "memroutes.inc"
#include "base/base.h"
#undef MEM_ROUTE
    {0, ROUTES}, /* the end */
};

/* A child's ledger is its own: empty, its table fresh, no header until its own file. */
static void own_process(void)
{
    pid_t me = getpid();
    if (led_pid != me) {
        memset(&own, 0, sizeof own);
        memset(current, 0, sizeof current);
        memset(extra, 0, sizeof extra);
        num = &own;
        if (slots && mmap(slots, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
                         MAP_FAILED)
            slots = NULL;
        room = slots ? SLOTS_FULL : 0;
        led_pid = me;
    }
    if (hdr && hdr_pid != me) {
        hdr = NULL;
        num = &own;
    }
}

/* A forked child (fork.c, before the pools' reset and the trace file's): the lock free,
 * its numbers its own. (Only here and in attach, never on an allocation's path: attach
 * keeps its guard, should a child's file be attached first.) */
void shimgen_ledger_after_fork(void)
{
    if (!__atomic_load_n(&configured, __ATOMIC_ACQUIRE))
        return;
    lock = 0;
    own_process();
}

/* The lock held by another thread: wait for it (never on the common path). */
static __attribute__((noinline)) void wait_for_lock(uintptr_t me)
{
    uintptr_t was = 0;
    for (unsigned spins = 0;
         !__atomic_compare_exchange_n(&lock, &was, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
         spins++, was = 0) {
        if (spins > 64)
            sched_yield();
        else
            shimgen_pause();
    }
}

/* 0: held by this very thread, a signal handler inside its own section (not waited for). */
static inline __attribute__((always_inline)) int lock_ledger(void)
{
    uintptr_t me = (uintptr_t)__builtin_thread_pointer(), was = 0;
    if (__builtin_expect(
            __atomic_compare_exchange_n(&lock, &was, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED),
            1))
        return 1;
    if (was == me)
        return 0;
    wait_for_lock(me);
    return 1;
}

static inline __attribute__((always_inline)) void unlock_ledger(void)
{
    __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

void shimgen_ledger_attach(struct tf_header *h)
{
    if (led_pid != getpid()) /* a forked child before its fork handler ran: the lock */
        lock = 0;            /* may be a copy of another thread's, held for ever */
    int locked = lock_ledger();
    own_process();
    h->mem_columns = COLS;
    h->mem_routes = ROUTES;
    for (unsigned i = 0; route_fns[i].route < ROUTES; i++)
        h->mem_route_fn[route_fns[i].route] = route_fns[i].idx + 1;
    h->mem_limit = shimgen_ledger_limit;
    struct nums *to = (struct nums *)(void *)&h->mem_untracked;
    memmove(to, num, sizeof *to);
    num = to;
    hdr = h;
    hdr_pid = getpid();
    if (locked)
        unlock_ledger();
}

void shimgen_ledger_detach(struct tf_header *h)
{
    int locked = lock_ledger();
    if (hdr == h) {
        memcpy(&own, num, sizeof own);
        num = &own;
        hdr = NULL;
    }
    if (locked)
        unlock_ledger();
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

/* (reserved[1]: what the column held and had reserved with these bytes, the peak's
 * candidate once the driver took them: the driver held no more than that then) */
int shimgen_ledger_reserve(int column, uint64_t size, uint64_t reserved[2], int last)
{
    uint64_t limit = shimgen_ledger_limit;
    reserved[0] = reserved[1] = 0;
    if (column < 0 || !limit || column == SHIMGEN_MEM_HOST_COLUMN || !lock_ledger())
        return 1;
    uint64_t cur = current[column] + extra[column];
    int fits = cur <= limit && size <= limit - cur;
    if (fits) {
        current[column] += size;
        reserved[0] = size;
        reserved[1] = current[column];
    } else if (last) {
        num->refused++;
    }
    unlock_ledger();
    return fits;
}

int shimgen_ledger_grow(int column, uint64_t reserved[2], uint64_t size)
{
    if (!reserved[0] || size <= reserved[0])
        return 1;
    uint64_t more[2];
    if (!shimgen_ledger_reserve(column, size - reserved[0], more, 1))
        return 0;
    reserved[0] += more[0];
    reserved[1] = more[1] > reserved[1] ? more[1] : reserved[1];
    return 1;
}

uint64_t shimgen_ledger_extra(int column)
{
    return column >= 0 && column < (int)COLS ? __atomic_load_n(&extra[column], __ATOMIC_RELAXED)
                                             : 0;
}

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

void shimgen_ledger_counts(uint64_t pools, uint64_t graph_allocs)
{
    if (!lock_ledger())
        return;
    num->pools = pools;
    num->graph_allocs += graph_allocs;
    unlock_ledger();
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
    if (!lock_ledger()) { /* (a reservation is never made in here) */
        if (tag)
            __atomic_fetch_add(&num->untracked, 1, __ATOMIC_RELAXED);
        return SHIMGEN_CUDA_SUCCESS;
    }
    if (reserved && reserved[0])
        current[column] -= reserved[0];
    if (tag && !((unsigned)column < COLS && insert(tag, key, size, (unsigned)column, route,
                                                   size)))
        __atomic_fetch_add(&num->untracked, 1, __ATOMIC_RELAXED); /* (also counted unlocked) */
    else if (tag && reserved && reserved[0]) {
        uint64_t then = reserved[1] - reserved[0] + size;
        if (then > num->peak[column])
            num->peak[column] = then;
    }
    unlock_ledger();
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
    if (SHIMGEN_MEM_POOL_ROUTES >> taken[2] & 1) /* back to its pool, reserved */
        recompute_extra((unsigned)taken[1]);
    unlock_ledger();
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

uint64_t shimgen_ledger_held(int column)
{
    return column >= 0 && column < (int)COLS
               ? __atomic_load_n(&current[column], __ATOMIC_RELAXED)
               : 0;
}

/* SHIMGEN_LIMIT_MEMORY: bytes, or a number and K, M, G or T (powers of 1024), with "iB",
 * "B" or nothing after, at most SHIMGEN_SIZE_MAX (shimgen/run/limits.py takes the same);
 * anything else is said once and no limit is set. */
static uint64_t parse_size(const char *s)
{
    static const char units[] = SHIMGEN_SIZE_UNITS;
    if (*s < '0' || *s > '9')
        return 0;
    uint64_t n = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, *s - '0', &n) ||
            n > SHIMGEN_SIZE_MAX)
            return 0;
    const char *end = s;
    int shift = 0;
    const char *u = *end ? strchr(units, *end) : NULL;
    if (u) {
        shift = 10 * (int)(u - units + 1);
        end++;
        if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
            end += strlen(end);
    } else if (strcmp(end, "B") == 0) {
        end++;
    }
    if (*end || n > (SHIMGEN_SIZE_MAX >> shift))
        return 0;
    return n << shift;
}

/* The ledger is a part of the trace file: its numbers are kept in the header. */
static void attach(struct tf_header *h, size_t stride)
{
    (void)stride;
    shimgen_ledger_attach(h);
}

static const struct shimgen_tf_part ledger_part = {NULL, attach, shimgen_ledger_detach};

void shimgen_ledger_config(void)
{
    led_pid = getpid();
    shimgen_tracefile_join(&ledger_part);
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    const char *v = secure_getenv(SHIMGEN_ENV_LIMIT_MEMORY);
    if (!v || !*v)
        return;
    shimgen_ledger_limit = parse_size(v);
    if (!shimgen_ledger_limit)
        shimgen_say("shimgen: %s=%s " SHIMGEN_SIZE_HINT "; no memory limit\n",
                    SHIMGEN_ENV_LIMIT_MEMORY, v);
}
