/* startcall: a process that opens libcuda.so.1 and calls cuDriverGetVersion once, to
 * measure the start-up of a program that does use the driver (with the shim, the first
 * call loads the real driver and fills the jump slots). Exit status: the call's CUresult. */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*fn_version)(int *);

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "startcall: %s\n", dlerror());
        return 100;
    }
    fn_version f = (fn_version)dlsym(h, "cuDriverGetVersion");
    if (!f) {
        fprintf(stderr, "startcall: no cuDriverGetVersion\n");
        return 101;
    }
    int v = 0;
    return f(&v);
}
