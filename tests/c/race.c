/* 64 threads wait at a barrier, then all make their first driver call at once (through
 * the shim's lazy first-call path) and keep calling. Exit 0 only if every call returned
 * CUDA_SUCCESS and the version the driver reports alone. argv[1]: calls per thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 64
typedef int (*version_fn)(int *);

static pthread_barrier_t barrier;
static version_fn fn;
static long calls_per_thread;
static int expected;
static int bad[THREADS];

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < calls_per_thread; i++) {
        int v = 0;
        if (fn(&v) != 0 || v != expected)
            bad[id]++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    calls_per_thread = argc > 1 ? atol(argv[1]) : 1000;
    expected = argc > 2 ? atoi(argv[2]) : 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    fn = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!fn) {
        fprintf(stderr, "no cuDriverGetVersion\n");
        return 1;
    }
    pthread_t t[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += bad[i];
    }
    printf("threads %d calls %ld failures %d\n", THREADS, THREADS * calls_per_thread, failures);
    return failures != 0;
}
