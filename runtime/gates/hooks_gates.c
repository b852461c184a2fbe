/*
 * hooks_gates.c: the hooks that apply the selected gates (gates.c) around the calls through
 * which programs discover and use them: cuInit (every device, once the driver is up),
 * cuDeviceGet and cuMemGetHandleForAddressRange (a DMA-BUF export); cuMemCreate's hook (a
 * GPUDirect RDMA allocation) is the memory ledger's, hooks_memory.c, which applies them too.
 * Installed only when SHIMGEN_GATES is in effect on the profile's driver
 * (shimgen/shim/hooks.py: feature "gates"). The DMA-BUF export hook is compiled where the
 * driver exports its function (CUDA 11.7 on).
 */

#include "base/base.h"
#include "gates.h"

typedef shimgen_CUresult (*init_fn)(unsigned);
typedef shimgen_CUresult (*device_get_fn)(int *, int);
typedef shimgen_CUresult (*handle_range_fn)(void *, unsigned long long, size_t, int,
                                            unsigned long long);

shimgen_CUresult shimgen_hook_cuInit(unsigned flags);
shimgen_CUresult shimgen_hook_cuInit(unsigned flags)
{
    static int said;
    shimgen_CUresult rc = ((init_fn)shimgen_real[SHIMGEN_IDX_cuInit])(flags);
    if (rc == SHIMGEN_CUDA_SUCCESS)
        shimgen_gates_apply();
    else if (shimgen_gates_armed() && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        shimgen_say("shimgen: SHIMGEN_GATES=%s armed, but cuInit returned %d: nothing applied "
                    "(the gates are written once cuInit succeeds)\n", shimgen_cfg.gates_spec,
                    (int)rc);
    return rc;
}

shimgen_CUresult shimgen_hook_cuDeviceGet(int *device, int ordinal);
shimgen_CUresult shimgen_hook_cuDeviceGet(int *device, int ordinal)
{
    shimgen_gates_apply();
    shimgen_CUresult rc = ((device_get_fn)shimgen_real[SHIMGEN_IDX_cuDeviceGet])(device, ordinal);
    shimgen_gates_apply();
    return rc;
}

#ifdef SHIMGEN_IDX_cuMemGetHandleForAddressRange
shimgen_CUresult shimgen_hook_cuMemGetHandleForAddressRange(void *handle,
                                                            unsigned long long dptr,
                                                            size_t size, int type,
                                                            unsigned long long flags);
shimgen_CUresult shimgen_hook_cuMemGetHandleForAddressRange(void *handle,
                                                            unsigned long long dptr,
                                                            size_t size, int type,
                                                            unsigned long long flags)
{
    shimgen_gates_apply();
    return ((handle_range_fn)shimgen_real[SHIMGEN_IDX_cuMemGetHandleForAddressRange])(
        handle, dptr, size, type, flags);
}
#endif
