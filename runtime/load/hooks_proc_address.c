/*
 * hooks_proc_address.c: the cuGetProcAddress and cuGetProcAddress_v2 hooks. The real
 * driver decides which ABI variant a (symbol, version, flags) query gets (cuMemAlloc vs
 * cuMemAlloc_v2, _ptds/_ptsz, errors and the query result); the shim then swaps the
 * returned address for its own trampoline of that same export (procaddr.c), so later calls
 * go through the shim. An address that is no export is passed through unchanged and
 * counted. Each hook is compiled where the driver exports its function. The symbol is the
 * driver's to read; the address only after a successful call, where the driver has just
 * written it (a failed call may leave pfn garbage: it is never read then). Read directly,
 * never through saferead.h: the route must not depend on a system call a sandbox may
 * refuse.
 */

#include "base/base.h"
#include "load.h"

#if defined(SHIMGEN_IDX_cuGetProcAddress) || defined(SHIMGEN_IDX_cuGetProcAddress_v2)
/* The driver's answer at pfn (a successful call wrote it there) replaced by the shim's
 * forwarder of it. */
static void swap_answer(void **pfn)
{
    if (pfn && *pfn)
        *pfn = shimgen_map_proc_address(*pfn);
}
#endif

typedef shimgen_CUresult (*get_proc_v1)(const char *, void **, int, uint64_t);
typedef shimgen_CUresult (*get_proc_v2)(const char *, void **, int, uint64_t, int *);

#ifdef SHIMGEN_IDX_cuGetProcAddress
shimgen_CUresult shimgen_hook_cuGetProcAddress(const char *symbol, void **pfn, int version,
                                               uint64_t flags);
shimgen_CUresult shimgen_hook_cuGetProcAddress(const char *symbol, void **pfn, int version,
                                               uint64_t flags)
{
    get_proc_v1 real = (get_proc_v1)shimgen_real[SHIMGEN_IDX_cuGetProcAddress];
    shimgen_CUresult rc = real(symbol, pfn, version, flags);
    if (rc == SHIMGEN_CUDA_SUCCESS)
        swap_answer(pfn);
    return rc;
}
#endif

#ifdef SHIMGEN_IDX_cuGetProcAddress_v2
shimgen_CUresult shimgen_hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                                  uint64_t flags, int *status);
shimgen_CUresult shimgen_hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                                  uint64_t flags, int *status)
{
    get_proc_v2 real = (get_proc_v2)shimgen_real[SHIMGEN_IDX_cuGetProcAddress_v2];
    shimgen_CUresult rc = real(symbol, pfn, version, flags, status);
    if (rc == SHIMGEN_CUDA_SUCCESS)
        swap_answer(pfn);
    return rc;
}
#endif
