/* Error returns and what the trace counts of them: threads call cuInit(0) once (on a machine
 * without a GPU: CUDA_ERROR_NO_DEVICE; with a timer, only the main thread, before it), then cuDeviceGet before any successful init
 * (CUDA_ERROR_NOT_INITIALIZED) and cuDriverGetVersion (success), with random pauses, while
 * an interval timer's handler calls cuDriverGetVersion(NULL) (an error), landing anywhere in the timing path of
 * the interrupted call, error path included. Every call's result is tallied here by
 * (function, code), with atomics (the handler too); the output lists the tallies, which
 * the test compares with the trace's "errors" and "calls".
 * argv[1]: library to dlopen; argv[2]: threads (all at once; "<n>s": one after another, each
 * reusing the counter block the previous one gave back); argv[3]: rounds per thread; argv[4]: the
 * timer's interval in microseconds (0: no signals); argv[5]: random seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned);
typedef int (*device_get_fn)(int *, int);
typedef int (*version_fn)(int *);

enum { F_INIT, F_DEVICE_GET, F_VERSION, NF };
static const char *const fn_names[NF] = {"cuInit", "cuDeviceGet", "cuDriverGetVersion"};
#define MAX_CODE 1000
static unsigned long tally[NF][MAX_CODE + 1]; /* the last column: codes above MAX_CODE */
static unsigned long handler_calls;
static int handlers_running;

static init_fn init;
static device_get_fn device_get;
static version_fn version;
static long rounds;
static unsigned seed0;
static int with_timer;

static void count(int f, int rc)
{
    unsigned c = rc >= 0 && rc < MAX_CODE ? (unsigned)rc : MAX_CODE;
    __atomic_fetch_add(&tally[f][c], 1, __ATOMIC_RELAXED);
}

/* cuDriverGetVersion(NULL): CUDA_ERROR_INVALID_VALUE, and no allocation (cuDeviceGet calls
 * calloc: from a handler that interrupts malloc, it would deadlock in the C library). */
static void on_alarm(int sig)
{
    (void)sig;
    __atomic_fetch_add(&handlers_running, 1, __ATOMIC_ACQ_REL);
    count(F_VERSION, version(NULL));
    __atomic_fetch_add(&handler_calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&handlers_running, 1, __ATOMIC_ACQ_REL);
}

static void pause_a_little(unsigned *seed)
{
    for (volatile unsigned k = rand_r(seed) % 64; k; k--)
        ;
}

static void *worker(void *arg)
{
    unsigned seed = seed0 + (unsigned)(long)arg * 7919u;
    if (!with_timer) /* slow (tens of ms without a GPU; under a fast timer, endless) */
        count(F_INIT, init(0));
    for (long r = 0; r < rounds; r++) {
        int d = 0, v = 0;
        switch (rand_r(&seed) % 2) {
        case 0:
            count(F_DEVICE_GET, device_get(&d, 0));
            break;
        default:
            count(F_VERSION, version(&v));
        }
        pause_a_little(&seed);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    init = (init_fn)dlsym(h, "cuInit");
    device_get = (device_get_fn)dlsym(h, "cuDeviceGet");
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (!init || !device_get || !version)
        return 1;
    char *end;
    int nthreads = (int)strtol(argv[2], &end, 10), one_by_one = *end == 's';
    rounds = atol(argv[3]);
    long interval = atol(argv[4]);
    seed0 = (unsigned)atol(argv[5]);
    if (nthreads < 1 || nthreads > 256)
        return 2;

    int v0 = 0;
    count(F_VERSION, version(&v0)); /* the first call (it loads the driver) before any signal */
    count(F_INIT, init(0));
    with_timer = interval > 0;
    if (interval > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, interval}, {0, interval}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    pthread_t t[256];
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)(long)i) != 0)
            return 1;
        if (one_by_one && pthread_join(t[i], NULL) != 0)
            return 1;
    }
    worker(0);
    for (int i = 1; i < nthreads && !one_by_one; i++)
        pthread_join(t[i], NULL);
    if (interval > 0) {
        /* A SIGALRM already sent may still run its handler on any thread (the driver's own
         * too): stop the timer, ignore the signal, and let such a handler finish before the
         * tallies are printed, so that they hold every call the trace can have. */
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        signal(SIGALRM, SIG_IGN);
        usleep(50000);
        while (__atomic_load_n(&handlers_running, __ATOMIC_ACQUIRE))
            usleep(1000);
    }
    for (int f = 0; f < NF; f++)
        for (int c = 0; c <= MAX_CODE; c++)
            if (tally[f][c])
                printf("%s %d %lu\n", fn_names[f], c, tally[f][c]);
    printf("handler %lu\n", handler_calls);
    return 0;
}
