/*
 * view.c: the budget's view of a device (nvml.h). The limits are read once, at load, with
 * secure_getenv, as the libcuda shim reads them: SHIMGEN_LIMIT_MEMORY (one process's limit
 * per device), SHIMGEN_BUDGET_FILE (the shared budget's books, runtime/budget/view.h) and
 * SHIMGEN_LIMIT_JOB_MEMORY (the size of a budget whose books no process has made yet).
 *
 * With the books: the limit is the budget's size (the per-process limit when that is
 * smaller), the use the device's in the books (what the live processes hold together), the
 * processes the live slots that hold bytes on the device. The device is the books' entry of
 * its UUID (nvmlDeviceGetUUID's text turned into cuDeviceGetUuid's 16 bytes); books keyed
 * by ordinal (a driver that gave no UUID) are matched by nvmlDeviceGetIndex, which numbers
 * the devices as CUDA does only where CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER leave
 * CUDA's order NVML's (PCI bus). A device the books do not hold yet, or books not made yet,
 * has nothing used and no processes. Books there but not readable as books (another
 * user's, another version: the libcuda shim refuses them too) are no budget.
 *
 * The per-process limit alone: it holds every device; the use is the device's own, as the
 * real library says it, at most the limit; the processes are not known (-1), so the real
 * list is kept.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nvml.h"

static unsigned long long limit_bytes; /* SHIMGEN_LIMIT_MEMORY's; 0: none */
static unsigned long long job_bytes;   /* SHIMGEN_LIMIT_JOB_MEMORY's; 0: none */
static const char *books_path;         /* SHIMGEN_BUDGET_FILE; NULL: no shared budget */

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

static unsigned long long size_of(const char *name)
{
    const char *v = secure_getenv(name); /* unset if AT_SECURE */
    return v ? parse_size(v) : 0;
}

__attribute__((constructor)) static void read_limit(void)
{
    limit_bytes = size_of(SHIMGEN_NVML_ENV_LIMIT_MEMORY);
    job_bytes = size_of(SHIMGEN_NVML_ENV_LIMIT_JOB_MEMORY);
    const char *books = secure_getenv(SHIMGEN_NVML_ENV_BUDGET_FILE);
    books_path = books && *books ? books : NULL;
}

int shimgen_nvml_limited(void)
{
    return limit_bytes != 0 || books_path != NULL;
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* NVML's UUID text ("GPU-" then 32 hex digits in groups joined by '-') as the 16 bytes
 * cuDeviceGetUuid gives: 1, or 0 for text not of that form. */
int shimgen_nvml_uuid_bytes(const char *text, uint8_t out[16])
{
    const char *p = strchr(text, '-');
    unsigned n = 0;
    if (!p)
        return 0;
    for (p++; *p && n < 32; p++) {
        int h = hex(*p);
        if (h < 0 && *p != '-')
            return 0;
        if (h >= 0)
            out[n / 2] = (uint8_t)(n % 2 ? out[n / 2] | h : h << 4), n++;
    }
    return n == 32 && !*p;
}

typedef unsigned int (*uuid_fn)(void *dev, char *uuid, unsigned int length);
typedef unsigned int (*index_fn)(void *dev, unsigned int *index);

/* The books' entry of device `dev` (its UUID's, else its index's where the books are keyed
 * by ordinal), or -1. */
static int books_device(void *dev, const struct shimgen_budget_view *b)
{
    uuid_fn uuid = (uuid_fn)shimgen_nvml_real(SHIMGEN_NVML_IDX_UUID);
    index_fn index = (index_fn)shimgen_nvml_real((unsigned)SHIMGEN_NVML_IDX_INDEX);
    char text[SHIMGEN_NVML_UUID_BUFFER];
    uint8_t key[16];
    if (uuid && uuid(dev, text, sizeof text) == SHIMGEN_NVML_SUCCESS &&
        (text[sizeof text - 1] = '\0', shimgen_nvml_uuid_bytes(text, key)))
        for (unsigned d = 0; d < BOOKS_DEVICES; d++)
            if (!memcmp(b->device[d].uuid, key, 16))
                return (int)d;
    unsigned int i;
    if (!index || index(dev, &i) != SHIMGEN_NVML_SUCCESS)
        return -1;
    memcpy(key, "ordinal", 8), memcpy(key + 8, &i, sizeof i), memset(key + 12, 0, 4);
    for (unsigned d = 0; d < BOOKS_DEVICES; d++)
        if (!memcmp(b->device[d].uuid, key, 16))
            return (int)d;
    return -1;
}

/* From the books: 1, or 0 when they cannot be read (not made yet: nothing used). */
static int from_books(void *dev, struct shimgen_nvml_view *out)
{
    struct shimgen_budget_view *b = malloc(sizeof *b); /* (some 35 KiB: not on a stack) */
    if (!b || shimgen_budget_read(books_path, b) != 0) {
        free(b);
        return 0;
    }
    int d = books_device(dev, b);
    out->limit = b->limit;
    out->used = d >= 0 ? b->device[d].used : 0;
    for (unsigned i = 0; d >= 0 && i < b->nprocs; i++)
        if (b->proc[i].bytes[d]) {
            out->procs[out->nprocs].pid = (unsigned int)b->proc[i].pid;
            out->procs[out->nprocs++].bytes = b->proc[i].bytes[d];
        }
    free(b);
    return 1;
}

int shimgen_nvml_view(void *dev, unsigned long long real_used, struct shimgen_nvml_view *out)
{
    memset(out, 0, sizeof *out);
    struct stat st; /* (books not made yet: the size they will be made with, nothing used) */
    if (books_path && (from_books(dev, out) ||
                       (lstat(books_path, &st) != 0 && (out->limit = job_bytes)))) {
        if (limit_bytes && limit_bytes < out->limit)
            out->limit = limit_bytes;
        return 1;
    }
    if (!limit_bytes)
        return 0;
    out->limit = limit_bytes;
    out->used = real_used < limit_bytes ? real_used : limit_bytes;
    out->nprocs = -1;
    return 1;
}
