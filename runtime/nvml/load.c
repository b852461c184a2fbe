/*
 * load.c: the real libnvidia-ml, loaded once at the first call of any export, by the path
 * of the file the shim was built from, else NVML's usual places (shimgen/driver/nvml.py,
 * SEARCH_PATHS); never this shim itself, whose SONAME is the real library's. Each export's
 * slot is set once: its answer (nvml.h) when a limit is set, else the real function, else a
 * stand-in that returns NVML_ERROR_LIBRARY_NOT_FOUND (no real library) or
 * NVML_ERROR_FUNCTION_NOT_FOUND (a real library without it).
 *
 * The load's state is one word, as the libcuda shim's (load/driver.c), not a pthread_once:
 * a fork while another thread loads would give the child a link map half-changed by a
 * dlopen no thread of the child finishes (glibc's dlopen then aborts the child). A fork
 * handler waits for a load under way to end and holds off a new one until the fork is done;
 * a fork on the loading thread itself does not wait. No lock is held across the dlopen.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>

#include "nvml.h"

/* The mark every shimgen shim carries (runtime/load/selfcheck.c, cache/seal.py): an ELF note
 * in the PT_NOTE segment, so that no shim is ever loaded as the real library it stands for
 * and the shim cache knows the library it sealed for a shim. */
static const struct {
    unsigned int namesz, descsz, type;
    char name[8];
    unsigned int desc;
} shim_note __attribute__((used, section(".note.shimgen"), aligned(4))) = {
    8, 4, 0x5348494du /* "SHIM" */, "shimgen", 1};

static void *real_fns[SHIMGEN_NVML_NFUNCS];
static int found; /* 1: a real library was loaded */
enum { LOAD_NONE, LOAD_RUNNING, LOAD_FORK_HELD, LOAD_DONE };
static int load_state;
/* What this thread holds: the load (it is loading) or the fork (between its fork's prepare
 * and parent or child handler). A call made on the thread meanwhile cannot wait. */
enum { HELD_NONE, HELD_LOAD, HELD_FORK };
static __thread int held __attribute__((tls_model("initial-exec")));

/* True when `h` is this very shim (a search path that leads back to it, through a link or a
 * copy loaded under its name) or no NVML at all: its first required export is not in
 * another object. */
static int not_the_real_one(void *h)
{
    Dl_info mine, theirs;
    void *f = dlsym(h, SHIMGEN_NVML_PROBE_EXPORT);
    if (!f || !dladdr((void *)shimgen_nvml_real, &mine) || !dladdr(f, &theirs))
        return 1;
    return mine.dli_fbase == theirs.dli_fbase;
}

/* dlopen of one candidate: only a regular file (a FIFO would block the load). */
static void *open_candidate(const char *path)
{
    struct stat st;
    if (!path[0] || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return NULL;
    shimgen_nvml_dlopen_setup();
    void *h = ((void *(*)(const char *, int))shimgen_nvml_real_dlopen)(path,
                                                                       RTLD_LAZY | RTLD_LOCAL);
    if (h && not_the_real_one(h)) {
        dlclose(h);
        return NULL;
    }
    return h;
}

static void load(void)
{
    static const char *const places[] = {SHIMGEN_NVML_BUILT_FROM, SHIMGEN_NVML_SEARCH_PATHS};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof places / sizeof *places; i++)
        h = open_candidate(places[i]);
    if (!h)
        return;
    for (unsigned i = 0; i < SHIMGEN_NVML_NFUNCS; i++)
        real_fns[i] = dlsym(h, shimgen_nvml_names[i]);
    found = 1;
}

/* 1 when a real library was found (shimgen_nvml_missing's answer depends on it). */
int shimgen_nvml_found(void)
{
    return found;
}

unsigned int shimgen_nvml_missing(void)
{
    return found ? SHIMGEN_NVML_ERROR_FUNCTION_NOT_FOUND : SHIMGEN_NVML_ERROR_LIBRARY_NOT_FOUND;
}

static void wait_while(int seen)
{
    struct timespec pause = {0, 50 * 1000};
    while (__atomic_load_n(&load_state, __ATOMIC_ACQUIRE) == seen)
        nanosleep(&pause, NULL);
}

/* 1 once the real library is loaded (or found missing); 0 on a thread that holds the load
 * or a fork, which must not wait for it. Other threads wait; the first one loads. */
int shimgen_nvml_loaded(void)
{
    for (;;) {
        int s = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
        if (s == LOAD_DONE)
            return 1;
        if (held)
            return 0;
        if (s != LOAD_NONE) {
            wait_while(s);
            continue;
        }
        held = HELD_LOAD;
        int expect = LOAD_NONE;
        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_RUNNING, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            load();
            __atomic_store_n(&load_state, LOAD_DONE, __ATOMIC_RELEASE);
        }
        held = HELD_NONE;
    }
}

static void before_fork(void)
{
    if (held)
        return;
    for (;;) {
        int s = __atomic_load_n(&load_state, __ATOMIC_ACQUIRE);
        if (s == LOAD_DONE)
            return;
        if (s != LOAD_NONE) {
            wait_while(s);
            continue;
        }
        held = HELD_FORK;
        int expect = LOAD_NONE;
        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_FORK_HELD, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;
        held = HELD_NONE;
    }
}

static void after_fork(void)
{
    if (held != HELD_FORK)
        return;
    __atomic_store_n(&load_state, LOAD_NONE, __ATOMIC_RELEASE);
    held = HELD_NONE;
}

/* (registered when the shim is loaded, before any load can start) */
__attribute__((constructor)) static void fork_handlers(void)
{
    pthread_atfork(before_fork, after_fork, after_fork);
}

void *shimgen_nvml_real(unsigned idx)
{
    if (!shimgen_nvml_loaded())
        return NULL;
    return idx < SHIMGEN_NVML_NFUNCS ? real_fns[idx] : NULL;
}
