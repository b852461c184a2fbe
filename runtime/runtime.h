/*
 * runtime.h: what the files of the shim's C runtime share. The runtime loads the real
 * driver once, fills the jump slots, maps cuGetProcAddress answers back to the shim's
 * trampolines, redirects dlopen of libcuda, counts and times calls, and writes the trace at
 * exit. Nothing in it runs per forwarded call: after the first call every trampoline is one
 * indirect jump (SHIMGEN_TRACE=1 adds one per-thread increment, in stubs.S).
 *
 * The build's generated headers come first: shim.h (this build: function count, slot
 * indices, the driver it was built for) and facts.h (CUDA facts from shimgen/cuda.py).
 */
#ifndef SHIMGEN_RUNTIME_H
#define SHIMGEN_RUNTIME_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "facts.h"
#include "shim.h"

/* The CUDA driver's result type; hooks need no CUDA headers. */
typedef int shimgen_CUresult;

/* ---- tables: stubs.S (jump targets, stubs) and table.c (names, hooks) ---- */
extern void *shimgen_slots[];        /* what each exported trampoline jumps through */
extern void *shimgen_targets[];      /* hook or real function, after the counting stub */
extern void *shimgen_real[];         /* the real driver's functions */
extern uint64_t shimgen_counts[];    /* calls per function, when counting */
extern void *const shimgen_lazy_stubs[];   /* first-call resolvers */
extern void *const shimgen_count_stubs[];  /* count, then jump to shimgen_targets[i] */
extern void *const shimgen_entry_stubs[];  /* the exported trampolines themselves */
extern void *const shimgen_time_stubs[];   /* SHIMGEN_TRACE=time: time, then the target */
extern void *const shimgen_timeline_stubs[]; /* SHIMGEN_TRACE=timeline: the same + events */
extern char shimgen_time_return[];         /* where timed calls return first */
extern char shimgen_timeline_return[];     /* the same, for the timeline stubs */
extern const char *const shimgen_names[];
extern void *const shimgen_hook_fns[];     /* NULL where a function has no hook */
extern const unsigned char shimgen_hook_features[]; /* SHIMGEN_FEATURE_* per hook */
extern const unsigned char shimgen_result_fns[]; /* 1: returns a CUresult (timing.S) */
extern char shimgen_fail_init[];     /* returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED */
extern char shimgen_fail_missing[];  /* returns CUDA_ERROR_NOT_SUPPORTED */

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

/* ---- the real driver (driver.c) ---- */
void shimgen_init(void);
void *shimgen_lazy_resolve(unsigned idx);
/* fork() while a load runs: waits for it, holds off a new one until the fork is done */
void shimgen_load_before_fork(void);
void shimgen_load_after_fork(void);

/* ---- the user's hooks (userhooks.c): put in front of their exports' targets, once the
 * targets are filled; `loaded` 0 when the driver failed to load (none is installed) ---- */
void shimgen_user_hooks_install(int loaded);
/* userreal.S before the driver is loaded: what SHIMGEN_REAL(name) of export idx jumps to
 * (driver.c). */
void *shimgen_user_real_resolve(unsigned idx);
extern void *shimgen_user_next[]; /* what SHIMGEN_REAL(name) jumps to (userreal.S, table.c) */

/* ---- loading the driver safely (driver.c, selfcheck.c, stubs.S) ---- */
extern char shimgen_fail_loading[];  /* returns CUDA_ERROR_NOT_INITIALIZED */
int shimgen_file_is_shim(const char *path);

/* ---- cuGetProcAddress answers (procaddr.c) ---- */
void shimgen_addr_map_add(void *real_fn, unsigned idx);
void shimgen_addr_map_sort(void);
void *shimgen_map_proc_address(void *real_fn);

/* ---- dlopen redirection (dlopen.c) ---- */
extern void *shimgen_real_dlopen;
void shimgen_dlopen_setup(void);
const char *shimgen_dlopen_filter(const char *file);

/* ---- counting and timing (stats.c), called from stubs.S ---- */
void *shimgen_count_first(unsigned idx);
/* What the timing stub's C path gets back, in rax:rdx: the function to jump to, and the
 * shadow frame to keep in rbx (NULL: the call is counted but not timed). */
struct shadow_frame;
struct time_push {
    void *target;
    struct shadow_frame *frame;
};
struct time_push shimgen_time_push(unsigned idx, void **return_slot, void *caller_rbx,
                                   void *timed_return);
void *shimgen_real_caller(void *return_address);
void shimgen_stats_start(void);

/* ---- trace output at exit (trace.c) ---- */
void shimgen_trace_start(void);
void shimgen_trace_after_fork(void); /* a forked child's trace: its own (fork.c) */

/* ---- gates (gates.c) ---- */
void shimgen_gates_config(void); /* SHIMGEN_GATES and SHIMGEN_GATE_METHOD, read once */
int shimgen_gates_verify(uintptr_t driver_base, const char *loaded_build_id, char *why,
                         size_t whycap);
void shimgen_gates_apply(void);
void shimgen_gates_arm(uintptr_t driver_base, const char *loaded_build_id);
int shimgen_gates_patch_init(uintptr_t driver_base, int all, char *why, size_t whycap);
int shimgen_gates_armed(void);

#endif
