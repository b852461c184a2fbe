/*
 * A FAKE libnvidia-ml (tests/runtime/test_nvml_shim.py): NVML's required exports, memory
 * info (v1, v2) and compute processes (v1, v2, v3) of one device, from numbers the test
 * sets in the environment when the library loads (FAKE_NVML_TOTAL, FAKE_NVML_USED,
 * FAKE_NVML_PROCS "pid:bytes,..."; bytes "na" for NVML_VALUE_NOT_AVAILABLE; FAKE_NVML_UUID,
 * the device's UUID text, and FAKE_NVML_INDEX, its index). Its load sleeps FAKE_NVML_LOAD_MS
 * milliseconds (default none), so a fork lands inside it for certain. Not NVIDIA's.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
#define NA 0xffffffffffffffffULL

typedef struct { unsigned long long total, free, used; } mem1;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } mem2;
typedef struct { unsigned int pid; unsigned long long used; } proc1;
typedef struct { unsigned int pid; unsigned long long used; unsigned int gi, ci; } proc2;

static unsigned long long total = 80ULL << 30, used = 10ULL << 30;
static unsigned int pids[8];
static unsigned long long bytes[8];
static unsigned int nprocs;
static int device; /* its address is the one device handle */

__attribute__((constructor)) static void setup(void)
{
    const char *v;
    if ((v = getenv("FAKE_NVML_LOAD_MS"))) {
        long ms = atol(v);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    if ((v = getenv("FAKE_NVML_TOTAL")))
        total = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_NVML_USED")))
        used = strtoull(v, NULL, 10);
    for (v = getenv("FAKE_NVML_PROCS"); v && *v && nprocs < 8; nprocs++) {
        char *end;
        pids[nprocs] = (unsigned int)strtoul(v, &end, 10);
        bytes[nprocs] = strncmp(end, ":na", 3) == 0 ? NA : strtoull(end + 1, &end, 10);
        v = strchr(end, ',');
        v = v ? v + 1 : NULL;
    }
}

API int nvmlInit_v2(void) { return 0; }
API int nvmlShutdown(void) { return 0; }
API const char *nvmlErrorString(int rc) { return rc ? "fake error" : "fake success"; }
API int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{
    if (i != 0 || !dev)
        return 2;
    *dev = &device;
    return 0;
}
API int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len)
{
    if (dev != &device || !uuid || len < 41)
        return 2;
    const char *u = getenv("FAKE_NVML_UUID");
    strncpy(uuid, u ? u : "GPU-00000000-1111-2222-3333-444444444444", len - 1);
    uuid[len - 1] = '\0';
    return 0;
}
API int nvmlDeviceGetIndex(void *dev, unsigned int *index)
{
    const char *i = getenv("FAKE_NVML_INDEX");
    if (dev != &device || !index)
        return 2;
    *index = i ? (unsigned int)strtoul(i, NULL, 10) : 0;
    return 0;
}
API int nvmlDeviceGetMemoryInfo(void *dev, mem1 *m)
{
    if (dev != &device || !m)
        return 2;
    m->total = total, m->used = used, m->free = total - used;
    return 0;
}
API int nvmlDeviceGetMemoryInfo_v2(void *dev, mem2 *m)
{
    if (dev != &device || !m)
        return 2;
    if (m->version != (sizeof(mem2) | 2u << 24))
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m->total = total, m->reserved = 1ULL << 20, m->used = used;
    m->free = total - used - m->reserved;
    return 0;
}

#define PROCESSES(name, rec, fill)                                                      \
    API int name(void *dev, unsigned int *count, rec *infos)                            \
    {                                                                                   \
        if (dev != &device || !count)                                                   \
            return 2;                                                                   \
        if (*count < nprocs) {                                                          \
            *count = nprocs;                                                            \
            return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */                                \
        }                                                                               \
        for (unsigned int i = 0; i < nprocs; i++) {                                     \
            infos[i].pid = pids[i], infos[i].used = bytes[i];                           \
            fill;                                                                       \
        }                                                                               \
        *count = nprocs;                                                                \
        return 0;                                                                       \
    }
PROCESSES(nvmlDeviceGetComputeRunningProcesses, proc1, (void)0)
PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, proc2, infos[i].gi = infos[i].ci = 7)
PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, proc2, infos[i].gi = infos[i].ci = 7)
/* One export the shim only forwards. */
API int nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!n)
        return 2;
    *n = 1;
    return 0;
}
