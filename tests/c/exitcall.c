/* exit() from a host callback, inside cuLaunchHostFunc: the process ends while that
 * driver call is still in progress. Its trace must still count it (a timed call is
 * otherwise counted when it returns). argv[1]: library to dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static version_fn version;

static void host_callback(void *user)
{
    (void)user;
    int v = 0;
    printf("callback version rc %d\n", version(&v));
    fflush(stdout);
    exit(0);
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    host_launch_fn host = (host_launch_fn)dlsym(h, "cuLaunchHostFunc");
    if (!version || !host)
        return 1;
    host(NULL, host_callback, NULL);
    return 2; /* not reached */
}
