/*
 * resolve.c: an export's first call (nvml_stubs.S): its slot set once, to its answer
 * (answers.c) when a limit is set (view.c), else the real function (load.c), else a
 * stand-in that returns NVML_ERROR_LIBRARY_NOT_FOUND (no real library) or
 * NVML_ERROR_FUNCTION_NOT_FOUND (a real library without it). The top of the folder: it
 * calls the others, none of them calls it.
 */
#include <stddef.h>

#include "nvml.h"

static const char *missing_string(void)
{
    return shimgen_nvml_found() ? "shimgen: this libnvidia-ml has no nvmlErrorString"
                                : "shimgen: no libnvidia-ml found";
}

void *shimgen_nvml_resolve(unsigned idx)
{
    if (idx >= SHIMGEN_NVML_NFUNCS)
        return (void *)shimgen_nvml_missing;
    int ready = shimgen_nvml_loaded();
    void *t = shimgen_nvml_real(idx);
    if (shimgen_nvml_limited() && shimgen_nvml_answer(idx))
        t = shimgen_nvml_answer(idx);
    if (!t)
        t = (int)idx == SHIMGEN_NVML_STRING_RESULT ? (void *)missing_string
                                                   : (void *)shimgen_nvml_missing;
    if (ready) /* (a call on a thread that holds the load or a fork: its slot left lazy) */
        __atomic_store_n(&shimgen_nvml_slots[idx], t, __ATOMIC_RELEASE);
    return t;
}
