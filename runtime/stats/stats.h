/*
 * stats.h: the life of the per-thread counter blocks (stats.c): the blocks of the process,
 * and the paths the stubs take on a thread's first call, at thread exit, at exit and after
 * fork. The blocks' layout is block.h; the process's totals folded from them, totals.h.
 */
#ifndef SHIMGEN_STATS_H
#define SHIMGEN_STATS_H

#include <pthread.h>
#include <stdint.h>

#include "arch/entry.h" /* shimgen_tls_stats, the calling thread's block */
#include "tracefile/tracefile.h"
#include "calls.h"
#include "quantiles.h"
#include "timeline.h"
#include "totals.h"

/* stats.c */
extern pthread_mutex_t shimgen_stats_lock; /* thread exit and the output; never a first call */
extern struct tstats *shimgen_live_blocks;   /* every block, live or free (a free one is empty) */
void shimgen_collect_stats(void); /* at exit: every block folded into the totals */
extern uint64_t shimgen_blockless_calls; /* calls of threads that got no block (not timed) */
void shimgen_stats_after_fork(void);

/* ---- counting and timing (stats.c), called from stubs.S ---- */
void *shimgen_count_first(unsigned idx);
/* What the timing stub's C path gets back, in rax:rdx: the function to jump to, and the
 * shadow frame to keep in rbx (NULL: the call is counted but not timed). */
struct shadow_frame;
struct time_push {
    void *target;
    struct shadow_frame *frame;
};
struct time_push shimgen_time_push(unsigned idx, void **return_slot, void *caller_rbx,
                                   void *timed_return);
void *shimgen_real_caller(void *return_address);
void shimgen_stats_start(void);

/* ---- trace output at exit (trace.c) ---- */
void shimgen_trace_start(void);
void shimgen_trace_after_fork(void); /* a forked child's trace: its own (fork.c) */

#endif
