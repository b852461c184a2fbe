/* Signal handlers that call the driver during a thread's first traced calls. A thread's
 * first traced call gets its per-thread block on a slow path; a handler that interrupts
 * that path and calls the driver on the same thread must neither deadlock (a lock or
 * malloc held by the interrupted path) nor lose a call. A signaller sends SIGUSR1 to the
 * target thread at random intervals while it makes its first calls (after a random
 * delay); the handler calls cuDriverGetVersion.
 *   threads mode: N new threads, one after the other, each the target of its signals;
 *   they stay alive until the end, so that each needs a new block.
 *   main mode: N forked children (the parent never calls the driver); in each, another
 *   thread loads the driver and stays alive, then the child's main thread is the target.
 *   A child that hangs is killed by alarm(); the parent counts children that did not
 *   exit 0.
 * Prints "threads <n> calls <n> handler <n> bad <n>" (threads mode: one trace), or one
 * line "child <pid> calls <n> handler <n> bad <n>" per child and "children <n> failed <n>".
 * argv[1]: library to dlopen; argv[2]: threads|main; argv[3]: N; argv[4]: seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CALLS_PER_THREAD 3

typedef int (*version_fn)(int *);

static version_fn version;
static long calls_made, bad; /* by the target threads, one at a time */
static volatile long handler_calls, handler_bad;
static volatile int target_ready, armed, target_done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int released;

/* Keep the calling thread (and its block) alive until release_all(). */
static void wait_for_release(void)
{
    pthread_mutex_lock(&lock);
    while (!released)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void release_all(void)
{
    pthread_mutex_lock(&lock);
    released = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void on_usr1(int sig)
{
    (void)sig;
    int v = 0;
    if (version(&v) != 0 || v <= 0)
        __atomic_fetch_add(&handler_bad, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&handler_calls, 1, __ATOMIC_RELAXED);
}

static void spin(unsigned iterations)
{
    for (volatile unsigned i = 0; i < iterations; i++)
        ;
}

/* The target's first calls, after a random delay. */
static void first_calls(unsigned delay)
{
    __atomic_store_n(&target_ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE)) /* both run from here on */
        ;
    spin(delay);
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        int v = 0;
        if (version(&v) != 0 || v <= 0)
            bad++;
        calls_made++;
    }
}

static void *target(void *arg)
{
    first_calls((unsigned)(long)arg);
    __atomic_store_n(&target_done, 1, __ATOMIC_RELEASE);
    wait_for_release();
    return NULL;
}

/* Signals to `t` from a random moment around its first call, at random intervals, until
 * the target is done (at least one). */
static void signal_until_done(pthread_t t, unsigned *seed)
{
    while (!__atomic_load_n(&target_ready, __ATOMIC_ACQUIRE))
        ;
    __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
    spin((unsigned)rand_r(seed) % 3000);
    do {
        pthread_kill(t, SIGUSR1);
        spin((unsigned)rand_r(seed) % 500);
    } while (!__atomic_load_n(&target_done, __ATOMIC_ACQUIRE));
}

static pthread_t main_thread;

static void *signal_main(void *arg)
{
    unsigned seed = (unsigned)(long)arg;
    signal_until_done(main_thread, &seed);
    return NULL;
}

static volatile int loaded;

static void *load_driver(void *arg)
{
    int v = 0;
    if (version(&v) != 0)
        bad++;
    if (arg) {
        __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
        wait_for_release();
    }
    return NULL;
}

static int child(unsigned seed)
{
    alarm(20); /* a hang ends in SIGALRM */
    pthread_t t, loader;
    pthread_create(&loader, NULL, load_driver, &main_thread); /* the first call */
    while (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
        sched_yield();
    main_thread = pthread_self();
    pthread_create(&t, NULL, signal_main, (void *)(long)seed);
    first_calls((unsigned)rand_r(&seed) % 3000);
    __atomic_store_n(&target_done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    release_all();
    pthread_join(loader, NULL);
    sched_yield(); /* a signal still pending is delivered on the way back from a syscall */
    char line[128];
    int n = snprintf(line, sizeof line, "child %ld calls %ld handler %ld bad %ld\n",
                     (long)getpid(), calls_made + 1, handler_calls, bad + handler_bad);
    if (write(1, line, (size_t)n) != n)
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (!version)
        return 1;
    long n = atol(argv[3]);
    unsigned seed = (unsigned)atol(argv[4]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);

    if (strcmp(argv[2], "main") == 0) {
        fflush(stdout);
        long failed = 0;
        for (long i = 0; i < n; i++) {
            unsigned s = (unsigned)rand_r(&seed);
            pid_t pid = fork();
            if (pid == 0)
                exit(child(s) == 0 ? 0 : 1); /* exit, not _exit: the shim writes its trace */
            int status = 0;
            if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0)
                failed++;
        }
        printf("children %ld failed %ld\n", n, failed);
        return 0;
    }
    load_driver(NULL); /* the process's first call, before any signal */
    calls_made = 1;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!t)
        return 3;
    for (long i = 0; i < n; i++) {
        target_ready = armed = target_done = 0;
        if (pthread_create(&t[i], NULL, target, (void *)(long)(rand_r(&seed) % 3000)) != 0)
            return 3;
        signal_until_done(t[i], &seed);
    }
    release_all();
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("threads %ld calls %ld handler %ld bad %ld\n", n, calls_made, handler_calls,
           bad + handler_bad);
    return 0;
}
