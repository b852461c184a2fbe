/* 64 threads make their first driver call at once (the shim's lazy first-call path: the
 * driver's load and each thread's first counted call): they leave a barrier together and
 * spin a random while (mostly a few cycles) first. They are still alive, blocked, when the
 * main thread exits: their calls reach the trace only through the list of every block.
 *   race_firstcall CALLS SEED
 * Prints "threads 64 calls <c> failures <f>", then exits with the threads still there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 64
typedef int (*version_fn)(int *);

static version_fn fn;
static long calls_per_thread;
static int arrived;
static long failures;
static sem_t done;
static unsigned spin[THREADS];
static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    /* A barrier that spins (yielding, so that the rest can start on 2 CPUs): the threads on
     * a CPU when the last arrives leave it together, while the main thread sleeps. */
    __atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&arrived, __ATOMIC_ACQUIRE) < THREADS)
        sched_yield();
    for (unsigned k = 0; k < spin[id]; k++)
        __builtin_ia32_pause();
    long mine = 0;
    for (long i = 0; i < calls_per_thread; i++) {
        int v = 0;
        mine += fn(&v) != 0 || v == 0;
    }
    __atomic_fetch_add(&failures, mine, __ATOMIC_RELAXED);
    sem_post(&done);
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
    sem_init(&done, 0, 0);
    pthread_t t;
    for (long i = 0; i < THREADS; i++) {
        spin[i] = (unsigned)(rand() % 8 ? rand() % 8 : rand() % 400);
        if (pthread_create(&t, NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < THREADS; i++)
        while (sem_wait(&done) != 0)
            ;
    printf("threads %d calls %ld failures %ld\n", THREADS, THREADS * calls_per_thread,
           failures);
    fflush(stdout);
    exit(failures != 0);
}
