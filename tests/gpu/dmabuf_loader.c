/*
 * A loader in the style of the RDMA test tools: it opens libcuda.so.1 with dlopen, takes
 * each entry point with dlsym, asks device 0 for GPUDirect RDMA and DMA-BUF support
 * (attributes 110, 116, 124), and exports 2 MiB of device memory as a DMA-BUF file
 * descriptor with cuMemGetHandleForAddressRange, as such a tool does before it registers
 * the memory with a NIC. It needs no CUDA headers. It prints one line per step and exits 0
 * when every call before the export succeeded, whatever the export returned (the export's
 * result is what the GPU proof compares); 1 otherwise.
 *   cc -O2 -o dmabuf_loader tests/gpu/dmabuf_loader.c -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define GET(name, ...)                                                               \
    __typeof__(__VA_ARGS__) name = (__typeof__(__VA_ARGS__))dlsym(lib, #name);       \
    if (!name) {                                                                     \
        printf("dlsym %s failed\n", #name);                                          \
        return 1;                                                                    \
    }

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("dlopen libcuda.so.1 failed: %s\n", dlerror());
        return 1;
    }
    GET(cuInit, CUresult(*)(unsigned));
    GET(cuDeviceGet, CUresult(*)(CUdevice *, int));
    GET(cuDeviceGetAttribute, CUresult(*)(int *, int, CUdevice));
    GET(cuCtxCreate_v2, CUresult(*)(CUcontext *, unsigned, CUdevice));
    GET(cuMemAlloc_v2, CUresult(*)(CUdeviceptr *, size_t));
    GET(cuMemFree_v2, CUresult(*)(CUdeviceptr));
    GET(cuMemGetHandleForAddressRange,
        CUresult(*)(void *, CUdeviceptr, size_t, int, unsigned long long));
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CUresult r = cuInit(0);
    printf("cuInit %d\n", r);
    if (r || (r = cuDeviceGet(&dev, 0)) || (r = cuCtxCreate_v2(&ctx, 0, dev))) {
        printf("set-up failed: %d\n", r);
        return 1;
    }
    const int attrs[] = {110, 116, 124}; /* GPUDirect RDMA supported, flush writes, DMA-BUF */
    for (unsigned i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        int v = -1;
        r = cuDeviceGetAttribute(&v, attrs[i], dev);
        printf("attribute %d = %d (rc %d)\n", attrs[i], v, r);
    }
    const size_t size = 2u << 20;
    if ((r = cuMemAlloc_v2(&p, size))) {
        printf("cuMemAlloc_v2 failed: %d\n", r);
        return 1;
    }
    int fd = -1;
    r = cuMemGetHandleForAddressRange(&fd, p, size, 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */,
                                      0);
    printf("dmabuf export rc %d fd %s\n", r, fd >= 0 && !r ? "valid" : "none");
    if (!r && fd >= 0)
        close(fd);
    cuMemFree_v2(p);
    return 0;
}
