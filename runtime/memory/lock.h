/*
 * lock.h: the ledger's shared state and its lock, inner to memory/: ledger.c (the numbers,
 * their place in the trace file's header, the limit's reservations, the configuration)
 * and entries.c (the live-entry table, the allocation and free paths) both use them.
 * Defined in lock.c; declared hidden, as the build makes every definition, so that both
 * files address them directly, as one file did its statics.
 */
#ifndef SHIMGEN_MEMORY_LOCK_H
#define SHIMGEN_MEMORY_LOCK_H

#include <stdint.h>

#include "memory.h"

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

#pragma GCC visibility push(hidden)
extern struct nums own_nums;   /* the numbers before a trace file's header, or without one */
extern struct nums *num;       /* where the numbers are: own_nums, or the header's */
extern uint64_t current[COLS]; /* the bytes held per column (and reserved for the limit) */
extern uint64_t extra[COLS];   /* what pools and graphs reserve beyond the pool routes' */
extern struct slot *slots;     /* SLOTS entries, mapped at the first allocation */
extern unsigned room;          /* entries the table takes still; 0 too before it is mapped */
extern uintptr_t lock;         /* 0, or the thread pointer of the thread holding it */
void wait_for_lock(uintptr_t me);
#pragma GCC visibility pop

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

#endif
