/*
 * hooks_memory.c: the hooks of the memory routes (shimgen/shim/memroutes.py, docs/memory.md),
 * one family per kind of route (MEM_KIND_<kind>), each defined for every route of the
 * driver by the list the build renders (memroutes.inc: MEM_ROUTE(kind, name, index)). An
 * allocation asks the ledger (ledger.c) first, which may refuse it for the limit
 * (CUDA_ERROR_OUT_OF_MEMORY, the driver never called), then tells it what the driver
 * answered; a free takes its entry out first and puts it back when the driver refuses it.
 * Installed when a run traces into a directory or has a limit (feature "memory"); the
 * answers of cuMemGetInfo_v2 and cuDeviceTotalMem_v2 only with a limit (feature "limit"; a
 * shared budget's size is one).
 * cuMemCreate's hook also applies the gates (a GPUDirect RDMA allocation, hooks_gates.c).
 *
 * The families are macros in routes.h, expanded here, where the columns' helpers are.
 *
 * The functions the ledger watches (memroutes.py WATCHES, MEM_WATCH(kind, name)): those that
 * change a thread's current context bump an epoch, so that an allocation asks the driver
 * for its device only when a context may have changed since the thread last asked; those
 * of pools and graphs tell reserve.c what to ask the driver again.
 */

#include <string.h>

#include "memory.h"
#include "base/base.h"
#include "budget/budget.h"
#include "gates/gates.h"

#define OOM SHIMGEN_CUDA_ERROR_OUT_OF_MEMORY
/* (a driver with only some routes, a test's fake, uses only some of the helpers) */
#define UNUSED_OK __attribute__((unused))

static int said_device UNUSED_OK;

static int devices UNUSED_OK; /* the driver's device count once it said it; 0: not yet */

/* Bumped before and after every function that can change a thread's current context (the
 * "context" watches): a thread's cached device is good while the epoch it was asked at is
 * the epoch now. (Asked before the driver is: a bump during the call makes the next
 * allocation ask again.) Starts at 1: a thread's cache of 0 was never asked. */
static uint64_t ctx_epoch UNUSED_OK = 1;
static __thread struct {
    uint64_t epoch;
    int column;
} ctx_cache __attribute__((tls_model("initial-exec"), unused));

static UNUSED_OK void ctx_changed(void)
{
    __atomic_fetch_add(&ctx_epoch, 1, __ATOMIC_RELEASE);
}

#ifdef SHIMGEN_IDX_cuDeviceGetCount
/* The driver's device count, kept once it says it (before cuInit it cannot: asked again). */
static __attribute__((noinline)) int count_devices(void)
{
    int n = 0;
    if (REAL(cuDeviceGetCount, int *)(&n) == SHIMGEN_CUDA_SUCCESS && n > 0)
        __atomic_store_n(&devices, n, __ATOMIC_RELAXED);
    return n;
}
#endif

/* The device of the current context asked of the driver, kept for the thread with the
 * epoch it was asked at (a failure, no context, is not kept). */
static __attribute__((noinline, unused)) int ask_device(uint64_t epoch)
{
#ifdef SHIMGEN_IDX_cuCtxGetDevice
#ifdef SHIMGEN_IDX_cuDeviceGetCount
    if (!__atomic_load_n(&devices, __ATOMIC_RELAXED) && count_devices() == 1)
        return 0;
#endif
    int dev;
    if (REAL(cuCtxGetDevice, int *)(&dev) != SHIMGEN_CUDA_SUCCESS)
        return -1;
    int column = (unsigned)dev < SHIMGEN_MEM_DEVICES ? dev : -1;
    if (column < 0 && dev >= 0 && !__atomic_exchange_n(&said_device, 1, __ATOMIC_RELAXED))
        shimgen_say("shimgen: device %d is past the memory ledger's %u devices: its "
                    "allocations are not followed\n", dev, SHIMGEN_MEM_DEVICES);
    ctx_cache.column = column;
    ctx_cache.epoch = epoch;
    return column;
#else
    (void)epoch;
    return -1;
#endif
}

/* The device of the calling thread's current context, as the allocation uses it; -1 when
 * there is none or its ordinal has no column. With one device, device 0 without asking;
 * with several, the thread's cached answer while no context may have changed (asked after
 * a success, or before a call that fails without a context). */
static UNUSED_OK int device_column(void)
{
    if (__builtin_expect(__atomic_load_n(&devices, __ATOMIC_RELAXED) == 1, 1))
        return 0;
    uint64_t epoch = __atomic_load_n(&ctx_epoch, __ATOMIC_ACQUIRE);
    if (__builtin_expect(ctx_cache.epoch == epoch, 1))
        return ctx_cache.column;
    return ask_device(epoch);
}

/* What the program passed, read without faulting (saferead.h): 1 when all n bytes were. A
 * struct that cannot be read is no reason to fault where the driver would answer: the
 * call is forwarded untouched (its column -1, not limited; untracked if the driver took it). */
static UNUSED_OK int read_in(void *dst, const void *src, size_t n)
{
    return src && shimgen_safe_read(dst, src, n) == (long)n;
}

/* Where a CUmemAllocationProp puts its memory: a device location's ordinal, or the host
 * column for any other location (host, host NUMA); never a current context. -1 when it
 * cannot be read. */
static UNUSED_OK int location_column(const void *prop)
{
    int loc[2]; /* CUmemLocation {type, id} */
    if (!read_in(loc, (const char *)prop + SHIMGEN_MEM_PROP_LOCATION_OFFSET, sizeof loc))
        return -1;
    if (loc[0] != SHIMGEN_MEM_LOCATION_TYPE_DEVICE)
        return SHIMGEN_MEM_HOST_COLUMN;
    return loc[1] >= 0 && loc[1] < (int)SHIMGEN_MEM_DEVICES ? loc[1] : -1;
}

/* An imported handle's column: its location, asked of the driver (0 bytes are counted: the
 * memory is its exporter's); -1 when the driver cannot say. */
static UNUSED_OK int import_column(uint64_t handle)
{
#ifdef SHIMGEN_IDX_cuMemGetAllocationPropertiesFromHandle
    unsigned char prop[64] = {0}; /* CUmemAllocationProp is 32 bytes; room to spare */
    if (REAL(cuMemGetAllocationPropertiesFromHandle, void *, uint64_t)(prop, handle) ==
        SHIMGEN_CUDA_SUCCESS)
        return location_column(prop);
#else
    (void)handle;
#endif
    return -1;
}

/* A pool's device: the ledger's record of it, else the current context's. */
static UNUSED_OK int pool_device(uint64_t pool)
{
    int c = shimgen_pool_column(pool);
    return c >= 0 ? c : device_column();
}

static UNUSED_OK uint64_t times(uint64_t a, uint64_t b)
{
    uint64_t p;
    return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}

/* The most a device pads a row to: the largest of its pitch alignments
 * (SHIMGEN_PITCH_ALIGNMENT_ATTRS), asked of the driver once per device (1 while it cannot
 * say: before cuInit, when no allocation succeeds either). */
static uint64_t row_align[SHIMGEN_MEM_DEVICES] UNUSED_OK;

static UNUSED_OK uint64_t padded_row(int col, uint64_t bytes)
{
    if (col < 0 || col >= (int)SHIMGEN_MEM_DEVICES)
        return bytes;
    uint64_t a = __atomic_load_n(&row_align[col], __ATOMIC_RELAXED);
#ifdef SHIMGEN_IDX_cuDeviceGetAttribute
    if (!a) {
        static const int attrs[] = SHIMGEN_PITCH_ALIGNMENT_ATTRS;
        for (unsigned k = 0; k < sizeof attrs / sizeof *attrs; k++) {
            int v = 0;
            if (REAL(cuDeviceGetAttribute, int *, int, int)(&v, attrs[k], col) ==
                    SHIMGEN_CUDA_SUCCESS && v > 0 && (uint64_t)v > a)
                a = (uint64_t)v;
        }
        if (a)
            __atomic_store_n(&row_align[col], a, __ATOMIC_RELAXED);
    }
#endif
    if (a <= 1)
        return bytes;
    return bytes > UINT64_MAX - (a - 1) ? UINT64_MAX : (bytes + a - 1) / a * a;
}

/* Bytes of an array: its rows (a zero height or depth is one row) of its width times its
 * element, each padded as a pitched row is. */
static UNUSED_OK uint64_t array_bytes(int col, const uint64_t ext[3], int format,
                                     unsigned channels)
{
    uint64_t element = 4;
#define FORMAT(f, n) if (format == (f)) element = (n);
    SHIMGEN_FOR_EACH_ARRAY_FORMAT(FORMAT)
#undef FORMAT
    uint64_t row = padded_row(col, times(ext[0], times(element, channels)));
    return times(row, times(ext[1] ? ext[1] : 1, ext[2] ? ext[2] : 1));
}

/* An array descriptor (CUDA_ARRAY_DESCRIPTOR, dims 2: width, height, format, channels;
 * CUDA_ARRAY3D_DESCRIPTOR, dims 3: width, height, depth, format, channels), read without
 * faulting; 0 when it cannot be. */
struct desc {
    uint64_t ext[3];
    int format;
    unsigned channels;
};
static UNUSED_OK int read_desc(const void *d, int dims, struct desc *out)
{
    size_t raw[3] = {0, 0, 1};
    int fc[2];
    if (!read_in(raw, d, dims * sizeof *raw) ||
        !read_in(fc, (const char *)d + dims * sizeof *raw, sizeof fc))
        return 0;
    for (int k = 0; k < 3; k++)
        out->ext[k] = raw[k];
    out->format = fc[0];
    out->channels = (unsigned)fc[1];
    return 1;
}

/* An array's column: the current context's device, -1 when its descriptor cannot be read. */
static UNUSED_OK int array_column(const void *d, int dims)
{
    struct desc x;
    return read_desc(d, dims, &x) ? device_column() : -1;
}

/* Bytes of an array of `levels` levels (0 and 1: one), each level's extent halved. */
static UNUSED_OK uint64_t levels_bytes(int col, const void *d, int dims, unsigned levels)
{
    struct desc x;
    if (!read_desc(d, dims, &x))
        return 0;
    uint64_t sum = 0;
    for (unsigned l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t b = array_bytes(col, x.ext, x.format, x.channels);
        sum = sum > UINT64_MAX - b ? UINT64_MAX : sum + b;
        for (int k = 0; k < 3; k++)
            x.ext[k] = x.ext[k] > 1 ? x.ext[k] / 2 : x.ext[k];
    }
    return sum;
}

/* A pitched allocation the driver made larger than its bound: given back (to be refused). */
static UNUSED_OK void free_pitched(uint64_t p)
{
#ifdef SHIMGEN_IDX_cuMemFree_v2
    REAL(cuMemFree_v2, uint64_t)(p);
#else
    (void)p;
#endif
}

/* An allocation from a pool (the device's current one for cuMemAllocAsync): on the pool's
 * device when the ledger knows the pool, else the current context's. Inside a stream
 * capture it is a graph's allocation, taken when the graph is launched (the graphs'
 * reservation counts it, not this route). After it, the pool's reservation asked again. */
static UNUSED_OK shimgen_CUresult pool_taken(shimgen_CUresult rc, const uint64_t *p, size_t n,
                                            uint64_t pool, void *s, int col, unsigned r,
                                            const uint64_t *held_back)
{
    int captured = rc == SHIMGEN_CUDA_SUCCESS && shimgen_in_capture(s);
    if (rc == SHIMGEN_CUDA_SUCCESS && p && !captured)
        shimgen_ledger_settle(col, LEDGER_META(r, LEDGER_ADDR), n, *p, held_back);
    else if (held_back[0])
        shimgen_ledger_settle(col, LEDGER_META(r, 0), 0, 0, held_back);
    if (rc == SHIMGEN_CUDA_SUCCESS && captured)
        shimgen_graph_alloc(col);
    else if (rc == SHIMGEN_CUDA_SUCCESS)
        shimgen_pool_refresh(pool ? pool : shimgen_device_pool(col));
    return rc;
}

#include "routes.h"

#define MEM_ROUTE(kind, name, index) MEM_KIND_##kind(name, index)
#define MEM_WATCH(kind, name) MEM_WATCH_##kind(name)
#include "memroutes.inc"
#undef MEM_ROUTE
#undef MEM_WATCH
