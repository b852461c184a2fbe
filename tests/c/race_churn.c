/* Threads that start, call the driver and exit, a few at a time, released together so that
 * they race for the per-thread blocks that the previous round's threads freed.
 *   race_churn LIB ROUNDS CALLS SEED
 * Each round starts 2 or 3 threads (chosen at random from SEED), which meet at a spin
 * barrier, spin a random while more (mostly a few cycles: the claim's window is that
 * short), make CALLS calls of cuDriverGetVersion and end (return or pthread_exit, at
 * random); the main thread pauses at random (none, a yield, a short sleep) and joins them.
 * It makes no call. Prints "threads <n> calls <c> bad <b>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*version_fn)(int *);

static version_fn version;
static long calls_per_thread;
static int arrived, round_threads;
static long bad;

struct job {
    unsigned spin;
    int how;
};

#if defined(__x86_64__)
# define SPIN_PAUSE() __builtin_ia32_pause()
#else /* aarch64 (tests/runtime/test_aarch64_timing.py, under qemu-user) */
# define SPIN_PAUSE() __asm__ __volatile__("yield")
#endif

static void *worker(void *arg)
{
    const struct job *j = arg;
    /* A spin barrier: the threads of a round that are on a CPU at once leave it together. */
    __atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&arrived, __ATOMIC_ACQUIRE) < round_threads)
        SPIN_PAUSE();
    for (unsigned k = 0; k < j->spin; k++)
        SPIN_PAUSE();
    long mine = 0;
    for (long k = 0; k < calls_per_thread; k++) {
        int v = 0;
        mine += version(&v) != 0 || v == 0;
    }
    __atomic_fetch_add(&bad, mine, __ATOMIC_RELAXED);
    if (j->how)
        pthread_exit(NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: race_churn LIB ROUNDS CALLS SEED\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!version) {
        fprintf(stderr, "no cuDriverGetVersion: %s\n", dlerror());
        return 1;
    }
    long rounds = atol(argv[2]), threads = 0;
    calls_per_thread = atol(argv[3]);
    srand((unsigned)atol(argv[4]));
    for (long r = 0; r < rounds; r++) {
        pthread_t t[4];
        struct job jobs[4];
        int n = rand() % 4 ? 2 : 3;
        __atomic_store_n(&arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&round_threads, n, __ATOMIC_RELAXED);
        for (int i = 0; i < n; i++) {
            jobs[i].spin = (unsigned)(rand() % 8 == 0 ? rand() % 200 : rand() % 4);
            jobs[i].how = rand() % 2;
            if (pthread_create(&t[i], NULL, worker, &jobs[i]) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                return 1;
            }
        }
        int pause_kind = rand() % 3;
        if (pause_kind == 1)
            sched_yield();
        else if (pause_kind == 2) {
            struct timespec ts = {0, (long)(rand() % 20000)};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        threads += n;
    }
    printf("threads %ld calls %ld bad %ld\n", threads, threads * calls_per_thread, bad);
    return bad != 0;
}
