/* The CUDA runtime's routes into the driver: libcudart resolves its driver table through
 * cuGetProcAddress_v2, and cudaGetDriverEntryPoint(ByVersion) hands driver functions out.
 * argv[1]: path of libcudart.so. Prints what each call returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*entry_fn)(const char *, void **, unsigned long long, int *);
typedef int (*entry_by_version_fn)(const char *, void **, unsigned, unsigned long long, int *);
typedef int (*version_fn)(int *);

static void report(const char *what, int rc, void *fn)
{
    int v = 0, vrc = -1;
    Dl_info info;
    const char *lib = "none";
    if (rc == 0 && fn) {
        vrc = ((version_fn)fn)(&v);
        if (dladdr(fn, &info) && info.dli_fname)
            lib = info.dli_fname;
    }
    printf("%s rc %d call_rc %d version %d lib %s\n", what, rc, vrc, v, lib);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    int (*rt_version)(int *) = (int (*)(int *))dlsym(rt, "cudaDriverGetVersion");
    int dv = 0;
    int rc = rt_version ? rt_version(&dv) : -1;
    printf("cudaDriverGetVersion rc %d version %d\n", rc, dv);

    entry_fn e = (entry_fn)dlsym(rt, "cudaGetDriverEntryPoint");
    void *fn = NULL;
    int st = -1;
    rc = e ? e("cuDriverGetVersion", &fn, 0, &st) : -1;
    report("cudaGetDriverEntryPoint", rc, fn);

    entry_by_version_fn ev = (entry_by_version_fn)dlsym(rt, "cudaGetDriverEntryPointByVersion");
    fn = NULL;
    rc = ev ? ev("cuDriverGetVersion", &fn, (unsigned)dv, 0, &st) : -2;
    report("cudaGetDriverEntryPointByVersion", rc, fn);
    return 0;
}
