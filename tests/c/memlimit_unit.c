/* examples/hooks/memlimit.c as a unit (tests/run/test_userhooks.py): compiled with this file and
 * a small table (-DSLOTS=16, so that slots collide and wrap round), its hooks called
 * directly, the driver's functions played by the shimgen_real_* below: allocations at the
 * addresses given on the command line, so the test picks colliding ones. Prints "ok N" or
 * the first failed check. Run with SHIMGEN_MEMLIMIT set (the hook reads it at load). */
#include <shimgen/hook.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long long next_addr[64];
static int naddr, taken;
static size_t real_free = 1ull << 40;

void shimgen_hook_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

#define REAL(ret, name, params) ret shimgen_real_##name params; ret shimgen_real_##name params
REAL(CUresult, cuMemAlloc_v2, (CUdeviceptr *p, size_t n))
{
    (void)n;
    *p = next_addr[taken++ % naddr];
    return CUDA_SUCCESS;
}
REAL(CUresult, cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s))
{
    (void)s;
    return shimgen_real_cuMemAlloc_v2(p, n);
}
REAL(CUresult, cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned f))
{
    (void)f;
    return shimgen_real_cuMemAlloc_v2(p, n);
}
REAL(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *h, size_t n,
                             const CUmemAllocationProp *p, unsigned long long f))
{
    (void)p;
    (void)f;
    return shimgen_real_cuMemAlloc_v2(h, n);
}
REAL(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
                                    unsigned e))
{
    (void)e;
    *pitch = (w + 511) & ~(size_t)511;
    return shimgen_real_cuMemAlloc_v2(p, *pitch * h);
}
REAL(CUresult, cuMemFree_v2, (CUdeviceptr p))
{
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
REAL(CUresult, cuMemFreeAsync, (CUdeviceptr p, CUstream s))
{
    (void)s;
    return shimgen_real_cuMemFree_v2(p);
}
REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle h))
{
    return h == 0xbad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
REAL(CUresult, cuMemGetInfo_v2, (size_t *f, size_t *t))
{
    *f = real_free;
    *t = 1ull << 41;
    return CUDA_SUCCESS;
}

#define HOOK(name) shimgen_user_hook_##name
CUresult HOOK(cuMemAlloc_v2)(CUdeviceptr *, size_t);
CUresult HOOK(cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
CUresult HOOK(cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
CUresult HOOK(cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                           unsigned long long);
CUresult HOOK(cuMemAllocPitch_v2)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult HOOK(cuMemFree_v2)(CUdeviceptr);
CUresult HOOK(cuMemFreeAsync)(CUdeviceptr, CUstream);
CUresult HOOK(cuMemRelease)(CUmemGenericAllocationHandle);
CUresult HOOK(cuMemGetInfo_v2)(size_t *, size_t *);

static int checks;
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            printf("failed line %d: %s\n", __LINE__, #cond);                                  \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static size_t free_now(void)
{
    size_t f = 0, t = 0;
    CHECK(HOOK(cuMemGetInfo_v2)(&f, &t) == CUDA_SUCCESS);
    return f;
}

/* argv[1]: the limit the environment gave, in bytes; argv[2..]: the addresses to hand out */
int main(int argc, char **argv)
{
    size_t limit = strtoull(argv[1], NULL, 0);
    for (int a = 2; a < argc && naddr < 64; a++)
        next_addr[naddr++] = strtoull(argv[a], NULL, 0);
    size_t unit = limit / 8, t = 0, f = 0;
    CUdeviceptr p[8];
    CHECK(HOOK(cuMemGetInfo_v2)(&f, &t) == CUDA_SUCCESS && t == limit && f == limit);
    for (int i = 0; i < 8; i++) /* every address handed out: colliding slots fill up */
        CHECK(HOOK(cuMemAlloc_v2)(&p[i], unit) == CUDA_SUCCESS);
    CHECK(free_now() == limit - 8 * unit);
    CUdeviceptr extra;
    CHECK(HOOK(cuMemAlloc_v2)(&extra, limit - 8 * unit + 1) == CUDA_ERROR_OUT_OF_MEMORY);
    for (int i = 0; i < 8; i += 2) /* holes in the collision chains */
        CHECK(HOOK(cuMemFree_v2)(p[i]) == CUDA_SUCCESS);
    CHECK(free_now() == limit - 4 * unit);
    for (int i = 1; i < 8; i += 2) /* each found past the holes */
        CHECK(HOOK(cuMemFreeAsync)(p[i], NULL) == CUDA_SUCCESS);
    CHECK(free_now() == limit);
    CHECK(HOOK(cuMemFree_v2)(p[1]) == CUDA_SUCCESS && free_now() == limit); /* twice: no credit */
    CUmemGenericAllocationHandle h;
    CHECK(HOOK(cuMemCreate)(&h, limit, NULL, 0) == CUDA_SUCCESS && free_now() == 0);
    CHECK(HOOK(cuMemAllocManaged)(&extra, 1, 1) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(HOOK(cuMemAllocAsync)(&extra, 1, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(HOOK(cuMemRelease)(h) == CUDA_SUCCESS && free_now() == limit);
    size_t pitch;
    CHECK(HOOK(cuMemAllocPitch_v2)(&extra, &pitch, 1000, 4, 4) == CUDA_SUCCESS && pitch == 1024);
    CHECK(free_now() == limit - 4096);
    CHECK(HOOK(cuMemAllocPitch_v2)(&extra, &pitch, limit / 4, 4, 4) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(free_now() == limit - 4096);
    real_free = 100; /* never more free than the device has */
    CHECK(free_now() == 100);
    real_free = 1ull << 40;
    /* a free the driver refuses keeps the allocation counted */
    next_addr[0] = 0xbad;
    naddr = 1;
    CHECK(HOOK(cuMemCreate)(&h, unit, NULL, 0) == CUDA_SUCCESS && h == 0xbad);
    CHECK(HOOK(cuMemRelease)(h) == CUDA_ERROR_INVALID_VALUE);
    CHECK(free_now() == limit - 4096 - unit);
    printf("ok %d\n", checks);
    return 0;
}
