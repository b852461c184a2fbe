/*
 * ledger.c: the device memory ledger of a process (docs/memory.md). The hooks of the memory
 * routes (hooks_memory.c) tell it each allocation and free; it keeps, per column (a device
 * ordinal below SHIMGEN_MEM_DEVICES, or pinned host memory) and route, the bytes held and
 * taken and the allocations held, and each column's peak, and applies SHIMGEN_LIMIT_MEMORY
 * (an allocation that would take a device past it is refused before the driver is called).
 * Live allocations are in an open-addressing table (address, pointer, handle or array ->
 * size, column, route; a handle's references), mapped at the first allocation (entries.c;
 * the state both share and the lock in lock.h, defined in lock.c).
 *
 * Only allocation and free routes come here, each under one short spinlock (never held over
 * a driver call); a signal handler's allocation inside the thread's own section is not
 * followed (counted as untracked), never waited for. The numbers are kept in the trace
 * file's header as they change (tracefile/header.c attaches it), so a process killed
 * leaves them (kept only there once it is attached; in memory before, or without a file).
 * A forked child starts a ledger of its own, empty, in its own file.
 *
 * What pools and graphs hold reserved (reserve.c asks the driver) comes here as four numbers
 * per column; the ledger keeps, per column, the bytes they reserve beyond what the pool
 * routes hold (`extra`): the limit counts them, a shared budget too (entries.c,
 * shimgen_ledger_charge: in the process's slot, never refused), and the reserved peak is the
 * most held and reserved at once.
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
#include "budget/budget.h"
#include "lock.h"
#include "tracefile/tracefile.h"

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
static pid_t led_pid;           /* the process whose numbers `led` holds */
static struct tf_header *hdr;   /* where they are kept too; NULL: no trace file */
static pid_t hdr_pid;
static int configured;  /* shimgen_ledger_config ran: the driver's load began */
uint64_t shimgen_ledger_limit;
static uint64_t own_limit; /* SHIMGEN_LIMIT_MEMORY's (the header's); the above is the most
                            * a size can be when only a shared budget limits */

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
        memset(&own_nums, 0, sizeof own_nums);
        memset(current, 0, sizeof current);
        memset(extra, 0, sizeof extra);
        num = &own_nums;
        if (slots && mmap(slots, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
                         MAP_FAILED)
            slots = NULL;
        room = slots ? SLOTS_FULL : 0;
        led_pid = me;
    }
    if (hdr && hdr_pid != me) {
        hdr = NULL;
        num = &own_nums;
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
    h->mem_limit = own_limit;
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
        memcpy(&own_nums, num, sizeof own_nums);
        num = &own_nums;
        hdr = NULL;
    }
    if (locked)
        unlock_ledger();
}

/* (reserved[1]: what the column held and had reserved with these bytes, the peak's
 * candidate once the driver took them: the driver held no more than that then) */
int shimgen_ledger_reserve(int column, uint64_t size, uint64_t reserved[2], int last)
{
    uint64_t limit = shimgen_ledger_limit;
    reserved[0] = reserved[1] = 0;
    if (column < 0 || !limit || column == SHIMGEN_MEM_HOST_COLUMN)
        return 1;
    int shared = __atomic_load_n(&shimgen_budget_on, __ATOMIC_RELAXED);
    if (shared && !shimgen_budget_take(column, size, last)) { /* (the budget's first) */
        if (last)
            __atomic_fetch_add(&num->refused, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (shared && !own_limit) { /* (a grow's: the budget alone) */
        reserved[0] = size;
        reserved[1] = LEDGER_BUDGET_ONLY;
        return 1;
    }
    if (!lock_ledger()) {
        if (shared)
            shimgen_budget_give(column, size);
        return 1;
    }
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
    if (!fits && shared)
        shimgen_budget_give(column, size);
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

void shimgen_ledger_counts(uint64_t pools, uint64_t graph_allocs)
{
    if (!lock_ledger())
        return;
    num->pools = pools;
    num->graph_allocs += graph_allocs;
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

static const struct shimgen_tf_part ledger_part = {NULL, attach, shimgen_ledger_detach, NULL, NULL,
                                                    NULL};

/* A size variable's bytes; 0 when unset, or not a size (said once). */
static uint64_t size_of(const char *name)
{
    const char *v = secure_getenv(name);
    uint64_t n = v && *v ? parse_size(v) : 0;
    if (v && *v && !n)
        shimgen_say("shimgen: %s=%s " SHIMGEN_SIZE_HINT "; no memory limit\n", name, v);
    return n;
}

void shimgen_ledger_config(void)
{
    led_pid = getpid();
    shimgen_tracefile_join(&ledger_part);
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    own_limit = size_of(SHIMGEN_ENV_LIMIT_MEMORY);
    shimgen_budget_config(size_of(SHIMGEN_ENV_LIMIT_JOB_MEMORY));
    shimgen_ledger_limit = own_limit;
    if (!own_limit && __atomic_load_n(&shimgen_budget_on, __ATOMIC_RELAXED))
        shimgen_ledger_limit = SHIMGEN_SIZE_MAX; /* (reservations made: the budget's) */
}
