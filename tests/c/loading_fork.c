/* fork() while another thread's first driver call is loading the real driver: a thread
 * makes the process's first call (cuDriverGetVersion, which loads the driver) while the
 * main thread forks again and again from a random moment (0 to 499 us after the call
 * began), with random pauses of 0 to 99 us, until that call has returned. Each child makes its first driver calls, cuDriverGetVersion
 * and cuInit(0), prints "child <version rc> <version> <cuInit rc>" and leaves with _exit.
 * The parent prints "forks N during_load L children_ok K load_us U" and exits 0 when every child
 * exited 0. argv[1]: random seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef int (*init_fn)(unsigned);

static version_fn version;
static init_fn init;
static int started, loaded;

static long load_us;

static long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

/* A busy wait: a sleep would overshoot by more than the load takes. */
static void pause_us(long us)
{
    long end = now_us() + us;
    while (now_us() < end && !__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
        ;
}

static void *first_call(void *arg)
{
    (void)arg;
    int v = 0;
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    long t0 = now_us();
    version(&v);
    load_us = now_us() - t0;
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
    return NULL;
}


int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    srand((unsigned)atoi(argv[1]));
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    init = (init_fn)dlsym(h, "cuInit");
    if (!version || !init)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, first_call, NULL);
    while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        ;
    pause_us(rand() % 500);
    pid_t pids[40];
    int forks = 0, during = 0, ok = 0;
    for (int last = 0; forks < 40 && !last;) {
        last = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
        during += !last;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int v = 0, vr = version(&v);
            int ir = init(0);
            printf("child %d %d %d\n", vr, v, ir);
            fflush(stdout);
            _exit(vr == 0 ? 0 : 1);
        }
        if (pid < 0)
            break;
        pids[forks++] = pid;
        pause_us(rand() % 100);
    }
    for (int i = 0; i < forks; i++) {
        int status = 0;
        if (waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            ok++;
    }
    pthread_join(t, NULL);
    printf("forks %d during_load %d children_ok %d load_us %ld\n", forks, during, ok, load_us);
    return ok == forks ? 0 : 1;
}
