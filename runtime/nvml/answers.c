/*
 * answers.c: the exports the shim answers when a limit is set (shimgen/driver/nvml.py, ANSWERS;
 * the list is the generated nvml_answers.inc). Each calls the real function first, so a
 * bad device, a bad pointer or a wrong structure version is the real library's answer,
 * then puts in the budget's view of the device (nvml.h): memory info with the limit as
 * total and the budget's use as used; compute processes with each process's bytes from its
 * ledger, or, while the view does not know them, the real list with no process over the
 * limit. A program's memory is read only through shimgen_safe_read; it is written only
 * where the real function has just written.
 */
#include <string.h>

#include "nvml.h"
#include "saferead.h"

typedef unsigned int (*memory_fn)(void *dev, void *mem);
typedef unsigned int (*processes_fn)(void *dev, unsigned int *count, void *infos);
#define NO_FIELD ((size_t)-1)

static int get_u64(const void *base, size_t off, unsigned long long *value)
{
    return shimgen_safe_read(value, (const char *)base + off, sizeof *value) == sizeof *value;
}

static void put_u64(void *base, size_t off, unsigned long long value)
{
    memcpy((char *)base + off, &value, sizeof value);
}

/* nvmlDeviceGetMemoryInfo and _v2: total, used and free from the view, the total never
 * more than the device's; _v2's reserved is the device's, which no budget holds: 0. */
static unsigned int memory_answer(unsigned idx, void *dev, void *mem, size_t total,
                                  size_t reserved, size_t free_, size_t used)
{
    memory_fn real = (memory_fn)shimgen_nvml_real(idx);
    if (!real)
        return shimgen_nvml_missing();
    unsigned int rc = real(dev, mem);
    unsigned long long real_used, real_total;
    struct shimgen_nvml_view v;
    if (rc != SHIMGEN_NVML_SUCCESS || !get_u64(mem, used, &real_used) ||
        !get_u64(mem, total, &real_total) || !shimgen_nvml_view(dev, real_used, &v))
        return rc;
    if (v.limit > real_total) /* a limit past the device is the device (as cuMemGetInfo) */
        v.limit = real_total;
    if (v.used > v.limit)
        v.used = v.limit;
    put_u64(mem, total, v.limit);
    put_u64(mem, used, v.used);
    put_u64(mem, free_, v.limit - v.used);
    if (reserved != NO_FIELD)
        put_u64(mem, reserved, 0);
    return rc;
}

/* The real list kept, no process's bytes over the limit (an unavailable count stays so). */
static void clamp_list(void *infos, unsigned int n, size_t size, size_t bytes,
                       unsigned long long limit)
{
    for (unsigned int i = 0; infos && i < n; i++) {
        unsigned long long b;
        char *rec = (char *)infos + (size_t)i * size;
        if (get_u64(rec, bytes, &b) && b != SHIMGEN_NVML_VALUE_NOT_AVAILABLE && b > limit)
            put_u64(rec, bytes, limit);
    }
}

/* The budget's processes in place of the real list: as NVML answers, *count is set to how
 * many there are, and NVML_ERROR_INSUFFICIENT_SIZE returned when the array is too small. */
static unsigned int budget_list(const struct shimgen_nvml_view *v, unsigned int cap,
                                unsigned int *count, void *infos, size_t size, size_t pid,
                                size_t bytes)
{
    unsigned int n = (unsigned int)v->nprocs;
    memcpy(count, &n, sizeof n);
    if (n > cap || (n && !infos))
        return SHIMGEN_NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < n; i++) {
        char *rec = (char *)infos + (size_t)i * size;
        memset(rec, 0xff, size); /* the MIG instance ids: none */
        memcpy(rec + pid, &v->procs[i].pid, sizeof v->procs[i].pid);
        put_u64(rec, bytes, v->procs[i].bytes);
    }
    return SHIMGEN_NVML_SUCCESS;
}

/* nvmlDeviceGetComputeRunningProcesses, _v2, _v3: records of `size` bytes. */
static unsigned int processes_answer(unsigned idx, void *dev, unsigned int *count, void *infos,
                                     size_t size, size_t pid, size_t bytes)
{
    processes_fn real = (processes_fn)shimgen_nvml_real(idx);
    if (!real)
        return shimgen_nvml_missing();
    unsigned int cap, n;
    if (shimgen_safe_read(&cap, count, sizeof cap) != sizeof cap)
        return real(dev, count, infos);
    unsigned int rc = real(dev, count, infos);
    struct shimgen_nvml_view v;
    if ((rc != SHIMGEN_NVML_SUCCESS && rc != SHIMGEN_NVML_ERROR_INSUFFICIENT_SIZE) ||
        !shimgen_nvml_view(dev, 0, &v))
        return rc;
    if (v.nprocs >= 0)
        return budget_list(&v, cap, count, infos, size, pid, bytes);
    if (rc == SHIMGEN_NVML_SUCCESS && shimgen_safe_read(&n, count, sizeof n) == sizeof n)
        clamp_list(infos, n < cap ? n : cap, size, bytes, v.limit);
    return rc;
}

/* One function per answered export, calling its kind's answer with its layout's offsets. */
#define MEMORY_FIELD(L, F) SHIMGEN_NVML_##L##_##F
#define SHIMGEN_NVML_ANSWER_memory(i, name, L)                                               \
    static unsigned int answer_##name(void *dev, void *mem)                                 \
    {                                                                                        \
        return memory_answer(i, dev, mem, MEMORY_FIELD(L, TOTAL), MEMORY_FIELD(L, RESERVED),  \
                             MEMORY_FIELD(L, FREE), MEMORY_FIELD(L, USED));                   \
    }
#define SHIMGEN_NVML_ANSWER_processes(i, name, L)                                            \
    static unsigned int answer_##name(void *dev, unsigned int *count, void *infos)           \
    {                                                                                        \
        return processes_answer(i, dev, count, infos, SHIMGEN_NVML_##L##_SIZE,               \
                                SHIMGEN_NVML_##L##_PID, SHIMGEN_NVML_##L##_USEDGPUMEMORY);   \
    }
#define SHIMGEN_NVML_ANSWER(kind, i, name, L) SHIMGEN_NVML_ANSWER_##kind(i, name, L)
#include "nvml_answers.inc"
#undef SHIMGEN_NVML_ANSWER

static void *const answers[SHIMGEN_NVML_NFUNCS] = {
#define SHIMGEN_NVML_ANSWER(kind, i, name, L) [i] = (void *)answer_##name,
#include "nvml_answers.inc"
#undef SHIMGEN_NVML_ANSWER
};

void *shimgen_nvml_answer(unsigned idx)
{
    return idx < SHIMGEN_NVML_NFUNCS ? answers[idx] : NULL;
}
