/*
 * tracefile.h: the binary trace file of SHIMGEN_TRACE_DIR (docs/traceformat.md) as the rest
 * of the runtime uses it (tracefile.c): a thread's block mapped from the file, the file as
 * the record of the trace, the header finished at exit, a forked child's blocks moved onto
 * its own file. The header's layout is tracefile_header.h; the blocks are struct tstats
 * (block.h, layout.h).
 */
#ifndef SHIMGEN_TRACEFILE_H
#define SHIMGEN_TRACEFILE_H

#include <stdint.h>

struct tstats;

/* The file made at a thread's first traced call, blocks added to it, the header finished
 * at exit, a forked child's blocks moved onto its own. */
void *shimgen_tracefile_block(int *anon); /* async-signal-safe */
int shimgen_tracefile_ready(void);        /* this process's file is the record */
void shimgen_tracefile_missed(uint64_t n); /* calls counted in no block: in the header */
int shimgen_tracefile_finish(uint64_t calls_missing);
extern uint64_t shimgen_calls_missing; /* at exit: calls the trace file could not take */
void shimgen_tracefile_after_fork(struct tstats *blocks); /* every block of the process */

#endif
