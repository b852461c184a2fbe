/* Threads that start, call the driver and exit, a few at a time, released together so that
 * they race for the per-thread blocks that the previous round's threads freed.
 *   race_churn LIB ROUNDS CALLS SEED [TOGETHER SECONDS]
 * Each round starts 2 or 3 threads (chosen at random from SEED), which meet at a spin
 * barrier, spin a random while more (mostly a few cycles: the claim's window is that
 * short), make CALLS calls of cuDriverGetVersion and end (return or pthread_exit, at
 * random); the main thread pauses at random (none, a yield, a short sleep) and joins them.
 * It makes no call. Prints "threads <n> calls <c> bad <b>", then "rounds <r> together <t>":
 * the rounds whose threads all left the barrier within TOGETHER_NS of each other (on CPUs
 * at once: the rounds that race; on a loaded machine few do). With TOGETHER, rounds go on
 * past ROUNDS until that many raced, or SECONDS have passed. */
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

#define TOGETHER_NS 2000

struct job {
    unsigned spin;
    int how;
    struct timespec left; /* when it left the barrier */
};

static double ns_of(const struct timespec *t)
{
    return (double)t->tv_sec * 1e9 + (double)t->tv_nsec;
}

#if defined(__x86_64__)
# define SPIN_PAUSE() __builtin_ia32_pause()
#else /* aarch64 (tests/runtime/test_aarch64_timing.py, under qemu-user) */
# define SPIN_PAUSE() __asm__ __volatile__("yield")
#endif

static void *worker(void *arg)
{
    struct job *j = arg;
    /* A spin barrier: the threads of a round that are on a CPU at once leave it together. */
    __atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL);
    for (unsigned spins = 0; __atomic_load_n(&arrived, __ATOMIC_ACQUIRE) < round_threads;)
        if (++spins < 4096)
            SPIN_PAUSE();
        else /* the others are not on a CPU: let them have this one (a loaded machine) */
            sched_yield();
    clock_gettime(CLOCK_MONOTONIC, &j->left);
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
    long rounds = atol(argv[2]), threads = 0, want = argc > 5 ? atol(argv[5]) : 0, together = 0;
    double seconds = argc > 6 ? atof(argv[6]) : 0, start;
    calls_per_thread = atol(argv[3]);
    srand((unsigned)atol(argv[4]));
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    start = ns_of(&now);
    long r;
    for (r = 0; r < rounds || (together < want && ns_of(&now) - start < seconds * 1e9);
         r++) {
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
        double first = 0, last = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(t[i], NULL);
            double at = ns_of(&jobs[i].left);
            first = i == 0 || at < first ? at : first;
            last = i == 0 || at > last ? at : last;
        }
        together += last - first < TOGETHER_NS;
        threads += n;
        clock_gettime(CLOCK_MONOTONIC, &now);
    }
    printf("threads %ld calls %ld bad %ld\n", threads, threads * calls_per_thread, bad);
    printf("rounds %ld together %ld\n", r, together);
    return bad != 0;
}
