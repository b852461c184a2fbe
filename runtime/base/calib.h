/*
 * calib.h: ticks of the time-stamp counter to nanoseconds (calib.c): readings of both
 * clocks, the one taken when the driver is loaded, and the process's rate.
 */
#ifndef SHIMGEN_CALIB_H
#define SHIMGEN_CALIB_H

#include <stdint.h>

/* One reading of both clocks: the CLOCK_MONOTONIC time `ns` read between two rdtsc, `ticks`
 * their midpoint, `width` the ticks between them (the pair's uncertainty); the narrowest of
 * a few tries. Async-signal-safe. */
struct shimgen_calib {
    uint64_t ticks, ns, width;
};
void shimgen_calib_read(struct shimgen_calib *c);
/* A reading far enough after `start` that the two pairs' widths are under CALIB_PARTS of
 * the span between them, or CALIB_MAX_NS after it at most (it waits, spinning). */
#define CALIB_PARTS 4000u
#define CALIB_MAX_NS 2000000u
void shimgen_calib_after(const struct shimgen_calib *start, struct shimgen_calib *end);
int shimgen_calib_better(const struct shimgen_calib *start, const struct shimgen_calib *a,
                         const struct shimgen_calib *b);

void shimgen_calib_start(void); /* when the driver is loaded */
extern uint64_t shimgen_tsc_start; /* ticks then: the zero of the timeline */
double shimgen_ns_per_tick(void);

#endif
