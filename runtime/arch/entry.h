/*
 * entry.h: what the C runtime takes from the entry code of arch/<arch>/ beyond the stubs'
 * tables, declared here too (the rest of the contract: docs/design.md, "arch/"). Each
 * architecture's tls.c defines the calling thread's block and three hooks; the per-thread
 * counters are reached through them only.
 */
#ifndef SHIMGEN_ENTRY_H
#define SHIMGEN_ENTRY_H

#include <stdint.h>

struct fstats;
struct tstats;

/* ---- the stubs' tables (stubs.S, timing.S: jump targets, stubs, failures) ---- */
extern void *shimgen_slots[];        /* what each exported trampoline jumps through */
extern void *shimgen_targets[];      /* hook or real function, after the counting stub */
extern void *shimgen_real[];         /* the real driver's functions */
extern uint64_t shimgen_counts[];    /* calls per function, when counting */
extern void *const shimgen_lazy_stubs[];   /* first-call resolvers */
extern void *const shimgen_count_stubs[];  /* count, then jump to shimgen_targets[i] */
extern void *const shimgen_entry_stubs[];  /* the exported trampolines themselves */
extern void *const shimgen_time_stubs[];   /* SHIMGEN_TRACE=time: time, then the target */
extern void *const shimgen_timeline_stubs[]; /* SHIMGEN_TRACE=timeline: the same + events */
extern void *const shimgen_timed_returns[]; /* where timed calls return first, then NULL */
extern char shimgen_fail_init[];     /* returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED */
extern char shimgen_fail_missing[];  /* returns CUDA_ERROR_NOT_SUPPORTED */
extern char shimgen_fail_loading[];  /* returns CUDA_ERROR_NOT_INITIALIZED */

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
