/*
 * tls.c (x86-64): arch/entry.h's per-thread hooks. The counting stubs of stubs.S reach a
 * thread's block through shimgen_tls_stats and test it for NULL themselves: nothing to do.
 */
#include "arch/entry.h"

__thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));

void shimgen_arch_stats_start(void)
{
}

void shimgen_arch_block_given(struct fstats *fn)
{
    (void)fn;
}

void shimgen_arch_thread_fn(struct fstats *fn)
{
    (void)fn;
}
