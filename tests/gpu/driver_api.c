/*
 * A plain driver-API program (no runtime): cuInit, device, primary context, memory, a PTX
 * module loaded from memory, a kernel launch, copies both ways, and a cuGetProcAddress_v2
 * lookup called through. Linked with -lcuda (DT_NEEDED libcuda.so.1), so under LD_PRELOAD
 * every call lands in the shim by symbol binding. Exit 0 and "DRIVER_API_OK" on success.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static const char ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry add_one(.param .u64 p_a, .param .u32 p_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .f32 %f<3>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [p_a];\n"
    "  ld.param.u32 %r1, [p_n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.s32 %p1, %r5, %r1;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.s32 %rd3, %r5, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.f32 %f1, [%rd4];\n"
    "  add.f32 %f2, %f1, 0f3F800000;\n"
    "  st.global.f32 [%rd4], %f2;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult rc_ = (call);                                                             \
        if (rc_ != CUDA_SUCCESS) {                                                         \
            const char *s_ = NULL;                                                         \
            cuGetErrorName(rc_, &s_);                                                      \
            fprintf(stderr, "FAIL %s -> %d %s (line %d)\n", #call, (int)rc_, s_ ? s_ : "?", \
                    __LINE__);                                                             \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

typedef CUresult (*version_fn)(int *);

int main(void)
{
    int version = 0, count = 0;
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    char name[256] = "";
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    printf("driver %d, %d device(s), device 0: %s\n", version, count, name);

    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    /* cuGetProcAddress_v2: the answer must work (under the shim it is the shim's forwarder). */
    void *fn = NULL;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CHECK(cuGetProcAddress("cuDriverGetVersion", &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    int v2 = 0;
    if (!fn || q != CU_GET_PROC_ADDRESS_SUCCESS || ((version_fn)fn)(&v2) != CUDA_SUCCESS ||
        v2 != version) {
        fprintf(stderr, "FAIL cuGetProcAddress(cuDriverGetVersion): fn %p q %d v %d\n", fn,
                (int)q, v2);
        return 1;
    }

    const unsigned n = 1u << 20;
    float *host = malloc(n * sizeof *host);
    if (!host)
        return 1;
    for (unsigned i = 0; i < n; i++)
        host[i] = (float)i;
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n * sizeof *host));
    CHECK(cuMemcpyHtoD(d, host, n * sizeof *host));

    CUmodule mod;
    CUfunction k;
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&k, mod, "add_one"));
    unsigned nn = n;
    void *args[] = {&d, &nn};
    for (int rep = 0; rep < 3; rep++)
        CHECK(cuLaunchKernel(k, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, d, n * sizeof *host));

    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        if (host[i] != (float)i + 3.0f)
            bad++;
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree(d));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(host);
    if (bad) {
        fprintf(stderr, "FAIL %u of %u elements wrong\n", bad, n);
        return 1;
    }
    printf("DRIVER_API_OK %u elements checked\n", n);
    return 0;
}
