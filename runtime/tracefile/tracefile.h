/*
 * tracefile.h: the binary trace file of SHIMGEN_TRACE_DIR (docs/traceformat.md) as the rest
 * of the runtime uses it (tracefile.c): a thread's block mapped from the file, the file as
 * the record of the trace, the header finished at exit, a forked child's blocks moved onto
 * its own file. The header's layout is tracefile/header.h; the blocks are struct tstats
 * (block.h, layout.h).
 */
#ifndef SHIMGEN_TRACEFILE_H
#define SHIMGEN_TRACEFILE_H

#include <stdint.h>

#include <stddef.h>

#include "block.h"
#include "header.h"

struct tstats;
struct tf_header;

/* A part of the trace file: what joins it without the file knowing it (the calls ring,
 * the memory ledger). `block_bytes`: bytes every block has after its struct tstats (the
 * stride is the struct rounded up to a page, then each part's bytes in the order joined);
 * `attach`: a new header's fields (after the file's own and the names, before the magic),
 * for blocks `stride` bytes apart; `detach`: a header about to be unmapped (NULL: none);
 * `first_bytes`: of its bytes, those given disk space when a block is made, from the part's
 * start (NULL: all; the part grows the rest itself, as it fills); `placed`: a block of the
 * file made or moved (a forked child's) at file offset `off` (NULL: nothing to do);
 * `header_unused`: bytes [*from, *to) of the header this process will never write (fields
 * of a feature that is off), left without disk space: a hole, read as zeros (NULL: none).
 * Joined at the driver's load, before any block is made; at most SHIMGEN_TF_PARTS. */
struct shimgen_tf_part {
    size_t (*block_bytes)(void);
    void (*attach)(struct tf_header *h, size_t stride);
    void (*detach)(struct tf_header *h);
    size_t (*first_bytes)(void);
    void (*placed)(void *block, uint64_t off);
    void (*header_unused)(size_t *from, size_t *to);
};
#define SHIMGEN_TF_PARTS 4
void shimgen_tracefile_join(const struct shimgen_tf_part *p);
/* The bytes of a block's mapping, in the file or anonymous: every block has this layout. */
size_t shimgen_tracefile_block_bytes(void);

/* The file made at a thread's first traced call, blocks added to it, the header finished
 * at exit, a forked child's blocks moved onto its own. */
void *shimgen_tracefile_block(int *anon); /* async-signal-safe */
int shimgen_tracefile_ready(void);        /* this process's file is the record */
void shimgen_tracefile_missed(uint64_t n); /* calls counted in no block: in the header */
/* Disk space for [off, off + len) of the file, for a part that grows as it fills
 * (async-signal-safe): 0, or -1 (errno). */
int shimgen_tracefile_grow(uint64_t off, uint64_t len);
int shimgen_tracefile_finish(uint64_t calls_missing);
extern uint64_t shimgen_calls_missing; /* at exit: calls the trace file could not take */
void shimgen_tracefile_after_fork(struct tstats *blocks); /* every block of the process */

#endif
