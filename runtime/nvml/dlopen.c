/*
 * dlopen.c: the NVML shim's redirection of dlopen. The shim exports `dlopen` (a wrapper in
 * nvml_stubs.S), as the libcuda shim does, so that a program opening NVML by another name
 * than its SONAME (nvidia-smi tries "libnvidia-ml.so" and absolute paths such as
 * /usr/lib64/libnvidia-ml.so.1) gets the shim instead of the real library: any name whose
 * last part starts with NVML's ("libnvidia-ml.so") opens the shim's own file. The wrapper
 * then tail-jumps to the dlopen after the shim in the lookup order (the libcuda shim's, when
 * it comes after, else the C library's), so that glibc still sees the original caller. The
 * shim's own load of the real library (load.c) calls that dlopen directly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "nvml.h"

void *shimgen_nvml_real_dlopen;
static char self_path[PATH_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *dlopen_unavailable(const char *file, int mode)
{
    (void)file;
    (void)mode;
    return NULL;
}

static void setup(void)
{
    void *real = dlsym(RTLD_NEXT, "dlopen");
    shimgen_nvml_real_dlopen = real ? real : (void *)dlopen_unavailable;
    Dl_info me;
    if (dladdr((void *)shimgen_nvml_dlopen_filter, &me) && me.dli_fname &&
        strchr(me.dli_fname, '/') && strlen(me.dli_fname) < sizeof self_path)
        strcpy(self_path, me.dli_fname);
}

/* The real dlopen and the shim's own path, found once, before the first use of either. */
void shimgen_nvml_dlopen_setup(void)
{
    pthread_once(&once, setup);
}

const char *shimgen_nvml_dlopen_filter(const char *file)
{
    shimgen_nvml_dlopen_setup();
    if (!file || !self_path[0])
        return file;
    const char *slash = strrchr(file, '/');
    const char *base = slash ? slash + 1 : file;
    static const char prefix[] = SHIMGEN_NVML_NAME_PREFIX;
    return strncmp(base, prefix, sizeof prefix - 1) == 0 ? self_path : file;
}
