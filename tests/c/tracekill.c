/* Driver calls for the binary trace file tests (tests/runtime/test_tracefile.py), made so that a test
 * can kill the process with SIGKILL and compare the file's counts with the calls made.
 *   rounds LIB R T SEED: R rounds of 1..T threads, each making 1..200 calls of
 *     cuDriverGetVersion and exiting (later rounds reuse the freed blocks), then T threads
 *     that make their calls and stay alive; prints "calls N" once every call is made, then
 *     waits for stdin to close (a normal exit) or for SIGKILL.
 *   race LIB T COUNTERS: T threads call for ever; thread i stores its calls made after each
 *     one in 8-byte slot i of the file COUNTERS (mapped shared); prints "started" once
 *     each has made one.
 *   inside LIB N: N calls of cuDriverGetVersion, then cuLaunchHostFunc whose callback
 *     prints "inside" and waits for ever (the fake driver runs callbacks at once).
 *   fork LIB DEPTH SEED EXEC [IMAGE]: calls, then a child (which, when EXEC is 1, makes
 *     calls as image 0 and then execs this program again, as image 1) that does the same at
 *     DEPTH-1, more calls while it runs, then waits for it. Each image prints
 *     "pid P image I calls N" with its own calls.
 *   twice LIB N M: N calls of cuDriverGetVersion and M of cuInit (longer: 64 ticks and more),
 *     "made" once they are made, then, after a byte on stdin, as many more and "made"
 *     again; then waits for stdin to close.
 * argv[1] is the library to dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef void (*host_fn)(void *);
typedef int (*launch_fn)(void *, host_fn, void *);

static version_fn version;
static long total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int done, staying_ready;
static volatile unsigned long *counters;

static void calls(long n)
{
    int v;
    for (long i = 0; i < n; i++)
        version(&v);
    __atomic_fetch_add(&total, n, __ATOMIC_RELAXED);
}

static void *round_thread(void *arg)
{
    calls((long)(uintptr_t)arg);
    return NULL;
}

static void *staying_thread(void *arg)
{
    calls((long)(uintptr_t)arg);
    pthread_mutex_lock(&lock);
    staying_ready++;
    pthread_cond_broadcast(&cond);
    while (!done)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *racing_thread(void *arg)
{
    unsigned long i = (unsigned long)(uintptr_t)arg, n = 0;
    int v;
    for (;;) {
        version(&v);
        __atomic_store_n(&counters[i], ++n, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void wait_forever(void *arg)
{
    (void)arg;
    printf("inside\n");
    fflush(stdout);
    for (;;)
        pause();
}

static int rounds(int r, int t, unsigned seed)
{
    srand(seed);
    pthread_t th[64];
    calls(1 + rand() % 200);
    for (int k = 0; k < r; k++) {
        int n = 1 + rand() % t;
        for (int i = 0; i < n; i++)
            pthread_create(&th[i], NULL, round_thread, (void *)(uintptr_t)(1 + rand() % 200));
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
    }
    for (int i = 0; i < t; i++)
        pthread_create(&th[i], NULL, staying_thread, (void *)(uintptr_t)(1 + rand() % 200));
    pthread_mutex_lock(&lock);
    while (staying_ready < t)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    printf("calls %ld\n", total);
    fflush(stdout);
    char buf[16];
    while (read(0, buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    return 0;
}

static int forks(char **argv, int depth, unsigned seed, int exec, int image)
{
    srand(seed ^ (unsigned)getpid());
    long mine = 1 + rand() % 50;
    calls(mine);
    if (depth > 0) {
        pid_t c = fork();
        if (c == 0) {
            total = 0;
            long pre = 1 + rand() % 50;
            if (exec) {
                calls(pre);
                printf("pid %ld image 0 calls %ld\n", (long)getpid(), pre);
                fflush(stdout);
                char d[16], s[16];
                snprintf(d, sizeof d, "%d", depth - 1);
                snprintf(s, sizeof s, "%u", seed + 1);
                execl("/proc/self/exe", argv[0], argv[1], "fork", d, s, "1", "1", (char *)NULL);
                _exit(127);
            }
            return forks(argv, depth - 1, seed + 1, exec, 0);
        }
        long more = 1 + rand() % 50;
        calls(more);
        mine += more;
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            return 1;
    }
    printf("pid %ld image %d calls %ld\n", (long)getpid(), image, mine);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h || !(version = (version_fn)dlsym(h, "cuDriverGetVersion")))
        return 3;
    const char *mode = argv[2];
    if (strcmp(mode, "twice") == 0 && argc == 5) {
        char buf[16];
        int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
        if (!init)
            return 3;
        for (int k = 0; k < 2; k++) {
            calls(atol(argv[3]));
            for (long i = 0; i < atol(argv[4]); i++)
                init(0);
            printf("made\n");
            fflush(stdout);
            if (read(0, buf, 1) <= 0)
                return 5;
        }
        while (read(0, buf, sizeof buf) > 0)
            ;
        return 0;
    }
    if (strcmp(mode, "rounds") == 0 && argc == 6)
        return rounds(atoi(argv[3]), atoi(argv[4]), (unsigned)atol(argv[5]));
    if (strcmp(mode, "race") == 0 && argc == 5) {
        int t = atoi(argv[3]);
        int fd = open(argv[4], O_RDWR);
        counters = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd < 0 || counters == MAP_FAILED || t > 64)
            return 4;
        pthread_t th;
        for (int i = 0; i < t; i++)
            pthread_create(&th, NULL, racing_thread, (void *)(uintptr_t)i);
        for (int i = 0; i < t; i++) /* every thread has made a call (and has a block) */
            while (!__atomic_load_n(&counters[i], __ATOMIC_RELAXED))
                usleep(100);
        printf("started\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (strcmp(mode, "inside") == 0 && argc == 4) {
        launch_fn launch = (launch_fn)dlsym(h, "cuLaunchHostFunc");
        if (!launch)
            return 5;
        calls(atol(argv[3]));
        return launch(NULL, wait_forever, NULL);
    }
    if (strcmp(mode, "fork") == 0 && (argc == 6 || argc == 7))
        return forks(argv, atoi(argv[3]), (unsigned)atol(argv[4]), atoi(argv[5]),
                     argc == 7 ? atoi(argv[6]) : 0);
    return 2;
}
