/* The link-time route: this program has DT_NEEDED libcuda.so.1 and calls the driver
 * directly. Prints "route linked rc <rc> version <v> lib <file>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int cuDriverGetVersion(int *version);

int main(void)
{
    int v = 0;
    int rc = cuDriverGetVersion(&v);
    Dl_info info;
    const char *lib = dladdr((void *)cuDriverGetVersion, &info) && info.dli_fname
                          ? info.dli_fname : "unknown";
    printf("route linked rc %d version %d lib %s\n", rc, v, lib);
    return 0;
}
