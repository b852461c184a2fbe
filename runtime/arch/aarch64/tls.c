/*
 * tls.c (AArch64): arch/entry.h's per-thread hooks.
 *
 * The counting stubs of stubs.S reach a thread's counters through shimgen_tls_fn, which is
 * never NULL: the thread's block once it has one (set with shimgen_tls_stats), until then
 * the nursery, whose counts nobody reads and whose targets are the first-count stubs
 * (shimgen_count_first_stubs: stats.c's C path, which gets the block). A block's
 * fn[i].target is shimgen_targets[i] (final before any slot leads to a counting stub), so
 * a counted call is an increment and a branch through the word after it, with no test.
 * The offsets of both TLS pointers from the thread pointer (the same in every thread:
 * initial-exec variables of the static TLS block) are kept for the stubs to load with
 * one instruction; set before any slot leads to them.
 */
#include <stddef.h>

#include "shim.h"
#include "arch/entry.h"
#include "arch/layout.h"

/* A function's target in a block's counters (struct fstats, by its layout.h offsets). */
#define TARGET(fn, i) (*(void **)((char *)(fn) + (size_t)(i) * TS_FSTATS_SIZE + TS_TARGET))

extern void *const shimgen_count_first_stubs[];
static unsigned char nursery[SHIMGEN_NFUNCS][TS_FSTATS_SIZE]
    __attribute__((aligned(TS_FSTATS_SIZE)));
__thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));
__thread void *shimgen_tls_fn __attribute__((tls_model("initial-exec"))) = nursery;
/* In .data, ahead of every file's .bss: stubs.S loads them with a literal ldr, which
 * reaches 1 MiB (the runtime's .bss holds larger tables than that). */
__attribute__((section(".data"))) uintptr_t shimgen_tls_stats_offset;
__attribute__((section(".data"))) uintptr_t shimgen_tls_fn_offset;

void shimgen_arch_stats_start(void)
{
    uintptr_t tp = (uintptr_t)__builtin_thread_pointer();
    shimgen_tls_stats_offset = (uintptr_t)&shimgen_tls_stats - tp;
    shimgen_tls_fn_offset = (uintptr_t)&shimgen_tls_fn - tp;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++)
        TARGET(nursery, i) = shimgen_count_first_stubs[i];
}

void shimgen_arch_block_given(struct fstats *fn)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++)
        TARGET(fn, i) = __atomic_load_n(&shimgen_targets[i], __ATOMIC_RELAXED);
}

void shimgen_arch_thread_fn(struct fstats *fn)
{
    __atomic_store_n(&shimgen_tls_fn, fn ? (void *)fn : (void *)nursery, __ATOMIC_RELAXED);
}
