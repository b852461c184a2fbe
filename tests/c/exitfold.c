/* The trace file of a process that dies while its exit folds the blocks (tests/runtime/test_guards.py).
 * argv[1]: the library to dlopen; argv[2]: "exit" or "die".
 * A thread calls cuLaunchHostFunc, whose callback (run at once by the FAKE driver) waits for
 * ever: a call in progress at exit, which the exit counts from its frame. The main thread
 * makes 5 calls of cuDriverGetVersion, prints "ready", and calls exit(0). With "die", every
 * block of the process's trace file (SHIMGEN_TRACE_DIR: the mappings of the *.shimtrace file
 * past its header) is first made unreadable, and SIGSEGV ends the process with _exit(77):
 * so the first read of a block in the exit's fold ends the process there, as a signal or
 * another thread's _exit at that moment would. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef void (*host_fn)(void *);
typedef int (*launch_fn)(void *, host_fn, void *);

static launch_fn launch;
static int inside;

static void wait_for_ever(void *arg)
{
    (void)arg;
    __atomic_store_n(&inside, 1, __ATOMIC_RELEASE);
    for (;;)
        pause();
}

static void *caller(void *arg)
{
    (void)arg;
    launch(NULL, wait_for_ever, NULL);
    return NULL;
}

static void died(int sig)
{
    (void)sig;
    _exit(77);
}

/* Every page of the trace file's blocks made unreadable; returns how many mappings. */
static int blocks_unreadable(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    int n = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi, off;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &lo, &hi, &off, &path_at) != 3 ||
            !path_at)
            continue;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        size_t len = strlen(path);
        if (len < 10 || strcmp(path + len - 10, ".shimtrace") != 0)
            continue;
        uint64_t blocks_off = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || pread(fd, &blocks_off, 8, 64) != 8 || !blocks_off)
            abort();
        close(fd);
        unsigned long from = off < blocks_off ? lo + (blocks_off - off) : lo;
        if (from < hi && mprotect((void *)from, hi - from, PROT_NONE) == 0)
            n++;
    }
    if (maps)
        fclose(maps);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    version_fn version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    launch = h ? (launch_fn)dlsym(h, "cuLaunchHostFunc") : NULL;
    if (!version || !launch)
        return 1;
    int v;
    for (int i = 0; i < 5; i++)
        version(&v);
    pthread_t t;
    if (pthread_create(&t, NULL, caller, NULL) != 0)
        return 1;
    while (!__atomic_load_n(&inside, __ATOMIC_ACQUIRE))
        usleep(1000);
    if (strcmp(argv[2], "die") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = died;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        if (blocks_unreadable() == 0)
            return 1;
    }
    printf("ready\n");
    fflush(stdout);
    exit(0);
}
