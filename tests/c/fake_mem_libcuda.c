/* A FAKE libcuda for the user-hook tests: not NVIDIA's driver. It exports the allocation,
 * free and memory-info functions that examples/hooks/memlimit.c hooks, and cuLaunchKernel
 * for examples/hooks/launchlog.c, with behaviour the tests can check exactly: allocations
 * hand out increasing fake addresses (no memory behind them), cuMemGetInfo_v2 reports
 * FAKE_MEM_FREE bytes free (default 80 GiB) of 96 GiB, and a free of address 0 fails;
 * cuMemGetAddressRange_v2 says any address is of an allocation at 0x100000 of 0x123000
 * bytes, either output NULL (as NVIDIA's, which documents both as optional).
 * cuGetProcAddress(_v2) hands out the export of the name asked, as the real driver does for
 * these names. Built with SONAME libcuda.so.1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static unsigned long long next_address = 0x7f0000000000ull;

static CUdeviceptr take(size_t size)
{
    /* 2 MiB apart at least, as the real driver's allocations are */
    size_t step = (size + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    return __atomic_fetch_add(&next_address, step ? step : (2u << 20), __ATOMIC_RELAXED);
}

EXPORT CUresult cuInit(unsigned flags)
{
    return flags == 0 ? 0 : 1;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return 1;
    *v = 12040;
    return 0;
}

/* Functions shimgen hooks itself (shimgen/shim/hooks.py), so a shim can be made for this fake. */
EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
    if (!dev || ordinal != 0)
        return 101;
    *dev = 0;
    return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev)
{
    if (!value || dev != 0)
        return 101;
    *value = attribute == 1 ? 1024 : 0;
    return 0;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, unsigned long long dptr,
                                              size_t size, int type, unsigned long long flags)
{
    (void)handle;
    (void)dptr;
    (void)size;
    (void)type;
    (void)flags;
    return 801;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    if (!dptr || !size)
        return 1;
    *dptr = take(size);
    return 0;
}

/* The old ABI variant: another export, which a hook on cuMemAlloc_v2 does not reach. */
EXPORT CUresult cuMemAlloc(unsigned *dptr, unsigned size)
{
    if (!dptr || !size)
        return 1;
    *dptr = 0x1000;
    return 0;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, void *stream)
{
    (void)stream;
    return cuMemAlloc_v2(dptr, size);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
    (void)flags;
    return cuMemAlloc_v2(dptr, size);
}

/* Rows padded to 512 bytes. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned element)
{
    if (!dptr || !pitch || !width || !height || !element)
        return 1;
    *pitch = (width + 511) & ~(size_t)511;
    *dptr = take(*pitch * height);
    return 0;
}

EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop,
                            unsigned long long flags)
{
    (void)prop;
    if (!handle || !size || flags)
        return 1;
    static unsigned long long next_handle = 1;
    *handle = __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
    return 0;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return dptr ? 0 : 1;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, void *stream)
{
    (void)stream;
    return cuMemFree_v2(dptr);
}

EXPORT CUresult cuMemRelease(unsigned long long handle)
{
    return handle ? 0 : 1;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (!free_bytes || !total)
        return 1;
    const char *f = getenv("FAKE_MEM_FREE");
    *free_bytes = f ? strtoull(f, NULL, 10) : 80ull << 30;
    *total = 96ull << 30;
    return 0;
}

EXPORT CUresult cuMemGetAddressRange_v2(uint64_t *base, size_t *size, uint64_t dptr)
{
    if (!dptr)
        return 1;
    if (base)
        *base = 0x100000;
    if (size)
        *size = 0x123000;
    return 0;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, void *stream,
                               void **params, void **extra)
{
    (void)params;
    (void)extra;
    (void)stream;
    return f ? (CUresult)((gx * gy * gz + bx * by * bz + shmem) % 1000) : 1;
}

EXPORT CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shmem, void *stream,
                                    void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

struct entry {
    const char *name;
    void *fn;
};

static const struct entry entries[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged},
    {"cuMemAllocPitch", (void *)cuMemAllocPitch_v2},
    {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync},
    {"cuMemRelease", (void *)cuMemRelease},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    uint64_t flags, int *status)
{
    (void)version;
    if (!symbol || !pfn)
        return 1;
    *pfn = NULL;
    for (unsigned i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (strcmp(symbol, entries[i].name) == 0)
            *pfn = entries[i].fn;
    if (flags == 2 && strcmp(symbol, "cuLaunchKernel") == 0)
        *pfn = (void *)cuLaunchKernel_ptsz;
    if (status)
        *status = *pfn ? 0 : 1;
    return 0;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
