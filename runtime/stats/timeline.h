/*
 * timeline.h: SHIMGEN_TRACE=timeline (timeline.c): each thread's ring of timed calls, kept
 * when its thread exits, written at exit as a Chrome/Perfetto trace.
 */
#ifndef SHIMGEN_TIMELINE_H
#define SHIMGEN_TIMELINE_H

struct tstats;

void shimgen_timeline_ring(struct tstats *s); /* async-signal-safe (mmap) */
void shimgen_timeline_keep(struct tstats *s);
void shimgen_timeline_after_fork(void);
void shimgen_write_timeline(struct tstats *blocks); /* every block of the process */

#endif
