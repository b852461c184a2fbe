/* Calls through the driver in forked children: one forked before the parent's first driver
 * call, one after. Each child calls cuDriverGetVersion `n` times; the parent `m` times.
 * Prints "pid <role> <pid> rc <rc> version <v>" per process; exits non-zero on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*version_fn)(int *);

static int call(version_fn fn, const char *role, int times)
{
    int v = 0, rc = 0;
    for (int i = 0; i < times; i++)
        rc |= fn(&v);
    printf("pid %s %ld rc %d version %d\n", role, (long)getpid(), rc, v);
    fflush(stdout);
    return rc;
}

static int child(version_fn fn, const char *role, int times)
{
    pid_t p = fork();
    if (p == 0)
        exit(call(fn, role, times) ? 3 : 0);
    int status = 0;
    waitpid(p, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    version_fn fn = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!fn)
        return 1;
    int bad = child(fn, "child_before", 3);
    bad |= call(fn, "parent", 2);
    bad |= child(fn, "child_after", 5);
    return bad != 0;
}
