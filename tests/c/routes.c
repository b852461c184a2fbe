/* Every way a program can reach libcuda's cuDriverGetVersion, each reported on one line:
 *   route <name> rc <CUresult> version <int> lib <file the function lives in>
 * (a driver without cuGetProcAddress_v2, CUDA 11.x, reports its two routes as absent:
 *   route <name> absent), then cuGetProcAddress asked for ABI variants at several versions
 * and flags, through each entry point the driver has, one line per answer:
 *   lookup <entry> <symbol> <version> <flags> rc <CUresult> sym <name> lib <file>
 * argv[1]: the real driver's absolute path; argv[2] (optional): another path to the same
 * file under a name that is not libcuda's. Nothing here calls cuInit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*version_fn)(int *);
typedef int (*gpa_v1)(const char *, void **, int, unsigned long long);
typedef int (*gpa_v2)(const char *, void **, int, unsigned long long, int *);

static void report(const char *route, void *fn)
{
    if (!fn) {
        printf("route %s rc -1 version 0 lib none\n", route);
        return;
    }
    int v = 0;
    int rc = ((version_fn)fn)(&v);
    Dl_info info;
    const char *lib = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "unknown";
    printf("route %s rc %d version %d lib %s\n", route, rc, v, lib);
}

static void lookup(const char *entry, const char *symbol, int version, unsigned long long flags,
                   int rc, void *fn)
{
    Dl_info info;
    int found = fn && dladdr(fn, &info);
    printf("lookup %s %s %d %llu rc %d sym %s lib %s\n", entry, symbol, version, flags, rc,
           found && info.dli_sname && info.dli_saddr == fn ? info.dli_sname : "none",
           found && info.dli_fname ? info.dli_fname : "none");
}

static void *sym(void *handle, const char *name)
{
    return handle ? dlsym(handle, name) : NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: routes REAL_DRIVER_PATH\n");
        return 2;
    }
    void *so1 = dlopen("libcuda.so.1", RTLD_NOW);
    void *so = dlopen("libcuda.so", RTLD_NOW);
    void *abs = dlopen(argv[1], RTLD_NOW);
    report("dlopen_libcuda.so.1", sym(so1, "cuDriverGetVersion"));
    report("dlopen_libcuda.so", sym(so, "cuDriverGetVersion"));
    report("dlopen_absolute", sym(abs, "cuDriverGetVersion"));
    if (argc > 2) /* a path to the real driver's file under another name */
        report("dlopen_alias_path", sym(dlopen(argv[2], RTLD_NOW), "cuDriverGetVersion"));
    report("dlsym_default", dlsym(RTLD_DEFAULT, "cuDriverGetVersion"));
    report("dlsym_next", dlsym(RTLD_NEXT, "cuDriverGetVersion"));

    int driver = 0;
    version_fn v = (version_fn)sym(so1, "cuDriverGetVersion");
    if (v)
        v(&driver);
    report("after_version_query", (void *)v);

    gpa_v1 g1 = (gpa_v1)sym(so1, "cuGetProcAddress");
    gpa_v2 g2 = (gpa_v2)sym(so1, "cuGetProcAddress_v2");
    void *fn = NULL;
    int st = -1;
    if (g1 && g1("cuDriverGetVersion", &fn, driver, 0) == 0)
        report("cuGetProcAddress", fn);
    else
        report("cuGetProcAddress", NULL);
    fn = NULL;
    if (!g2)
        printf("route cuGetProcAddress_v2 absent\n");
    else if (g2("cuDriverGetVersion", &fn, driver, 0, &st) == 0 && st == 0)
        report("cuGetProcAddress_v2", fn);
    else
        report("cuGetProcAddress_v2", NULL);

    /* The runtime asks cuGetProcAddress for cuGetProcAddress itself: through _v2 where the
     * driver has it (CUDA 12), through the first one on an older driver (CUDA 11.x). */
    void *self = NULL;
    fn = NULL;
    if (g2 && g2("cuGetProcAddress", &self, driver, 0, &st) == 0 && self &&
        ((gpa_v2)self)("cuDriverGetVersion", &fn, driver, 0, &st) == 0)
        report("cuGetProcAddress_self", fn);
    else if (!g2 && g1 && g1("cuGetProcAddress", &self, driver, 0) == 0 && self &&
             ((gpa_v1)self)("cuDriverGetVersion", &fn, driver, 0) == 0)
        report("cuGetProcAddress_self", fn);
    else
        report("cuGetProcAddress_self", NULL);
    Dl_info info;
    printf("self %s\n", self && dladdr(self, &info) && info.dli_sname ? info.dli_sname : "none");

    /* ABI variants by version and flags: legacy (1) and per-thread (2) default stream. */
    static const struct { const char *symbol; int version; unsigned long long flags; } asks[] = {
        {"cuMemAlloc", 3000, 0}, {"cuMemAlloc", 0, 0}, {"cuStreamSynchronize", 0, 0},
        {"cuStreamSynchronize", 0, 1}, {"cuStreamSynchronize", 0, 2}, {"cuMemcpyHtoD", 0, 2},
        {"cuLaunchKernel", 11030, 2}, {"cuCtxCreate", 0, 0},
    };
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        int version = asks[i].version ? asks[i].version : driver; /* 0: the driver's own */
        fn = NULL;
        int rc = g1 ? g1(asks[i].symbol, &fn, version, asks[i].flags) : -1;
        lookup("cuGetProcAddress", asks[i].symbol, version, asks[i].flags, rc, fn);
        if (!g2)
            continue;
        fn = NULL;
        rc = g2(asks[i].symbol, &fn, version, asks[i].flags, &st);
        lookup("cuGetProcAddress_v2", asks[i].symbol, version, asks[i].flags, rc, fn);
    }
    return 0;
}
