/* fork() while another thread's first NVML call is loading the real libnvidia-ml through
 * the NVML shim (tests/runtime/test_nvml_fork.py): a thread makes the process's first call
 * (nvmlInit_v2, which loads the real library: the FAKE libnvidia-ml, whose constructor
 * sleeps FAKE_NVML_LOAD_MS) while the main thread forks again and again from a random moment
 * (0 to 499 us after the call began), with random pauses of 0 to 99 us, until that call has
 * returned. Each child makes its first calls, nvmlInit_v2 and nvmlDeviceGetCount_v2, prints
 * "child <init rc> <count rc> <count>" and leaves with _exit. The parent prints "forks N
 * during_load L children_ok K" and exits 0 when every child exited 0. argv[1]: seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(void);
typedef int (*count_fn)(unsigned int *);

static init_fn init;
static count_fn count;
static int started, loaded;

static long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static void pause_us(long us)
{
    long end = now_us() + us;
    while (now_us() < end && !__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
        ;
}

static void *first_call(void *arg)
{
    (void)arg;
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    init();
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    srand((unsigned)atoi(argv[1]));
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    init = (init_fn)dlsym(h, "nvmlInit_v2");
    count = (count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
    if (!init || !count)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, first_call, NULL);
    while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        ;
    pause_us(rand() % 500);
    pid_t pids[20];
    int forks = 0, during = 0, ok = 0;
    for (int last = 0; forks < 20 && !last;) {
        last = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
        during += !last;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            unsigned int n = 0;
            int ir = init(), cr = count(&n);
            printf("child %d %d %u\n", ir, cr, n);
            fflush(stdout);
            _exit(ir == 0 && cr == 0 && n == 1 ? 0 : 1);
        }
        if (pid > 0)
            pids[forks++] = pid;
        pause_us(rand() % 100);
    }
    pthread_join(t, NULL);
    for (int i = 0; i < forks; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    printf("forks %d during_load %d children_ok %d\n", forks, during, ok);
    return ok == forks ? 0 : 1;
}
