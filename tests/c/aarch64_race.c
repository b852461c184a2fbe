/*
 * aarch64_race.c: races and forks through an aarch64 shim, for tests/runtime/test_aarch64.py
 * (cross-compiled, run under qemu-user, whose threads are the host's).
 *
 *   aarch64_race race SEED T N   T threads released at once, each after a delay of 0 to
 *                                200 us drawn from SEED, call cuDriverGetVersion N times
 *                                (the first calls race the driver's load and each thread's
 *                                first count); prints the calls that returned 12040ish
 *   aarch64_race fork N          N calls, a fork, N more in the child and 2N in the parent;
 *                                prints "child PID"
 *   aarch64_race exit T          T threads call cuDriverGetVersion without end; once each
 *                                has called, the main thread calls exit(0) while they go on
 *                                (the exit folds and clears their blocks under them)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*version_fn)(int *);

static version_fn version;
static pthread_barrier_t start;
static int per_thread;
static unsigned seed;
static int ok[256];

static void *racer(void *arg)
{
    long k = (long)arg;
    unsigned s = seed * 2654435761u + (unsigned)k;
    useconds_t delay = rand_r(&s) % 200;
    pthread_barrier_wait(&start);
    usleep(delay);
    for (int i = 0; i < per_thread; i++) {
        int v = 0;
        if (version(&v) == 0 && v >= 11000)
            ok[k]++;
    }
    return NULL;
}

static volatile int called[256];

static void *forever(void *arg)
{
    long k = (long)arg;
    for (;;) {
        int v = 0;
        version(&v);
        called[k] = 1;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h || argc < 3)
        return 2;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (strcmp(argv[1], "race") == 0 && argc == 5) {
        seed = (unsigned)atoi(argv[2]);
        int threads = atoi(argv[3]);
        per_thread = atoi(argv[4]);
        if (threads < 1 || threads > 256)
            return 2;
        pthread_t t[256];
        pthread_barrier_init(&start, NULL, (unsigned)threads);
        for (long k = 0; k < threads; k++)
            pthread_create(&t[k], NULL, racer, (void *)k);
        long total = 0;
        for (int k = 0; k < threads; k++) {
            pthread_join(t[k], NULL);
            total += ok[k];
        }
        printf("%ld\n", total);
        return 0;
    }
    if (strcmp(argv[1], "fork") == 0) {
        int n = atoi(argv[2]), v;
        for (int i = 0; i < n; i++)
            version(&v);
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < n; i++)
                version(&v);
            exit(0); /* the trace is written at exit (_exit would skip it) */
        }
        for (int i = 0; i < n; i++)
            version(&v);
        int status;
        waitpid(pid, &status, 0);
        printf("child %d %d\n", (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    if (strcmp(argv[1], "exit") == 0) {
        int threads = atoi(argv[2]);
        if (threads < 1 || threads > 256)
            return 2;
        pthread_t t;
        for (long k = 0; k < threads; k++)
            pthread_create(&t, NULL, forever, (void *)k);
        for (int k = 0; k < threads; k++)
            while (!called[k])
                usleep(100);
        exit(0);
    }
    return 2;
}
