/* spawnbench: wall time of whole processes, with and without LD_PRELOAD of the shim,
 * interleaved so that both see the same machine load.
 *
 *   spawnbench ROUNDS SHIM PROG [PROG...]
 *
 * Each round runs every PROG twice, once without LD_PRELOAD and once with LD_PRELOAD=SHIM,
 * in an order that rotates from round to round. Each process is timed from posix_spawn to
 * waitpid (CLOCK_MONOTONIC). Every process must exit 0. Output: one line per process,
 * "PROG_INDEX PRELOAD NS", PRELOAD being 0 or 1. The rest of the environment is inherited
 * (LD_LIBRARY_PATH names the real driver's directory).
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: spawnbench ROUNDS SHIM PROG [PROG...]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    const char *shim = argv[2];
    int nprog = argc - 3;

    /* Two environments: the inherited one without LD_PRELOAD, and the same plus the shim. */
    size_t n = 0;
    while (environ[n])
        n++;
    char **plain = calloc(n + 1, sizeof *plain);
    char **preload = calloc(n + 2, sizeof *preload);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            plain[k] = preload[k] = environ[i], k++;
    size_t len = strlen(shim) + 12;
    char *pre = malloc(len);
    snprintf(pre, len, "LD_PRELOAD=%s", shim);
    preload[k] = pre;

    int slots = 2 * nprog;
    for (long r = 0; r < rounds; r++) {
        for (int j = 0; j < slots; j++) {
            int s = (int)((j + r) % slots);
            int p = s / 2, with = s % 2;
            char *args[] = {argv[3 + p], NULL};
            pid_t pid;
            double t0 = now_ns();
            int err = posix_spawn(&pid, argv[3 + p], NULL, NULL, args, with ? preload : plain);
            if (err) {
                fprintf(stderr, "spawnbench: cannot run %s: %s\n", argv[3 + p], strerror(err));
                return 1;
            }
            int status;
            if (waitpid(pid, &status, 0) < 0) {
                perror("spawnbench: waitpid");
                return 1;
            }
            double t1 = now_ns();
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "spawnbench: %s (LD_PRELOAD %s) failed, status %d\n",
                        argv[3 + p], with ? "set" : "unset", status);
                return 1;
            }
            printf("%d %d %.0f\n", p, with, t1 - t0);
        }
    }
    return 0;
}
