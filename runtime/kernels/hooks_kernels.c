/*
 * hooks_kernels.c: the hooks of feature "kernels" (shimgen/shim/hooks.py KERNEL_HOOKS):
 * the functions that make a handle learn its name, the launches count it by kernel and
 * stream (table.c). Installed when a run traces into a directory; no other function pays.
 *
 * A name comes from the program's own argument (cuModuleGetFunction, cuLibraryGetKernel:
 * read through shimgen_safe_string after the driver's success, the handle it wrote through
 * shimgen_safe_read), from the kernel a function was made of (cuKernelGetFunction), or,
 * for a handle first seen at a launch, from the driver, asked once (cuFuncGetName, then
 * cuKernelGetName for a CUkernel passed as a CUfunction; neither in a driver before CUDA
 * 12.3), never while the launch's stream captures (cuStreamIsCapturing): then at a later
 * launch. A launch into a capture is not counted: it runs when its graph is launched.
 * cuLaunchHostFunc's function is named by its symbol (dladdr). A graph's launch is counted
 * by hooks_graphs.c.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "kernels.h"
#include "base/base.h"
#include "arch/cpu.h"
#include "memory/memory.h"

#define OK SHIMGEN_CUDA_SUCCESS

/* The handle the driver wrote at `where` and the name the program passed at `name`, kept. */
static __attribute__((noinline, unused)) void learn(const void *where, const void *name,
                                                    unsigned from)
{
    uint64_t handle = 0;
    char text[SHIMGEN_KERN_NAME_MAX + 2]; /* (one byte more than is kept: a longer one cut) */
    if (shimgen_safe_read(&handle, where, sizeof handle) != (long)sizeof handle || !handle)
        return;
    int slot = shimgen_kern_slot(handle);
    if (shimgen_safe_string(text, sizeof text, name) > 0)
        shimgen_kern_name(slot, text, from);
}

/* A handle first seen at a launch: its name asked of the driver, once, outside a capture. */
static __attribute__((noinline)) void ask_name(int slot, void *f, void *stream)
{
    const char *name = NULL;
    unsigned asks = 0;
#ifdef SHIMGEN_IDX_cuStreamIsCapturing
    int status = 0;
    if (HAS(cuStreamIsCapturing) &&
        (REAL(cuStreamIsCapturing, void *, int *)(stream, &status) != OK || status != 0))
        return; /* (capturing, or it cannot say: asked at a later launch) */
#else
    (void)stream;
#endif
#ifdef SHIMGEN_IDX_cuFuncGetName
    if (HAS(cuFuncGetName)) {
        asks = 1;
        if (REAL(cuFuncGetName, const char **, void *)(&name, f) != OK)
            name = NULL;
    }
#endif
#ifdef SHIMGEN_IDX_cuKernelGetName
    if (!name && HAS(cuKernelGetName)) {
        asks = 1;
        if (REAL(cuKernelGetName, const char **, void *)(&name, f) != OK)
            name = NULL;
    }
#endif
    (void)f;
    shimgen_kern_asks(asks);
    char text[SHIMGEN_KERN_NAME_MAX + 2];
    if (name && shimgen_safe_string(text, sizeof text, name) > 0)
        shimgen_kern_name(slot, text, SHIMGEN_KERN_FROM_DRIVER);
    else
        shimgen_kern_name(slot, "", SHIMGEN_KERN_FROM_UNNAMED);
}

/* A host function's slot named by its symbol. */
static __attribute__((noinline, unused)) void other_name(int slot, void *fn, int kind)
{
    Dl_info info;
    if (dladdr(fn, &info) && info.dli_sname && info.dli_sname[0])
        shimgen_kern_name(slot, info.dli_sname, (unsigned)kind);
    else
        shimgen_kern_name(slot, SHIMGEN_KERN_HOST_UNKNOWN, (unsigned)kind);
}

/* After a launch call: a success counted on its kernel and stream. `kind` 0 a kernel, else
 * how a host function is named (constant in each caller). `pair`: its GPU timing events
 * (gputime.c), -1 none. */
static inline __attribute__((unused)) shimgen_CUresult launched(shimgen_CUresult r, void *f,
                                                                void *stream,
                                                                const uint32_t shape[6],
                                                                uint64_t t0, int kind,
                                                                int pair)
{
    uint64_t t1 = shimgen_ticks();
    if (r != OK || shimgen_in_capture(stream)) {
        if (pair >= 0)
            shimgen_gpu_end(pair, 0, -1);
        return r;
    }
    int slot = shimgen_kern_slot((uint64_t)(uintptr_t)f);
    if (pair >= 0)
        shimgen_gpu_end(pair, 1, slot);
    shimgen_kern_launch(slot, (uint64_t)(uintptr_t)stream, shape, t0, t1);
    if (__builtin_expect(shimgen_kern_unnamed(slot), 0)) {
        if (kind)
            other_name(slot, f, kind);
        else
            ask_name(slot, f, stream);
    }
    return r;
}

/* Before a launch: its start event when GPU time is on (gputime.c), else -1; the events go
 * on the launch's own stream, which a _ptsz launch's 0 (`pt` 1) is the per-thread one. */
#define GPU_BEGIN(stream, pt)                                                              \
    (__builtin_expect(shimgen_gpu_every != 0, 0)                                           \
         ? shimgen_gpu_begin((pt) && !(stream)                                             \
                                 ? (void *)(uintptr_t)SHIMGEN_KERN_STREAM_PER_THREAD       \
                                 : (stream))                                               \
         : -1)

#ifdef SHIMGEN_IDX_cuModuleGetFunction
HOOK(cuModuleGetFunction, (void **hfunc, void *hmod, const char *name))
{
    shimgen_CUresult r = REAL(cuModuleGetFunction, void **, void *, const char *)(hfunc, hmod,
                                                                                 name);
    if (r == OK)
        learn(hfunc, name, SHIMGEN_KERN_FROM_CUMODULEGETFUNCTION);
    return r;
}
#endif

#ifdef SHIMGEN_IDX_cuLibraryGetKernel
HOOK(cuLibraryGetKernel, (void **kernel, void *library, const char *name))
{
    shimgen_CUresult r = REAL(cuLibraryGetKernel, void **, void *, const char *)(kernel,
                                                                                library, name);
    if (r == OK)
        learn(kernel, name, SHIMGEN_KERN_FROM_CULIBRARYGETKERNEL);
    return r;
}
#endif

#ifdef SHIMGEN_IDX_cuKernelGetFunction
HOOK(cuKernelGetFunction, (void **func, void *kernel))
{
    shimgen_CUresult r = REAL(cuKernelGetFunction, void **, void *)(func, kernel);
    if (r != OK)
        return r;
    uint64_t handle = 0;
    int of = shimgen_kern_slot((uint64_t)(uintptr_t)kernel);
    if (shimgen_safe_read(&handle, func, sizeof handle) == (long)sizeof handle && handle)
        shimgen_kern_name_as(shimgen_kern_slot(handle), of, SHIMGEN_KERN_FROM_CUKERNELGETFUNCTION);
    return r;
}
#endif

#define LAUNCH(name, pt)                                                                   \
    HOOK(name, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,  \
                unsigned bz, unsigned shared, void *stream, void **params, void **extra))  \
    {                                                                                      \
        const uint32_t shape[6] = {gx, gy, gz, bx, by, bz};                                \
        int pair = GPU_BEGIN(stream, pt);                                                  \
        uint64_t t0 = shimgen_ticks();                                                     \
        return launched(REAL(name, void *, unsigned, unsigned, unsigned, unsigned,         \
                             unsigned, unsigned, unsigned, void *, void **, void **)(      \
                            f, gx, gy, gz, bx, by, bz, shared, stream, params, extra),    \
                        f, stream, shape, t0, 0, pair);                                    \
    }
#define COOPERATIVE(name, pt)                                                              \
    HOOK(name, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,  \
                unsigned bz, unsigned shared, void *stream, void **params))                \
    {                                                                                      \
        const uint32_t shape[6] = {gx, gy, gz, bx, by, bz};                                \
        int pair = GPU_BEGIN(stream, pt);                                                  \
        uint64_t t0 = shimgen_ticks();                                                     \
        return launched(REAL(name, void *, unsigned, unsigned, unsigned, unsigned,         \
                             unsigned, unsigned, unsigned, void *, void **)(               \
                            f, gx, gy, gz, bx, by, bz, shared, stream, params),           \
                        f, stream, shape, t0, 0, pair);                                    \
    }
/* cuLaunchKernelEx: its grid, block and stream read (safely) from its CUlaunchConfig. */
#define LAUNCH_EX(name, pt)                                                                \
    HOOK(name, (const void *config, void *f, void **params, void **extra))                 \
    {                                                                                      \
        uint32_t cfg[SHIMGEN_LAUNCH_CONFIG_STREAM_OFFSET / 4 + 2] = {0};                   \
        void *stream = NULL;                                                               \
        if (shimgen_safe_read(cfg, config, sizeof cfg) == (long)sizeof cfg)               \
            memcpy(&stream, (char *)cfg + SHIMGEN_LAUNCH_CONFIG_STREAM_OFFSET,             \
                   sizeof stream);                                                         \
        int pair = GPU_BEGIN(stream, pt);                                                  \
        uint64_t t0 = shimgen_ticks();                                                     \
        return launched(REAL(name, const void *, void *, void **, void **)(config, f,      \
                                                                          params, extra), \
                        f, stream, cfg, t0, 0, pair);                                      \
    }

#ifdef SHIMGEN_IDX_cuLaunchKernel
LAUNCH(cuLaunchKernel, 0)
#endif
#ifdef SHIMGEN_IDX_cuLaunchKernel_ptsz
LAUNCH(cuLaunchKernel_ptsz, 1)
#endif
#ifdef SHIMGEN_IDX_cuLaunchCooperativeKernel
COOPERATIVE(cuLaunchCooperativeKernel, 0)
#endif
#ifdef SHIMGEN_IDX_cuLaunchCooperativeKernel_ptsz
COOPERATIVE(cuLaunchCooperativeKernel_ptsz, 1)
#endif
#ifdef SHIMGEN_IDX_cuLaunchKernelEx
LAUNCH_EX(cuLaunchKernelEx, 0)
#endif
#ifdef SHIMGEN_IDX_cuLaunchKernelEx_ptsz
LAUNCH_EX(cuLaunchKernelEx_ptsz, 1)
#endif

/* cuLaunchHostFunc(stream, fn, data): no grid, no block. */
#define HOST_FUNC(name, pt)                                                                \
    HOOK(name, (void *stream, void *fn, void *data))                                       \
    {                                                                                      \
        const uint32_t shape[6] = {0};                                                     \
        int pair = GPU_BEGIN(stream, pt);                                                  \
        uint64_t t0 = shimgen_ticks();                                                     \
        return launched(REAL(name, void *, void *, void *)(stream, fn, data), fn, stream,  \
                        shape, t0, SHIMGEN_KERN_FROM_CULAUNCHHOSTFUNC, pair);              \
    }
#ifdef SHIMGEN_IDX_cuLaunchHostFunc
HOST_FUNC(cuLaunchHostFunc, 0)
#endif
#ifdef SHIMGEN_IDX_cuLaunchHostFunc_ptsz
HOST_FUNC(cuLaunchHostFunc_ptsz, 1)
#endif
