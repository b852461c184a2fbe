/* A fake slow file system, preloaded before the shim (tests/runtime/test_faults_process.py):
 * renameat() and renameat2() wait a pseudo-random 0 to 999 us before they are passed on,
 * which widens the moment between the shim's look at a shared trace name and its rename,
 * so that processes of one job that write together meet there often. Nothing else
 * changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);

static void wait_a_little(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    unsigned long r = (unsigned long)now.tv_nsec * 2654435761ul + (unsigned long)getpid();
    struct timespec pause = {0, (long)((r >> 11) % 1000) * 1000};
    nanosleep(&pause, NULL);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    renameat_fn real = (renameat_fn)dlsym(RTLD_NEXT, "renameat");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    wait_a_little();
    return real(olddirfd, oldpath, newdirfd, newpath);
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned flags)
{
    renameat2_fn real = (renameat2_fn)dlsym(RTLD_NEXT, "renameat2");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    wait_a_little();
    return real(olddirfd, oldpath, newdirfd, newpath, flags);
}
