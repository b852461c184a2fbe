/*
 * first.c: the C paths the stubs (stubs.S, timing.S, calls.S) take on a thread's first
 * call, before it has a block (stats.c gives it one), and the code that called into the
 * shim as a hook asks for it (shimgen_real_caller).
 */

#define _GNU_SOURCE

#include "arch/entry.h"
#include "base/base.h"
#include "stats.h"
#include "totals.h"
#include "blocks.h"

/* A call of a thread that has no block (none could be added: a full disk, or no memory):
 * counted with atomics in memory, and said at once in the trace file's header, which a
 * process that dies before its exit leaves behind. */
uint64_t shimgen_blockless_calls;

static void count_blockless(unsigned idx, int timed)
{
    __atomic_fetch_add(&shimgen_counts[idx], 1, __ATOMIC_RELAXED);
    if (timed)
        __atomic_fetch_add(&shimgen_untimed_calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&shimgen_blockless_calls, 1, __ATOMIC_RELAXED);
    shimgen_tracefile_missed(1);
}

/* A thread's first call in calls mode (calls.S, no block yet): NULL once it has a block
 * (the stub starts again), else the target, the call counted in memory (no block: a full
 * disk). */
void *shimgen_calls_first_call(unsigned idx)
{
    if (stats_block())
        return NULL;
    count_blockless(idx, 1);
    return shimgen_targets[idx];
}

void *shimgen_count_first(unsigned idx)
{
    struct tstats *s = stats_block();
    if (s)
        s->fn[idx].count++;
    else
        count_blockless(idx, 0);
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
        count_blockless(idx, 1);
        return r;
    }
    /* Take a free frame before writing it, as the fast path does (timing.S). */
    struct shadow_frame *f = __atomic_load_n(&s->free, __ATOMIC_RELAXED);
    if (!f) {
        s->fn[idx].count++;
        s->untimed++;
        return r;
    }
    __atomic_store_n(&s->free, __atomic_load_n(&f->next, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    /* Timed: counted on the return, like the fast path's calls. */
    f->ret = *return_slot;
    f->rbx = caller_rbx;
    f->start = shimgen_ticks();
    /* The index last (a reader of the file sees a frame in use only with its start). */
    __atomic_store_n(&f->idx, (uint64_t)idx, __ATOMIC_RELEASE);
    *return_slot = timed_return;
    r.frame = f;
    return r;
}

/* The code that called into the shim: under SHIMGEN_TRACE=time (or timeline) a hook's
 * return address is the timing trampoline, and the caller's is in the frame of the call
 * in progress that started last (the hook's own: it runs right after its entry). */
void *shimgen_real_caller(void *return_address)
{
    struct tstats *s = shimgen_tls_stats;
    int timed = return_address == (void *)shimgen_calls_return;
    for (unsigned k = 0; shimgen_timed_returns[k]; k++)
        timed |= return_address == shimgen_timed_returns[k];
    if (!timed || !s)
        return return_address;
    unsigned char is_free[SHADOW_DEPTH];
    mark_free_frames(s, is_free);
    const struct shadow_frame *last = NULL;
    for (unsigned k = 0; k < SHADOW_DEPTH; k++)
        if (!is_free[k] && (!last || s->f[k].start > last->start))
            last = &s->f[k];
    return last ? last->ret : return_address;
}
