/*
 * trace.c: the trace written at exit (SHIMGEN_TRACE=1, time, timeline), as late as the
 * exit sequence allows (the shim's ELF destructor): the JSON file of SHIMGEN_TRACE_FILE
 * (written whole, through output.c, under the name output_name.c gives it), or a table on
 * stderr, most called first, with each function's percentiles (quantiles.c); and what a
 * forked child resets so that it reports its own calls only (stats.c).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "output/output.h"
#include "quantiles.h"
#include "stats.h"
#include "timeline.h"
#include "totals.h"
#include "tracefile/tracefile.h"

static const char *result_name(uint32_t code)
{
    switch (code) {
#define RESULT_CASE(number, name) case number: return name;
        SHIMGEN_FOR_EACH_RESULT(RESULT_CASE)
#undef RESULT_CASE
    }
    return "unknown";
}

/* The process's error returns, as (function, code, count). */
struct err_entry {
    unsigned fn;
    uint32_t code;
    uint64_t count;
};
static struct err_entry err_list[ERRORS_SLOTS];

static int by_function_then_code(const void *a, const void *b)
{
    const struct err_entry *x = a, *y = b;
    if (x->fn != y->fn)
        return x->fn < y->fn ? -1 : 1;
    return x->code < y->code ? -1 : x->code > y->code;
}

static int by_count(const void *a, const void *b)
{
    const struct err_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return by_function_then_code(a, b);
}

/* How often the process's errors hold `key` (0 when they do not). */
static uint64_t error_count(uint64_t key)
{
    for (unsigned e = 0; e < ERRORS_SLOTS; e++)
        if (__atomic_load_n(&shimgen_errors[e].key, __ATOMIC_RELAXED) == key)
            return __atomic_load_n(&shimgen_errors[e].count, __ATOMIC_RELAXED);
    return 0;
}

/* The driver's own error returns (injected 0: the returns counted less the injected ones
 * among them, docs/traceformat.md), or the injected failures (injected 1). */
static unsigned gather_errors(int (*order)(const void *, const void *), int injected)
{
    unsigned n = 0;
    for (unsigned e = 0; e < ERRORS_SLOTS; e++) {
        uint64_t key = __atomic_load_n(&shimgen_errors[e].key, __ATOMIC_RELAXED);
        uint64_t count = __atomic_load_n(&shimgen_errors[e].count, __ATOMIC_RELAXED);
        uint64_t k = key & ~SHIMGEN_TRACEFILE_ERR_INJECTED;
        if (!key || !count || (k != key) != injected || (k >> 32) - 1 >= SHIMGEN_NFUNCS)
            continue;
        uint64_t inj = injected ? 0 : error_count(key | SHIMGEN_TRACEFILE_ERR_INJECTED);
        if (count > inj)
            err_list[n++] = (struct err_entry){(unsigned)(k >> 32) - 1, (uint32_t)k, count - inj};
    }
    qsort(err_list, n, sizeof err_list[0], order);
    return n;
}

/* "errors" (or "injected"): {"<function>": {"<code>": count, ...}, ...} */
static void write_json_codes(struct shimgen_out *f, const char *name, int injected)
{
    unsigned n = gather_errors(by_function_then_code, injected);
    shimgen_out_printf(f, ",\n  \"%s\": {", name);
    for (unsigned e = 0; e < n; e++) {
        int first_of_fn = e == 0 || err_list[e].fn != err_list[e - 1].fn;
        if (first_of_fn) {
            shimgen_out_printf(f, "%s\n    ", e ? "}," : "");
            shimgen_out_json_str(f, shimgen_names[err_list[e].fn]);
            shimgen_out_printf(f, ": {");
        }
        shimgen_out_printf(f, "%s\"%u\": %llu", first_of_fn ? "" : ", ", err_list[e].code,
                           (unsigned long long)err_list[e].count);
    }
    shimgen_out_printf(f, "%s}", n ? "}\n  " : "");
}

/* "hist": the counts of the function's log2 buckets, up to its last non-zero one; "fine":
 * [bucket, count] of each fine bucket the process's table holds (docs/traceformat.md). */
static void write_json_hist(struct shimgen_out *f, unsigned i)
{
    const uint64_t *h = shimgen_hist[i];
    unsigned last = 0;
    for (unsigned b = 0; b < TS_HIST_BUCKETS; b++)
        if (h[b])
            last = b + 1;
    shimgen_out_printf(f, ", \"hist\": [");
    for (unsigned b = 0; b < last; b++)
        shimgen_out_printf(f, "%s%llu", b ? ", " : "", (unsigned long long)h[b]);
    shimgen_out_printf(f, "], \"fine\": [");
    int first = 1;
    unsigned home = fine_home(i, FINE_PROC_SLOTS_SHIFT);
    for (unsigned b = 0; b < last; b++) {
        if (!h[b])
            continue;
        unsigned lo = fine_first(b), width = fine_end(b) - lo;
        for (unsigned k = 0; k < width + FINE_PROC_PROBES - 1; k++) {
            const struct finepair *e = &shimgen_fine[(home + lo + k) & (FINE_PROC_SLOTS - 1)];
            if (fine_key_in(e->key, i, b) && e->count) {
                shimgen_out_printf(f, "%s[%u, %llu]", first ? "" : ", ",
                                   fine_key_bucket(e->key),
                                   (unsigned long long)e->count);
                first = 0;
            }
        }
    }
    shimgen_out_printf(f, "]");
}

/* The JSON trace's fields up to its "calls": the shim, the driver, the mode, the process. */
static void write_json_head(struct shimgen_out *f)
{
    shimgen_out_printf(f, "{\n  \"shimgen\": ");
    shimgen_out_json_str(f, SHIMGEN_VERSION);
    shimgen_out_printf(f, ",\n  \"driver\": ");
    shimgen_out_json_str(f, shimgen_cfg.driver_path);
    shimgen_out_printf(f, ",\n  \"driver_version\": ");
    shimgen_out_json_str(f, shimgen_loaded_version);
    shimgen_out_printf(f, ",\n  \"shim_driver_version\": ");
    shimgen_out_json_str(f, SHIMGEN_DRIVER_VERSION);
    shimgen_out_printf(f, ",\n  \"build_id\": ");
    shimgen_out_json_str(f, SHIMGEN_DRIVER_BUILD_ID);
    shimgen_out_printf(f, ",\n  \"loaded_build_id\": ");
    shimgen_out_json_str(f, shimgen_loaded_build_id);
    shimgen_out_printf(f, ",\n  \"mode\": \"%s\",\n  \"rank\": ",
                       shimgen_cfg.timeline              ? SHIMGEN_TRACE_NAME_TIMELINE
                       : shimgen_cfg.trace == TRACE_TIME ? SHIMGEN_TRACE_NAME_TIME
                                                         : SHIMGEN_TRACE_NAME_COUNTS);
    if (shimgen_cfg.rank[0])
        shimgen_out_json_str(f, shimgen_cfg.rank);
    else
        shimgen_out_printf(f, "null");
    shimgen_out_printf(f, ",\n  \"pid\": %ld,\n  \"unmapped_proc_addresses\": %llu",
                       (long)getpid(),
                       (unsigned long long)__atomic_load_n(&shimgen_unmapped_proc_addresses,
                                                           __ATOMIC_RELAXED));
}

/* One word of function i's totals in the JSON, by its unit (a count as it is, ticks as ns;
 * k: ns per tick), then ", " (the derived keys follow). */
#define JSON_WORD(word, fold, unit, key) \
    shimgen_out_printf(f, "\"" key "\": "); \
    JSON_##unit(f, FTOTAL_##fold(i, word), k); \
    shimgen_out_printf(f, ", ");
#define JSON_CALLS(f, v, k) shimgen_out_printf(f, "%llu", (unsigned long long)(v))
#define JSON_TICKS(f, v, k) shimgen_out_printf(f, "%.0f", (double)(v) * (k))

/* SHIMGEN_TRACE=time: the times, the errors and each function's latency, in ns. */
static void write_json_times(struct shimgen_out *f)
{
    double k = shimgen_ns_per_tick();
    shimgen_out_printf(f, ",\n  \"ns_per_tick\": %.9g,\n  \"untimed_calls\": %llu", k,
                       (unsigned long long)shimgen_untimed_calls);
    write_json_codes(f, "errors", 0);
    shimgen_out_printf(f, ",\n  \"error_overflow\": %llu",
                       (unsigned long long)shimgen_error_overflow);
    shimgen_out_printf(f, ",\n  \"time\": {");
    int first = 1;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        uint64_t c = shimgen_counts[i];
        if (!c)
            continue;
        shimgen_out_printf(f, "%s\n    ", first ? "" : ",");
        shimgen_out_json_str(f, shimgen_names[i]);
        double p[3];
        shimgen_function_quantiles(i, p);
        shimgen_out_printf(f, ": {");
        SHIMGEN_FSTATS_JSON(JSON_WORD)
        shimgen_out_printf(f, "\"mean_ns\": %.1f, \"p50_ns\": %.1f, \"p90_ns\": %.1f, "
                              "\"p99_ns\": %.1f",
                           FTOTAL_SUM(i, total) * k / (double)c, p[0] * k, p[1] * k, p[2] * k);
        write_json_hist(f, i);
        shimgen_out_printf(f, "}");
        first = 0;
    }
    shimgen_out_printf(f, "%s}", first ? "" : "\n  ");
}

/* SHIMGEN_TRACE_FILE: the counts (and times) as JSON. 0 when it is written, 1 when its
 * name is too long (the table is written instead), -1 otherwise. */
static int write_json(void)
{
    int too_long;
    struct shimgen_out *f = shimgen_open_output(shimgen_cfg.trace_file, "trace file", &too_long);
    if (!f)
        return too_long ? 1 : -1;
    write_json_head(f);
    shimgen_out_printf(f, ",\n  \"calls\": {");
    int first = 1;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        uint64_t c = __atomic_load_n(&shimgen_counts[i], __ATOMIC_RELAXED);
        if (!c)
            continue;
        shimgen_out_printf(f, "%s\n    ", first ? "" : ",");
        shimgen_out_json_str(f, shimgen_names[i]);
        shimgen_out_printf(f, ": %llu", (unsigned long long)c);
        first = 0;
    }
    shimgen_out_printf(f, "%s}", first ? "" : "\n  ");
    write_json_codes(f, "injected", 1);
    if (shimgen_cfg.trace == TRACE_TIME)
        write_json_times(f);
    shimgen_out_printf(f, "\n}\n");
    char path[PATH_MAX];
    if (shimgen_out_close(f, path, sizeof path) != 0)
        return -1;
    shimgen_say("shimgen: trace written to %s\n", path);
    return 0;
}

/* The `n` entries of err_list gathered, under `title`, in `shimgen report`'s columns and
 * order (report/format.py): function, code, name, count. */
static void write_codes(const char *title, unsigned n)
{
    int width = (int)strlen("function");
    for (unsigned e = 0; e < n; e++) {
        int w = (int)strlen(shimgen_names[err_list[e].fn]);
        width = w > width ? w : width;
    }
    fprintf(stderr, "%s (pid %ld):\n%-*s  %5s  %-40s %12s\n", title, (long)getpid(), width,
            "function", "code", "name", "count");
    for (unsigned e = 0; e < n; e++)
        fprintf(stderr, "%-*s  %5u  %-40s %12llu\n", width, shimgen_names[err_list[e].fn],
                err_list[e].code, result_name(err_list[e].code),
                (unsigned long long)err_list[e].count);
}

/* SHIMGEN_TRACE=time: the table's rows, in `order`, with times; the errors returned. */
static void write_table_times(const unsigned *order, unsigned n)
{
    double k = shimgen_ns_per_tick();
    fprintf(stderr, "%14s  %14s  %12s  %12s  %12s  %12s  %12s  %s\n", "calls", "total ms",
            "mean ns", "p50 ns", "p90 ns", "p99 ns", "max ns", "function");
    for (unsigned i = 0; i < n; i++) {
        unsigned x = order[i];
        double p[3];
        shimgen_function_quantiles(x, p);
        fprintf(stderr, "%14llu  %14.3f  %12.0f  %12.0f  %12.0f  %12.0f  %12.0f  %s\n",
                (unsigned long long)shimgen_counts[x], FTOTAL_SUM(x, total) * k / 1e6,
                FTOTAL_SUM(x, total) * k / (double)shimgen_counts[x], p[0] * k, p[1] * k,
                p[2] * k, FTOTAL_MAX(x, max) * k, shimgen_names[x]);
    }
    unsigned ne = gather_errors(by_count, 0);
    if (ne || shimgen_error_overflow)
        write_codes("shimgen errors returned", ne);
    if (shimgen_error_overflow)
        fprintf(stderr, "%14llu  (error returns not kept: too many distinct codes)\n",
                (unsigned long long)shimgen_error_overflow);
    uint64_t blockless = __atomic_load_n(&shimgen_blockless_calls, __ATOMIC_RELAXED);
    uint64_t full = shimgen_untimed_calls > blockless ? shimgen_untimed_calls - blockless : 0;
    if (blockless)
        fprintf(stderr, "%14llu  (calls counted but not timed: their thread got no block, no "
                "room on the trace's disk or no memory)\n", (unsigned long long)blockless);
    if (full)
        fprintf(stderr, "%14llu  (calls counted but not timed: shadow stack full)\n",
                (unsigned long long)full);
}

/* Without SHIMGEN_TRACE_FILE: a table on stderr, most called first. */
static void write_table(void)
{
    static unsigned order[SHIMGEN_NFUNCS];
    unsigned n = 0;
    uint64_t total = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        if (__atomic_load_n(&shimgen_counts[i], __ATOMIC_RELAXED)) {
            order[n++] = i;
            total += shimgen_counts[i];
        }
    }
    for (unsigned i = 1; i < n; i++) { /* insertion sort: n is at most a few hundred */
        unsigned x = order[i], j = i;
        while (j > 0 && shimgen_counts[order[j - 1]] < shimgen_counts[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    fprintf(stderr, "shimgen trace (pid %ld, libcuda %s): %llu calls to %u functions\n",
            (long)getpid(), shimgen_loaded_version, (unsigned long long)total, n);
    if (shimgen_cfg.trace == TRACE_TIME)
        write_table_times(order, n);
    else {
        fprintf(stderr, "%14s  %s\n", "calls", "function");
        for (unsigned i = 0; i < n; i++)
            fprintf(stderr, "%14llu  %s\n", (unsigned long long)shimgen_counts[order[i]],
                    shimgen_names[order[i]]);
    }
    unsigned ni = gather_errors(by_count, 1);
    if (ni)
        write_codes("shimgen injected failures (SHIMGEN_INJECT)", ni);
    if (shimgen_unmapped_proc_addresses)
        fprintf(stderr, "%14llu  (cuGetProcAddress answers that are no export, passed through)\n",
                (unsigned long long)shimgen_unmapped_proc_addresses);
}

static void write_trace(void)
{
    shimgen_collect_stats();
    if (shimgen_cfg.timeline)
        shimgen_write_timeline(shimgen_live_blocks);
    /* With SHIMGEN_TRACE_DIR the file is the record (`shimgen report` prints it): no table,
     * unless the file could not be made or could not take every call (a full disk). */
    int in_file = shimgen_tracefile_ready() && !shimgen_calls_missing;
    if (shimgen_cfg.trace_file[0] ? write_json() == 1 && !in_file : !in_file)
        write_table();
}

static int trace_started;
static int fork_ready; /* shimgen_trace_start ran (at the first call, before the load) */

/* A forked child (fork.c, last): its own counts and file. */
void shimgen_trace_after_fork(void)
{
    if (!__atomic_load_n(&fork_ready, __ATOMIC_ACQUIRE))
        return;
    shimgen_unmapped_proc_addresses = 0;
    shimgen_stats_after_fork();
}

/* The trace is written by the shim's ELF destructor, which glibc runs (from _dl_fini) after
 * every atexit handler and C++ static destructor of the process, whenever they were
 * registered: calls made from those are in the trace. It runs after the program's own
 * ELF destructors and those of libraries that depend on the shim (a program linked with
 * -lcuda); _exit and a fatal signal run none of this. The shim is never unloaded
 * (-z nodelete), so dlclose does not run it early. */
__attribute__((destructor)) static void trace_at_exit(void)
{
    if (__atomic_load_n(&trace_started, __ATOMIC_ACQUIRE))
        write_trace();
}

/* Once the driver is loaded: write the trace at exit; reset it in forked children. */
void shimgen_trace_start(void)
{
    if (shimgen_cfg.trace != TRACE_OFF)
        __atomic_store_n(&trace_started, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&fork_ready, 1, __ATOMIC_RELEASE);
}
