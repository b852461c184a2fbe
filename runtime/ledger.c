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
 * leaves them. A forked child starts a ledger of its own, empty, in its own file.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ledger.h"
#include "tracefile_header.h"

#define COLS SHIMGEN_MEM_COLUMNS
#define ROUTES SHIMGEN_MEM_ROUTES
#define SLOT_BITS 17
#define SLOTS (1u << SLOT_BITS)
#define SLOTS_FULL (SLOTS / 4 * 3) /* no more entries past this: untracked */

struct slot {
    uint64_t key, size;
    uint32_t refs; /* a handle's references (cuMemRetainAllocationHandle adds one) */
    uint8_t tag;   /* LEDGER_*; 0: a free slot */
    uint8_t column, route, unused;
};

static struct {
    uint64_t current[COLS], peak[COLS];
    uint64_t held[COLS][ROUTES], live[COLS][ROUTES], taken[COLS][ROUTES];
    uint64_t untracked, refused;
} led;
static pid_t led_pid;           /* the process whose numbers `led` holds */
static struct tf_header *hdr;   /* where they are kept too; NULL: no trace file */
static pid_t hdr_pid;
static struct slot *slots;      /* SLOTS entries, mapped at the first allocation */
static unsigned nslots;
static int lock;
static __thread int in_ledger __attribute__((tls_model("initial-exec")));
uint64_t shimgen_ledger_limit;

/* The route of each function this driver has (memroutes.inc, from memroutes.py). */
static const struct {
    unsigned idx, route;
} route_fns[] = {
#define MEM_ROUTE(kind, name, index) {SHIMGEN_IDX_##name, index},
#include "memroutes.inc"
#undef MEM_ROUTE
    {0, ROUTES}, /* the end */
};

/* A child's ledger is its own: empty, its table fresh, no header until its own file. */
static void own_process(void)
{
    pid_t me = getpid();
    if (led_pid != me) {
        memset(&led, 0, sizeof led);
        if (slots && mmap(slots, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
                         MAP_FAILED)
            slots = NULL;
        nslots = 0;
        led_pid = me;
    }
    if (hdr && hdr_pid != me)
        hdr = NULL;
}

static void mirror_all(void);

/* (Only here and in attach, never on an allocation's path: the child's trace file may have
 * been made, and attached, before this handler ran; its numbers are then made the child's.) */
static void after_fork_child(void)
{
    lock = 0;
    in_ledger = 0;
    own_process();
    if (hdr)
        mirror_all();
}

static inline void spin_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int lock_ledger(void)
{
    if (in_ledger) /* a signal handler inside this thread's own section */
        return 0;
    in_ledger = 1;
    for (unsigned spins = 0; __atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE); spins++) {
        if (spins > 64)
            sched_yield();
        else
            spin_pause();
    }
    return 1;
}

static void unlock_ledger(void)
{
    __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
    in_ledger = 0;
}

/* One column and route's numbers into the header (under the lock). */
static void mirror(unsigned c, unsigned r)
{
    struct tf_header *h = hdr;
    if (!h)
        return;
    __atomic_store_n(&h->mem_held[c * ROUTES + r], led.held[c][r], __ATOMIC_RELAXED);
    __atomic_store_n(&h->mem_live[c * ROUTES + r], led.live[c][r], __ATOMIC_RELAXED);
    __atomic_store_n(&h->mem_taken[c * ROUTES + r], led.taken[c][r], __ATOMIC_RELAXED);
    __atomic_store_n(&h->mem_peak[c], led.peak[c], __ATOMIC_RELAXED);
}

static void mirror_counts(void)
{
    if (hdr) {
        __atomic_store_n(&hdr->mem_untracked, led.untracked, __ATOMIC_RELAXED);
        __atomic_store_n(&hdr->mem_refused, led.refused, __ATOMIC_RELAXED);
    }
}

void shimgen_ledger_attach(struct tf_header *h)
{
    if (led_pid != getpid()) { /* a forked child before its fork handler ran: the lock */
        lock = 0;              /* may be a copy of another thread's, held for ever */
        in_ledger = 0;
    }
    int locked = lock_ledger();
    own_process();
    h->mem_columns = COLS;
    h->mem_routes = ROUTES;
    for (unsigned i = 0; route_fns[i].route < ROUTES; i++)
        h->mem_route_fn[route_fns[i].route] = route_fns[i].idx + 1;
    h->mem_limit = shimgen_ledger_limit;
    hdr = h;
    hdr_pid = getpid();
    mirror_all();
    if (locked)
        unlock_ledger();
}

static void mirror_all(void)
{
    for (unsigned c = 0; c < COLS; c++)
        for (unsigned r = 0; r < ROUTES; r++)
            mirror(c, r);
    mirror_counts();
}

static unsigned home(unsigned tag, uint64_t key)
{
    return (unsigned)(((key ^ ((uint64_t)tag << 58)) * 0x9E3779B97F4A7C15ull) >>
                      (64 - SLOT_BITS));
}

static int find(unsigned tag, uint64_t key)
{
    if (!slots)
        return -1;
    for (unsigned i = home(tag, key);; i = (i + 1) & (SLOTS - 1)) {
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
    nslots--;
    for (unsigned j = (i + 1) & (SLOTS - 1); slots[j].tag; j = (j + 1) & (SLOTS - 1)) {
        unsigned k = home(slots[j].tag, slots[j].key);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            slots[i] = slots[j];
            slots[j].tag = 0;
            i = j;
        }
    }
}

/* An entry's bytes added (an allocation: `taken` too) or given back, into the header too. */
static void count(const struct slot *s, int add, int taken)
{
    unsigned c = s->column, at = c * ROUTES + s->route;
    uint64_t n = add ? s->size : -s->size, one = add ? 1 : (uint64_t)-1;
    uint64_t *held = &led.held[0][0] + at, *live = &led.live[0][0] + at;
    uint64_t cur = led.current[c] += n;
    *held += n;
    *live += one;
    struct tf_header *h = hdr;
    if (h) {
        __atomic_store_n(&h->mem_held[at], *held, __ATOMIC_RELAXED);
        __atomic_store_n(&h->mem_live[at], *live, __ATOMIC_RELAXED);
    }
    if (taken) {
        uint64_t t = (&led.taken[0][0])[at] += s->size;
        if (h)
            __atomic_store_n(&h->mem_taken[at], t, __ATOMIC_RELAXED);
    }
    if (cur > led.peak[c]) {
        led.peak[c] = cur;
        if (h)
            __atomic_store_n(&h->mem_peak[c], cur, __ATOMIC_RELAXED);
    }
}

/* A new entry, in its key's place (replacing one of the same key, whose free the ledger
 * never saw). */
static int insert(const struct slot *s)
{
    if (!slots) {
        void *m = mmap(NULL, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        slots = m == MAP_FAILED ? NULL : m;
    }
    if (!slots || nslots >= SLOTS_FULL)
        return 0;
    unsigned i = home(s->tag, s->key);
    for (; slots[i].tag; i = (i + 1) & (SLOTS - 1))
        if (slots[i].tag == s->tag && slots[i].key == s->key) {
            count(&slots[i], 0, 0);
            slots[i] = *s;
            return 1;
        }
    slots[i] = *s;
    nslots++;
    return 1;
}

int shimgen_ledger_begin(struct ledger_op *op)
{
    uint64_t limit = shimgen_ledger_limit;
    if (op->column < 0 || !limit || op->column == SHIMGEN_MEM_HOST_COLUMN || !lock_ledger())
        return 1;
    uint64_t cur = led.current[op->column];
    int fits = cur <= limit && op->size <= limit - cur;
    if (fits) {
        led.current[op->column] += op->size;
        op->reserved = 1;
    } else {
        led.refused++;
        mirror_counts();
    }
    unlock_ledger();
    return fits;
}

void shimgen_ledger_end(struct ledger_op *op, int ok, unsigned tag, uint64_t key)
{
    if (!lock_ledger()) {
        if (ok)
            __atomic_fetch_add(&led.untracked, 1, __ATOMIC_RELAXED);
        return;
    }
    if (op->reserved)
        led.current[op->column] -= op->size;
    if (ok) {
        struct slot s = {.key = key, .size = op->size, .refs = 1, .tag = (uint8_t)tag,
                         .column = (uint8_t)op->column, .route = (uint8_t)op->route};
        if (op->column >= 0 && op->route < ROUTES && insert(&s)) {
            count(&s, 1, 1);
        } else {
            __atomic_fetch_add(&led.untracked, 1, __ATOMIC_RELAXED); /* (also counted unlocked) */
            mirror_counts();
        }
    }
    unlock_ledger();
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
        count(&slots[i], 0, 0);
        remove_slot((unsigned)i);
        took = 1;
    }
    unlock_ledger();
    return took;
}

void shimgen_ledger_untake(unsigned tag, uint64_t key, int took, const uint64_t taken[3])
{
    if (!took || !lock_ledger())
        return;
    int i = find(tag, key);
    if (i >= 0 && took == 2) {
        slots[i].refs++;
    } else if (i < 0 && took == 1) {
        struct slot s = {.key = key, .size = taken[0], .refs = 1, .tag = (uint8_t)tag,
                         .column = (uint8_t)taken[1], .route = (uint8_t)taken[2]};
        if (insert(&s))
            count(&s, 1, 0);
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
               ? __atomic_load_n(&led.current[column], __ATOMIC_RELAXED)
               : 0;
}

/* SHIMGEN_LIMIT_MEMORY: bytes, or a number and K, M, G or T (powers of 1024), with "iB",
 * "B" or nothing after; anything else is said once and no limit is set. */
static uint64_t parse_size(const char *s)
{
    static const char units[] = SHIMGEN_SIZE_UNITS;
    if (*s < '0' || *s > '9')
        return 0;
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
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
    if (*end || n > (~0ull >> shift))
        return 0;
    return (uint64_t)(n << shift);
}

void shimgen_ledger_config(void)
{
    led_pid = getpid();
    pthread_atfork(NULL, NULL, after_fork_child);
    const char *v = secure_getenv(SHIMGEN_ENV_LIMIT_MEMORY);
    if (!v || !*v)
        return;
    shimgen_ledger_limit = parse_size(v);
    if (!shimgen_ledger_limit)
        shimgen_say("shimgen: %s=%s is not a size (200MiB, 2GiB); no memory limit\n",
                    SHIMGEN_ENV_LIMIT_MEMORY, v);
}
