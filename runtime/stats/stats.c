/*
 * stats.c: per-thread counters and timing (SHIMGEN_TRACE=1 / time / timeline).
 *
 * Each thread counts into its own block, reached through one initial-exec TLS pointer, so
 * a counted call is a plain increment (no lock prefix, no shared cache line). A thread
 * gets its block at its first traced call: a free block is claimed (one compare-and-swap
 * of its state) or a new one is mapped (mmap) and pushed on the list of every block
 * (compare-and-swap). That path takes no lock and calls no malloc, so a signal handler
 * that calls the driver at any moment of it, on the same thread, cannot deadlock; if the
 * handler gives the thread a block first, the interrupted path hands its own back. When
 * the thread exits (pthread key destructor), its block is folded into the process's totals
 * (totals.c: counts, times, error returns, histograms), with the calls it left in progress
 * (pthread_exit inside a call, or a longjmp or exception out of one), cleared, and freed
 * for the next thread, whatever way its calls ended. At process exit the totals plus every
 * live block give the trace. If a block cannot be mapped, the thread counts into the
 * globals with atomics.
 *
 * The fast paths are in stubs.S and timing.S; first.c has the C paths they take on a
 * thread's first call; this file the blocks' life, and what the trace needs at thread
 * exit, at exit and after fork.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "arch/entry.h"
#include "base/base.h"
#include "stats.h"
#include "timeline.h"
#include "calls.h"
#include "totals.h"
#include "blocks.h"
#include "tracefile/tracefile.h"

pthread_mutex_t shimgen_stats_lock = PTHREAD_MUTEX_INITIALIZER;
struct tstats *shimgen_live_blocks;
static unsigned long free_block_count; /* blocks in state BLOCK_FREE */
static pthread_key_t stats_key;
static int stats_key_ok;

/* Every frame free, in order. */
static void reset_frames(struct tstats *s)
{
    for (unsigned i = 0; i < SHADOW_DEPTH; i++) {
        s->f[i].next = i + 1 < SHADOW_DEPTH ? &s->f[i + 1] : NULL;
        s->f[i].ret = NULL; /* the last one's NULL link is then no call (a reader's rule) */
    }
    s->free = s->f;
}

/* Mark the frames on the free list. The walk is bounded and checks every link, so a list
 * that another thread is changing (at exit) cannot make it loop or stray. 1 when the walk
 * reached the list's end (NULL); 0 when it met a link that is no frame's, or a frame twice:
 * the list changed under it. */
int mark_free_frames(const struct tstats *s, unsigned char is_free[SHADOW_DEPTH])
{
    memset(is_free, 0, SHADOW_DEPTH);
    const struct shadow_frame *f = __atomic_load_n(&s->free, __ATOMIC_RELAXED);
    for (unsigned n = 0; f && n < SHADOW_DEPTH; n++) {
        uintptr_t off = (uintptr_t)f - (uintptr_t)s->f;
        size_t k = off / sizeof *f;
        if (off % sizeof *f || k >= SHADOW_DEPTH || is_free[k])
            return 0;
        is_free[k] = 1;
        f = __atomic_load_n(&s->f[k].next, __ATOMIC_RELAXED);
    }
    return f == NULL;
}

/* Count the calls in progress (frames not on the free list): calls that will never return
 * (the thread is exiting, or the process is) or that left by longjmp or an exception. Only
 * from a walk that reached the list's end: a walk cut short by a thread still calling (at
 * process exit) leaves free frames unmarked, and the last free frame's NULL link reads as
 * function index 0. Such a block is walked again, a few times; if its thread never holds
 * still, its calls in progress are not counted (they are still running). */
static void count_calls_in_progress(struct tstats *s)
{
    unsigned char is_free[SHADOW_DEPTH];
    for (unsigned tries = 0; !mark_free_frames(s, is_free); tries++)
        if (tries == 8)
            return;
    for (unsigned k = 0; k < SHADOW_DEPTH; k++) {
        uint64_t idx = __atomic_load_n(&s->f[k].idx, __ATOMIC_RELAXED);
        if (!is_free[k] && idx < SHIMGEN_NFUNCS)
            s->fn[idx].count++;
    }
}

static void stats_retire(void *p);

/* At load: the key that tells a thread's exit. Made early, so that it is one of the first
 * keys of the process, whose values glibc keeps in the thread itself: setting it then
 * allocates nothing, which keeps a thread's first call free of malloc. */
__attribute__((constructor)) static void stats_key_init(void)
{
    stats_key_ok = pthread_key_create(&stats_key, stats_retire) == 0;
}

/* Once the driver is loaded, before any slot points at a counting or timing stub. */
void shimgen_stats_start(void)
{
    shimgen_arch_stats_start();
    if (!stats_key_ok)
        stats_key_ok = pthread_key_create(&stats_key, stats_retire) == 0;
    shimgen_calib_start();
    if (shimgen_cfg.calls)
        shimgen_calls_join(); /* the ring: in every block, after its struct tstats */
}

/* A free block, claimed by this thread; NULL when there is none. */
static struct tstats *claim_free_block(void)
{
    if (!__atomic_load_n(&free_block_count, __ATOMIC_ACQUIRE))
        return NULL;
    for (struct tstats *s = __atomic_load_n(&shimgen_live_blocks, __ATOMIC_ACQUIRE); s;
         s = s->next) {
        int expected = BLOCK_FREE;
        if (__atomic_compare_exchange_n(&s->state, &expected, BLOCK_LIVE, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_sub(&free_block_count, 1, __ATOMIC_RELAXED);
            return s;
        }
    }
    return NULL;
}

/* A new block (mmap: zeroed), live, on the list of every block: with SHIMGEN_TRACE_DIR, a
 * region of the process's trace file (tracefile.c), otherwise anonymous memory. */
static struct tstats *new_block(void)
{
    int anon;
    void *p = shimgen_tracefile_block(&anon);
    if (!p && anon)
        p = mmap(NULL, shimgen_tracefile_block_bytes(), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!p || p == MAP_FAILED)
        return NULL;
    struct tstats *s = p;
    reset_frames(s);
    s->state = BLOCK_LIVE;
    s->next = __atomic_load_n(&shimgen_live_blocks, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&shimgen_live_blocks, &s->next, s, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    return s;
}

static void release_block(struct tstats *s)
{
    __atomic_store_n(&s->state, BLOCK_FREE, __ATOMIC_RELEASE);
    __atomic_fetch_add(&free_block_count, 1, __ATOMIC_RELEASE);
}

/* The calling thread's block, got at its first traced call. Async-signal-safe: no lock, no
 * malloc (see the top of this file). */
struct tstats *stats_block(void)
{
    struct tstats *s = shimgen_tls_stats;
    if (s) { /* a handler's first call came between the two, or a forked child's first */
        shimgen_arch_block_given(s->fn);
        shimgen_arch_thread_fn(s->fn);
        return s;
    }
    s = claim_free_block();
    if (!s && !(s = new_block()))
        return NULL;
    s->tid = gettid();
    shimgen_arch_block_given(s->fn);
    if (shimgen_cfg.timeline)
        shimgen_timeline_ring(s);
    if (shimgen_cfg.calls)
        shimgen_calls_ring(s);
    /* A signal handler's driver call on this thread may have given it a block while this
     * one was being got: then that one stays and this one goes back. */
    struct tstats *had = NULL;
    if (!__atomic_compare_exchange_n(&shimgen_tls_stats, &had, s, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED)) {
        release_block(s);
        shimgen_arch_thread_fn(had->fn);
        return had;
    }
    shimgen_arch_thread_fn(s->fn);
    if (stats_key_ok)
        pthread_setspecific(stats_key, s);
    return s;
}

/* Thread exit: fold the block into the totals, with the calls it left in progress, and
 * free it for the next thread. The thread's pointer is cleared first, so that a signal
 * handler's driver call from here on counts into another block (which this destructor
 * then retires in its next round), not into one being folded. */
static void stats_retire(void *p)
{
    struct tstats *s = p;
    if (!s)
        return;
    if (shimgen_tls_stats == s) {
        shimgen_arch_thread_fn(NULL);
        __atomic_store_n(&shimgen_tls_stats, NULL, __ATOMIC_RELAXED);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    pthread_mutex_lock(&shimgen_stats_lock);
    if (s->state == BLOCK_LIVE) {
        count_calls_in_progress(s);
        /* With a trace file the block is the record: its counts stay in the file, and the
         * next thread that claims it adds to them; they are folded once, at exit. */
        if (!shimgen_tracefile_ready()) {
            shimgen_fold_block(s);
            shimgen_clear_block(s);
        }
        reset_frames(s);
        if (shimgen_cfg.timeline)
            shimgen_timeline_keep(s);
        release_block(s);
    }
    pthread_mutex_unlock(&shimgen_stats_lock);
}

/* With a trace file: calls counted with atomics (a thread with no block, a signal handler's
 * while its thread made the file), and the failures injected in them, go into a block of
 * their own. Returns how many calls the file lacks (0 unless no block can take them). */
static uint64_t put_outside_counts(void)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++)
        n += __atomic_load_n(&shimgen_counts[i], __ATOMIC_RELAXED);
    uint64_t untimed = __atomic_load_n(&shimgen_untimed_calls, __ATOMIC_RELAXED);
    if (!n && !untimed)
        return 0;
    int fresh = 1;
    struct tstats *s = new_block();
    if (!s) {
        /* No block can be added (a full disk): the counts go into one the file has, one no
         * thread uses (claimed), else this thread's, else any (its thread's increments and
         * ours may then race: atomics on our side). */
        fresh = 0;
        s = claim_free_block();
        if (s && !s->in_file) {
            release_block(s);
            s = NULL;
        }
        if (s)
            fresh = 2;
        else if (shimgen_tls_stats && shimgen_tls_stats->in_file)
            s = shimgen_tls_stats;
        else
            for (s = shimgen_live_blocks; s && !s->in_file; s = s->next)
                ;
        if (!s)
            return n ? n : 1;
    }
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        uint64_t c = __atomic_exchange_n(&shimgen_counts[i], 0, __ATOMIC_RELAXED);
        if (c)
            __atomic_fetch_add(&s->fn[i].count, c, __ATOMIC_RELAXED);
    }
    __atomic_fetch_add(&s->untimed, __atomic_exchange_n(&shimgen_untimed_calls, 0,
                                                        __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    shimgen_move_errors(s); /* the injected failures of those calls */
    if (fresh == 1)
        s->tid = 0;
    if (fresh)
        release_block(s);
    return 0;
}

/* At exit: fold every live block (with a trace file, every block). trylock, so that exit()
 * from a signal handler that interrupted a thread holding the lock cannot hang; without the
 * lock the sum is read as it stands. */
void shimgen_collect_stats(void)
{
    int locked = 0;
    for (int i = 0; i < 1000 && !locked; i++) {
        locked = pthread_mutex_trylock(&shimgen_stats_lock) == 0;
        if (!locked)
            usleep(100);
    }
    int in_file = shimgen_tracefile_ready();
    uint64_t outside = in_file ? put_outside_counts() : 0;
    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {
        int live = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == BLOCK_LIVE;
        if (!live && !in_file)
            continue; /* folded when its thread exited */
        /* Timed calls are counted when they return: count the ones still in progress
         * (a thread blocked in the driver, or exit() from a callback) from their frames. */
        if (live)
            count_calls_in_progress(s);
        shimgen_fold_block(s);
        if (!in_file)
            shimgen_clear_block(s); /* a trace file keeps its counts: it is the record */
    }
    if (locked)
        pthread_mutex_unlock(&shimgen_stats_lock);
    shimgen_tracefile_finish(outside);
}

/* In a forked child: it reports its own calls only (and, by its pid, to its own file). */
void shimgen_stats_after_fork(void)
{
    /* The block moved onto the child's file starts from zero, its targets too (aarch64):
     * the thread's next counted call takes the first-count path, which gives them back. */
    shimgen_arch_thread_fn(NULL);
    /* First of all: the blocks onto the child's own trace file (never the parent's). */
    shimgen_tracefile_after_fork(shimgen_live_blocks);
    shimgen_totals_after_fork();
    shimgen_blockless_calls = 0;
    /* Only the forking thread lives on in the child: its block keeps its shadow frames;
     * every block restarts from zero, and the lock may have been held by a thread that
     * is gone. */
    pthread_mutex_init(&shimgen_stats_lock, NULL);
    unsigned long nfree = 0;
    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {
        shimgen_clear_block(s);
        s->ev_head = 0;
        /* Other threads' blocks are free here: those threads do not exist, and their calls
         * in progress are the parent's, not to be counted at this process's exit. */
        if (s != shimgen_tls_stats) {
            reset_frames(s);
            s->state = BLOCK_FREE;
            nfree++;
        }
    }
    free_block_count = nfree;
    if (shimgen_tls_stats)
        shimgen_tls_stats->tid = gettid();
    shimgen_timeline_after_fork();
    /* Frames of calls in progress in the forking thread stay: they return in the child. */
}
