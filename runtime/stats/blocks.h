/*
 * blocks.h: the blocks' life (stats.c) as the first-call paths (first.c) take it, inner to
 * stats/. Declared hidden, as the build makes every definition.
 */
#ifndef SHIMGEN_STATS_BLOCKS_H
#define SHIMGEN_STATS_BLOCKS_H

#include "tracefile/tracefile.h"

#pragma GCC visibility push(hidden)
/* The calling thread's block, got at its first traced call; NULL when none can be.
 * Async-signal-safe: no lock, no malloc (stats.c says how). */
struct tstats *stats_block(void);
/* is_free[k]: frame k of s is on its free list; 0 when the list changed while read. */
int mark_free_frames(const struct tstats *s, unsigned char is_free[SHADOW_DEPTH]);
#pragma GCC visibility pop

#endif
