/* Process trees for the run-level report tests (tests/report/test_report_runs.py), on libcuda.so.1:
 *   execs LIB N: a call, then N children one after another, each forked and exec'ing this
 *     program as "child LIB" (which makes 3 calls and exits 0); every process exits 0.
 *   kills LIB N MAXUS SEED: N children one after another, each calling cuDriverGetVersion
 *     in a loop from its start, SIGKILLed 0 to MAXUS microseconds after the fork (random,
 *     from SEED): some die before, while or after their trace file is made.
 *   child LIB: 3 calls, exit 0.
 * Prints "calls N" for the calls it made itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*version_fn)(int *);

static version_fn load(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    version_fn v = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!v) {
        fprintf(stderr, "spawnexec: cannot load %s\n", lib);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    version_fn version = load(argv[2]);
    int v;
    if (strcmp(argv[1], "child") == 0) {
        for (int i = 0; i < 3; i++)
            version(&v);
        return 0;
    }
    version(&v);
    int n = argc > 3 ? atoi(argv[3]) : 0;
    if (strcmp(argv[1], "execs") == 0) {
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();
            if (pid == 0) {
                char *args[] = {argv[0], "child", argv[2], NULL};
                execv("/proc/self/exe", args);
                _exit(127);
            }
            int st;
            if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
                return 1;
        }
        return 0;
    }
    if (strcmp(argv[1], "kills") == 0 && argc == 6) {
        unsigned maxus = (unsigned)atoi(argv[4]);
        srand((unsigned)atoi(argv[5]));
        for (int i = 0; i < n; i++) {
            unsigned us = maxus ? (unsigned)rand() % (maxus + 1) : 0;
            pid_t pid = fork();
            if (pid == 0)
                for (;;)
                    version(&v);
            if (pid < 0)
                return 1;
            struct timespec t = {0, (long)us * 1000};
            nanosleep(&t, NULL);
            kill(pid, SIGKILL);
            int st;
            if (waitpid(pid, &st, 0) != pid)
                return 1;
        }
        return 0;
    }
    return 2;
}
