/*
 * tls.c (x86-64): arch/entry.h's per-thread hooks. The counting stubs of stubs.S reach a
 * thread's block through shimgen_tls_stats and test it for NULL themselves. The timing
 * stubs' entry (timing.S) reaches it through shimgen_tls_time, which is never NULL: the
 * thread's block while it has one (set by shimgen_arch_thread_fn with shimgen_tls_stats),
 * until then the nursery, a block of which only the free-frame word is ever read, and it
 * holds none, so the entry takes the path of a call without a frame, which knows the
 * nursery and takes the C path that gets the block: the entry has no test of its own.
 */
#include <stddef.h>
#include <stdint.h>

#include "shim.h"
#include "arch/entry.h"
#include "tracefile/block.h"

__thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));

/* The nursery's free-frame word (always NULL); the nursery itself is the block that would
 * have it at TS_FREE, an address timing.S compares with and reads that one word of. */
__attribute__((visibility("hidden"))) struct shadow_frame *const shimgen_time_nursery_free = NULL;
__thread struct tstats *shimgen_tls_time __attribute__((tls_model("initial-exec"))) =
    (struct tstats *)((const char *)&shimgen_time_nursery_free - TS_FREE);

void shimgen_arch_stats_start(void)
{
}

void shimgen_arch_block_given(struct fstats *fn)
{
    (void)fn;
}

void shimgen_arch_thread_fn(struct fstats *fn)
{
    uintptr_t nursery = (uintptr_t)&shimgen_time_nursery_free - TS_FREE;
    __atomic_store_n(&shimgen_tls_time, fn ? (struct tstats *)(void *)fn : (struct tstats *)nursery,
                     __ATOMIC_RELAXED);
}
