/*
 * block.h: a thread's counter block (struct tstats), its shadow frames and timeline events,
 * as the counting and timing stubs (stubs.S, timing.S) update them, and the fine histogram's
 * bucket arithmetic. The offsets the assembly uses are in layout.h, checked here against the
 * structs. Types and inline helpers only: shared by stats.c (the blocks' life), totals.c
 * (their fold into the process's totals), tracefile.c and tracefile/header.c (blocks in the
 * trace file), timeline.c (rings of events), trace.c and quantiles.c (output at exit).
 */
#ifndef SHIMGEN_BLOCK_H
#define SHIMGEN_BLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch/cpu.h"
#include "arch/layout.h"
#include "base/base.h"

#define SHADOW_DEPTH ((unsigned)TS_SHADOW_DEPTH)

/* A timed call in progress. A thread's frames are not a stack: a call takes any free frame
 * and keeps its address in rbx across the call (callee-saved, so every stack switch that
 * honours the ABI brings it back), and its return gives back that frame, whatever order
 * the calls end in (coroutines). Free frames form a list through `next`. */
struct shadow_frame {
    void *ret;      /* the caller's return address */
    uint64_t start; /* ticks at entry */
    union {
        uint64_t idx;              /* the function (a call in progress) */
        struct shadow_frame *next; /* the next free frame (a free frame) */
    };
    void *rbx; /* the caller's rbx (the timing stub keeps the frame in rbx) */
};

/* One timed call in a timeline ring: written by the timeline stub's return path. */
struct tl_event {
    uint64_t start;   /* ticks at entry */
    uint64_t dur_idx; /* elapsed ticks << 16 | function index */
};

/* What a thread has of one function: what a timed call updates is in one cache line. Its
 * words are runenv.py's list (tracefields.h), each a 64-bit word; the struct is aligned to
 * its size, a power of two, which pads it. `target`: 0 on x86-64; on aarch64 a copy of
 * shimgen_targets[i], written when a thread takes the block (stats.c), for the counting stub
 * to branch through (readers skip it: its fold is NONE). */
#define FSTATS_MEMBER(word, fold, unit, offset) uint64_t word;
struct fstats {
    SHIMGEN_FSTATS_WORDS(FSTATS_MEMBER)
} __attribute__((aligned(TS_FSTATS_SIZE)));
#undef FSTATS_MEMBER

/* One (function, non-success code) of a thread's timed calls and how often it was returned. */
struct errslot {
    uint64_t key; /* (function index + 1) << 32 | (uint32_t)code; 0: a free slot */
    uint64_t count;
};

/* One (function, fine bucket) of a thread's timed calls (layout.h). */
struct fineslot {
    uint32_t key; /* (function index + 1) * TS_FINE_STEP + fine bucket; 0: a free slot */
    uint32_t count;
};

struct tstats {
    struct fstats fn[SHIMGEN_NFUNCS];
    uint64_t untimed;
    struct shadow_frame *free; /* the first free frame; NULL: all in use */
    uint64_t in_file; /* 1: a block of the process's trace file; 0: anonymous memory */
    struct tl_event *ev;      /* SHIMGEN_TRACE=timeline: the thread's ring of events */
    uint64_t ev_head;         /* events recorded so far; the ring keeps the last ev_mask+1 */
    uint64_t ev_mask;
    struct shadow_frame f[SHADOW_DEPTH];
    struct tstats *next; /* every block ever made (shimgen_live_blocks), never unlinked */
    int state;           /* BLOCK_LIVE (a thread's) or BLOCK_FREE (to be reused) */
    pid_t tid;
    uint64_t err_overflow; /* non-success returns that found every slot of err[] taken */
    struct errslot err[TS_ERR_SLOTS];
    _Alignas(64) uint64_t hist[SHIMGEN_NFUNCS][TS_HIST_BUCKETS];
    struct fineslot fine[TS_FINE_SLOTS];
};

enum { BLOCK_FREE = 0, BLOCK_LIVE = 1 };

_Static_assert(sizeof(struct fstats) == TS_FSTATS_SIZE &&
                   TS_FSTATS_SIZE == 1u << TS_FSTATS_SHIFT, "fstats");
#define FSTATS_AT(word, fold, unit, offset) \
    _Static_assert(offsetof(struct fstats, word) == (offset), "fstats." #word);
SHIMGEN_FSTATS_WORDS(FSTATS_AT)
#undef FSTATS_AT
_Static_assert(offsetof(struct tstats, untimed) == TS_UNTIMED, "tstats.untimed");
_Static_assert(offsetof(struct tstats, free) == TS_FREE, "tstats.free");
_Static_assert(offsetof(struct tstats, ev) == TS_EV, "tstats.ev");
_Static_assert(offsetof(struct tstats, ev_head) == TS_EV_HEAD, "tstats.ev_head");
_Static_assert(offsetof(struct tstats, ev_mask) == TS_EV_MASK, "tstats.ev_mask");
_Static_assert(offsetof(struct tstats, f) == TS_FRAMES, "tstats.f");
_Static_assert(offsetof(struct tstats, next) == TS_NEXT, "tstats.next");
_Static_assert(offsetof(struct tstats, err_overflow) == TS_ERR_OVERFLOW, "tstats.err_overflow");
_Static_assert(offsetof(struct tstats, err) == TS_ERR, "tstats.err");
_Static_assert(sizeof(struct errslot) == TS_ERRSLOT_SIZE, "errslot");
_Static_assert(TS_ERR_SLOTS == 1u << TS_ERR_SLOTS_SHIFT, "err[] is a power of two");
_Static_assert(offsetof(struct tstats, hist) == TS_HIST, "tstats.hist");
_Static_assert(sizeof(uint64_t) * TS_HIST_BUCKETS == 1u << TS_HIST_SHIFT, "one histogram");
_Static_assert(TS_HIST_SCALE * TS_FSTATS_SIZE == TS_HIST_BUCKETS &&
                   (TS_HIST_SCALE == 1 || TS_HIST_SCALE == 2 || TS_HIST_SCALE == 4 ||
                    TS_HIST_SCALE == 8), "struct fstats of 8 to 64 bytes: an index scale");
_Static_assert((TS_FSTATS_SCALE == 1 || TS_FSTATS_SCALE == 2 || TS_FSTATS_SCALE == 4 ||
                TS_FSTATS_SCALE == 8) && TS_FSTATS_SCALE << TS_IDX_SHIFT == TS_FSTATS_SIZE &&
                   TS_HIST_IDX_SCALE << TS_IDX_SHIFT == TS_HIST_BUCKETS &&
                   (TS_HIST_IDX_SCALE == 1 || TS_HIST_IDX_SCALE == 2 ||
                    TS_HIST_IDX_SCALE == 4 || TS_HIST_IDX_SCALE == 8),
               "the time path's index i * 8 reaches fn[i] and hist[i] by an index scale");
_Static_assert(offsetof(struct tstats, fine) == TS_FINE, "tstats.fine");
_Static_assert(sizeof(struct fineslot) == TS_FINE_SLOT_SIZE, "fineslot");
_Static_assert(TS_FINE_SLOTS == 1u << TS_FINE_SLOTS_SHIFT, "fine[] is a power of two");
_Static_assert((uint64_t)(SHIMGEN_NFUNCS + 1) * TS_FINE_STEP < 1ull << 32,
               "a fine key fits in 32 bits");
_Static_assert(TS_FINE_STEP % (1u << TS_IDX_SHIFT) == 0 && TS_FINE_STEP >= 1u << TS_FINE_BITS,
               "i * 8 times TS_FINE_STEP / 8 is a key's base; a key's bucket is below a step");
_Static_assert((63 - TS_FINE_SUB_SHIFT + 2) << TS_FINE_SUB_SHIFT <= 1u << TS_FINE_BITS,
               "every fine bucket fits in TS_FINE_BITS");
_Static_assert(sizeof(struct tl_event) == 1u << TL_EVENT_SHIFT, "tl_event");
_Static_assert(SHIMGEN_NFUNCS < 1u << TL_INDEX_BITS,
               "the function index fits in the low bits of an event");
_Static_assert(sizeof(struct shadow_frame) == TS_FRAME_SIZE, "shadow_frame");
_Static_assert(offsetof(struct shadow_frame, ret) == FRAME_RET, "shadow_frame.ret");
_Static_assert(offsetof(struct shadow_frame, start) == FRAME_START, "shadow_frame.start");
_Static_assert(offsetof(struct shadow_frame, idx) == FRAME_IDX, "shadow_frame.idx");
_Static_assert(offsetof(struct shadow_frame, next) == FRAME_NEXT, "shadow_frame.next");
_Static_assert(offsetof(struct shadow_frame, rbx) == FRAME_RBX, "shadow_frame.rbx");


/* Fine bucket helpers (layout.h): the range of ticks of bucket f, the log2 bucket holding
 * it, and the first and one-past-last fine bucket of log2 bucket b. */
static inline uint64_t fine_lo(unsigned f)
{
    if (f < (1u << TS_FINE_SUB_SHIFT))
        return f;
    unsigned sh = (f >> TS_FINE_SUB_SHIFT) - 1;
    return (uint64_t)((f & ((1u << TS_FINE_SUB_SHIFT) - 1)) | (1u << TS_FINE_SUB_SHIFT)) << sh;
}
static inline uint64_t fine_hi(unsigned f)
{
    if (f < (1u << TS_FINE_SUB_SHIFT))
        return (uint64_t)f + 1;
    unsigned sh = (f >> TS_FINE_SUB_SHIFT) - 1;
    return fine_lo(f) + (1ull << sh);
}
static inline unsigned fine_octave(unsigned f)
{
    uint64_t lo = fine_lo(f) | 1;
    return 63u - (unsigned)__builtin_clzll(lo);
}
static inline unsigned fine_first(unsigned b)
{
    if (b < TS_FINE_SUB_SHIFT)
        return b ? 1u << b : 0u;
    return (b - TS_FINE_SUB_SHIFT + 1) << TS_FINE_SUB_SHIFT;
}
static inline unsigned fine_end(unsigned b)
{
    return fine_first(b + 1);
}
/* A fine key's function index + 1 and its fine bucket (layout.h). */
static inline unsigned fine_key_fn(uint64_t key)
{
    return (unsigned)(key / TS_FINE_STEP);
}
static inline unsigned fine_key_bucket(uint64_t key)
{
    return (unsigned)(key % TS_FINE_STEP);
}
/* Whether a fine key is of function i, in log2 bucket b. */
static inline int fine_key_in(uint64_t key, unsigned i, unsigned b)
{
    return fine_key_fn(key) == i + 1 && fine_octave(fine_key_bucket(key)) == b;
}
/* Function i's home slot in a thread's fine table: its keys' base modulo the table's size
 * (a key's slot is the key modulo the size, layout.h). */
static inline unsigned fine_thread_home(unsigned idx)
{
    return (unsigned)(((uint64_t)idx + 1) * TS_FINE_STEP) & (TS_FINE_SLOTS - 1);
}
/* A function's home slot in the process's fine table of 2^bits slots (totals.c). */
static inline unsigned fine_home(unsigned idx, unsigned bits)
{
    return (unsigned)(((uint32_t)(idx + 1) * (uint32_t)TS_FINE_HASH) >> (32 - bits));
}
#endif
