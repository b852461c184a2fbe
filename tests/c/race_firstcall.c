/* 64 threads make their first driver call at once (the shim's lazy first-call path: the
 * driver's load and each thread's first counted call), after a random spin each, and are
 * still alive, blocked, when the main thread exits: their calls reach the trace only
 * through the list of every per-thread block.
 *   race_firstcall CALLS SEED
 * Prints "threads 64 calls <c> failures <f>", then exits with the threads still there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 64
typedef int (*version_fn)(int *);

static version_fn fn;
static long calls_per_thread;
static int go;
static long done, failures;
static unsigned spin[THREADS];
static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        __builtin_ia32_pause();
    for (unsigned k = 0; k < spin[id]; k++)
        __builtin_ia32_pause();
    long mine = 0;
    for (long i = 0; i < calls_per_thread; i++) {
        int v = 0;
        mine += fn(&v) != 0 || v == 0;
    }
    __atomic_fetch_add(&failures, mine, __ATOMIC_RELAXED);
    __atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&hold); /* held by main until exit: the thread never retires */
    return NULL;
}

int main(int argc, char **argv)
{
    calls_per_thread = argc > 1 ? atol(argv[1]) : 100;
    srand(argc > 2 ? (unsigned)atol(argv[2]) : 1);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    fn = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!fn) {
        fprintf(stderr, "no cuDriverGetVersion\n");
        return 1;
    }
    pthread_mutex_lock(&hold);
    pthread_t t;
    for (long i = 0; i < THREADS; i++) {
        spin[i] = (unsigned)(rand() % 2 ? rand() % 200 : rand() % 5000);
        if (pthread_create(&t, NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) < THREADS)
        sched_yield();
    printf("threads %d calls %ld failures %ld\n", THREADS, THREADS * calls_per_thread,
           failures);
    fflush(stdout);
    exit(failures != 0);
}
