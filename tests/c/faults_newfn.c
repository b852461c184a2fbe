/* A function the shim may not know (a driver newer than the shim) or the driver may lack
 * (a driver older than the shim). It is reached two ways: dlsym on libcuda.so.1, and
 * cuGetProcAddress_v2. Each pointer found is called as fn(&out, NULL), the signature of
 * cuLibraryGetKernelCount(unsigned *count, CUlibrary lib). Then cuDriverGetVersion shows that
 * the program goes on.
 * argv[1]: function name; argv[2]: the CUDA version to ask cuGetProcAddress_v2 for.
 * Prints:
 *   dlsym <name> <found|null> rc <rc>
 *   proc <name> rc <rc> status <status> lib <file holding the address|null> call <rc>
 *   known cuDriverGetVersion lib <file holding the address cuGetProcAddress_v2 gave>
 *   version rc <rc> version <v> */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*query_fn)(unsigned *, void *);
typedef int (*version_fn)(int *);
typedef int (*gpa_v2)(const char *, void **, int, unsigned long long, int *);

static const char *lib_of(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "null";
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: faults_newfn NAME CUDA_VERSION\n");
        return 2;
    }
    const char *name = argv[1];
    int cuda = atoi(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    gpa_v2 gpa = h ? (gpa_v2)dlsym(h, "cuGetProcAddress_v2") : NULL;
    version_fn version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!gpa || !version) {
        fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    unsigned out = 0;
    query_fn direct = (query_fn)dlsym(h, name);
    printf("dlsym %s %s rc %d\n", name, direct ? "found" : "null",
           direct ? direct(&out, NULL) : -1);

    void *fn = NULL;
    int status = -1;
    int rc = gpa(name, &fn, cuda, 0, &status);
    printf("proc %s rc %d status %d lib %s call %d\n", name, rc, status, lib_of(fn),
           rc == 0 && fn ? ((query_fn)fn)(&out, NULL) : -1);

    void *known = NULL;
    gpa("cuDriverGetVersion", &known, cuda, 0, &status);
    printf("known cuDriverGetVersion lib %s\n", lib_of(known));

    int v = 0;
    rc = version(&v);
    printf("version rc %d version %d\n", rc, v);
    return rc != 0;
}
