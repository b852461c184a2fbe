/*
 * view.c: the budget's view of a device (nvml.h), for now from the environment alone: the
 * per-process limit of SHIMGEN_LIMIT_MEMORY (read once, at load, with secure_getenv, as the
 * libcuda shim reads it) holds every device. The limit is the total; the use is the
 * device's own, as the real library says it, at most the limit; the processes are not known
 * (-1), so the real list is kept. The shared budget books replace this file: the same two
 * functions, answered from the books.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "nvml.h"

static unsigned long long limit_bytes; /* 0: no limit */

/* SHIMGEN_LIMIT_MEMORY's grammar (runenv.SIZE_UNITS, as run/limits.py and the libcuda
 * shim take it): digits, then K, M, G or T (powers of 1024) with "iB", "B" or nothing
 * after, or "B" alone. 0 for what is not a size. */
static unsigned long long parse_size(const char *s)
{
    static const char units[] = SHIMGEN_NVML_SIZE_UNITS;
    unsigned long long n = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (~0ULL - d) / 10)
            return 0;
        n = n * 10 + d;
    }
    if (p == s)
        return 0;
    unsigned shift = 0;
    for (unsigned i = 0; *p && units[i]; i++)
        if (*p == units[i]) {
            shift = 10 * (i + 1);
            p++;
            if (p[0] == 'i' && p[1] == 'B')
                p += 2;
            else if (p[0] == 'B')
                p++;
            break;
        }
    if (shift == 0 && p[0] == 'B')
        p++;
    if (*p || (shift && n > (~0ULL >> shift)))
        return 0;
    return n << shift;
}

__attribute__((constructor)) static void read_limit(void)
{
    const char *v = secure_getenv(SHIMGEN_NVML_ENV_LIMIT_MEMORY); /* unset if AT_SECURE */
    limit_bytes = v ? parse_size(v) : 0;
}

int shimgen_budget_limited(void)
{
    return limit_bytes != 0;
}

int shimgen_budget_view(const char *uuid, unsigned long long real_used,
                        struct shimgen_budget_view *out)
{
    (void)uuid; /* the per-process limit holds every device alike */
    if (!limit_bytes)
        return 0;
    out->limit = limit_bytes;
    out->used = real_used < limit_bytes ? real_used : limit_bytes;
    out->nprocs = -1;
    return 1;
}
