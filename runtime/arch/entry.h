/*
 * entry.h: what the C runtime takes from the entry code of arch/<arch>/ beyond the stubs'
 * tables (the rest of the contract: docs/design.md, "arch/"). Each architecture's tls.c
 * defines these: the calling thread's block, and three hooks; the per-thread counters are
 * reached through them only.
 */
#ifndef SHIMGEN_ENTRY_H
#define SHIMGEN_ENTRY_H

struct fstats;
struct tstats;

/* The calling thread's block (NULL: none yet), which the stubs read too. */
extern __thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));

/* Once the driver is loaded, before any slot points at a counting or timing stub. */
void shimgen_arch_stats_start(void);
/* A block's counters `fn` about to serve this thread: the targets its stubs jump through. */
void shimgen_arch_block_given(struct fstats *fn);
/* The counters the calling thread's counting stubs reach: `fn`, or NULL for none yet (a
 * thread without a block, a block retired, a forked child's first call to come). */
void shimgen_arch_thread_fn(struct fstats *fn);

#endif
