/* A FAKE libcuda for the kernels' tests (tests/runtime/test_kernels.py): not NVIDIA's driver.
 * It keeps names and launches: a handle is its own record of a kind (function or kernel) and
 * a name; cuModuleGetFunction and cuLibraryGetKernel make one of the name passed,
 * cuKernelGetFunction a function of its kernel's name, and cuModuleEnumerateFunctions and
 * cuLibraryEnumerateKernels (one handle each) one named by the string the module or library
 * handle points at, so the shim sees a handle it never saw made. cuFuncGetName names a
 * function (a kernel handle: CUDA_ERROR_INVALID_HANDLE), cuKernelGetName a kernel; both fail
 * with FAKE_KERN_NO_NAMES set. Launches (every route) count per name, not a launch with a
 * grid of 0 (it fails), nor one into a capturing stream (counted apart); a host function's
 * launch counts as "host", a graph's as "graph" (and its kernel nodes as "graph_kernels":
 * fake_kernels_graphs.h, its graphs); a name asked while
 * any stream captures is counted too (FAKE_KERN_CAPTURING=S:N: stream S captures from the
 * start for its first N launches, begun by no call the shim could see). Each launch it
 * counts runs on its stream's fake GPU clock for gx * 1000 + strlen(NAME) ns (a host
 * function's and a graph's with gx 1), which timing events read (fake_kernels_events.c).
 * At exit it prints, on stdout:
 *   fake {"launches": {NAME: n}, "gpu_ns": {NAME: ns}, "captured": n,
 *         "asked_in_capture": n, EVENTS}
 * Built with SONAME libcuda.so.1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum { FUNC = 1, KERNEL = 2 };
#define NAME_BYTES 8192 /* a name's bytes kept, its NUL included: more than the shim keeps */
struct handle {
    int kind;
    char name[NAME_BYTES];
};
#define MAX_NAMES 64
static struct {
    char name[NAME_BYTES];
    unsigned long n, ns;
} counts[MAX_NAMES];
void fake_gpu_ran(void *stream, unsigned long ns); /* fake_kernels_events.c */
void fake_events_report(void);
static unsigned long captured, asked_in_capture;
#define MAX_STREAMS 16
static uintptr_t capturing[MAX_STREAMS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* FAKE_KERN_CAPTURING=S:N: stream S captures from the start, begun by no call the shim
 * sees, for its first N launches (under the lock) */
static long start_left = -1;

static int captured_from_start(void *stream)
{
    const char *s = getenv("FAKE_KERN_CAPTURING");
    char *end;
    if (!s || strtoul(s, &end, 10) != (uintptr_t)stream)
        return 0;
    if (start_left < 0)
        start_left = *end == ':' ? strtol(end + 1, NULL, 10) : 0;
    return start_left > 0;
}

static int any_capture(void)
{
    const char *s = getenv("FAKE_KERN_CAPTURING");
    if (s && captured_from_start((void *)(uintptr_t)strtoul(s, NULL, 10)))
        return 1;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing[i])
            return 1;
    return 0;
}

int fake_is_capturing(void *stream);
int fake_is_capturing(void *stream)
{
    if (captured_from_start(stream))
        return 1;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing[i] == (uintptr_t)stream + 1)
            return 1;
    return 0;
}

static struct handle *make(int kind, const char *name)
{
    struct handle *h = calloc(1, sizeof *h);
    h->kind = kind;
    snprintf(h->name, sizeof h->name, "%s", name);
    return h;
}

static void count(const char *name, void *stream, unsigned gx)
{
    pthread_mutex_lock(&lock);
    if (fake_is_capturing(stream)) {
        captured++;
        if (captured_from_start(stream))
            start_left--;
    } else {
        int i = 0;
        while (i < MAX_NAMES - 1 && counts[i].name[0] && strcmp(counts[i].name, name))
            i++;
        snprintf(counts[i].name, sizeof counts[i].name, "%s", name);
        counts[i].n++;
        counts[i].ns += gx * 1000ul + strlen(name);
        fake_gpu_ran(stream, gx * 1000ul + strlen(name));
    }
    pthread_mutex_unlock(&lock);
}

static CUresult launch(void *f, unsigned gx, void *stream)
{
    struct handle *h = f;
    if (!h || !gx || (h->kind != FUNC && h->kind != KERNEL))
        return 1;
    count(h->name, stream, gx);
    return 0;
}

/* A host function's launch counts as "host" (a graph's: fake_kernels_graphs.h). */
EXPORT CUresult cuLaunchHostFunc(void *stream, void (*fn)(void *), void *data)
{
    (void)data;
    if (!fn)
        return 1;
    count("host", stream, 1);
    return 0;
}

#include "fake_kernels_graphs.h"

__attribute__((destructor)) static void report(void)
{
    printf("fake {\"launches\": {");
    for (int i = 0; i < MAX_NAMES && counts[i].name[0]; i++)
        printf("%s\"%s\": %lu", i ? ", " : "", counts[i].name, counts[i].n);
    printf("}, \"gpu_ns\": {");
    for (int i = 0; i < MAX_NAMES && counts[i].name[0]; i++)
        printf("%s\"%s\": %lu", i ? ", " : "", counts[i].name, counts[i].ns);
    printf("}, \"captured\": %lu, \"asked_in_capture\": %lu", captured, asked_in_capture);
    fake_events_report();
    printf("}\n");
    fflush(stdout);
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
    (void)handle, (void)dptr, (void)size, (void)type, (void)flags;
    return 801;
}

EXPORT CUresult cuModuleGetFunction(void **f, void *mod, const char *name)
{
    (void)mod;
    if (!f || !name)
        return 1;
    *f = make(FUNC, name);
    return 0;
}

EXPORT CUresult cuLibraryGetKernel(void **k, void *lib, const char *name)
{
    (void)lib;
    if (!k || !name)
        return 1;
    *k = make(KERNEL, name);
    return 0;
}

EXPORT CUresult cuKernelGetFunction(void **f, void *kernel)
{
    struct handle *k = kernel;
    if (!f || !k || k->kind != KERNEL)
        return 400;
    *f = make(FUNC, k->name);
    return 0;
}

EXPORT CUresult cuModuleEnumerateFunctions(void **fns, unsigned n, void *mod)
{
    if (!fns || n != 1 || !mod)
        return 1;
    fns[0] = make(FUNC, mod);
    return 0;
}

EXPORT CUresult cuLibraryEnumerateKernels(void **ks, unsigned n, void *lib)
{
    if (!ks || n != 1 || !lib)
        return 1;
    ks[0] = make(KERNEL, lib);
    return 0;
}

static CUresult name_of(const char **name, void *handle, int kind)
{
    struct handle *h = handle;
    pthread_mutex_lock(&lock);
    if (any_capture())
        asked_in_capture++;
    pthread_mutex_unlock(&lock);
    if (!name || !h || h->kind != kind || getenv("FAKE_KERN_NO_NAMES"))
        return 400;
    *name = h->name;
    return 0;
}

EXPORT CUresult cuFuncGetName(const char **name, void *f)
{
    return name_of(name, f, FUNC);
}

EXPORT CUresult cuKernelGetName(const char **name, void *k)
{
    return name_of(name, k, KERNEL);
}

EXPORT CUresult cuStreamBeginCapture_v2(void *stream, int mode)
{
    (void)mode;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (!capturing[i]) {
            capturing[i] = (uintptr_t)stream + 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuStreamEndCapture(void *stream, void **graph)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing[i] == (uintptr_t)stream + 1)
            capturing[i] = 0;
    pthread_mutex_unlock(&lock);
    if (graph)
        *graph = NULL;
    return 0;
}

EXPORT CUresult cuStreamIsCapturing(void *stream, int *status)
{
    if (!status)
        return 1;
    pthread_mutex_lock(&lock);
    *status = fake_is_capturing(stream);
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuStreamSynchronize(void *stream)
{
    (void)stream;
    if (getenv("FAKE_KERN_HANG")) /* a kernel that never ends: wait for the kill */
        for (;;)
            pause();
    return 0;
}

#define LAUNCH_ARGS                                                                        \
    void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
        unsigned shmem, void *stream
EXPORT CUresult cuLaunchKernel(LAUNCH_ARGS, void **params, void **extra)
{
    (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return launch(f, gx, stream);
}

/* A _ptsz launch's stream 0 is the per-thread default stream (CU_STREAM_PER_THREAD). */
#define PER_THREAD(stream) ((stream) ? (stream) : (void *)2)

EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, PER_THREAD(stream), params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, PER_THREAD(stream), params, NULL);
}

struct launch_config {
    unsigned grid[3], block[3], shmem;
    void *stream;
    void *attrs;
    unsigned nattrs;
};

EXPORT CUresult cuLaunchKernelEx(const struct launch_config *c, void *f, void **params,
                                 void **extra)
{
    (void)params, (void)extra;
    return c ? launch(f, c->grid[0], c->stream) : 1;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const struct launch_config *c, void *f, void **params,
                                      void **extra)
{
    (void)params, (void)extra;
    return c ? launch(f, c->grid[0], PER_THREAD(c->stream)) : 1;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    uint64_t flags, int *status)
{
    (void)symbol, (void)version, (void)flags;
    if (!pfn)
        return 1;
    *pfn = NULL;
    if (status)
        *status = 1;
    return 0;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
