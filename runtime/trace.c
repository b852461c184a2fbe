/*
 * trace.c: the trace written at exit (SHIMGEN_TRACE=1, time, timeline): the JSON file of
 * SHIMGEN_TRACE_FILE, or a table on stderr, most called first; the output file names
 * (%p, %r, and the name each process of a job writes); and what a forked child resets so
 * that it reports its own calls only.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats.h"

/* The processes of a job other than the first one to load the shim, which owns names
 * without %p or %r. */
static int derived_name(const char *pattern)
{
    return shimgen_shared_name(pattern) &&
           (shimgen_cfg.trace_file_shared || getpid() != shimgen_cfg.load_pid);
}

static void trace_path(const char *pattern, char *out, size_t cap)
{
    /* In SHIMGEN_TRACE_FILE (and SHIMGEN_TIMELINE_FILE), "%p" becomes the process id and
     * "%r" the rank (or "p<pid>" in a process that has none, such as a launcher). A name
     * with neither is owned by the first process of the job; any other process appends
     * ".<pid>". */
    int suffix = derived_name(pattern);
    size_t o = 0;
    for (const char *s = pattern; *s && o + 24 < cap; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%ld", (long)getpid());
            s++;
        } else if (s[0] == '%' && s[1] == 'r') {
            if (shimgen_cfg.rank[0])
                o += (size_t)snprintf(out + o, cap - o, "%s", shimgen_cfg.rank);
            else
                o += (size_t)snprintf(out + o, cap - o, "p%ld", (long)getpid());
            s++;
        } else
            out[o++] = *s;
    }
    out[o] = '\0';
    if (suffix)
        snprintf(out + o, cap - o, ".%ld", (long)getpid());
}

/* Open an output file named by `pattern` (%p, %r): no symbolic link followed, no FIFO
 * waited on, and a derived name (another process's) never truncates a file that exists.
 * NULL, said once on stderr, when it cannot be written. */
FILE *shimgen_open_output(const char *pattern, const char *what, char *path, size_t cap)
{
    trace_path(pattern, path, cap);
    if (getuid() != geteuid() || getgid() != getegid()) {
        shimgen_say("shimgen: not writing %s %s: set-user-ID or set-group-ID process\n", what,
                    path);
        return NULL;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK |
                            (derived_name(pattern) ? O_EXCL : O_TRUNC), 0644);
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        shimgen_say("shimgen: cannot write %s %s: %s\n", what, path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* SHIMGEN_TRACE_FILE: the counts (and times) as JSON. */
static void write_json(void)
{
    char path[PATH_MAX];
    FILE *f = shimgen_open_output(shimgen_cfg.trace_file, "trace file", path, sizeof path);
    if (!f)
        return;
    fprintf(f, "{\n  \"shimgen\": \"%s\",\n  \"driver\": \"%s\",\n"
               "  \"driver_version\": \"%s\",\n  \"build_id\": \"%s\",\n"
               "  \"loaded_build_id\": \"%s\",\n  \"pid\": %ld,\n"
               "  \"unmapped_proc_addresses\": %llu,\n  \"calls\": {",
            SHIMGEN_VERSION, shimgen_cfg.driver_path, SHIMGEN_DRIVER_VERSION,
            SHIMGEN_DRIVER_BUILD_ID, shimgen_loaded_build_id, (long)getpid(),
            (unsigned long long)__atomic_load_n(&shimgen_unmapped_proc_addresses,
                                                __ATOMIC_RELAXED));
    int first = 1;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        uint64_t c = __atomic_load_n(&shimgen_counts[i], __ATOMIC_RELAXED);
        if (!c)
            continue;
        fprintf(f, "%s\n    \"%s\": %llu", first ? "" : ",", shimgen_names[i],
                (unsigned long long)c);
        first = 0;
    }
    fprintf(f, "%s}", first ? "" : "\n  ");
    if (shimgen_cfg.trace == TRACE_TIME) {
        double k = shimgen_ns_per_tick();
        fprintf(f, ",\n  \"untimed_calls\": %llu,\n  \"time\": {",
                (unsigned long long)shimgen_untimed_calls);
        first = 1;
        for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
            uint64_t c = shimgen_counts[i];
            if (!c)
                continue;
            fprintf(f, "%s\n    \"%s\": {\"calls\": %llu, \"total_ns\": %.0f, "
                       "\"mean_ns\": %.1f, \"max_ns\": %.0f}",
                    first ? "" : ",", shimgen_names[i], (unsigned long long)c,
                    shimgen_time_total[i] * k, shimgen_time_total[i] * k / (double)c,
                    shimgen_time_max[i] * k);
            first = 0;
        }
        fprintf(f, "%s}", first ? "" : "\n  ");
    }
    fprintf(f, "\n}\n");
    fclose(f);
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
            (long)getpid(), SHIMGEN_DRIVER_VERSION, (unsigned long long)total, n);
    if (shimgen_cfg.trace == TRACE_TIME) {
        double k = shimgen_ns_per_tick();
        fprintf(stderr, "%14s  %14s  %12s  %12s  %s\n", "calls", "total ms", "mean ns",
                "max ns", "function");
        for (unsigned i = 0; i < n; i++) {
            unsigned x = order[i];
            fprintf(stderr, "%14llu  %14.3f  %12.1f  %12.0f  %s\n",
                    (unsigned long long)shimgen_counts[x], shimgen_time_total[x] * k / 1e6,
                    shimgen_time_total[x] * k / (double)shimgen_counts[x],
                    shimgen_time_max[x] * k, shimgen_names[x]);
        }
        if (shimgen_untimed_calls)
            fprintf(stderr, "%14llu  (calls counted but not timed: shadow stack full)\n",
                    (unsigned long long)shimgen_untimed_calls);
    } else {
        fprintf(stderr, "%14s  %s\n", "calls", "function");
        for (unsigned i = 0; i < n; i++)
            fprintf(stderr, "%14llu  %s\n", (unsigned long long)shimgen_counts[order[i]],
                    shimgen_names[order[i]]);
    }
    if (shimgen_unmapped_proc_addresses)
        fprintf(stderr, "%14llu  (cuGetProcAddress answers that are no export, passed through)\n",
                (unsigned long long)shimgen_unmapped_proc_addresses);
}

static void write_trace(void)
{
    if (shimgen_cfg.trace == TRACE_OFF)
        return;
    shimgen_collect_stats();
    if (shimgen_cfg.timeline)
        shimgen_write_timeline();
    if (shimgen_cfg.trace_file[0])
        write_json();
    else
        write_table();
}

static void after_fork_child(void)
{
    shimgen_unmapped_proc_addresses = 0;
    shimgen_stats_after_fork();
}

/* Once the driver is loaded: write the trace at exit; reset it in forked children. */
void shimgen_trace_start(void)
{
    if (shimgen_cfg.trace != TRACE_OFF)
        atexit(write_trace);
    pthread_atfork(NULL, NULL, after_fork_child);
}
