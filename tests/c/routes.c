/* Every way a program can reach libcuda's cuDriverGetVersion, each reported on one line:
 *   route <name> rc <CUresult> version <int> lib <file the function lives in>
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
    if (g2 && g2("cuDriverGetVersion", &fn, driver, 0, &st) == 0 && st == 0)
        report("cuGetProcAddress_v2", fn);
    else
        report("cuGetProcAddress_v2", NULL);

    /* The runtime asks cuGetProcAddress for cuGetProcAddress itself. */
    void *self = NULL;
    fn = NULL;
    if (g2 && g2("cuGetProcAddress", &self, driver, 0, &st) == 0 && self &&
        ((gpa_v2)self)("cuDriverGetVersion", &fn, driver, 0, &st) == 0)
        report("cuGetProcAddress_self", fn);
    else
        report("cuGetProcAddress_self", NULL);
    Dl_info info;
    printf("self %s\n", self && dladdr(self, &info) && info.dli_sname ? info.dli_sname : "none");
    return 0;
}
