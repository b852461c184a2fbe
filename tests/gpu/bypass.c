/*
 * Negative control for the CUPTI oracle: make driver calls that go around the shim, and
 * check (in run_validation.sh) that compare_counts.py reports them.
 *
 * argv[1] is the bare name of a symbolic link to the real driver that does not start with
 * "libcuda.so", found through LD_LIBRARY_PATH, so the shim's dlopen wrapper passes it
 * through (a name with a '/' would be compared by inode and redirected); glibc sees the same file
 * (same device and inode) as the driver the shim already loaded and returns that handle, so
 * dlsym gives the real driver's own functions. Linked with -lcuda: cuInit and one
 * cuDeviceGetCount go through the shim; BYPASS_CALLS more cuDeviceGetCount calls do not.
 * Prints BYPASS_DONE <n> on success.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

#define BYPASS_CALLS 5

typedef CUresult (*count_fn)(int *);

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int n = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL cuInit/cuDeviceGetCount through the shim\n");
        return 1;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "FAIL dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    count_fn direct = (count_fn)dlsym(h, "cuDeviceGetCount");
    Dl_info info;
    if (!direct || !dladdr((void *)direct, &info)) {
        fprintf(stderr, "FAIL dlsym cuDeviceGetCount\n");
        return 1;
    }
    printf("cuDeviceGetCount resolved in %s\n", info.dli_fname);
    for (int i = 0; i < BYPASS_CALLS; i++) {
        int m = 0;
        if (direct(&m) != CUDA_SUCCESS || m != n) {
            fprintf(stderr, "FAIL direct cuDeviceGetCount\n");
            return 1;
        }
    }
    printf("BYPASS_DONE %d\n", BYPASS_CALLS);
    return 0;
}
