/*
 * hooks_gputime.c: the hooks of feature "gputime" (shimgen/shim/hooks.py GPU_TIME_HOOKS),
 * installed only when SHIMGEN_GPU_TIME is on: a stream or event the program found done is a
 * synchronisation it made, where the pending pairs that are done are resolved (gputime.c).
 * The other points (cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, a context's
 * destruction) are the memory ledger's watches (runtime/memory/routes.h), which call
 * gputime.c when it is on; a graph's launch is timed by its hook in hooks_graphs.c.
 */

#include "kernels.h"
#include "base/base.h"

#define QUERY(name)                                                                        \
    shimgen_CUresult shimgen_hook_##name(void *x);                                          \
    shimgen_CUresult shimgen_hook_##name(void *x)                                           \
    {                                                                                       \
        shimgen_CUresult r = REAL(name, void *)(x);                                         \
        if (r == SHIMGEN_CUDA_SUCCESS)                                                      \
            shimgen_gpu_resolve();                                                          \
        return r;                                                                           \
    }

#ifdef SHIMGEN_IDX_cuStreamQuery
QUERY(cuStreamQuery)
#endif
#ifdef SHIMGEN_IDX_cuStreamQuery_ptsz
QUERY(cuStreamQuery_ptsz)
#endif
#ifdef SHIMGEN_IDX_cuEventQuery
QUERY(cuEventQuery)
#endif
