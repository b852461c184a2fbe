/* launchlog.c: one notice line per kernel launch through cuLaunchKernel (and its per-thread
 * default stream variant cuLaunchKernel_ptsz), with its grid and block sizes, to where the
 * shim writes notices (stderr, or SHIMGEN_NOTICE_FILE: `shimgen run` puts them in the run's
 * notices.log). SHIMGEN_LAUNCHLOG_MAX lines at most (default 1000; 0: every launch), then one
 * line that says how many were not logged.
 *   shimgen run --hook examples/hooks/launchlog.c -- python train.py   (docs/hooks.md) */
#include <shimgen/hook.h>

#include <stdlib.h>

static unsigned long long max_lines = 1000;
static unsigned long long launches;

__attribute__((constructor)) static void read_max(void)
{
    const char *s = getenv("SHIMGEN_LAUNCHLOG_MAX");
    if (s && *s)
        max_lines = strtoull(s, NULL, 10);
}

static void say(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                unsigned by, unsigned bz, unsigned shmem)
{
    unsigned long long n = __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
    if (max_lines == 0 || n <= max_lines)
        shimgen_hook_say("launchlog: %s #%llu grid %ux%ux%u block %ux%ux%u shared %u bytes", name,
                         n, gx, gy, gz, bx, by, bz, shmem);
    else if (n == max_lines + 1)
        shimgen_hook_say("launchlog: more than %llu launches; the rest are not logged "
                         "(SHIMGEN_LAUNCHLOG_MAX=0 logs every one)", max_lines);
}

SHIMGEN_HOOK(CUresult, cuLaunchKernel,
             (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
              unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra))
{
    say("cuLaunchKernel", gx, gy, gz, bx, by, bz, shmem);
    return SHIMGEN_REAL(cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

SHIMGEN_HOOK(CUresult, cuLaunchKernel_ptsz,
             (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
              unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra))
{
    say("cuLaunchKernel_ptsz", gx, gy, gz, bx, by, bz, shmem);
    return SHIMGEN_REAL(cuLaunchKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shmem, stream, params,
                                             extra);
}
