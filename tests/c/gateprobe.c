/* Drives the fake libcuda's gates through whatever libcuda.so.1 is (the shim under
 * LD_PRELOAD): cuInit, then per device the gated attributes, the raw gate bytes, and
 * whether a DMA-BUF export and a GPUDirect RDMA allocation succeed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*init_fn)(unsigned);
typedef int (*get_fn)(int *, int);
typedef int (*attr_fn)(int *, int, int);
typedef int (*byte_fn)(int, int);
typedef int (*global_fn)(void);
typedef int (*range_fn)(void *, unsigned long long, size_t, int, unsigned long long);
typedef int (*create_fn)(unsigned long long *, size_t, const void *, unsigned long long);

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    init_fn init = (init_fn)dlsym(h, "cuInit");
    get_fn get = (get_fn)dlsym(h, "cuDeviceGet");
    attr_fn attr = (attr_fn)dlsym(h, "cuDeviceGetAttribute");
    byte_fn byte = (byte_fn)dlsym(h, "cuFakeDeviceByte");
    global_fn global = (global_fn)dlsym(h, "cuFakeGdrGlobal");
    range_fn range = (range_fn)dlsym(h, "cuMemGetHandleForAddressRange");
    create_fn create = (create_fn)dlsym(h, "cuMemCreate");
    printf("init %d\n", init(0));
    for (int d = 0; d < 2; d++) {
        int dev = -1, a110 = -1, a116 = -1, a124 = -1, a1 = -1;
        get(&dev, d);
        attr(&a110, 110, dev);
        attr(&a116, 116, dev);
        attr(&a124, 124, dev);
        attr(&a1, 1, dev);
        printf("dev %d attr110 %d attr116 %d attr124 %d attr1 %d byte40 0x%02x byte44 0x%02x\n",
               d, a110, a116, a124, a1, byte(dev, 0x40), byte(dev, 0x44));
    }
    int fd = -1;
    unsigned long long handle = 0;
    printf("global %d dmabuf_export %d gdr_alloc %d\n", global(),
           range(&fd, 0x1000, 4096, 1, 0), create(&handle, 4096, NULL, 0));
    return 0;
}
