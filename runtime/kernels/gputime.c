/*
 * gputime.c: GPU time per kernel without CUPTI (SHIMGEN_GPU_TIME, `shimgen run --gpu-time`;
 * docs/design.md "GPU time per kernel"). A timed launch is bracketed on its own stream by
 * two of the driver's timing events (cuEventCreate with default flags, cuEventRecord before
 * and after the forwarded launch), a pair taken from a fixed pool: no allocation per
 * launch, a pair's events made once, at its first use, in the context current then, and
 * used again by launches in that context only. A pair is resolved later, never waited
 * for: at a synchronisation the program makes (the memory ledger's sync watches,
 * cuStreamQuery and cuEventQuery returning success) and at exit (atexit), each pending
 * pair's end event asked with cuEventQuery; one done gives cuEventElapsedTime, added to its
 * kernel's slot in the trace file's header (version 8's kgpu_* fields), so a process killed
 * keeps what was resolved. A launch is not timed, and counted by why (kgpu_not): skipped by
 * the sampling (every=N), into a stream that captures or that the driver cannot say of
 * (cuStreamIsCapturing first: no event is ever recorded into a capture), its events
 * refused by the driver, no free pair, its pair dropped (its context destroyed, or the
 * driver no longer knew its events), still running at exit. A resolved launch also goes on
 * the GPU track (gputrack.c).
 *
 * Threads: a pair is claimed by a compare-and-swap of its state word (FREE -> BUSY), and
 * the thread that holds it BUSY alone writes its other fields; it is published PENDING with
 * release order, and a resolver claims it back to BUSY the same way. No lock, no wait.
 */

#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "base/base.h"
#include "memory/memory.h"
#include "tracefile/tracefile.h"

#define OK SHIMGEN_CUDA_SUCCESS
#define NOT_READY SHIMGEN_CUDA_ERROR_NOT_READY
#define PAIRS SHIMGEN_KGPU_PAIRS
#define BUCKETS SHIMGEN_KGPU_BUCKETS
#define SUB_SHIFT SHIMGEN_KGPU_SUB_SHIFT
#define PROBES 64u /* pairs looked at for a free one before the pool counts as full */
#define NOT_DONE_MOST 16u /* pairs not done a resolve asks before it stops */
#define EVERY_MAX 1000000000u
#define MAYBE __attribute__((unused)) /* (a driver without the events uses none) */

enum { FREE = 0, BUSY = 1, PENDING = 2 };
struct pair {
    uint32_t state;
    int32_t slot;
    int32_t ref; /* its context's reference event (refs[]), -1: none (not on the GPU track) */
    void *ctx;   /* the context its events belong to; NULL: no events made yet */
    void *ev[2]; /* start, end */
    uint64_t stream;
};

unsigned shimgen_gpu_every; /* 1 in this many launches timed; 0: off */
static struct pair pool[PAIRS];
static uint64_t pending; /* pairs PENDING: 0 lets a resolve return at once */
static MAYBE uint64_t cursor, seq;
static MAYBE unsigned resolve_from; /* where a resolve starts: the oldest pending, about */
static MAYBE int exit_set;

static MAYBE void not_timed(unsigned why)
{
    __atomic_fetch_add(&shimgen_kern_header()->kgpu_not[why], 1, __ATOMIC_RELAXED);
}

static MAYBE void pending_add(int64_t d)
{
    __atomic_fetch_add(&pending, (uint64_t)d, __ATOMIC_RELAXED);
    __atomic_fetch_add(&shimgen_kern_header()->kgpu_pending, (uint64_t)d, __ATOMIC_RELAXED);
}

/* A launch's GPU ns in its histogram's bucket (runenv.KGPU_BUCKETS says how). */
static MAYBE unsigned bucket(uint64_t ns)
{
    if (ns < (1u << SUB_SHIFT))
        return (unsigned)ns;
    unsigned sh = (unsigned)(63 - __builtin_clzll(ns)) - SUB_SHIFT;
    uint64_t b = ((uint64_t)sh << SUB_SHIFT) + (ns >> sh);
    return b < BUCKETS ? (unsigned)b : BUCKETS - 1;
}

static MAYBE void add(int slot, uint64_t ns)
{
    struct tf_header *h = shimgen_kern_header();
    __atomic_fetch_add(&h->kgpu_ns[slot], ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->kgpu_hist[(unsigned)slot * BUCKETS + bucket(ns)], 1,
                       __ATOMIC_RELAXED);
    uint64_t was = __atomic_load_n(&h->kgpu_max[slot], __ATOMIC_RELAXED);
    while (ns > was && !__atomic_compare_exchange_n(&h->kgpu_max[slot], &was, ns, 1,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_fetch_add(&h->kgpu_timed[slot], 1, __ATOMIC_RELAXED);
}

static MAYBE void release(struct pair *p, int forget)
{
    if (forget)
        p->ctx = p->ev[0] = p->ev[1] = NULL; /* (the driver's, gone with their context) */
    __atomic_store_n(&p->state, FREE, __ATOMIC_RELEASE);
}

/* A free pair of context `ctx` (or one with no events yet), held BUSY; NULL when none. */
static MAYBE struct pair *take(void *ctx)
{
    unsigned at = (unsigned)__atomic_fetch_add(&cursor, 1, __ATOMIC_RELAXED);
    for (unsigned k = 0; k < PROBES; k++) {
        struct pair *p = &pool[(at + k) % PAIRS];
        uint32_t was = FREE;
        if (__atomic_load_n(&p->state, __ATOMIC_RELAXED) != FREE ||
            !__atomic_compare_exchange_n(&p->state, &was, BUSY, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        if (!p->ctx || p->ctx == ctx)
            return p;
        release(p, 0);
    }
    return NULL;
}

/* Pending pairs whose end event is done: their time added; the rest left pending. Pairs are
 * taken in the order of the pool's cursor, so the oldest pending ones lie from where the
 * last pass met its first one not done: a pass starts there and stops after `most` not
 * done (a program that polls a query while the GPU is far behind pays a few driver
 * queries, not one per pending pair). */
static void resolve(unsigned most)
{
    if (!__atomic_load_n(&pending, __ATOMIC_ACQUIRE))
        return;
#if defined(SHIMGEN_IDX_cuEventQuery) && defined(SHIMGEN_IDX_cuEventElapsedTime)
    unsigned from = __atomic_load_n(&resolve_from, __ATOMIC_RELAXED), misses = 0;
    for (unsigned k = 0; k < PAIRS && misses < most; k++) {
        unsigned i = (from + k) % PAIRS;
        struct pair *p = &pool[i];
        uint32_t was = PENDING;
        if (__atomic_load_n(&p->state, __ATOMIC_RELAXED) != PENDING ||
            !__atomic_compare_exchange_n(&p->state, &was, BUSY, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        shimgen_CUresult r = REAL(cuEventQuery, void *)(p->ev[1]);
        if (r == NOT_READY) {
            __atomic_store_n(&p->state, PENDING, __ATOMIC_RELEASE);
            if (!misses++)
                __atomic_store_n(&resolve_from, i, __ATOMIC_RELAXED);
            continue;
        }
        float ms = 0;
        if (r == OK && REAL(cuEventElapsedTime, float *, void *, void *)(&ms, p->ev[0],
                                                                        p->ev[1]) == OK) {
            uint64_t ns = ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
            add(p->slot, ns);
            shimgen_gpu_track(p->ref, p->ctx, p->ev[0], p->slot, p->stream, ns);
        } else
            not_timed(r == OK ? SHIMGEN_KGPU_NOT_REFUSED : SHIMGEN_KGPU_NOT_CONTEXT);
        pending_add(-1);
        release(p, r != OK);
    }
#else
    (void)most;
#endif
}

void shimgen_gpu_resolve(void)
{
    resolve(NOT_DONE_MOST);
}

/* At exit: what is done resolved, the rest counted as unfinished (never waited for). */
static MAYBE void at_exit(void)
{
    resolve(PAIRS);
    uint64_t left = __atomic_exchange_n(&pending, 0, __ATOMIC_ACQ_REL);
    struct tf_header *h = shimgen_kern_header();
    __atomic_fetch_add(&h->kgpu_not[SHIMGEN_KGPU_NOT_UNFINISHED], left, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&h->kgpu_pending, left, __ATOMIC_RELAXED);
}

/* A pair's two events, made in context `ctx` (the first use of the pair); 0 refused. The
 * exit handler is set at the first pair's. */
static MAYBE int make_events(struct pair *p, void *ctx)
{
#ifdef SHIMGEN_IDX_cuEventCreate
    if (REAL(cuEventCreate, void **, unsigned)(&p->ev[0], 0) != OK)
        return 0;
    if (REAL(cuEventCreate, void **, unsigned)(&p->ev[1], 0) != OK) {
#ifdef SHIMGEN_IDX_cuEventDestroy_v2
        REAL(cuEventDestroy_v2, void *)(p->ev[0]);
#endif
        return 0;
    }
    p->ctx = ctx;
    if (!__atomic_exchange_n(&exit_set, 1, __ATOMIC_RELAXED))
        atexit(at_exit);
    return 1;
#else
    (void)p, (void)ctx;
    return 0;
#endif
}

int shimgen_gpu_begin(void *stream)
{
    if (shimgen_gpu_every > 1 &&
        __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED) % shimgen_gpu_every) {
        not_timed(SHIMGEN_KGPU_NOT_SAMPLED);
        return -1;
    }
#if defined(SHIMGEN_IDX_cuEventCreate) && defined(SHIMGEN_IDX_cuEventRecord) &&          \
    defined(SHIMGEN_IDX_cuCtxGetCurrent)
    int status = 0;
#ifdef SHIMGEN_IDX_cuStreamIsCapturing
    if (!HAS(cuStreamIsCapturing) ||
        REAL(cuStreamIsCapturing, void *, int *)(stream, &status) != OK || status != 0) {
        not_timed(SHIMGEN_KGPU_NOT_CAPTURE);
        return -1;
    }
#else
    (void)status;
    not_timed(SHIMGEN_KGPU_NOT_CAPTURE);
    return -1;
#endif
    void *ctx = NULL;
    if (REAL(cuCtxGetCurrent, void **)(&ctx) != OK || !ctx) {
        not_timed(SHIMGEN_KGPU_NOT_CONTEXT);
        return -1;
    }
    struct pair *p = take(ctx);
    if (!p) {
        shimgen_gpu_resolve(); /* (only when the pool is full: its done pairs freed) */
        p = take(ctx);
    }
    if (!p) {
        not_timed(SHIMGEN_KGPU_NOT_POOL);
        return -1;
    }
    if (!p->ctx && !make_events(p, ctx)) {
        not_timed(SHIMGEN_KGPU_NOT_REFUSED);
        release(p, 1);
        return -1;
    }
    p->ref = shimgen_gpu_ref(ctx, stream);
    p->stream = (uint64_t)(uintptr_t)stream;
    if (REAL(cuEventRecord, void *, void *)(p->ev[0], stream) != OK) {
        not_timed(SHIMGEN_KGPU_NOT_REFUSED);
        release(p, 0);
        return -1;
    }
    return (int)(p - pool);
#else
    (void)stream;
    not_timed(SHIMGEN_KGPU_NOT_REFUSED);
    return -1;
#endif
}

void shimgen_gpu_end(int i, int ok, int slot)
{
    if (i < 0)
        return;
    struct pair *p = &pool[i];
    if (!ok || slot < 0) { /* (a refused launch: nothing ran; no slot: kern_lost_launches) */
        release(p, 0);
        return;
    }
#ifdef SHIMGEN_IDX_cuEventRecord
    if (REAL(cuEventRecord, void *, void *)(p->ev[1], (void *)(uintptr_t)p->stream) != OK) {
        not_timed(SHIMGEN_KGPU_NOT_REFUSED);
        release(p, 0);
        return;
    }
#endif
    p->slot = slot;
    pending_add(1);
    __atomic_store_n(&p->state, PENDING, __ATOMIC_RELEASE);
}

/* A context about to be destroyed: its pending pairs dropped (counted), its free pairs'
 * events forgotten (they go with it). A pair BUSY in another thread is that thread's. */
void shimgen_gpu_ctx_gone(void *ctx)
{
    for (unsigned i = 0; i < PAIRS && ctx; i++) {
        struct pair *p = &pool[i];
        uint32_t was = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
        if (was == BUSY || __atomic_load_n(&p->ctx, __ATOMIC_RELAXED) != ctx ||
            !__atomic_compare_exchange_n(&p->state, &was, BUSY, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        if (p->ctx != ctx) { /* (taken and given back for another context meanwhile) */
            __atomic_store_n(&p->state, was, __ATOMIC_RELEASE);
            continue;
        }
        if (was == PENDING) {
            not_timed(SHIMGEN_KGPU_NOT_CONTEXT);
            pending_add(-1);
        }
        release(p, 1);
    }
    shimgen_gpu_refs_gone(ctx);
}

/* SHIMGEN_GPU_TIME: "1" every launch, "every=N" one in N; anything else said, and off. */
void shimgen_gpu_config(void)
{
    const char *v = secure_getenv(SHIMGEN_ENV_GPU_TIME);
    size_t pre = strlen(SHIMGEN_KGPU_EVERY);
    char *end = NULL;
    unsigned long n = 0;
    if (!v || !*v || !strcmp(v, "0"))
        return;
    if (!strcmp(v, "1"))
        n = 1;
    else if (!strncmp(v, SHIMGEN_KGPU_EVERY, pre) && v[pre] >= '1' && v[pre] <= '9')
        n = strtoul(v + pre, &end, 10);
    if (!n || (end && *end) || n > EVERY_MAX) {
        shimgen_say("shimgen: %s=%s is not 1 or %sN (N from 1 to %u); GPU time is not "
                    "measured\n", SHIMGEN_ENV_GPU_TIME, v, SHIMGEN_KGPU_EVERY, EVERY_MAX);
        return;
    }
    shimgen_gpu_every = (unsigned)n;
    shimgen_kern_gpu_arrays();
    __atomic_store_n(&shimgen_on_sync, shimgen_gpu_resolve, __ATOMIC_RELEASE);
    __atomic_store_n(&shimgen_on_ctx_destroy, shimgen_gpu_ctx_gone, __ATOMIC_RELEASE);
    __atomic_store_n(&shimgen_kern_header()->kgpu_every, (uint32_t)n, __ATOMIC_RELAXED);
}

/* A forked child: the parent's pairs forgotten (its events are not the child's). */
void shimgen_gpu_after_fork(void)
{
    memset(pool, 0, sizeof pool);
    shimgen_gpu_refs_after_fork();
    pending = cursor = seq = 0; /* (the exit handler, set or not, is the parent's too) */
    resolve_from = 0;
}
