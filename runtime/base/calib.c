/*
 * calib.c: ticks of the time-stamp counter to nanoseconds. A reading of both clocks is the
 * narrowest of a few tries of rdtsc, clock_gettime(CLOCK_MONOTONIC), rdtsc: the ticks
 * between the two rdtsc bound its error. The process's rate is measured from the reading
 * taken when the driver is loaded to one at exit, taken once the two readings' widths are
 * small against the span between them (waiting for it, spinning, in a process younger than
 * that). Async-signal-safe but for shimgen_ns_per_tick (exit).
 */

#define _GNU_SOURCE
#include <time.h>

#include "arch/cpu.h"
#include "calib.h"

uint64_t shimgen_tsc_start;
static struct shimgen_calib calib_start; /* when the driver is loaded */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void shimgen_calib_read(struct shimgen_calib *c)
{
    *c = (struct shimgen_calib){0, 0, UINT64_MAX};
    for (int i = 0; i < 8; i++) {
        uint64_t t0 = shimgen_ticks(), ns = mono_ns(), t1 = shimgen_ticks();
        if (t1 >= t0 && t1 - t0 < c->width)
            *c = (struct shimgen_calib){t0 + (t1 - t0) / 2, ns, t1 - t0};
    }
}

/* Whether reading b, taken after start, gives a narrower relative uncertainty than a. */
int shimgen_calib_better(const struct shimgen_calib *start, const struct shimgen_calib *a,
                         const struct shimgen_calib *b)
{
    if (b->ticks <= start->ticks || b->ns <= start->ns || b->width == UINT64_MAX)
        return 0;
    if (a->ticks <= start->ticks || a->ns <= start->ns || a->width == UINT64_MAX)
        return 1;
    /* (w0 + wb) / span_b < (w0 + wa) / span_a, in long double: the products exceed 64 bits */
    long double ub = (long double)(start->width + b->width) / (long double)(b->ticks - start->ticks);
    long double ua = (long double)(start->width + a->width) / (long double)(a->ticks - start->ticks);
    return ub < ua;
}

void shimgen_calib_after(const struct shimgen_calib *start, struct shimgen_calib *end)
{
    for (unsigned tries = 0;; tries++) {
        shimgen_calib_read(end);
        if (tries == 100000)
            return; /* (a clock that never moves on: the caller checks the pair) */
        if (end->width == UINT64_MAX || end->ns < start->ns)
            continue; /* (each try stepped back: not a reading) */
        uint64_t span = end->ticks > start->ticks ? end->ticks - start->ticks : 0;
        uint64_t widths = start->width == UINT64_MAX ? UINT64_MAX / CALIB_PARTS
                                                     : start->width + end->width;
        if ((span && widths <= span / CALIB_PARTS) || end->ns - start->ns >= CALIB_MAX_NS)
            return;
    }
}

/* Nanoseconds per TSC tick, from the reading at the driver's load to one at exit (taken
 * late enough to be exact to a part in CALIB_PARTS, waiting up to CALIB_MAX_NS for it in a
 * process that lived less); once, the same for the trace and the timeline. */
double shimgen_ns_per_tick(void)
{
    static double k;
    if (k)
        return k;
    struct shimgen_calib end;
    shimgen_calib_after(&calib_start, &end);
    if (end.ticks <= calib_start.ticks || end.ns <= calib_start.ns)
        return 0.0;
    k = (double)(end.ns - calib_start.ns) / (double)(end.ticks - calib_start.ticks);
    return k;
}

void shimgen_calib_start(void)
{
    shimgen_calib_read(&calib_start);
    shimgen_tsc_start = calib_start.ticks;
}
