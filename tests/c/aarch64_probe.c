/*
 * aarch64_probe.c: an aarch64 program for the arm64 tests (tests/runtime/test_aarch64.py),
 * cross-compiled by the test and run under qemu-user, with or without an aarch64 shim
 * preloaded.
 *
 *   aarch64_probe [SHIM]  cuDriverGetVersion, cuInit(0), cuGetProcAddress of
 *                         cuDriverGetVersion (and whether the answer lies in the file SHIM,
 *                         as preloaded), then a call through that answer: one line each
 *   aarch64_probe grid    for each export name on stdin and each CUDA version of VERSIONS,
 *                         cuGetProcAddress's result and whether it gave a pointer: the
 *                         answers a shim must leave as the driver gives them
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*version_fn)(int *);
typedef int (*init_fn)(unsigned);
typedef int (*procaddr_fn)(const char *, void **, int, unsigned long long);

static const int VERSIONS[] = {11030, 12000, 12040, 12090};

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("dlopen %s\n", dlerror());
        return 1;
    }
    procaddr_fn procaddr = (procaddr_fn)dlsym(h, "cuGetProcAddress");
    if (argc > 1 && strcmp(argv[1], "grid") == 0) {
        char name[256];
        while (scanf("%255s", name) == 1)
            for (size_t k = 0; k < sizeof VERSIONS / sizeof VERSIONS[0]; k++) {
                void *p = NULL;
                int r = procaddr(name, &p, VERSIONS[k], 0);
                printf("%s %d %d %d\n", name, VERSIONS[k], r, p != NULL);
            }
        return 0;
    }
    int v = 0, r = ((version_fn)dlsym(h, "cuDriverGetVersion"))(&v);
    printf("version %d %d\n", r, v);
    printf("init %d\n", ((init_fn)dlsym(h, "cuInit"))(0));
    void *p = NULL;
    r = procaddr("cuDriverGetVersion", &p, 12000, 0);
    Dl_info info;
    int in_shim = argc > 1 && p && dladdr(p, &info) && info.dli_fname &&
                  strcmp(info.dli_fname, argv[1]) == 0;
    printf("procaddr %d %d\n", r, in_shim);
    v = 0;
    r = p ? ((version_fn)p)(&v) : -1;
    printf("through %d %d\n", r, v);
    return 0;
}
