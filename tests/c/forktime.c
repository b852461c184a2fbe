/* A forked child's timing totals are its own (SHIMGEN_TRACE=time, the fake driver).
 *   forktime SLOW_MS N
 * The parent: a thread calls cuInit and cuLaunchHostFunc with a host function that sleeps
 * SLOW_MS ms, then exits (its block is folded into the process's totals); the main thread
 * does the same. Then it forks; the child calls cuDriverGetVersion N times and
 * cuLaunchHostFunc N times with a host function that returns at once, and exits. Prints
 * "child <pid> rc <status>" after waiting for it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned);
typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static init_fn init;
static version_fn version;
static host_launch_fn launch_host;
static long slow_ms;

static void slow(void *user)
{
    (void)user;
    struct timespec ts = {slow_ms / 1000, (slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void quick(void *user)
{
    (void)user;
}

static void *parent_thread(void *arg)
{
    (void)arg;
    init(0);
    launch_host(NULL, slow, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: forktime SLOW_MS N\n");
        return 2;
    }
    slow_ms = atol(argv[1]);
    long n = atol(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    init = h ? (init_fn)dlsym(h, "cuInit") : NULL;
    version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    launch_host = h ? (host_launch_fn)dlsym(h, "cuLaunchHostFunc") : NULL;
    if (!init || !version || !launch_host) {
        fprintf(stderr, "missing driver function\n");
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, parent_thread, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    init(0);
    launch_host(NULL, slow, NULL);
    pid_t p = fork();
    if (p == 0) {
        int bad = 0, v = 0;
        for (long i = 0; i < n; i++)
            bad |= version(&v) != 0 || launch_host(NULL, quick, NULL) != 0;
        exit(bad ? 3 : 0);
    }
    int status = 0;
    waitpid(p, &status, 0);
    printf("child %ld rc %d\n", (long)p, WIFEXITED(status) ? WEXITSTATUS(status) : 99);
    return 0;
}
