/* Which library a dlmopen of libcuda gives, in the base namespace or a new one: opens
 * argv[2] with dlmopen(argv[1] == "new" ? LM_ID_NEWLM : LM_ID_BASE), looks up
 * cuDriverGetVersion in it and calls it argv[3] times. Prints
 * "file <the file that defines the function> rc <rc> version <v> calls <n>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*version_fn)(int *);

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    Lmid_t ns = strcmp(argv[1], "new") == 0 ? LM_ID_NEWLM : LM_ID_BASE;
    void *h = dlmopen(ns, argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlmopen: %s\n", dlerror());
        return 1;
    }
    version_fn version = (version_fn)dlsym(h, "cuDriverGetVersion");
    Dl_info info;
    if (!version || !dladdr((void *)version, &info) || !info.dli_fname)
        return 1;
    int n = atoi(argv[3]), rc = 0, v = 0;
    for (int i = 0; i < n; i++)
        rc |= version(&v);
    printf("file %s rc %d version %d calls %d\n", info.dli_fname, rc, v, n);
    return 0;
}
