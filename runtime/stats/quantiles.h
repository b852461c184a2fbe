/*
 * quantiles.h: a function's latency percentiles (quantiles.c), for the trace at exit.
 */
#ifndef SHIMGEN_QUANTILES_H
#define SHIMGEN_QUANTILES_H

/* p50, p90 and p99 of function i, in ticks, from the process's totals (0: no timed call). */
void shimgen_function_quantiles(unsigned i, double out[3]);

#endif
