/* A FAKE libcuda for the memory ledger's tests: not NVIDIA's driver. Every allocation route
 * of shimgen/shim/memroutes.py hands out fake addresses and handles (no memory behind them)
 * and keeps its own totals, per column (a device, or "host" for pinned host memory and
 * memory at a host location), so a test compares the shim's ledger with them exactly
 * (fake_ledger_totals). A thread's current device is set by cuCtxSetCurrent((CUcontext)
 * (device + 1)); allocations that need a context fail without one (201). A forked child's
 * totals start from zero, as its ledger does. Built with SONAME libcuda.so.1.
 *
 * Pools and graphs: each device has a default pool; cuMemPoolCreate makes more (their
 * device their props' location). A pool reserves memory in 2 MiB chunks as its allocations
 * need it and keeps what they give back until a synchronisation (above its release
 * threshold) or cuMemPoolTrimTo; cuMemPoolGetAttribute says its reserved and used bytes
 * and their highs. A graph's memory allocation nodes (cuGraphAddMemAllocNode, or
 * cuMemAllocAsync while its stream captures) take their memory from the device's graph
 * reservation at the first launch of an instance (2 MiB chunks, kept until
 * cuDeviceGraphMemTrim); cuDeviceGetGraphMemAttribute says it. The fake keeps per column
 * the pools' and the graphs' four numbers and the peak of what is held by the other routes
 * plus what pools and graphs reserve (fake_ledger_totals). Streams run at once.
 *
 * As a driver does, it pads: a pitched allocation's rows to 512 bytes (the largest of the
 * device's pitch alignments, cuDeviceGetAttribute's TEXTURE_ALIGNMENT; TEXTURE_PITCH_
 * ALIGNMENT says 32), an array's rows (width times element) the same; and it hands a freed
 * address (or array, or host pointer) out again, the most recently freed first. With
 * FAKE_LEDGER_JITTER set, an allocation yields the processor at random after it took its
 * bytes and a free before it gives them back, so that other threads' calls come in between
 * (the fake's peak, the most it held at once, is then the driver's worst case).
 * FAKE_LEDGER_ADDRESSES (hex, comma-separated) are the addresses its device allocations hand
 * out first, in order, so that a test places the ledger's entries in slots of its choosing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define COLS 5 /* devices 0..3, then the host */
#define HOSTCOL 4
#define MAXA 4096

typedef int CUresult;
typedef unsigned long long u64;

static __thread int current = -1;
static u64 next_address = 0x7f0000000000ull, next_handle = 0x1000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc {
    u64 key;
    u64 size;
    int col, refs, kind; /* kind: 1 address, 2 handle, 3 array, 4 host */
    const char *fn;
    struct fpool *pool; /* an allocation from a pool: the pool */
} allocs[MAXA];
static struct {
    const char *fn;
    u64 bytes, calls;
} taken[64];

/* Pools (a column's default pool is pool (column + 1) << 8) and graph memory. */
#define MAXP 80 /* more than the shim follows (reserve.c: 64) */
#define CHUNK (2ull << 20)
#define UP(n) (((n) + CHUNK - 1) / CHUNK * CHUNK)
static struct fpool {
    u64 handle, reserved, reserved_high, used, used_high, threshold;
    int col, live;
} fpools[MAXP];
static u64 next_pool = 0x100000, current_pool[COLS];
static u64 graph_mem[COLS][4];   /* reserved, reserved high, used, used high */
static u64 pool_high_sum[COLS], used_high_sum[COLS]; /* the most the column's live pools'
                                                      * highs summed to */
static u64 footprint_peak[COLS]; /* the most held (pools' allocations apart) and reserved */
static u64 pool_held[COLS];      /* what the pool allocations hold, per column */

static u64 held[COLS], peak[COLS], live[COLS];

/* Freed keys of addresses, arrays and host pointers, handed out again (most recent first). */
#define REUSE 64
static u64 reuse[5][REUSE];
static int nreuse[5];
static int jitter;
static u64 device_free = 80ull << 30; /* FAKE_LEDGER_FREE: what cuMemGetInfo_v2 says free */
static int align_says = 512; /* FAKE_LEDGER_ALIGN_SAYS: TEXTURE_ALIGNMENT, less than it pads */
static u64 given[64]; /* FAKE_LEDGER_ADDRESSES: handed out first, in order */
static int ngiven, nextgiven;

/* As a driver checks what it is passed: 1 when n bytes at p can be read. */
static int readable(const void *p, size_t n)
{
    char buf[64];
    struct iovec local = {buf, n}, remote = {(void *)p, n};
    return p && n <= sizeof buf && process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
                                       (ssize_t)n;
}
static __thread unsigned jitter_seed;

static void maybe_yield(void)
{
    if (!jitter_seed)
        jitter_seed = (unsigned)(uintptr_t)&jitter_seed | 1;
    if (jitter && (rand_r(&jitter_seed) & 3) == 0)
        sched_yield();
}

static void note_footprint(void)
{
    for (int c = 0; c < COLS; c++) {
        u64 f = held[c] - pool_held[c] + graph_mem[c][0], highs = 0, used_highs = 0;
        for (int i = 0; i < MAXP; i++)
            if (fpools[i].live && fpools[i].col == c) {
                f += fpools[i].reserved, highs += fpools[i].reserved_high;
                used_highs += fpools[i].used_high;
            }
        if (used_highs > used_high_sum[c])
            used_high_sum[c] = used_highs;
        if (f > footprint_peak[c])
            footprint_peak[c] = f;
        if (highs > pool_high_sum[c])
            pool_high_sum[c] = highs;
    }
}

static void count_call(const char *fn, u64 bytes)
{
    for (int i = 0; i < 64; i++)
        if (!taken[i].fn || strcmp(taken[i].fn, fn) == 0) {
            taken[i].fn = fn;
            taken[i].bytes += bytes;
            taken[i].calls++;
            return;
        }
}

static void pool_give_back(struct fpool *p, int col, u64 size)
{
    p->used -= size;
    pool_held[col] -= size;
}

/* A new allocation, the lock held. */
static u64 add_locked(const char *fn, int kind, int col, u64 size, u64 key)
{
    if (!key && kind == 1 && nextgiven < ngiven)
        key = given[nextgiven++];
    else if (!key && kind != 2 && nreuse[kind])
        key = reuse[kind][--nreuse[kind]];
    else if (!key)
        key = kind == 2 ? next_handle++
                        : (next_address += (size + (2u << 20)) & ~((2ull << 20) - 1));
    for (int i = 0; i < MAXA; i++)
        if (!allocs[i].kind) {
            allocs[i] = (struct alloc){key, size, col, 1, kind, fn, NULL};
            break;
        }
    held[col] += size;
    live[col]++;
    if (held[col] > peak[col])
        peak[col] = held[col];
    count_call(fn, size);
    return key;
}

static u64 add(const char *fn, int kind, int col, u64 size, u64 key)
{
    pthread_mutex_lock(&lock);
    key = add_locked(fn, kind, col, size, key);
    note_footprint();
    pthread_mutex_unlock(&lock);
    maybe_yield(); /* (the bytes taken, the call not returned) */
    return key;
}

/* A free (or a handle's release): 0, or 1 when the fake holds no such thing. */
static CUresult drop(int kind, u64 key)
{
    maybe_yield(); /* (the call made, the bytes not given back) */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].kind == kind && allocs[i].key == key) {
            if (--allocs[i].refs == 0) {
                held[allocs[i].col] -= allocs[i].size;
                live[allocs[i].col]--;
                if (kind != 2 && nreuse[kind] < REUSE)
                    reuse[kind][nreuse[kind]++] = key;
                allocs[i].kind = 0;
                if (allocs[i].pool)
                    pool_give_back(allocs[i].pool, allocs[i].col, allocs[i].size);
                note_footprint();
            }
            pthread_mutex_unlock(&lock);
            return 0;
        }
    pthread_mutex_unlock(&lock);
    return 1;
}

static void child_own(void)
{
    memset(allocs, 0, sizeof allocs);
    memset(held, 0, sizeof held);
    memset(peak, 0, sizeof peak);
    memset(live, 0, sizeof live);
    memset(taken, 0, sizeof taken);
    memset(fpools, 0, sizeof fpools);
    memset(graph_mem, 0, sizeof graph_mem);
    memset(pool_high_sum, 0, sizeof pool_high_sum);
    memset(used_high_sum, 0, sizeof used_high_sum);
    memset(footprint_peak, 0, sizeof footprint_peak);
    memset(pool_held, 0, sizeof pool_held);
    memset(current_pool, 0, sizeof current_pool);
    memset(nreuse, 0, sizeof nreuse);
    pthread_mutex_init(&lock, NULL);
}

/* Its devices: FAKE_LEDGER_DEVICES (1 to 4), 4 without it; the calls of cuCtxGetDevice. */
static int devices = COLS - 1;
static unsigned long long device_asked;

__attribute__((constructor)) static void fake_load(void)
{
    pthread_atfork(NULL, NULL, child_own);
    const char *d = getenv("FAKE_LEDGER_DEVICES");
    if (d && *d >= '1' && *d <= '0' + COLS - 1)
        devices = *d - '0';
    jitter = getenv("FAKE_LEDGER_JITTER") != NULL;
    if (getenv("FAKE_LEDGER_ALIGN_SAYS"))
        align_says = atoi(getenv("FAKE_LEDGER_ALIGN_SAYS"));
    if (getenv("FAKE_LEDGER_FREE"))
        device_free = strtoull(getenv("FAKE_LEDGER_FREE"), NULL, 10);
    for (const char *a = getenv("FAKE_LEDGER_ADDRESSES"); a && *a && ngiven < 64; a++) {
        char *end;
        given[ngiven++] = strtoull(a, &end, 16);
        a = end;
        if (*a != ',')
            break;
    }
}

/* The fake's own totals as one line of JSON into buf (what the tests compare). */
EXPORT int fake_ledger_totals(char *buf, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "{\"columns\": {");
    for (int c = 0; c < COLS; c++) {
        char name[8];
        snprintf(name, sizeof name, c == HOSTCOL ? "host" : "%d", c);
        n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\": [%llu, %llu, %llu]", c ? ", " : "",
                              name, peak[c], held[c], live[c]);
    }
    n += (size_t)snprintf(buf + n, cap - n, "}, \"taken\": {");
    for (int i = 0; i < 64 && taken[i].fn; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\": [%llu, %llu]", i ? ", " : "",
                              taken[i].fn, taken[i].bytes, taken[i].calls);
    n += (size_t)snprintf(buf + n, cap - n, "}, \"reserve\": {");
    for (int c = 0; c < COLS; c++) {
        u64 p[4] = {0, pool_high_sum[c], 0, used_high_sum[c]};
        for (int i = 0; i < MAXP; i++)
            if (fpools[i].live && fpools[i].col == c)
                p[0] += fpools[i].reserved, p[2] += fpools[i].used;
        char name[8];
        snprintf(name, sizeof name, c == HOSTCOL ? "host" : "%d", c);
        n += (size_t)snprintf(buf + n, cap - n,
                              "%s\"%s\": [%llu, [%llu, %llu, %llu, %llu], "
                              "[%llu, %llu, %llu, %llu]]",
                              c ? ", " : "", name, footprint_peak[c], p[0], p[1], p[2], p[3],
                              graph_mem[c][0], graph_mem[c][1], graph_mem[c][2],
                              graph_mem[c][3]);
    }
    n += (size_t)snprintf(buf + n, cap - n, "}, \"device_asked\": %llu}",
                          __atomic_load_n(&device_asked, __ATOMIC_RELAXED));
    return 0;
}

EXPORT CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
EXPORT CUresult cuDriverGetVersion(int *v) { return v ? (*v = 12040, 0) : 1; }
EXPORT CUresult cuDeviceGet(int *dev, int ordinal) { return dev ? (*dev = ordinal, 0) : 1; }
#define PITCH 512 /* TEXTURE_ALIGNMENT (14); TEXTURE_PITCH_ALIGNMENT (51) is 32 */
EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev)
{
    (void)dev;
    if (!value)
        return 1;
    *value = attribute == 14 ? align_says : attribute == 51 ? 32 : 0;
    return 0;
}
EXPORT CUresult cuMemGetHandleForAddressRange(void *h, u64 d, size_t s, int t, u64 f)
{
    (void)h, (void)d, (void)s, (void)t, (void)f;
    return 801;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
    current = (int)(intptr_t)ctx - 1;
    return 0;
}
EXPORT CUresult cuDeviceGetCount(int *n) { return n ? (*n = devices, 0) : 1; }
EXPORT CUresult cuCtxGetDevice(int *dev)
{
    __atomic_fetch_add(&device_asked, 1, __ATOMIC_RELAXED);
    if (current < 0)
        return 201;
    *dev = current;
    return 0;
}

#define NEEDS_CONTEXT if (current < 0) return 201
#define DEVICE_ALLOC(name, ...)                                                            \
    EXPORT CUresult name(u64 *p, size_t n, ##__VA_ARGS__)                                   \
    {                                                                                       \
        NEEDS_CONTEXT;                                                                      \
        if (!p || !n)                                                                       \
            return 1;                                                                       \
        *p = add(#name, 1, current, n, 0);                                                  \
        return 0;                                                                           \
    }
#pragma GCC diagnostic ignored "-Wunused-parameter"
DEVICE_ALLOC(cuMemAlloc_v2)
DEVICE_ALLOC(cuMemAllocManaged, unsigned flags)
#pragma GCC diagnostic warning "-Wunused-parameter"

/* Rows padded to PITCH bytes. */
EXPORT CUresult cuMemAllocPitch_v2(u64 *p, size_t *pitch, size_t w, size_t h, unsigned e)
{
    NEEDS_CONTEXT;
    if (!p || !pitch || !w || !h || !e)
        return 1;
    *pitch = (w + PITCH - 1) & ~(size_t)(PITCH - 1);
    *p = add("cuMemAllocPitch_v2", 1, current, *pitch * h, 0);
    return 0;
}

EXPORT CUresult cuMemCreate(u64 *handle, size_t n, const void *prop, u64 flags)
{
    int loc[2];
    if (!handle || !n || !readable(prop, 16) || flags)
        return 1;
    memcpy(loc, (const char *)prop + 8, sizeof loc); /* CUmemLocation {type, id} */
    int col = loc[0] == 1 ? loc[1] : HOSTCOL;
    if (col < 0 || col >= COLS)
        return 101;
    *handle = add("cuMemCreate", 2, col, n, 0);
    return 0;
}

EXPORT CUresult cuMemRetainAllocationHandle(u64 *handle, void *addr)
{
    /* the fake maps each handle at the address equal to its value */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].kind == 2 && allocs[i].key == (u64)(uintptr_t)addr) {
            allocs[i].refs++;
            *handle = allocs[i].key;
            pthread_mutex_unlock(&lock);
            return 0;
        }
    pthread_mutex_unlock(&lock);
    return 1;
}

/* An imported handle: 0 bytes (the exporter's memory), on the device the "shareable
 * handle" names. */
EXPORT CUresult cuMemImportFromShareableHandle(u64 *handle, void *os, int type)
{
    if (!handle || type != 1 || (uintptr_t)os >= HOSTCOL)
        return 1;
    *handle = add("cuMemImportFromShareableHandle", 2, (int)(uintptr_t)os, 0, 0);
    return 0;
}

EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(void *prop, u64 handle)
{
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].kind == 2 && allocs[i].key == handle) {
            int loc[2] = {allocs[i].col == HOSTCOL ? 2 : 1, allocs[i].col};
            memset(prop, 0, 32);
            memcpy((char *)prop + 8, loc, sizeof loc);
            return 0;
        }
    return 1;
}

static u64 element(int format)
{
    return format == 0x01 ? 1 : format == 0x10 ? 2 : 4;
}

/* An array's rows padded to PITCH bytes, a zero height or depth one row. */
static u64 extent(size_t w, size_t h, size_t d, int format, unsigned ch)
{
    u64 row = ((u64)w * element(format) * ch + PITCH - 1) / PITCH * PITCH;
    return row * (h ? h : 1) * (d ? d : 1);
}

EXPORT CUresult cuArrayCreate_v2(void **a, const size_t *desc)
{
    NEEDS_CONTEXT;
    if (!a || !readable(desc, 32))
        return 1;
    int format = ((const int *)desc)[4];
    unsigned ch = ((const unsigned *)desc)[5];
    *a = (void *)(uintptr_t)add("cuArrayCreate_v2", 3, current,
                                extent(desc[0], desc[1], 1, format, ch), 0);
    return 0;
}

EXPORT CUresult cuArray3DCreate_v2(void **a, const size_t *desc)
{
    NEEDS_CONTEXT;
    if (!a || !readable(desc, 32))
        return 1;
    int format = ((const int *)desc)[6];
    unsigned ch = ((const unsigned *)desc)[7];
    *a = (void *)(uintptr_t)add("cuArray3DCreate_v2", 3, current,
                                extent(desc[0], desc[1], desc[2], format, ch), 0);
    return 0;
}

EXPORT CUresult cuMipmappedArrayCreate(void **a, const size_t *desc, unsigned levels)
{
    NEEDS_CONTEXT;
    if (!a || !readable(desc, 32))
        return 1;
    int format = ((const int *)desc)[6];
    unsigned ch = ((const unsigned *)desc)[7];
    size_t w = desc[0], h = desc[1], d = desc[2];
    u64 sum = 0;
    for (unsigned l = 0; l < levels; l++) {
        sum += extent(w, h, d, format, ch);
        w = w > 1 ? w / 2 : w, h = h > 1 ? h / 2 : h, d = d > 1 ? d / 2 : d;
    }
    *a = (void *)(uintptr_t)add("cuMipmappedArrayCreate", 3, current, sum, 0);
    return 0;
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    *p = (void *)(uintptr_t)add("cuMemHostAlloc", 4, HOSTCOL, n, 0);
    return 0;
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n)
{
    *p = (void *)(uintptr_t)add("cuMemAllocHost_v2", 4, HOSTCOL, n, 0);
    return 0;
}

#include "fake_ledger_pools.h"
/* (while capturing: a graph's free node, nothing freed now) */
EXPORT CUresult cuMemFree_v2(u64 p) { return drop(1, p); }
EXPORT CUresult cuMemFreeAsync(u64 p, void *s) { return (void)s, capturing ? 0 : drop(1, p); }
EXPORT CUresult cuMemFreeAsync_ptsz(u64 p, void *s)
{
    return (void)s, capturing ? 0 : drop(1, p);
}
EXPORT CUresult cuMemRelease(u64 h) { return drop(2, h); }
EXPORT CUresult cuArrayDestroy(void *a) { return drop(3, (u64)(uintptr_t)a); }
EXPORT CUresult cuMipmappedArrayDestroy(void *a) { return drop(3, (u64)(uintptr_t)a); }
EXPORT CUresult cuMemFreeHost(void *p) { return drop(4, (u64)(uintptr_t)p); }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    NEEDS_CONTEXT;
    *free_bytes = device_free;
    *total = 96ull << 30;
    return 0;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
    (void)dev;
    *bytes = 96ull << 30;
    return 0;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags,
                                    int *status)
{
    (void)symbol, (void)version, (void)flags;
    *pfn = NULL;
    if (status)
        *status = 1;
    return 0;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
