/*
 * layout.h: the byte layout of a thread's counter block (struct tstats, block.h) and of a
 * shadow frame, which the assembly in stubs.S and timing.S reads and writes by offset. Included by
 * stubs.S and by block.h, whose _Static_asserts check every offset against the struct,
 * so the two can never disagree. Needs SHIMGEN_NFUNCS (shim.h).
 */
#ifndef SHIMGEN_LAYOUT_H
#define SHIMGEN_LAYOUT_H

/* struct fstats, one per function: count, total, max, and on aarch64 the function's target
 * (what a timed call updates is in one cache line; a counted call on aarch64 reads its
 * target from the word after its count's, aarch64/stubs.S). Its words are shimgen/runenv.py's
 * one list of trace fields (TRACE_FSTATS_WORDS), rendered into tracefields.h; a word only C
 * fills needs no name here. */
#include "tracefields.h"
#define TS_FSTATS_SIZE SHIMGEN_FSTATS_SIZE
#define TS_FSTATS_SHIFT SHIMGEN_FSTATS_SHIFT /* log2 of TS_FSTATS_SIZE (block.h checks it) */
#define TS_COUNT SHIMGEN_FSTATS_COUNT
#define TS_TOTAL SHIMGEN_FSTATS_TOTAL
#define TS_MAX SHIMGEN_FSTATS_MAX
#define TS_TARGET SHIMGEN_FSTATS_TARGET
/* struct tstats after its fn[SHIMGEN_NFUNCS]. */
#define TS_UNTIMED (TS_FSTATS_SIZE * SHIMGEN_NFUNCS)
#define TS_FREE (TS_FSTATS_SIZE * SHIMGEN_NFUNCS + 8)
#define TS_EV (TS_FSTATS_SIZE * SHIMGEN_NFUNCS + 24)
#define TS_EV_HEAD (TS_FSTATS_SIZE * SHIMGEN_NFUNCS + 32)
#define TS_EV_MASK (TS_FSTATS_SIZE * SHIMGEN_NFUNCS + 40)
#define TS_FRAMES (TS_FSTATS_SIZE * SHIMGEN_NFUNCS + 48)
#define TS_SHADOW_DEPTH 128
/* After the frames: the list link, state and tid (16 bytes), then the error returns of the
 * time paths (a count of those that found no free slot, then the slots), then, aligned to a
 * cache line, the latency histograms: HIST_BUCKETS log2 buckets of elapsed ticks per
 * function (bucket 0: 0 or 1 tick; bucket b: [2^b, 2^(b+1)) ticks), of the timed calls that
 * the fine table below had no slot for (the others are in the fine table only). */
#define TS_NEXT (TS_FRAMES + TS_FRAME_SIZE * TS_SHADOW_DEPTH)
#define TS_ERR_OVERFLOW (TS_NEXT + 16)
#define TS_ERR (TS_NEXT + 24)
#define TS_ERR_SLOTS 256
#define TS_ERR_SLOTS_SHIFT 8 /* log2 of TS_ERR_SLOTS */
#define TS_ERR_HASH 0x61C88647 /* odd: the slot probed first is the top bits of key * this */
#define TS_ERRSLOT_SIZE 16 /* key: (function index + 1) << 32 | code (0: empty); count */
#define TS_HIST_BUCKETS 64
#define TS_HIST_SHIFT 9 /* log2 of TS_HIST_BUCKETS * 8: one function's histogram */
/* fn[i]'s byte offset times this is hist[i][0]'s word index (an x86-64 index scale: 1, 2, 4
 * or 8, so struct fstats is 8 to 64 bytes; block.h checks it). */
#define TS_HIST_SCALE (TS_HIST_BUCKETS / TS_FSTATS_SIZE)
#define TS_HIST ((TS_ERR + TS_ERRSLOT_SIZE * TS_ERR_SLOTS + 63) & ~63)
/* x86-64's time path keeps i * 8 (TS_IDX_SHIFT) as its index; times these x86-64 index
 * scales it reaches fn[i] and hist[i][0] (block.h checks that they are scales), and times
 * TS_FINE_STEP / 8 it is the base of function i's fine keys, less one step. */
#define TS_IDX_SHIFT 3
#define TS_FSTATS_SCALE (TS_FSTATS_SIZE >> TS_IDX_SHIFT)
#define TS_HIST_IDX_SCALE (TS_HIST_BUCKETS >> TS_IDX_SHIFT)
/* After the histograms: the thread's fine latency histogram, one table for every function,
 * FINE_SLOTS slots of 8 bytes (a 32-bit key, (function index + 1) * FINE_STEP + fine
 * bucket, 0 for a free slot; a 32-bit count). Fine bucket f of elapsed ticks v: v itself
 * below 64; else (e - 6) * 64 + (v >> (e - 6)) with e = bsr(v): 64 buckets per power of
 * two, each 1/64 of its octave or less, every one below 1 << FINE_BITS. A key's slot is
 * the key itself modulo FINE_SLOTS (its function's home, (index + 1) * FINE_STEP modulo
 * FINE_SLOTS, + f), probed FINE_PROBES slots on; a call that finds none free is in the log2
 * histogram only (the readers then use that octave's log2 bucket, docs/traceformat.md).
 * FINE_STEP: a multiple of 8 (the x86-64 index i * 8 times FINE_STEP / 8 is i * FINE_STEP,
 * one imul), above every fine bucket (a key is its function's and bucket's alone), near
 * FINE_SLOTS times the golden ratio's fraction, so that the homes of functions i and i + 1,
 * i + 2, ... spread over the table as a multiplicative hash's do. */
#define TS_FINE_BITS 12
#define TS_FINE_SUB_SHIFT 6 /* log2 of the buckets per power of two */
#define TS_FINE_SLOTS 32768
#define TS_FINE_SLOTS_SHIFT 15
#define TS_FINE_SLOT_SIZE 8
#define TS_FINE_PROBES 8
#define TS_FINE_STEP 20248 /* 8 * 2531; 32768 * 0.618 = 20251 */
#define TS_FINE_HASH 0x9E3779B1 /* the process's fine table (totals.c): a function's home is
                                 * the top bits of (index + 1) * this */
#define TS_FINE (TS_HIST + (1 << TS_HIST_SHIFT) * SHIMGEN_NFUNCS)
/* struct shadow_frame, 32 bytes: the caller's return address, start ticks, function index
 * (while the frame is free: the next free frame), the caller's rbx. */
#define TS_FRAME_SIZE 32
#define FRAME_RET 0
#define FRAME_START 8
#define FRAME_IDX 16
#define FRAME_NEXT 16 /* the same word: a free frame has no index */
#define FRAME_RBX 24
/* struct tl_event, 16 bytes: start ticks, elapsed ticks << 16 | function index. */
#define TL_EVENT_SHIFT 4
#define TL_INDEX_BITS 16

/* SHIMGEN_TRACE=calls: a call record (struct calls_record, stats/calls.h; what calls.S
 * writes, what shimgen/calls/records.py reads; docs/traceformat.md) and a function's info. */
#define REC_SEQ 0     /* u64: the record's place in its ring + 1; 0 while being written */
#define REC_IDX 8     /* u16: the function */
#define REC_STATE 10  /* u16: 1 entered, 2 returned */
#define REC_TID 12    /* i32: the thread (a block's ring outlives its threads) */
#define REC_START 16  /* u64: ticks at entry */
#define REC_DUR 24    /* u64: elapsed ticks once returned (the place, while entering) */
#define REC_RESULT 32 /* u64: rax at the return (the caller's rax, while entering) */
#define REC_ARGS 40   /* u64[11]: rdi, rsi, rdx, rcx, r8, r9, then 5 stack words */
/* u64, the argument word SHIMGEN_CALLS_UNREAD_WORD of a function with captures: bit k, its
 * k-th capture could not be read; all ones while its captures at entry are being read */
#define REC_UNREAD (REC_ARGS + 8 * SHIMGEN_CALLS_UNREAD_WORD)
#define REC_SHIFT 8   /* log2 of SHIMGEN_CALLS_RECORD_SIZE */
/* u64 right before a block's ring (struct ring_ctl, stats/calls.c): the places below it have
 * disk space; calls.S asks calls.c to grow the ring's part of the file for any other. */
#define RING_ROOM (-8)
#define REC_ENTERED 1
#define REC_RETURNED 2
/* A function's info (calls_table.c, 16 bits): stack words to keep; captures at entry (C);
 * captures after a successful return (C); or its one output a word that calls.S copies
 * itself (8 bytes, else 4) from the pointer in argument word (info >> 8) to the capture
 * area's start. */
#define CALLS_INFO_STACK 7
#define CALLS_INFO_ENTRY 8
#define CALLS_INFO_EXIT 16
#define CALLS_INFO_WORD 32
#define CALLS_INFO_WORD8 64
#define CALLS_INFO_SLOT_SHIFT 8
/* struct tstats's tid (block.h; checked in calls.c) */
#define TS_TID (TS_NEXT + 12)

#endif
