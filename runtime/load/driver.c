/*
 * driver.c: loading the real driver, once, at the first call: dlopen of the recorded file
 * (or SHIMGEN_DRIVER), else a fallback search when that file is gone; never a shim (the
 * file is checked for the shim's mark first, selfcheck.c); the identity check of what was
 * loaded (build-id, another shim preloaded after this one, the gates' profile); then every
 * slot filled. Also the lazy stubs' resolver (stubs.S), which waits for all this, and the
 * fork handlers that keep a child from inheriting a load in progress on another thread.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "hooks/hooks.h"
#include "kernels/kernels.h"
#include "memory/memory.h"
#include "base/base.h"
#include "load.h"
#include "stats/stats.h"
#include "gates/gates.h"

/* The load's state: one word, which waiting threads poll (async-signal-safe). pthread_once
 * would make a signal handler on the loading thread wait on itself, and a fork during the
 * load would give the child a half-done once and a half-loaded driver. */
enum { LOAD_NONE, LOAD_RUNNING, LOAD_FORK_HELD, LOAD_DONE };
static int load_state;
/* What this thread holds: HELD_LOAD from just before it claims the load until the load is
 * done; HELD_FORK between its fork's prepare and parent/child handlers. A call made on the
 * thread meanwhile (a signal handler's, the driver's own during its load) cannot wait for
 * the load: it returns CUDA_ERROR_NOT_INITIALIZED (shimgen_fail_loading). */
enum { HELD_NONE, HELD_LOAD, HELD_FORK };
static __thread int load_held __attribute__((tls_model("initial-exec")));
static int trace_registered;
static uint64_t missing_functions;

/* The version in a driver's real file name: "libcuda.so.535.261.03" gives "535.261.03"
 * (digits and two or three dot-separated parts, as shimgen/driver/elf.py reads it). */
static void version_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *v = strstr(base, ".so.");
    size_t n = v ? strlen(v + 4) : 0;
    unsigned dots = 0;
    int ok = n > 0 && n < sizeof shimgen_loaded_version;
    for (size_t i = 0; ok && i < n; i++) {
        char c = v[4 + i];
        if (c == '.' && i > 0 && v[4 + i - 1] != '.' && i + 1 < n)
            dots++;
        else if (c < '0' || c > '9')
            ok = 0;
    }
    ok = ok && (dots == 1 || dots == 2);
    shimgen_copy_str(shimgen_loaded_version, sizeof shimgen_loaded_version,
                     ok ? v + 4 : "unknown");
}

struct build_id_query {
    uintptr_t base;
    char hex[2 * 64 + 1];
};

static int find_build_id(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct build_id_query *q = data;
    if (info->dlpi_addr != q->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *n;
            const unsigned char *desc =
                (const unsigned char *)(name + ((n->n_namesz + 3u) & ~3u));
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
                n->n_descsz <= 64) {
                static const char digits[] = "0123456789abcdef";
                for (unsigned k = 0; k < n->n_descsz; k++) {
                    q->hex[2 * k] = digits[desc[k] >> 4];
                    q->hex[2 * k + 1] = digits[desc[k] & 15];
                }
                q->hex[2 * n->n_descsz] = '\0';
                return 1;
            }
            p = (const char *)desc + ((n->n_descsz + 3u) & ~3u);
        }
    }
    return 1;
}

static void check_identity(void *handle)
{
    struct link_map *lm = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return;
    struct build_id_query q = {.base = (uintptr_t)lm->l_addr, .hex = ""};
    dl_iterate_phdr(find_build_id, &q);
    shimgen_copy_str(shimgen_loaded_build_id, sizeof shimgen_loaded_build_id, q.hex);
    char got[PATH_MAX], want[PATH_MAX], other[PATH_MAX];
    version_from_name(lm->l_name && realpath(lm->l_name, got) ? got : shimgen_cfg.driver_path);
    void *d = dlsym(handle, "dlopen");
    Dl_info di;
    if (lm->l_name && realpath(lm->l_name, got) && realpath(shimgen_cfg.driver_path, want) &&
        strcmp(got, want) != 0 && d && dladdr(d, &di) && di.dli_fname &&
        realpath(di.dli_fname, other) && strcmp(other, got) == 0) {
        shimgen_say("shimgen: another shim (%s) is preloaded after this one; calls go through "
                    "both\n", got);
        return;
    }
    shimgen_gates_config();
    if (shimgen_cfg.gates_requested) /* before any driver function runs */
        shimgen_gates_arm((uintptr_t)lm->l_addr, q.hex);
    if (SHIMGEN_DRIVER_BUILD_ID[0] && strcmp(q.hex, SHIMGEN_DRIVER_BUILD_ID) != 0)
        shimgen_say("shimgen: %s has build-id %s, the shim was built for %s (libcuda %s); "
                    "forwarding by name, rebuild the shim\n",
                    shimgen_cfg.driver_path, q.hex[0] ? q.hex : "none", SHIMGEN_DRIVER_BUILD_ID,
                    SHIMGEN_DRIVER_VERSION);
}

static void fill_slots(void *handle)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        void *fn = handle ? dlsym(handle, shimgen_names[i]) : NULL;
        if (handle && !fn)
            missing_functions++;
        shimgen_real[i] = fn ? fn : (handle ? (void *)shimgen_fail_missing
                                            : (void *)shimgen_fail_init);
        if (fn)
            shimgen_addr_map_add(fn, i);
    }
    shimgen_addr_map_sort();
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        void *target = (handle && shimgen_hook_fns[i] &&
                        (shimgen_hook_features[i] & shimgen_cfg.features))
                           ? shimgen_hook_fns[i]
                           : shimgen_real[i];
        __atomic_store_n(&shimgen_targets[i], target, __ATOMIC_RELEASE);
    }
    shimgen_user_hooks_install(handle != NULL); /* the user's hooks in front (userhooks.c) */
    shimgen_inject_arm(shimgen_targets); /* in front of whatever each target is */
    if (shimgen_cfg.trace != TRACE_OFF)
        shimgen_stats_start();
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        void *slot = shimgen_cfg.trace == TRACE_TIME
                         ? (shimgen_cfg.timeline ? shimgen_timeline_stubs[i]
                            : shimgen_cfg.calls  ? SHIMGEN_CALLS_STUB(i)
                                                 : shimgen_time_stubs[i])
                     : shimgen_cfg.trace == TRACE_OFF ? shimgen_targets[i]
                                                      : shimgen_count_stubs[i];
        __atomic_store_n(&shimgen_slots[i], slot, __ATOMIC_RELEASE);
    }
}

/* A libcuda other than the recorded file, when that file is gone: the path given at build
 * time, then the usual locations. Writes the candidate to `out`; 0 when there is none. */
static int fallback_driver(char *out, size_t cap)
{
    static const char *const places[] = {SHIMGEN_DRIVER_GIVEN, SHIMGEN_LIBCUDA_PATHS};
    struct stat self, st;
    int have_self = shimgen_cfg.self_path[0] && stat(shimgen_cfg.self_path, &self) == 0;
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        if (stat(places[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (have_self && st.st_dev == self.st_dev && st.st_ino == self.st_ino)
            continue;
        shimgen_copy_str(out, cap, places[i]);
        return 1;
    }
    return 0;
}

typedef void *(*dlopen_fn)(const char *, int);

/* dlopen of one candidate, refusing any shimgen shim: the file (this shim, a copy, a link
 * to it) is checked for the shim's mark before it is loaded, and what dlopen returned must
 * not be this shim (a bare name can resolve to it by its SONAME). NULL with `err` set. */
static void *open_driver(const char *path, char *err, size_t cap)
{
    static const char not_driver[] = "it is a shimgen shim, not the real driver";
    /* Only a regular file (through any links) is handed to dlopen: a FIFO would block it
     * for ever, a device or directory cannot be a library. stat itself never blocks. (A
     * bare name is dlopen's to look up in the library path.) */
    struct stat st;
    if (strchr(path, '/') && stat(path, &st) != 0) {
        shimgen_copy_str(err, cap, strerror(errno));
        return NULL;
    }
    if (strchr(path, '/') && !S_ISREG(st.st_mode)) {
        shimgen_copy_str(err, cap, S_ISDIR(st.st_mode) ? "it is a directory, not a library"
                                   : "it is not a regular file (a FIFO, device or socket)");
        return NULL;
    }
    if (shimgen_file_is_shim(path)) {
        shimgen_copy_str(err, cap, not_driver);
        return NULL;
    }
    void *h = ((dlopen_fn)shimgen_real_dlopen)(path, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        shimgen_copy_str(err, cap, e ? e : "unknown error");
        return NULL;
    }
    if (dlsym(h, shimgen_names[0]) == (void *)shimgen_entry_stubs[0]) {
        shimgen_copy_str(err, cap, not_driver);
        return NULL;
    }
    return h;
}

static void load_driver(void)
{
    shimgen_cfg.features = SHIMGEN_FEATURE_ALWAYS;
    if (shimgen_attr_trace || shimgen_cfg.noverrides)
        shimgen_cfg.features |= SHIMGEN_FEATURE_ATTRS;
    shimgen_ledger_config(); /* the memory ledger: with a trace file or a limit (ledger.c) */
    if ((shimgen_cfg.trace != TRACE_OFF && shimgen_cfg.trace_dir[0]) || shimgen_ledger_limit)
        shimgen_cfg.features |= SHIMGEN_FEATURE_MEMORY;
    if (shimgen_ledger_limit)
        shimgen_cfg.features |= SHIMGEN_FEATURE_LIMIT;
    if (shimgen_kernels_config()) { /* kernels and streams: with a trace file (kernels/) */
        shimgen_gpu_config();         /* then GPU time, which asks for the kernels' tables */
        shimgen_cfg.features |= SHIMGEN_FEATURE_KERNELS |
                                (shimgen_gpu_every ? SHIMGEN_FEATURE_GPUTIME : 0);
    }
    char first_err[512];
    void *h = open_driver(shimgen_cfg.driver_path, first_err, sizeof first_err);
    if (!h) {
        /* The recorded file is gone (a driver upgrade replaces libcuda.so.<version>): try
         * the name it was given as (usually the libcuda.so.1 link, which now points at
         * the new driver), then the usual places; never the shim itself. */
        char err[512];
        if (!shimgen_cfg.driver_from_env &&
            fallback_driver(shimgen_cfg.driver_path, sizeof shimgen_cfg.driver_path)) {
            h = open_driver(shimgen_cfg.driver_path, err, sizeof err);
            if (h) {
                shimgen_cfg.driver_stat_ok =
                    stat(shimgen_cfg.driver_path, &shimgen_cfg.driver_stat) == 0;
                shimgen_say("shimgen: %s cannot be loaded (%s); loaded %s instead\n",
                            SHIMGEN_DRIVER_PATH, first_err, shimgen_cfg.driver_path);
            }
        }
        if (!h)
            shimgen_say("shimgen: cannot load the real CUDA driver %s (%s); every driver call "
                        "returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED\n",
                        shimgen_cfg.driver_from_env ? shimgen_cfg.driver_path
                                                    : SHIMGEN_DRIVER_PATH,
                        first_err);
    }
    if (h)
        check_identity(h);
    fill_slots(h);
    if (h && missing_functions)
        shimgen_say("shimgen: %s lacks %llu of the shim's %u functions (they return "
                    "CUDA_ERROR_NOT_SUPPORTED); rebuild the shim for this driver\n",
                    shimgen_cfg.driver_path, (unsigned long long)missing_functions,
                    SHIMGEN_NFUNCS);
}

/* Waiting for the load, or for a fork that holds it back: a poll with a short sleep, which
 * a signal handler may do too (nanosleep is async-signal-safe; a futex would need the
 * generic syscall(), which the shim does not import). It happens once per process, for
 * the time of the load. */
static void wait_while(int seen)
{
    struct timespec pause = {0, 50 * 1000};
    while (__atomic_load_n(&load_state, __ATOMIC_ACQUIRE) == seen)
        nanosleep(&pause, NULL);
}

/* 1 once the driver is loaded (or has failed to load); 0 when this thread holds the load
 * (it is loading, or forking) and so must not wait for it. Other threads wait. */
static int driver_ready(void)
{
    for (;;) {
        int s = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
        if (s == LOAD_DONE)
            return 1;
        if (load_held)
            return 0;
        if (s != LOAD_NONE) {
            wait_while(s);
            continue;
        }
        /* Marked before the claim: a signal handler on this thread from here on does not
         * wait, whatever point of the claim or the load it interrupts. */
        load_held = HELD_LOAD;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        shimgen_config();
        shimgen_dlopen_setup(); /* the real dlopen, which loads the driver */
        /* The trace is started before the load (its exit handler armed, its step of the
         * after-fork, fork.c, on): a fork during the load resets it in the child. */
        if (!__atomic_exchange_n(&trace_registered, 1, __ATOMIC_ACQ_REL))
            shimgen_trace_start();
        int expect = LOAD_NONE;
        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_RUNNING, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            /* Not cancellable: a thread cancelled inside dlopen would leave the load
             * running for ever, and every other thread waiting on it. */
            int cancel;
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
            load_driver();
            __atomic_store_n(&load_state, LOAD_DONE, __ATOMIC_RELEASE);
            pthread_setcancelstate(cancel, NULL);
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        load_held = HELD_NONE;
    }
}

void shimgen_init(void)
{
    driver_ready();
}

void *shimgen_lazy_resolve(unsigned idx)
{
    if (idx >= SHIMGEN_NFUNCS)
        return (void *)shimgen_fail_init;
    if (!driver_ready())
        return (void *)shimgen_fail_loading;
    return __atomic_load_n(&shimgen_slots[idx], __ATOMIC_ACQUIRE);
}

/* SHIMGEN_REAL(name) before the driver is loaded (userreal.S: a hook file's constructor):
 * the load, as the export's first call would make it, then what the export reaches without
 * the user's hook (shimgen_user_next, which userhooks.c fills); never the hook itself, which
 * the export's slot leads to once loaded. On a thread that holds the load, what the lazy
 * stub would answer (its failure). */
void *shimgen_user_real_resolve(unsigned idx)
{
    void *slot = shimgen_lazy_resolve(idx);
    void *next = idx < SHIMGEN_NFUNCS ? __atomic_load_n(&shimgen_user_next[idx], __ATOMIC_ACQUIRE)
                                      : NULL;
    return next ? next : slot;
}

/* fork() while another thread loads the driver: wait for that load to end, and hold off
 * any new one until the fork is done, so the child never inherits a half-loaded driver
 * or a half-filled set of slots. A fork on the loading thread itself (from a signal
 * handler, or the driver's own) does not wait: the child goes on with the same load. */
void shimgen_load_before_fork(void)
{
    if (load_held)
        return;
    for (;;) {
        int s = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
        if (s == LOAD_DONE)
            return;
        if (s != LOAD_NONE) {
            wait_while(s);
            continue;
        }
        load_held = HELD_FORK;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        int expect = LOAD_NONE;
        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_FORK_HELD, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;
        load_held = HELD_NONE;
    }
}

void shimgen_load_after_fork(void)
{
    if (load_held != HELD_FORK)
        return;
    __atomic_store_n(&load_state, LOAD_NONE, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    load_held = HELD_NONE;
}

