/*
 * quantiles.c: a function's latency percentiles for the trace at exit (trace.c), from the
 * process's log2 and fine histograms (totals.h): its calls as ranges of ticks, and the
 * quantiles of those as `shimgen report` computes them (docs/report.md).
 */

#include "quantiles.h"
#include "totals.h"

/* A function's latency distribution as ranges of ticks, in order: per non-empty log2
 * bucket b, its fine buckets when the process's fine table holds every call of b, else b's
 * own range (bucket 0: [0, 2) ticks; bucket b: [2^b, 2^(b+1))). docs/traceformat.md. */
struct seg {
    uint64_t lo, hi, n;
};
#define MAX_SEGS (TS_HIST_BUCKETS << TS_FINE_SUB_SHIFT)
static struct seg segs[MAX_SEGS];

static unsigned function_segments(unsigned i, struct seg *out)
{
    const uint64_t *h = shimgen_hist[i];
    unsigned n = 0, home = fine_home(i, FINE_PROC_SLOTS_SHIFT);
    for (unsigned b = 0; b < TS_HIST_BUCKETS; b++) {
        if (!h[b])
            continue;
        unsigned first = fine_first(b), width = fine_end(b) - first;
        uint64_t per[1u << TS_FINE_SUB_SHIFT] = {0}, sum = 0;
        for (unsigned k = 0; k < width + FINE_PROC_PROBES - 1; k++) {
            const struct finepair *e = &shimgen_fine[(home + first + k) & (FINE_PROC_SLOTS - 1)];
            uint64_t key = __atomic_load_n(&e->key, __ATOMIC_RELAXED);
            if (fine_key_in(key, i, b)) {
                uint64_t c = __atomic_load_n(&e->count, __ATOMIC_RELAXED);
                per[fine_key_bucket(key) - first] += c;
                sum += c;
            }
        }
        if (sum == h[b]) {
            for (unsigned f = 0; f < width; f++)
                if (per[f])
                    out[n++] = (struct seg){fine_lo(first + f), fine_hi(first + f), per[f]};
        } else
            out[n++] = (struct seg){b ? 1ull << b : 0, b < 63 ? 2ull << b : UINT64_MAX, h[b]};
    }
    return n;
}

/* The q-quantile (0 < q <= 1) of `n` ranges, in ticks, as docs/report.md defines it (the
 * same as `shimgen report`, shimgen/report/main.py percentiles): each range's calls spread
 * evenly over it, the top range ending at the maximum `max` (never below its lower edge);
 * the value below which q * calls of the calls lie. 0 for no calls. */
static double quantile_ticks(const struct seg *s, unsigned n, double q, double max)
{
    double total = 0.0, below = 0.0;
    for (unsigned k = 0; k < n; k++)
        total += (double)s[k].n;
    if (!n || total <= 0.0)
        return 0.0;
    double want = q * total;
    for (unsigned k = 0; k < n; k++) {
        double lo = (double)s[k].lo, hi = (double)s[k].hi;
        if (k == n - 1)
            hi = max < lo ? lo : max < hi ? max : hi;
        if (below + (double)s[k].n >= want)
            return lo + (hi - lo) * (want - below) / (double)s[k].n;
        below += (double)s[k].n;
    }
    return 0.0;
}

/* p50, p90 and p99 of function i, in ticks, within the values its calls can have (as
 * `shimgen report`'s bounded_percentiles, shimgen/report/model.py): none above the maximum,
 * none below the total less every other call at the maximum; one call is the maximum, two
 * are the maximum and the total less it, each percentile the call of rank ceil(q * calls). */
void shimgen_function_quantiles(unsigned i, double out[3])
{
    static const double qs[3] = {0.5, 0.9, 0.99};
    unsigned n = function_segments(i, segs);
    uint64_t calls = 0;
    for (unsigned b = 0; b < TS_HIST_BUCKETS; b++)
        calls += shimgen_hist[i][b];
    double top = (double)FTOTAL_MAX(i, max);
    double low = (double)FTOTAL_SUM(i, total) - (double)(calls ? calls - 1 : 0) * top;
    low = low < 0.0 ? 0.0 : low > top ? top : low;
    for (int k = 0; k < 3; k++) {
        double p = quantile_ticks(segs, n, qs[k], top);
        if (calls == 1)
            p = top;
        else if (calls == 2)
            p = qs[k] * 2.0 <= 1.0 ? low : top;
        else if (calls)
            p = p < low ? low : p > top ? top : p;
        out[k] = p;
    }
}
