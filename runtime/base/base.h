/*
 * base/base.h: what every part of the shim's C runtime stands on (docs/design.md, "The
 * runtime by concern"): the build's generated headers, shim.h (this build: function count,
 * slot indices, the driver it was built for) and facts.h (CUDA facts from shimgen/cuda.py);
 * the stubs' tables and the generated table.c's; the configuration, read once (config.c),
 * and the one way the runtime says something; the loaded driver's facts (loaded.c); the
 * tick rate (calib.h) and reads that never fault (saferead.h).
 *
 * The runtime loads the real driver once, fills the jump slots, maps cuGetProcAddress
 * answers back to the shim's trampolines, redirects dlopen of libcuda, counts and times
 * calls, and writes the trace at exit. Nothing in it runs per forwarded call: after the
 * first call every trampoline is one indirect jump (SHIMGEN_TRACE=1 adds one per-thread
 * increment, in stubs.S).
 */
#ifndef SHIMGEN_BASE_H
#define SHIMGEN_BASE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "facts.h"
#include "shim.h"
#include "arch/entry.h"
#include "calib.h"
#include "saferead.h"

/* The CUDA driver's result type; hooks need no CUDA headers. */
typedef int shimgen_CUresult;

/* ---- tables: table.c (names, hooks); the stubs' own are arch/entry.h's ---- */
extern const char *const shimgen_names[];
extern void *const shimgen_hook_fns[];     /* NULL where a function has no hook */
extern const unsigned char shimgen_hook_features[]; /* SHIMGEN_FEATURE_* per hook */
extern const unsigned char shimgen_result_fns[]; /* 1: returns a CUresult (timing.S) */
extern void *shimgen_user_next[]; /* what SHIMGEN_REAL(name) jumps to (userreal.S, table.c) */

/* ---- configuration, read once (config.c) ---- */
enum trace_mode { TRACE_OFF = 0, TRACE_COUNTS = 1, TRACE_TIME = 2 };

struct shimgen_config {
    char driver_path[PATH_MAX];
    char self_path[PATH_MAX];
    char trace_file[PATH_MAX];
    char timeline_file[PATH_MAX];
    char trace_dir[PATH_MAX];   /* SHIMGEN_TRACE_DIR, absolute; "" when unset */
    char notice_file[PATH_MAX]; /* SHIMGEN_NOTICE_FILE, absolute; "" when unset */
    char run_dir[PATH_MAX];     /* SHIMGEN_RUN_DIR's path, absolute; "" when unset */
    dev_t run_dev;              /* ... and the run directory's device and inode */
    ino_t run_ino;
    enum trace_mode trace;
    int timeline;                  /* SHIMGEN_TRACE=timeline: TRACE_TIME plus events */
    unsigned long timeline_events; /* per-thread ring, a power of two */
    int calls;                     /* SHIMGEN_TRACE=calls: TRACE_TIME plus records (calls.c) */
    unsigned long calls_records;   /* SHIMGEN_CALLS_RING: per-thread ring, a power of two */
    int quiet;
    int driver_stat_ok;
    long long job_sec; /* SHIMGEN_TRACE_JOB: when the job's first process loaded the shim, */
    long job_nsec;     /* the stamp of its files with a shared name (claim.c) */
    int driver_from_env;
    pid_t load_pid;
    int gates_requested;
    int gate_method; /* SHIMGEN_GATE_METHOD: SHIMGEN_GATE_METHOD_STRUCT, _INIT or _INIT_ALL */
    char gates_spec[256];
    char rank[16];
    char inject[SHIMGEN_INJECT_MAX_LEN + 1]; /* SHIMGEN_INJECT as given (inject.c parses it) */
    unsigned features; /* SHIMGEN_FEATURE_* whose hooks are installed */
    unsigned noverrides;
    struct {
        int attribute, value;
    } overrides[64];
    struct stat driver_stat;
};
extern struct shimgen_config shimgen_cfg;
int shimgen_at_run_dir(const char *path, const char **rel);
extern int shimgen_attr_trace;

void shimgen_config(void);
int shimgen_attr_override(int attribute, int *value);
/* One line on stderr, unless SHIMGEN_QUIET; formatted into a buffer, written at once. */
void shimgen_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void shimgen_copy_str(char *dst, size_t cap, const char *src);
/* A file name without %p or %r, which the processes of one job would share. */
int shimgen_shared_name(const char *name);

/* ---- the loaded driver's facts (loaded.c; filled by driver.c and procaddr.c) ---- */
extern char shimgen_loaded_build_id[129];
/* The loaded driver's version, from its real file name (libcuda.so.<version>, the rule
 * shimgen/driver/elf.py applies at build time); the build-time one until a driver is loaded, and
 * "unknown" when the loaded file's name has none. */
extern char shimgen_loaded_version[32];
/* cuGetProcAddress answers that named no export of the shim (passed through as they are) */
extern uint64_t shimgen_unmapped_proc_addresses;

/* A hook's tools: the real driver's function `name` called with its parameters' types, whether
 * the driver has it (not the stand-in for a missing export), and a hook's definition
 * (declared first: -Wmissing-prototypes). */
#define REAL(name, ...) ((shimgen_CUresult(*)(__VA_ARGS__))shimgen_real[SHIMGEN_IDX_##name])
#define HAS(name) (shimgen_real[SHIMGEN_IDX_##name] != (void *)shimgen_fail_missing)
#define HOOK(name, params)                                                                 \
    shimgen_CUresult shimgen_hook_##name params;                                            \
    shimgen_CUresult shimgen_hook_##name params

#endif
