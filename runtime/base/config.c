/*
 * config.c: the shim's configuration, read once from SHIMGEN_* when the shim is loaded
 * (a constructor; or at the first call that comes earlier): trace mode and files, the
 * timeline's and the calls ring's sizes, attribute overrides, gates, the job rank and stamp (SHIMGEN_TRACE_JOB), the
 * fault injection rules (SHIMGEN_INJECT, parsed by inject.c), and where the shim itself lives.
 * The one way the runtime says something, and the run directory's files, are in say.c.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

struct shimgen_config shimgen_cfg;
int shimgen_attr_trace;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
#define OVERRIDES_MAX (sizeof shimgen_cfg.overrides / sizeof shimgen_cfg.overrides[0])

static void parse_trace(const char *v)
{
    char buf[128];
    shimgen_copy_str(buf, sizeof buf, v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "0") == 0)
            continue;
        if (strcmp(t, "1") == 0 || strcmp(t, SHIMGEN_TRACE_NAME_COUNTS) == 0) {
            if (shimgen_cfg.trace == TRACE_OFF)
                shimgen_cfg.trace = TRACE_COUNTS;
        } else if (strcmp(t, SHIMGEN_TRACE_NAME_TIME) == 0)
            shimgen_cfg.trace = TRACE_TIME;
        else if (strcmp(t, SHIMGEN_TRACE_NAME_TIMELINE) == 0) {
            shimgen_cfg.trace = TRACE_TIME;
            shimgen_cfg.timeline = 1;
        } else if (strcmp(t, SHIMGEN_TRACE_NAME_CALLS) == 0) {
            shimgen_cfg.trace = TRACE_TIME;
            shimgen_cfg.calls = 1;
        } else if (strcmp(t, "attrs") == 0)
            shimgen_attr_trace = 1;
        else
            shimgen_say("shimgen: SHIMGEN_TRACE=%s: '%s' is not a known mode (use 1, counts, time, "
                "timeline, calls, attrs); ignored\n", v, t);
    }
}

#define TIMELINE_EVENTS_DEFAULT 65536ul   /* per thread: 1 MiB */
#define TIMELINE_EVENTS_MIN 1024ul
#define TIMELINE_EVENTS_MAX (1ul << 24)   /* per thread: 256 MiB */

/* A per-thread ring's size (SHIMGEN_TIMELINE_EVENTS, SHIMGEN_CALLS_RING: the most recent
 * events or records kept), rounded up to a power of two; `dflt` when not a number in
 * range (said). */
static unsigned long parse_ring(const char *var, const char *v, unsigned long lo,
                                unsigned long hi, unsigned long dflt)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || !end || *end || *v == '-' || n < lo || n > hi) {
        shimgen_say("shimgen: %s=%s is not a number from %lu to %lu; using %lu\n", var, v, lo,
                    hi, dflt);
        return dflt;
    }
    unsigned long p = lo;
    while (p < n)
        p <<= 1;
    return p;
}

/* SHIMGEN_TRACE_DIR, SHIMGEN_NOTICE_FILE: made absolute here (the program may change its
 * working directory before its first call); a name that does not fit is refused. */
static void parse_abs_name(const char *var, const char *v, char dst[PATH_MAX])
{
    char cwd[PATH_MAX];
    size_t n = strlen(v), c = 0;
    if (v[0] != '/') {
        if (!getcwd(cwd, sizeof cwd)) {
            shimgen_say("shimgen: %s=%s: cannot resolve a relative name (%s); ignored\n", var,
                        v, strerror(errno));
            return;
        }
        c = strlen(cwd);
    }
    if (c + 1 + n >= PATH_MAX) {
        shimgen_say("shimgen: %s is longer than the %d bytes a path may have; ignored\n", var,
                    PATH_MAX - 1);
        return;
    }
    if (c) {
        memcpy(dst, cwd, c);
        dst[c++] = '/';
    }
    memcpy(dst + c, v, n + 1);
}

/* SHIMGEN_TRACE_FILE, SHIMGEN_TIMELINE_FILE: a name that does not fit is refused, never
 * cut short (the shorter name would be another file). */
static void parse_file_name(const char *var, const char *v, char dst[PATH_MAX],
                            const char *instead)
{
    size_t n = strlen(v);
    if (n < PATH_MAX) {
        memcpy(dst, v, n + 1);
        return;
    }
    dst[0] = '\0';
    shimgen_say("shimgen: %s is %zu bytes long, more than the %d a path may have; %s\n", var,
                n, PATH_MAX - 1, instead);
}

/* One decimal int of SHIMGEN_ATTR_OVERRIDE, the whole of [s, end): digits with an optional
 * '-' (only where `sign` allows it), in the range of a C int. 1 when it is one. */
static int parse_int(const char *s, const char *end, int sign, long lo, long hi, int *out)
{
    const char *digits = sign && *s == '-' ? s + 1 : s;
    if (digits >= end || *digits < '0' || *digits > '9')
        return 0;
    char *stop = NULL;
    errno = 0;
    long n = strtol(s, &stop, 10);
    if (errno || stop != end || n < lo || n > hi)
        return 0;
    *out = (int)n;
    return 1;
}

/* SHIMGEN_ATTR_OVERRIDE=A=V,...: an attribute number from 0 to 100000 and a value in the
 * range of int (what cuDeviceGetAttribute reports). Anything else is refused, one line per
 * item, and has no effect; the items that are right still apply. */
static void parse_overrides(const char *v)
{
    char buf[512];
    shimgen_copy_str(buf, sizeof buf, v);
    char shown[512] = "";
    size_t o = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        int a = 0, val = 0;
        if (!eq || !parse_int(t, eq, 0, 0, 100000, &a) ||
            !parse_int(eq + 1, eq + strlen(eq), 1, INT_MIN, INT_MAX, &val)) {
            shimgen_say("shimgen: SHIMGEN_ATTR_OVERRIDE: '%s' is not ATTRIBUTE=VALUE (an attribute "
                        "number from 0 to 100000, a value from %d to %d); ignored\n",
                        t, INT_MIN, INT_MAX);
            continue;
        }
        if (shimgen_cfg.noverrides == OVERRIDES_MAX) {
            shimgen_say("shimgen: SHIMGEN_ATTR_OVERRIDE: '%s' is one more than %zu overrides; "
                        "ignored\n", t, (size_t)OVERRIDES_MAX);
            continue;
        }
        shimgen_cfg.overrides[shimgen_cfg.noverrides].attribute = a;
        shimgen_cfg.overrides[shimgen_cfg.noverrides].value = val;
        shimgen_cfg.noverrides++;
        if (o < sizeof shown)
            o += (size_t)snprintf(shown + o, sizeof shown - o, " %d=%d", a, val);
    }
    if (shimgen_cfg.noverrides)
        shimgen_say("shimgen: SHIMGEN_ATTR_OVERRIDE in effect:%s (values reported to the program; "
            "the driver's state is untouched)\n", shown);
}

int shimgen_attr_override(int attribute, int *value)
{
    for (unsigned i = 0; i < shimgen_cfg.noverrides; i++)
        if (shimgen_cfg.overrides[i].attribute == attribute) {
            *value = shimgen_cfg.overrides[i].value;
            return 1;
        }
    return 0;
}

/* SHIMGEN_RUN_DIR (set by `shimgen run`): "<device>:<inode>:<path>" of the run directory
 * the job was started with. A file the shim opens under that path is reached through the
 * directory opened and checked to be that one (shimgen_at_run_dir), never through a
 * directory put in its place while the job runs. */
static void parse_run_dir(const char *v)
{
    char *end = NULL;
    errno = 0;
    unsigned long long dev = strtoull(v, &end, 10);
    if (errno || *end != ':' || *v < '0' || *v > '9')
        goto bad;
    const char *at = end + 1;
    unsigned long long ino = strtoull(at, &end, 10);
    if (errno || *end != ':' || *at < '0' || *at > '9' || end[1] != '/' ||
        strlen(end + 1) >= sizeof shimgen_cfg.run_dir)
        goto bad;
    shimgen_cfg.run_dev = (dev_t)dev;
    shimgen_cfg.run_ino = (ino_t)ino;
    shimgen_copy_str(shimgen_cfg.run_dir, sizeof shimgen_cfg.run_dir, end + 1);
    size_t n = strlen(shimgen_cfg.run_dir);
    while (n > 1 && shimgen_cfg.run_dir[n - 1] == '/')
        shimgen_cfg.run_dir[--n] = '\0';
    return;
bad:
    shimgen_say("shimgen: SHIMGEN_RUN_DIR=%s is not <device>:<inode>:<absolute path>; "
                "ignored\n", v);
}

/* The job rank of this process, from the usual launchers' variables (read once). */
static const char *rank_vars[] = {SHIMGEN_RANK_VARS};

/* Processes of one job share a SHIMGEN_TRACE_FILE (or SHIMGEN_TIMELINE_FILE) name without
 * %p or %r. The job is stamped with the time its first process loaded the shim, which
 * that process puts in its environment for the processes it starts; the first of them to
 * write takes the plain name (claim.c). */
static void read_job(void)
{
    const char *v = secure_getenv(SHIMGEN_ENV_TRACE_JOB);
    char *end = NULL;
    if (v && *v >= '0' && *v <= '9') {
        errno = 0;
        long long sec = strtoll(v, &end, 10);
        if (!errno && *end == '.' && end[1] >= '0' && end[1] <= '9') {
            long nsec = strtol(end + 1, &end, 10);
            if (!errno && !*end && nsec < 1000000000L) {
                shimgen_cfg.job_sec = sec;
                shimgen_cfg.job_nsec = nsec;
                return;
            }
        }
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    shimgen_cfg.job_sec = now.tv_sec;
    shimgen_cfg.job_nsec = now.tv_nsec;
    char stamp[48];
    snprintf(stamp, sizeof stamp, "%lld.%09ld", (long long)now.tv_sec, (long)now.tv_nsec);
    setenv(SHIMGEN_ENV_TRACE_JOB, stamp, 1);
}

/* SHIMGEN_TRACE, and the calls ring's size: calls mode where the architecture has it. */
static void read_trace_settings(void)
{
    const char *v = secure_getenv(SHIMGEN_ENV_TRACE);
    if (v && *v)
        parse_trace(v);
    if (shimgen_cfg.calls && !SHIMGEN_ARCH_CALLS) { /* calls.S: x86-64 only, for now */
        shimgen_say("shimgen: SHIMGEN_TRACE=%s: this " SHIMGEN_ARCH_NAME " shim times calls and "
                    "does not record each one (calls mode is x86-64 only, for now)\n", v);
        shimgen_cfg.calls = 0;
    }
    if (shimgen_cfg.calls && shimgen_cfg.timeline) /* one ring a block: calls wins */
        shimgen_cfg.timeline = 0;
    shimgen_cfg.calls_records = SHIMGEN_CALLS_RING_DEFAULT;
    v = secure_getenv(SHIMGEN_ENV_CALLS_RING);
    if (shimgen_cfg.calls && v && *v)
        shimgen_cfg.calls_records = parse_ring(SHIMGEN_ENV_CALLS_RING, v, SHIMGEN_CALLS_RING_MIN,
                                               SHIMGEN_CALLS_RING_MAX,
                                               SHIMGEN_CALLS_RING_DEFAULT);
}

static void read_config(void)
{
    const char *v = secure_getenv(SHIMGEN_ENV_QUIET);
    shimgen_cfg.quiet = v && *v && strcmp(v, "0") != 0;
    v = secure_getenv(SHIMGEN_ENV_RUN_DIR);
    if (v && *v)
        parse_run_dir(v);
    v = secure_getenv(SHIMGEN_ENV_NOTICE_FILE);
    if (v && *v)
        parse_abs_name("SHIMGEN_NOTICE_FILE", v, shimgen_cfg.notice_file);

    v = secure_getenv(SHIMGEN_ENV_DRIVER);
    shimgen_cfg.driver_from_env = v && *v;
    shimgen_copy_str(shimgen_cfg.driver_path, sizeof shimgen_cfg.driver_path,
                     v && *v ? v : SHIMGEN_DRIVER_PATH);
    shimgen_cfg.driver_stat_ok = stat(shimgen_cfg.driver_path, &shimgen_cfg.driver_stat) == 0;

    read_trace_settings();
    v = secure_getenv(SHIMGEN_ENV_ATTR_OVERRIDE);
    if (v && *v)
        parse_overrides(v);
    v = secure_getenv(SHIMGEN_ENV_TRACE_FILE);
    if (v && *v)
        parse_file_name("SHIMGEN_TRACE_FILE", v, shimgen_cfg.trace_file,
                        "the trace goes to stderr instead");
    v = secure_getenv(SHIMGEN_ENV_TRACE_DIR);
    if (v && *v && shimgen_cfg.trace != TRACE_OFF)
        parse_abs_name("SHIMGEN_TRACE_DIR", v, shimgen_cfg.trace_dir);
    shimgen_cfg.timeline_events = TIMELINE_EVENTS_DEFAULT;
    if (shimgen_cfg.timeline) {
        v = secure_getenv(SHIMGEN_ENV_TIMELINE_EVENTS);
        if (v && *v)
            shimgen_cfg.timeline_events =
                parse_ring(SHIMGEN_ENV_TIMELINE_EVENTS, v, TIMELINE_EVENTS_MIN,
                           TIMELINE_EVENTS_MAX, TIMELINE_EVENTS_DEFAULT);
        v = secure_getenv(SHIMGEN_ENV_TIMELINE_FILE);
        parse_file_name("SHIMGEN_TIMELINE_FILE", v && *v ? v : "shimgen-timeline.%p.json",
                        shimgen_cfg.timeline_file, "no timeline is written");
    }
    for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0] && !shimgen_cfg.rank[0]; i++) {
        const char *r = secure_getenv(rank_vars[i]);
        if (r && *r && strspn(r, "0123456789") == strlen(r))
            shimgen_copy_str(shimgen_cfg.rank, sizeof shimgen_cfg.rank, r);
    }
    const char *inject = secure_getenv(SHIMGEN_ENV_INJECT); /* parsed by inject.c at the load */
    if (inject) /* one byte more than a rule may take: a longer one is refused, not cut */
        shimgen_copy_str(shimgen_cfg.inject, sizeof shimgen_cfg.inject, inject);
    shimgen_cfg.load_pid = getpid();
    if (shimgen_cfg.trace != TRACE_OFF && (shimgen_shared_name(shimgen_cfg.trace_file) ||
                                           shimgen_shared_name(shimgen_cfg.timeline_file)))
        read_job();

    Dl_info info;
    if (dladdr((void *)read_config, &info) && info.dli_fname) {
        if (!realpath(info.dli_fname, shimgen_cfg.self_path))
            shimgen_copy_str(shimgen_cfg.self_path, sizeof shimgen_cfg.self_path, info.dli_fname);
    }
}

void shimgen_config(void)
{
    pthread_once(&config_once, read_config);
}

/* Configuration is read when the shim is loaded; the driver is loaded on first use. */
__attribute__((constructor)) static void shimgen_load(void)
{
    shimgen_config();
}
