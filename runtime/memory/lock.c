/*
 * lock.c: the ledger's shared state and the slow path of its lock (lock.h), defined once
 * for ledger.c (the numbers) and entries.c (the live-entry table).
 */

#define _GNU_SOURCE
#include <sched.h>

#include "arch/cpu.h"
#include "lock.h"
#include "memory.h"

struct nums own_nums;
struct nums *num = &own_nums;
uint64_t current[COLS];
uint64_t extra[COLS];
struct slot *slots;
unsigned room;
uintptr_t lock;

/* The lock held by another thread: wait for it (never on the common path). */
__attribute__((noinline)) void wait_for_lock(uintptr_t me)
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

/* The listeners of memory.h (set by kernels/ when GPU time is on): here, where every shim
 * has them, not in hooks_memory.c, which a shim takes only with a route of its driver. */
void (*shimgen_on_sync)(void);
void (*shimgen_on_ctx_destroy)(void *ctx);
