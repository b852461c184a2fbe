/*
 * calls.h: SHIMGEN_TRACE=calls, a call record's layout (what calls.S writes, what
 * shimgen/calls/records.py reads; docs/traceformat.md) and what calls.c offers the rest of
 * the runtime. Included by calls.S too: the offsets are #defines, checked against the
 * struct in calls.c.
 */
#ifndef SHIMGEN_CALLS_H
#define SHIMGEN_CALLS_H

#include "facts.h"

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

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

struct calls_record {
    uint64_t seq;
    uint16_t idx, state;
    int32_t tid;
    uint64_t start, dur, result;
    uint64_t args[6 + SHIMGEN_CALLS_STACK_ARGS];
    unsigned char capture[SHIMGEN_CALLS_RECORD_SIZE - SHIMGEN_CALLS_CAPTURE_OFF];
};

/* The capture table (calls_table.c, rendered from shimgen/calls/model.py). */
struct calls_capture {
    uint16_t fn;
    uint8_t slot; /* the argument word (0-5 registers, 6-10 stack) */
    uint8_t kind; /* SHIMGEN_CALLS_CAPTURE_*; 0x80: a string (an output's) */
    uint16_t size, off;
};
extern const uint16_t shimgen_calls_info[];
extern const uint16_t shimgen_calls_first[];
extern const struct calls_capture shimgen_calls_captures[];
/* calls.S; where calls mode is not supported (SHIMGEN_ARCH_CALLS 0: config.c turns it
 * off), the architecture's timing.S names its timing stubs and return so */
extern void *const shimgen_calls_stubs[];
extern char shimgen_calls_return[];
#define SHIMGEN_CALLS_STUB(i) shimgen_calls_stubs[i]

struct tstats;
/* calls.c: the ring joins the trace file's blocks (at the driver's load, in calls mode); a
 * new block's ring. */
void shimgen_calls_join(void);
void shimgen_calls_ring(struct tstats *s);
#endif
#endif
