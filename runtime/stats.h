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
#include "block.h"

/* stats.c */
extern pthread_mutex_t shimgen_stats_lock; /* thread exit and the output; never a first call */
extern struct tstats *shimgen_live_blocks;   /* every block, live or free (a free one is empty) */
void shimgen_collect_stats(void); /* at exit: every block folded into the totals */
extern uint64_t shimgen_blockless_calls; /* calls of threads that got no block (not timed) */
void shimgen_stats_after_fork(void);

#endif
