/* An example of a hook with a table of its own; shimgen's built-in limit, over every
 * allocation route, is `shimgen run --limit memory=2GiB` (docs/memory.md).
 * memlimit.c: a per-process device memory limit, SHIMGEN_MEMLIMIT=2GiB (bytes, or with K, M,
 * G or T, and "iB" or "B" or nothing after: powers of 1024), over all the process's devices.
 * Allocations by cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocPitch_v2, cuMemAllocManaged and
 * cuMemCreate are counted; one past the limit returns CUDA_ERROR_OUT_OF_MEMORY. cuMemFree_v2,
 * cuMemFreeAsync and cuMemRelease give back what they free. cuMemGetInfo_v2 reports the limit
 * as the total, and free = limit - used, never above what is really free. Unset: every call
 * is forwarded untouched. shimgen run --hook examples/hooks/memlimit.c -- CMD (docs/hooks.md) */
#include <shimgen/hook.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

SHIMGEN_DECLARE(CUresult, cuMemFree_v2, (CUdeviceptr dptr)); /* used before its hook */

#ifndef SLOTS /* live allocations tracked (open addressing); 3/4 full: refused */
#define SLOTS 65536
#endif
enum { EMPTY, PTR, HANDLE }; /* what a slot holds: nothing, a device pointer, a handle */
static struct slot { unsigned long long key; size_t size; int kind; } table[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t limit, used; /* limit 0: no limit */
static unsigned live;      /* slots in use or reserved by an allocation in progress */

static size_t parse_size(const char *s) /* 0: not a size */
{
    static const char units[] = "KMGT";
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    const char *u = *end ? strchr(units, *end) : NULL;
    int shift = u ? 10 * (int)(u - units + 1) : 0;
    if (end == s || (*end && (!u || (end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B")))))
        return 0;
    return n > (~0ull >> shift) ? 0 : (size_t)(n << shift);
}

__attribute__((constructor)) static void read_limit(void)
{
    const char *s = getenv("SHIMGEN_MEMLIMIT");
    if (!s || !*s)
        return;
    limit = parse_size(s);
    if (limit)
        shimgen_hook_say("memlimit: device memory limited to %zu bytes", limit);
    else
        shimgen_hook_say("memlimit: SHIMGEN_MEMLIMIT=%s is not a size (2GiB, 512M); no limit", s);
}

#define HOME(key) ((unsigned)(((key) * 0x9E3779B97F4A7C15ull) >> 48) % SLOTS)

/* The slot of (key, kind), or the empty one where it would go (`for_insert`), else NULL. */
static struct slot *find(unsigned long long key, int kind, int for_insert)
{
    for (unsigned i = HOME(key);; i = (i + 1) % SLOTS) {
        if (table[i].kind == EMPTY)
            return for_insert ? &table[i] : NULL;
        if (table[i].kind == kind && table[i].key == key)
            return &table[i];
    }
}

/* Emptied by moving back the entries after it that would not be found past a hole. */
static void erase(struct slot *s)
{
    unsigned i = (unsigned)(s - table);
    for (unsigned j = (i + 1) % SLOTS; table[j].kind != EMPTY; j = (j + 1) % SLOTS) {
        unsigned h = HOME(table[j].key);
        if (i < j ? (h <= i || h > j) : (h <= i && h > j)) {
            table[i] = table[j];
            i = j;
        }
    }
    table[i].kind = EMPTY;
}

/* Before the driver is asked: room under the limit (and in the table: `slots` 1), taken. */
static int reserve(size_t size, unsigned slots)
{
    pthread_mutex_lock(&lock);
    int ok = size <= limit - used && live + slots <= SLOTS * 3 / 4;
    used += ok ? size : 0;
    live += ok ? slots : 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* After the driver answered (or to put back a free it refused): the allocation recorded,
 * or (rc not CUDA_SUCCESS) the reservation given back. */
static CUresult settle(CUresult rc, unsigned long long key, int kind, size_t size, int again)
{
    int ok = rc == CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (ok)
        *find(key, kind, 1) = (struct slot){key, size, kind};
    used = used + (again ? size : 0) - (ok ? 0 : size);
    live = live + (again ? 1u : 0u) - (ok ? 0u : 1u);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Before a free: its size taken off, so the address is never found twice (the driver may
 * hand it out again at once). Returns the size, 0 for an address not tracked. */
static size_t credit(unsigned long long key, int kind)
{
    pthread_mutex_lock(&lock);
    struct slot *s = find(key, kind, 0);
    size_t size = s ? s->size : 0;
    if (s) {
        erase(s);
        used -= size;
        live--;
    }
    pthread_mutex_unlock(&lock);
    return size;
}

#define ALLOC(size, kind, keyp, call)                                                         \
    do {                                                                                      \
        if (!limit)                                                                           \
            return call;                                                                      \
        if (!reserve(size, 1))                                                                \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                  \
        CUresult rc_ = call;                                                                  \
        return settle(rc_, rc_ == CUDA_SUCCESS ? *(keyp) : 0, kind, size, 0);                 \
    } while (0)

#define FREE(key, kind, call)                                                                 \
    do {                                                                                      \
        size_t size_ = limit ? credit(key, kind) : 0;                                         \
        CUresult rc_ = call;                                                                  \
        if (rc_ != CUDA_SUCCESS && size_) /* not freed: still counted */                      \
            settle(CUDA_SUCCESS, key, kind, size_, 1);                                        \
        return rc_;                                                                           \
    } while (0)

SHIMGEN_HOOK(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize))
{
    ALLOC(bytesize, PTR, dptr, SHIMGEN_REAL(cuMemAlloc_v2)(dptr, bytesize));
}

SHIMGEN_HOOK(CUresult, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream stream))
{
    ALLOC(bytesize, PTR, dptr, SHIMGEN_REAL(cuMemAllocAsync)(dptr, bytesize, stream));
}

SHIMGEN_HOOK(CUresult, cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned flags))
{
    ALLOC(bytesize, PTR, dptr, SHIMGEN_REAL(cuMemAllocManaged)(dptr, bytesize, flags));
}

SHIMGEN_HOOK(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *handle, size_t size,
                                     const CUmemAllocationProp *prop, unsigned long long flags))
{
    ALLOC(size, HANDLE, handle, SHIMGEN_REAL(cuMemCreate)(handle, size, prop, flags));
}

/* The pitch is the driver's choice: the allocation is made first, then counted or undone. */
SHIMGEN_HOOK(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *dptr, size_t *pitch, size_t width,
                                            size_t height, unsigned element))
{
    CUresult rc = SHIMGEN_REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, element);
    if (rc != CUDA_SUCCESS || !limit)
        return rc;
    if (reserve(*pitch * height, 1))
        return settle(rc, *dptr, PTR, *pitch * height, 0);
    SHIMGEN_REAL(cuMemFree_v2)(*dptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

SHIMGEN_HOOK(CUresult, cuMemFree_v2, (CUdeviceptr dptr))
{
    FREE(dptr, PTR, SHIMGEN_REAL(cuMemFree_v2)(dptr));
}

SHIMGEN_HOOK(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream))
{
    FREE(dptr, PTR, SHIMGEN_REAL(cuMemFreeAsync)(dptr, stream));
}

SHIMGEN_HOOK(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle))
{
    FREE(handle, HANDLE, SHIMGEN_REAL(cuMemRelease)(handle));
}

SHIMGEN_HOOK(CUresult, cuMemGetInfo_v2, (size_t *free_bytes, size_t *total))
{
    CUresult rc = SHIMGEN_REAL(cuMemGetInfo_v2)(free_bytes, total);
    if (rc != CUDA_SUCCESS || !limit)
        return rc;
    pthread_mutex_lock(&lock);
    size_t left = limit - used;
    pthread_mutex_unlock(&lock);
    *total = limit;
    *free_bytes = left < *free_bytes ? left : *free_bytes;
    return rc;
}
