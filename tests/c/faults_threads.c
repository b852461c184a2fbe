/* Threads that start, call the driver and exit while the main thread keeps calling.
 *   faults_threads LIB WAVES THREADS CALLS [callback-exit]
 * Each wave starts THREADS threads; thread i makes CALLS calls of cuDriverGetVersion, then
 * ends: i%3 == 0 returns, 1 calls pthread_exit, 2 is detached and returns. While a wave
 * runs, the main thread calls cuDriverGetVersion until every thread of the wave has made
 * its calls. With "callback-exit" (the fake driver only), every thread ends inside a driver
 * call instead: cuLaunchHostFunc runs a host function that calls pthread_exit.
 * Prints "threads <n> thread_calls <c> main_calls <m> host_funcs <h> bad <b>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static version_fn version;
static host_launch_fn launch_host;
static long calls_per_thread;
static int callback_exit;
static long finished, bad, thread_calls, host_funcs;

static void exit_from_callback(void *user)
{
    (void)user;
    pthread_exit(NULL);
}

static void *worker(void *arg)
{
    long i = (long)arg, mine_bad = 0;
    for (long k = 0; k < calls_per_thread; k++) {
        int v = 0;
        mine_bad += version(&v) != 0 || v == 0;
    }
    __atomic_fetch_add(&bad, mine_bad, __ATOMIC_RELAXED);
    __atomic_fetch_add(&thread_calls, calls_per_thread, __ATOMIC_RELAXED);
    if (callback_exit) {
        __atomic_fetch_add(&host_funcs, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&finished, 1, __ATOMIC_RELEASE);
        launch_host(NULL, exit_from_callback, NULL);
        __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED); /* not reached */
        return NULL;
    }
    __atomic_fetch_add(&finished, 1, __ATOMIC_RELEASE);
    if (i % 3 == 1)
        pthread_exit(NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: faults_threads LIB WAVES THREADS CALLS [callback-exit]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    launch_host = h ? (host_launch_fn)dlsym(h, "cuLaunchHostFunc") : NULL;
    long waves = atol(argv[2]), threads = atol(argv[3]);
    calls_per_thread = atol(argv[4]);
    callback_exit = argc > 5 && strcmp(argv[5], "callback-exit") == 0;
    if (!version || (callback_exit && !launch_host)) {
        fprintf(stderr, "missing driver function: %s\n", dlerror());
        return 1;
    }
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    long main_calls = 0, main_bad = 0;
    for (long w = 0; w < waves; w++) {
        __atomic_store_n(&finished, 0, __ATOMIC_RELAXED);
        for (long i = 0; i < threads; i++) {
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            if (!callback_exit && i % 3 == 2)
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t[i], &attr, worker, (void *)i) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                return 1;
            }
            pthread_attr_destroy(&attr);
        }
        while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < threads) {
            int v = 0;
            main_bad += version(&v) != 0 || v == 0;
            main_calls++;
        }
        for (long i = 0; i < threads; i++)
            if (callback_exit || i % 3 != 2)
                pthread_join(t[i], NULL);
    }
    printf("threads %ld thread_calls %ld main_calls %ld host_funcs %ld bad %ld\n",
           waves * threads, thread_calls, main_calls, host_funcs, bad + main_bad);
    return bad + main_bad != 0;
}
