/*
 * gputrack.c: the GPU track of GPU time (gputime.c; docs/design.md "GPU time per kernel"):
 * each resolved launch placed in time, in a ring in the trace file's header (version 8's
 * kgpu_track), which the calls timeline shows as a track per stream
 * (shimgen/report/calls_timeline.py).
 *
 * Each context's reference event, recorded once, at its first timed launch, on that
 * launch's stream, with the host ticks then: a launch's start is placed on the GPU track
 * at those ticks plus cuEventElapsedTime from it to the launch's start event. */

#define _GNU_SOURCE
#include <string.h>

#include "kernels.h"
#include "base/base.h"
#include "arch/cpu.h"
#include "tracefile/tracefile.h"

#define OK SHIMGEN_CUDA_SUCCESS

#define REFS 16u
enum { REF_FREE = 0, REF_MAKING = 1, REF_READY = 2 };
static struct {
    uint32_t state;
    void *ctx, *ev;
    uint64_t ticks;
} refs[REFS];

/* Context `ctx`'s reference (made now when it has none and a place is free); -1 none. A
 * place is claimed by a compare-and-swap of its state word (FREE -> MAKING), published
 * READY with release order. */
int shimgen_gpu_ref(void *ctx, void *stream)
{
    for (unsigned i = 0; i < REFS; i++)
        if (__atomic_load_n(&refs[i].state, __ATOMIC_ACQUIRE) == REF_READY &&
            refs[i].ctx == ctx)
            return (int)i;
#if defined(SHIMGEN_IDX_cuEventCreate) && defined(SHIMGEN_IDX_cuEventRecord)
    for (unsigned i = 0; i < REFS; i++) {
        uint32_t was = REF_FREE;
        if (!__atomic_compare_exchange_n(&refs[i].state, &was, REF_MAKING, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        refs[i].ctx = ctx;
        refs[i].ticks = shimgen_ticks();
        if (REAL(cuEventCreate, void **, unsigned)(&refs[i].ev, 0) != OK ||
            REAL(cuEventRecord, void *, void *)(refs[i].ev, stream) != OK) {
            refs[i].ctx = NULL; /* (an event made and not recorded is left to its context) */
            __atomic_store_n(&refs[i].state, REF_FREE, __ATOMIC_RELEASE);
            return -1;
        }
        __atomic_store_n(&refs[i].state, REF_READY, __ATOMIC_RELEASE);
        return (int)i;
    }
#else
    (void)stream;
#endif
    return -1;
}

void shimgen_gpu_track(int r, void *ctx, void *start, int slot, uint64_t stream, uint64_t ns)
{
#ifdef SHIMGEN_IDX_cuEventElapsedTime
    float ms = 0;
    if (r < 0 || __atomic_load_n(&refs[r].state, __ATOMIC_ACQUIRE) != REF_READY ||
        refs[r].ctx != ctx ||
        REAL(cuEventElapsedTime, float *, void *, void *)(&ms, refs[r].ev, start) != OK)
        return;
    struct tf_header *h = shimgen_kern_header();
    uint64_t at = __atomic_fetch_add(&h->kgpu_track_used, 1, __ATOMIC_RELAXED);
    uint64_t *w = &h->kgpu_track[at % SHIMGEN_KGPU_TRACK * SHIMGEN_KGPU_TRACK_WORDS];
    __atomic_store_n(&w[0], 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&w[1], stream, __ATOMIC_RELAXED);
    __atomic_store_n(&w[2], refs[r].ticks, __ATOMIC_RELAXED);
    __atomic_store_n(&w[3], ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w[4], ns, __ATOMIC_RELAXED);
    __atomic_store_n(&w[0], (uint64_t)slot + 1, __ATOMIC_RELEASE);
#else
    (void)r, (void)ctx, (void)start, (void)slot, (void)stream, (void)ns;
#endif
}

void shimgen_gpu_refs_gone(void *ctx)
{
    for (unsigned i = 0; i < REFS && ctx; i++) {
        uint32_t was = REF_READY;
        if (refs[i].ctx == ctx && __atomic_compare_exchange_n(&refs[i].state, &was, REF_MAKING,
                                                              0, __ATOMIC_ACQUIRE,
                                                              __ATOMIC_RELAXED)) {
            refs[i].ctx = refs[i].ev = NULL;
            __atomic_store_n(&refs[i].state, REF_FREE, __ATOMIC_RELEASE);
        }
    }
}

void shimgen_gpu_refs_after_fork(void)
{
    memset(refs, 0, sizeof refs);
}
