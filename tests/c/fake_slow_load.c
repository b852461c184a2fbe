/* A fake libcuda whose load is slow: its constructor sleeps FAKE_SLOW_LOAD_MS milliseconds
 * (default 20), so a signal or a fork lands inside the load for certain. Exports only what
 * tests/c/loading_*.c call: cuDriverGetVersion (12345) and cuInit (success). Loaded with
 * SHIMGEN_DRIVER under a real driver's shim, which forwards by name. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>

__attribute__((constructor)) static void slow_load(void)
{
    const char *v = getenv("FAKE_SLOW_LOAD_MS");
    long ms = v && *v ? atol(v) : 20;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

__attribute__((visibility("default"))) int cuDriverGetVersion(int *version)
{
    if (!version)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = 12345;
    return 0;
}

__attribute__((visibility("default"))) int cuInit(unsigned flags)
{
    (void)flags;
    return 0;
}
