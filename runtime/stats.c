/*
 * stats.c: per-thread counters and timing (SHIMGEN_TRACE=1 / time / timeline).
 *
 * Each thread counts into its own block, reached through one initial-exec TLS pointer, so
 * a counted call is a plain increment (no lock prefix, no shared cache line). Blocks are
 * allocated at a thread's first traced call, registered on a list under a mutex (once per
 * thread), folded into the global totals when the thread exits (pthread key destructor)
 * and reused. At process exit the global totals plus every live block give the trace.
 * If a block cannot be allocated, the thread counts into the globals with atomics.
 *
 * The fast paths are in stubs.S; this file has the C paths they take on a thread's first
 * call, and what the trace needs at exit and after fork.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"

__thread struct tstats *shimgen_tls_stats __attribute__((tls_model("initial-exec")));
pthread_mutex_t shimgen_stats_lock = PTHREAD_MUTEX_INITIALIZER;
struct tstats *shimgen_live_blocks;
static struct tstats *free_blocks;
static pthread_key_t stats_key;
uint64_t shimgen_time_total[SHIMGEN_NFUNCS];
uint64_t shimgen_time_max[SHIMGEN_NFUNCS];
uint64_t shimgen_untimed_calls;
uint64_t shimgen_tsc_start;
static uint64_t tsc_ns_start;

static inline uint64_t ticks(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fold_block(struct tstats *s)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        const struct fstats *fs = &s->fn[i];
        if (!fs->count)
            continue;
        __atomic_fetch_add(&shimgen_counts[i], fs->count, __ATOMIC_RELAXED);
        __atomic_fetch_add(&shimgen_time_total[i], fs->total, __ATOMIC_RELAXED);
        uint64_t m = __atomic_load_n(&shimgen_time_max[i], __ATOMIC_RELAXED);
        while (fs->max > m && !__atomic_compare_exchange_n(&shimgen_time_max[i], &m, fs->max,
                                                             1, __ATOMIC_RELAXED,
                                                             __ATOMIC_RELAXED))
            ;
    }
    __atomic_fetch_add(&shimgen_untimed_calls, s->untimed, __ATOMIC_RELAXED);
}

static void clear_block(struct tstats *s)
{
    memset(s->fn, 0, sizeof s->fn);
    s->untimed = 0;
}

static void stats_retire(void *p);

/* Once the driver is loaded, before any slot points at a counting or timing stub. */
void shimgen_stats_start(void)
{
    pthread_key_create(&stats_key, stats_retire);
    shimgen_tsc_start = ticks();
    tsc_ns_start = mono_ns();
}

static struct tstats *stats_block(void)
{
    struct tstats *s = shimgen_tls_stats;
    if (s)
        return s;
    pthread_mutex_lock(&shimgen_stats_lock);
    s = free_blocks;
    if (s)
        free_blocks = s->next;
    pthread_mutex_unlock(&shimgen_stats_lock);
    if (!s && !(s = calloc(1, sizeof *s)))
        return NULL;
    s->top = s->f;
    s->end = s->f + SHADOW_DEPTH;
    s->tid = gettid();
    if (shimgen_cfg.timeline)
        shimgen_timeline_ring(s);
    pthread_mutex_lock(&shimgen_stats_lock);
    s->next = shimgen_live_blocks;
    shimgen_live_blocks = s;
    pthread_mutex_unlock(&shimgen_stats_lock);
    shimgen_tls_stats = s;
    pthread_setspecific(stats_key, s);
    return s;
}

/* Thread exit: fold the block into the totals and keep it for the next thread. A thread
 * that exits inside a timed call (pthread_exit from a callback) keeps its block live; it
 * is still summed at process exit. */
static void stats_retire(void *p)
{
    struct tstats *s = p;
    if (!s || s->top != s->f)
        return;
    pthread_mutex_lock(&shimgen_stats_lock);
    fold_block(s);
    clear_block(s);
    if (shimgen_cfg.timeline)
        shimgen_timeline_keep(s);
    for (struct tstats **pp = &shimgen_live_blocks; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    s->next = free_blocks;
    free_blocks = s;
    pthread_mutex_unlock(&shimgen_stats_lock);
    shimgen_tls_stats = NULL;
}

/* At exit: fold every live block. trylock, so that exit() from a signal handler that
 * interrupted a thread holding the lock cannot hang; without the lock the sum is read as
 * it stands. */
void shimgen_collect_stats(void)
{
    int locked = 0;
    for (int i = 0; i < 1000 && !locked; i++) {
        locked = pthread_mutex_trylock(&shimgen_stats_lock) == 0;
        if (!locked)
            usleep(100);
    }
    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {
        /* Timed calls are counted when they return: count the ones still in progress
         * (a thread blocked in the driver, or exit() from a callback) from their frames. */
        for (const struct shadow_frame *f = s->f; f < s->top && f < s->end; f++)
            if (f->idx < SHIMGEN_NFUNCS)
                s->fn[f->idx].count++;
        fold_block(s);
        clear_block(s);
    }
    if (locked)
        pthread_mutex_unlock(&shimgen_stats_lock);
}

void *shimgen_count_first(unsigned idx)
{
    struct tstats *s = stats_block();
    if (s)
        s->fn[idx].count++;
    else
        __atomic_fetch_add(&shimgen_counts[idx], 1, __ATOMIC_RELAXED);
    return shimgen_targets[idx];
}

/* A thread's first timed call: allocate its block, then do what the assembly fast path
 * does, with the return address swapped in place instead of a call. */
struct time_push shimgen_time_push(unsigned idx, void **return_slot, void *caller_rbx,
                                   void *timed_return)
{
    struct time_push r = {shimgen_targets[idx], NULL};
    struct tstats *s = stats_block();
    if (!s) {
        __atomic_fetch_add(&shimgen_counts[idx], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&shimgen_untimed_calls, 1, __ATOMIC_RELAXED);
        return r;
    }
    if (s->top >= s->end) {
        s->fn[idx].count++;
        s->untimed++;
        return r;
    }
    /* Timed: counted on the return, like the fast path's calls. */
    /* Take the frame before writing it (a signal handler's timed call then uses the
     * next one). */
    struct shadow_frame *f = s->top;
    s->top = f + 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    f->ret = *return_slot;
    f->idx = idx;
    f->rbx = caller_rbx;
    f->start = ticks();
    *return_slot = timed_return;
    r.frame = f;
    return r;
}

/* The code that called into the shim: under SHIMGEN_TRACE=time (or timeline) a hook's
 * return address is the timing trampoline, and the caller's is on top of the shadow
 * stack. */
void *shimgen_real_caller(void *return_address)
{
    struct tstats *s = shimgen_tls_stats;
    if ((return_address == (void *)shimgen_time_return ||
         return_address == (void *)shimgen_timeline_return) &&
        s && s->top != s->f)
        return s->top[-1].ret;
    return return_address;
}

/* Nanoseconds per TSC tick, measured over the life of the process. */
double shimgen_ns_per_tick(void)
{
    uint64_t t = ticks(), ns = mono_ns();
    if (t <= shimgen_tsc_start || ns <= tsc_ns_start)
        return 0.0;
    return (double)(ns - tsc_ns_start) / (double)(t - shimgen_tsc_start);
}

/* In a forked child: it reports its own calls only (and, by its pid, to its own file). */
void shimgen_stats_after_fork(void)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        shimgen_counts[i] = 0;
        shimgen_time_total[i] = 0;
        shimgen_time_max[i] = 0;
    }
    shimgen_untimed_calls = 0;
    /* Only the forking thread lives on in the child: its block keeps its shadow frames;
     * every block restarts from zero, and the lock may have been held by a thread that
     * is gone. */
    pthread_mutex_init(&shimgen_stats_lock, NULL);
    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {
        clear_block(s);
        s->ev_head = 0;
        /* Other threads' calls in progress are the parent's: those threads do not exist
         * here, and their frames must not be counted at this process's exit. */
        if (s != shimgen_tls_stats)
            s->top = s->f;
    }
    if (shimgen_tls_stats)
        shimgen_tls_stats->tid = gettid();
    shimgen_timeline_after_fork();
    /* Frames of calls in progress in the forking thread stay: they return in the child. */
}
