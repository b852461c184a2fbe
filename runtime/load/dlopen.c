/*
 * dlopen.c: redirection of dlopen. The shim exports `dlopen` (a wrapper in stubs.S) so
 * that a program opening libcuda by another name (perftest's "libcuda.so", or the real
 * file's absolute path) gets the shim instead of the real library the shim already loaded.
 * The wrapper asks shimgen_dlopen_filter which name to open, then tail-jumps to the real
 * dlopen, so that glibc still sees the original caller (RUNPATH, $ORIGIN, namespace).
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "load.h"

void *shimgen_real_dlopen;

static void *dlopen_unavailable(const char *file, int mode)
{
    (void)file;
    (void)mode;
    return NULL;
}

/* The real dlopen, which comes after the shim in the lookup order: found before the first
 * dlopen goes through the wrapper and before the driver is loaded (driver.c). Threads that
 * find it at once store the same pointer. */
void shimgen_dlopen_setup(void)
{
    if (__atomic_load_n(&shimgen_real_dlopen, __ATOMIC_ACQUIRE))
        return;
    void *real = dlsym(RTLD_NEXT, "dlopen");
    __atomic_store_n(&shimgen_real_dlopen, real ? real : (void *)dlopen_unavailable,
                     __ATOMIC_RELEASE);
}

/* Returns the name dlopen should really open: the shim itself for any libcuda name that
 * the loader would resolve to the real driver, and for any path to the real driver's file
 * (same device and inode), whatever it is called; the caller's name otherwise. A bare name
 * that does not start with "libcuda.so" is not resolved here, so a differently named
 * link to the driver found through the search path is not redirected (docs/design.md). */
const char *shimgen_dlopen_filter(const char *file)
{
    shimgen_config();
    shimgen_dlopen_setup();
    if (!file || !shimgen_cfg.self_path[0])
        return file;
    const char *slash = strrchr(file, '/');
    const char *base = slash ? slash + 1 : file;
    if (!slash)
        return strncmp(base, "libcuda.so", 10) == 0 ? shimgen_cfg.self_path : file;
    struct stat st;
    if (shimgen_cfg.driver_stat_ok && stat(file, &st) == 0 &&
        st.st_dev == shimgen_cfg.driver_stat.st_dev && st.st_ino == shimgen_cfg.driver_stat.st_ino)
        return shimgen_cfg.self_path;
    return file;
}
