/*
 * load.c: the real libnvidia-ml, loaded once at the first call of any export, by the path
 * of the file the shim was built from, else NVML's usual places (shimgen/driver/nvml.py,
 * SEARCH_PATHS); never this shim itself, whose SONAME is the real library's. Each export's
 * slot is set once: its answer (nvml.h) when a limit is set, else the real function, else a
 * stand-in that returns NVML_ERROR_LIBRARY_NOT_FOUND (no real library) or
 * NVML_ERROR_FUNCTION_NOT_FOUND (a real library without it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>

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
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* True when `h` is this very shim (a search path that leads back to it, through a link or a
 * copy loaded under its name) or no NVML at all: its first required export is not in
 * another object. */
static int not_the_real_one(void *h)
{
    Dl_info mine, theirs;
    void *f = dlsym(h, SHIMGEN_NVML_PROBE_EXPORT);
    if (!f || !dladdr((void *)shimgen_nvml_resolve, &mine) || !dladdr(f, &theirs))
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

unsigned int shimgen_nvml_missing(void)
{
    return found ? SHIMGEN_NVML_ERROR_FUNCTION_NOT_FOUND : SHIMGEN_NVML_ERROR_LIBRARY_NOT_FOUND;
}

static const char *missing_string(void)
{
    return found ? "shimgen: this libnvidia-ml has no nvmlErrorString"
                 : "shimgen: no libnvidia-ml found";
}

void *shimgen_nvml_real(unsigned idx)
{
    pthread_once(&once, load);
    return idx < SHIMGEN_NVML_NFUNCS ? real_fns[idx] : NULL;
}

void *shimgen_nvml_resolve(unsigned idx)
{
    void *t = shimgen_nvml_real(idx);
    if (idx >= SHIMGEN_NVML_NFUNCS)
        return (void *)shimgen_nvml_missing;
    if (shimgen_nvml_limited() && shimgen_nvml_answer(idx))
        t = shimgen_nvml_answer(idx);
    if (!t)
        t = (int)idx == SHIMGEN_NVML_STRING_RESULT ? (void *)missing_string
                                                   : (void *)shimgen_nvml_missing;
    __atomic_store_n(&shimgen_nvml_slots[idx], t, __ATOMIC_RELEASE);
    return t;
}
