/*
 * totals.c: the process's totals, folded from the per-thread blocks (stats.c has the
 * blocks' life). A block is folded when its thread exits, or at exit (every block, when
 * the trace file is the record): its counts, times and maxima, its error returns into the
 * process's (function, code) table, and its log2 and fine histograms, all with atomics,
 * since threads exit at once. Clearing a block for its next thread touches only the
 * histograms of functions with calls, so the pages of the rest are never written. A forked
 * child's totals start from zero.
 */

#include <string.h>

#include "totals.h"
#include "base/base.h"
#include "tracefile/tracefile.h"

struct ftotals shimgen_fn_totals[SHIMGEN_NFUNCS];
uint64_t shimgen_untimed_calls;
struct errslot shimgen_errors[ERRORS_SLOTS];
uint64_t shimgen_error_overflow;
uint64_t shimgen_hist[SHIMGEN_NFUNCS][TS_HIST_BUCKETS];
struct finepair shimgen_fine[FINE_PROC_SLOTS];

/* Add n to the (key, count) slot at `slot_key`/`slot_count` when it holds `key` or is free
 * (claimed with a compare-and-swap: threads exit at once). 1 when added, 0 when the slot
 * holds another key. */
static int slot_add(uint64_t *slot_key, uint64_t *slot_count, uint64_t key, uint64_t n)
{
    uint64_t k = 0;
    if (!__atomic_compare_exchange_n(slot_key, &k, key, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
        && k != key)
        return 0;
    __atomic_fetch_add(slot_count, n, __ATOMIC_RELAXED);
    return 1;
}

/* Add n returns of `key` to the process's errors: open addressing (slot_add); every slot
 * taken: the overflow. */
static void fold_error(uint64_t key, uint64_t n)
{
    unsigned h = (unsigned)((key * TS_ERR_HASH) >> 32);
    for (unsigned probe = 0; probe < ERRORS_SLOTS; probe++) {
        struct errslot *e = &shimgen_errors[(h + probe) & (ERRORS_SLOTS - 1)];
        if (slot_add(&e->key, &e->count, key, n))
            return;
    }
    __atomic_fetch_add(&shimgen_error_overflow, n, __ATOMIC_RELAXED);
}

void shimgen_count_error(uint64_t key)
{
    fold_error(key, 1);
}

void shimgen_block_add_error(struct tstats *s, uint64_t key, uint64_t n)
{
    unsigned h = (unsigned)((key * TS_ERR_HASH) >> (64 - TS_ERR_SLOTS_SHIFT));
    for (unsigned probe = 0; probe < TS_ERR_SLOTS; probe++) {
        struct errslot *e = &s->err[(h + probe) & (TS_ERR_SLOTS - 1)];
        if (slot_add(&e->key, &e->count, key, n))
            return;
    }
    __atomic_fetch_add(&s->err_overflow, n, __ATOMIC_RELAXED);
}

void shimgen_move_errors(struct tstats *s)
{
    for (unsigned e = 0; e < ERRORS_SLOTS; e++) {
        uint64_t key = __atomic_load_n(&shimgen_errors[e].key, __ATOMIC_RELAXED);
        uint64_t n = key ? __atomic_exchange_n(&shimgen_errors[e].count, 0, __ATOMIC_RELAXED) : 0;
        if (n)
            shimgen_block_add_error(s, key, n);
    }
    __atomic_fetch_add(&s->err_overflow,
                       __atomic_exchange_n(&shimgen_error_overflow, 0, __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
}

/* Add n calls of fine key `key` to the process's fine histograms: like fold_error, from the
 * key's own slot (its function's home + its bucket), FINE_PROC_PROBES slots at most; none
 * free: the log2 histogram still has the calls. */
static int fine_used;

static void fold_fine(uint32_t key, uint64_t n)
{
    __atomic_store_n(&fine_used, 1, __ATOMIC_RELAXED);
    unsigned idx = fine_key_fn(key) - 1, f = fine_key_bucket(key);
    unsigned home = fine_home(idx, FINE_PROC_SLOTS_SHIFT) + f;
    for (unsigned probe = 0; probe < FINE_PROC_PROBES; probe++) {
        struct finepair *e = &shimgen_fine[(home + probe) & (FINE_PROC_SLOTS - 1)];
        if (slot_add(&e->key, &e->count, key, n))
            return;
    }
}

/* Every slot of a thread's fine table that can hold a key of function i: from its home to
 * the home plus its last fine bucket plus the probes. */
#define FINE_END (fine_first(TS_HIST_BUCKETS))
#define FOR_FINE_SLOTS(slot, i)                                                            \
    for (unsigned slot##_n = fine_thread_home(i),                                          \
                  slot##_end = fine_thread_home(i) + FINE_END + TS_FINE_PROBES - 1,        \
                  slot = slot##_n & (TS_FINE_SLOTS - 1);                                   \
         slot##_n < slot##_end; slot##_n++, slot = slot##_n & (TS_FINE_SLOTS - 1))

/* *total = the larger of it and v (atomics: threads exit at once). */
static void fold_max(uint64_t *total, uint64_t v)
{
    uint64_t m = __atomic_load_n(total, __ATOMIC_RELAXED);
    while (v > m && !__atomic_compare_exchange_n(total, &m, v, 1, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED))
        ;
}

/* One word of function i's struct fstats `fs` into the process's totals, by its fold. */
#define FOLD_WORD(word, fold, unit, offset) FOLD_##fold(i, fs, word)
#define FOLD_CALLS(i, fs, word) __atomic_fetch_add(&shimgen_counts[i], (fs)->word, __ATOMIC_RELAXED);
#define FOLD_SUM(i, fs, word) \
    __atomic_fetch_add(&shimgen_fn_totals[i].word, (fs)->word, __ATOMIC_RELAXED);
#define FOLD_MAX(i, fs, word) fold_max(&shimgen_fn_totals[i].word, (fs)->word);
#define FOLD_NONE(i, fs, word)

void shimgen_fold_block(struct tstats *s)
{
    for (unsigned e = 0; e < TS_ERR_SLOTS; e++)
        if (s->err[e].key && s->err[e].count)
            fold_error(s->err[e].key, s->err[e].count);
    __atomic_fetch_add(&shimgen_error_overflow, s->err_overflow, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        const struct fstats *fs = &s->fn[i];
        if (!fs->count)
            continue;
        /* A timed call's return counts it before its bucket: a row with calls holds them
         * all. Its fine buckets, and its log2 buckets of the calls that found no fine slot
         * (their sum is the log2 histogram, which the process's keeps). */
        for (unsigned b = 0; b < TS_HIST_BUCKETS; b++)
            if (s->hist[i][b])
                __atomic_fetch_add(&shimgen_hist[i][b], s->hist[i][b], __ATOMIC_RELAXED);
        FOR_FINE_SLOTS(k, i) {
            uint32_t key = __atomic_load_n(&s->fine[k].key, __ATOMIC_RELAXED);
            uint64_t n = s->fine[k].count;
            if (fine_key_fn(key) == i + 1 && n) {
                __atomic_fetch_add(&shimgen_hist[i][fine_octave(fine_key_bucket(key))], n,
                                   __ATOMIC_RELAXED);
                fold_fine(key, n);
            }
        }
        SHIMGEN_FSTATS_WORDS(FOLD_WORD)
    }
    __atomic_fetch_add(&shimgen_untimed_calls, s->untimed, __ATOMIC_RELAXED);
}

/* One word of function i's struct fstats cleared: each that has a total (a word of fold NONE,
 * aarch64's target, is the thread's to branch through, and stays). */
#define CLEAR_WORD(word, fold, unit, offset) CLEAR_##fold(s->fn[i], word)
#define CLEAR_CALLS(fs, word) (fs).word = 0;
#define CLEAR_SUM(fs, word) (fs).word = 0;
#define CLEAR_MAX(fs, word) (fs).word = 0;
#define CLEAR_NONE(fs, word)

/* Only the histograms of functions with calls can hold counts: the rest stay untouched
 * (most of a block's 300-odd KiB of histograms is never written, so never paged in). */
void shimgen_clear_block(struct tstats *s)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        if (!s->fn[i].count)
            continue;
        /* A fine slot is taken only after its function's call is counted: the slots of the
         * functions with calls hold every key there is. */
        FOR_FINE_SLOTS(k, i)
            if (fine_key_fn(s->fine[k].key) == i + 1)
                s->fine[k] = (struct fineslot){0, 0};
        memset(s->hist[i], 0, sizeof s->hist[i]);
    }
    memset(s->err, 0, sizeof s->err);
    s->err_overflow = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) { /* each word a statement: braces */
        SHIMGEN_FSTATS_WORDS(CLEAR_WORD)
    }
    s->untimed = 0;
}

/* In a forked child: it reports its own calls only. */
void shimgen_totals_after_fork(void)
{
    if (fine_used) /* the parent folded fine counts (its pages are touched only then) */
        memset(shimgen_fine, 0, sizeof shimgen_fine);
    fine_used = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        if (shimgen_counts[i]) /* a histogram of the parent's holds counts only then */
            memset(shimgen_hist[i], 0, sizeof shimgen_hist[i]);
        shimgen_counts[i] = 0;
        memset(&shimgen_fn_totals[i], 0, sizeof shimgen_fn_totals[i]);
    }
    shimgen_untimed_calls = 0;
    memset(shimgen_errors, 0, sizeof shimgen_errors);
    shimgen_error_overflow = 0;
}
