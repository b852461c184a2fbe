/*
 * totals.h: the process's totals (totals.c): each function's words of struct fstats, error returns and
 * latency histograms, folded from the per-thread blocks (block.h) at thread exit and at
 * exit, like its count (shimgen_counts, runtime.h); read by the trace at exit, reset in a
 * forked child.
 */
#ifndef SHIMGEN_TOTALS_H
#define SHIMGEN_TOTALS_H

#include <stdint.h>

#include "tracefile/tracefile.h"

/* Declared hidden (as the build makes every definition), so that the files that use them
 * address them directly, as the one that defines them does: shimgen_time_push counts into
 * shimgen_untimed_calls on every timed call of a thread that has no block. */
#pragma GCC visibility push(hidden)
/* A function's totals of the words of struct fstats that fold by SUM or MAX (tracefields.h);
 * a word that folds by CALLS is its count, shimgen_counts[i], which counts mode's stubs add
 * to. FTOTAL_<fold>(i, word) is function i's total of a word. */
#define FTOTALS_MEMBER(word, fold, unit, offset) FTOTALS_MEMBER_##fold(word)
#define FTOTALS_MEMBER_CALLS(word)
#define FTOTALS_MEMBER_SUM(word) uint64_t word;
#define FTOTALS_MEMBER_MAX(word) uint64_t word;
#define FTOTALS_MEMBER_NONE(word)
struct ftotals {
    SHIMGEN_FSTATS_WORDS(FTOTALS_MEMBER)
};
#define FTOTAL_CALLS(i, word) shimgen_counts[i]
#define FTOTAL_SUM(i, word) shimgen_fn_totals[i].word
#define FTOTAL_MAX(i, word) shimgen_fn_totals[i].word
extern struct ftotals shimgen_fn_totals[SHIMGEN_NFUNCS];
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
#pragma GCC visibility pop

/* A block's counts, times, errors and histograms added to the totals (atomics: threads
 * exit at once); then, where the block is not the record, cleared for its next thread. */
void shimgen_fold_block(struct tstats *s);
void shimgen_clear_block(struct tstats *s);
/* A failure SHIMGEN_INJECT returned on a thread without a block (none could be added: a
 * full disk), counted in the process's errors (atomics); at exit, with a trace file, every
 * one of them moved into a block of the file (shimgen_move_errors), whose error slots take
 * (key, n) as the timing stub's error path does (shimgen_block_add_error). */
void shimgen_count_error(uint64_t key);
void shimgen_block_add_error(struct tstats *s, uint64_t key, uint64_t n);
void shimgen_move_errors(struct tstats *s);
/* In a forked child: the totals back to zero (the parent's calls are not its own). */
void shimgen_totals_after_fork(void);

#endif
