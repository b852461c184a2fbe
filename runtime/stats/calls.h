/*
 * calls.h: SHIMGEN_TRACE=calls, a call record as C sees it (what calls.S writes, what
 * shimgen/calls/records.py reads; docs/traceformat.md) and what calls.c offers the rest of
 * the runtime. The offsets are arch/layout.h's #defines (calls.S reads them), checked
 * against the struct in calls.c.
 */
#ifndef SHIMGEN_CALLS_H
#define SHIMGEN_CALLS_H

#include "facts.h"
#include "arch/layout.h"

/* The record's byte layout (REC_*, CALLS_INFO_*): arch/layout.h, which calls.S reads. */

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
    uint8_t kind; /* SHIMGEN_CALLS_CAPTURE_* | an output's SHIMGEN_CALLS_CAPTURE_FLAG_* */
    uint16_t size, off;
};
extern const uint64_t shimgen_calls_table_digest;
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
/* calls.S: disk space in the trace file for the ring up to `place` (or the ring made to keep
 * what it has room for): a place at or above the ring's room (layout.h RING_ROOM). */
void shimgen_calls_grow(struct tstats *s, uint64_t place);
#endif
#endif
