/*
 * stats.h: the life of the per-thread counter blocks (stats.c): the blocks of the process,
 * the process's totals folded from them, and the paths the stubs take on a thread's first
 * call, at thread exit, at exit and after fork. The blocks' layout is block.h.
 */
#ifndef SHIMGEN_STATS_H
#define SHIMGEN_STATS_H

#include <pthread.h>
#include <stdint.h>

#include "block.h"

/* stats.c */
extern __thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));
extern pthread_mutex_t shimgen_stats_lock; /* thread exit and the output; never a first call */
extern struct tstats *shimgen_live_blocks;   /* every block, live or free (a free one is empty) */
extern uint64_t shimgen_time_total[SHIMGEN_NFUNCS];
extern uint64_t shimgen_time_max[SHIMGEN_NFUNCS];
extern uint64_t shimgen_untimed_calls; /* no free frame or no block: counted, not timed */
/* The process's error returns and histograms, folded from every block (thread exit, exit):
 * ERRORS_SLOTS (function, code) pairs, the rest counted in shimgen_error_overflow. */
#define ERRORS_SLOTS 4096u
extern struct errslot shimgen_errors[ERRORS_SLOTS];
extern uint64_t shimgen_error_overflow;
extern uint64_t shimgen_hist[SHIMGEN_NFUNCS][TS_HIST_BUCKETS];
/* The process's fine histograms, folded like the errors: (key, count) pairs with the keys of
 * struct fineslot; a pair that finds every slot taken is left to the log2 histogram. */
#define FINE_PROC_SLOTS 65536u
#define FINE_PROC_SLOTS_SHIFT 16
#define FINE_PROC_PROBES 64u
struct finepair {
    uint64_t key, count;
};
extern struct finepair shimgen_fine[FINE_PROC_SLOTS];
void shimgen_collect_stats(void);
void shimgen_stats_after_fork(void);

#endif
