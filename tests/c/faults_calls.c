/* Process-level run-time faults (tests/test_runtime_faults.py). Every mode opens
 * "libcuda.so.1" (the shim when it is preloaded) and calls cuDriverGetVersion.
 *
 *   faults_calls calls N        N calls, then a normal exit
 *   faults_calls _exit N        N calls, then _exit(0): no atexit handler runs
 *   faults_calls setenv N       change SHIMGEN_* in its own environment, then N calls
 *   faults_calls forkexec K N   N calls; K children at once: even ones fork and call
 *                               10*(i+1) times, odd ones exec "calls 10*(i+1)"
 *   faults_calls together K N SEED
 *                               K children (forked and exec'd: programs of the job) each
 *                               make one call (which loads the driver) and wait at one
 *                               gate; then each calls N*(i+1) - 1 more times, waits a
 *                               random 0-499 us (from SEED) and exits: their traces are
 *                               written at nearly the same moment. The parent makes no
 *                               call (it writes no trace)
 *   faults_calls pidfile N      a forked child first creates "$SHIMGEN_TRACE_FILE.<its pid>"
 *                               (a file that is there already), then calls N times
 *   faults_calls all REPS RC    call every function named on stdin REPS times, with no
 *                               arguments; each must return RC. Only for functions that are
 *                               the shim's failure stubs (303: no driver; 801: the driver
 *                               lacks it), which never reach a driver
 *
 * Output lines: "pid <role> <pid> calls <n> rc <rc> version <v>", "child <pid> <kind> <n>",
 * "all functions <f> calls <c> expected <e>". Exits non-zero on any failed call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef int (*noarg_fn)(void);

static void *lib;
static version_fn version;

static int calls(const char *role, long n)
{
    int v = 0, rc = 0;
    for (long i = 0; i < n; i++)
        rc |= version(&v);
    printf("pid %s %ld calls %ld rc %d version %d\n", role, (long)getpid(), n, rc, v);
    fflush(stdout);
    return rc != 0;
}

static int all_functions(long reps, int expected_rc)
{
    char name[256];
    long functions = 0, total = 0, expected = 0;
    while (fgets(name, sizeof name, stdin)) {
        name[strcspn(name, "\n")] = '\0';
        if (!name[0])
            continue;
        noarg_fn fn = (noarg_fn)dlsym(lib, name);
        if (!fn) {
            fprintf(stderr, "no %s\n", name);
            return 1;
        }
        functions++;
        for (long i = 0; i < reps; i++, total++)
            expected += fn() == expected_rc;
    }
    printf("all functions %ld calls %ld expected %ld\n", functions, total, expected);
    return expected != total;
}

static int forkexec(const char *self, long k, long n)
{
    pid_t pids[64];
    if (k > 64)
        k = 64;
    int bad = calls("parent", n);
    for (long i = 0; i < k; i++) {
        long m = 10 * (i + 1);
        pid_t p = fork();
        if (p == 0) {
            if (i % 2 == 0)
                exit(calls("forked", m) ? 3 : 0); /* a normal exit: the trace is written */
            char arg[32];
            snprintf(arg, sizeof arg, "%ld", m);
            execl(self, self, "calls", arg, (char *)NULL);
            _exit(4);
        }
        pids[i] = p;
        printf("child %ld %s %ld\n", (long)p, i % 2 == 0 ? "forked" : "exec", m);
        fflush(stdout); /* before the next fork, so no child prints it again */
    }
    for (long i = 0; i < k; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return bad;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* One child of "together", exec'd: `faults_calls gated M READY GATE R`. */
static int gated(long m, int ready, int gate, unsigned r)
{
    char c = 'r';
    int v = 0, bad = version(&v) != 0; /* the driver loaded before the gate */
    if (write(ready, &c, 1) != 1 || read(gate, &c, 1) != 0) /* EOF: the gate is open */
        return 6;
    bad |= calls("together", m - 1);
    double until = now_us() + (double)((r >> 7) % 500);
    while (now_us() < until)
        ;
    return bad ? 3 : 0;
}

static int together(const char *self, long k, long n, unsigned seed)
{
    pid_t pids[64];
    int gate[2], ready[2];
    if (k > 64)
        k = 64;
    if (pipe(gate) != 0 || pipe(ready) != 0)
        return 1;
    for (long i = 0; i < k; i++) {
        long m = n * (i + 1);
        unsigned r = seed * 2654435761u + (unsigned)i * 40503u;
        pid_t p = fork();
        if (p == 0) {
            char args[4][24];
            close(gate[1]);
            close(ready[0]);
            snprintf(args[0], sizeof args[0], "%ld", m);
            snprintf(args[1], sizeof args[1], "%d", ready[1]);
            snprintf(args[2], sizeof args[2], "%d", gate[0]);
            snprintf(args[3], sizeof args[3], "%u", r);
            execl(self, self, "gated", args[0], args[1], args[2], args[3], (char *)NULL);
            _exit(4);
        }
        pids[i] = p;
        printf("child %ld together %ld\n", (long)p, m);
        fflush(stdout);
    }
    close(ready[1]);
    char c;
    for (long i = 0; i < k; i++) /* every child has loaded the driver */
        if (read(ready[0], &c, 1) != 1)
            break;
    close(gate[0]);
    close(gate[1]);
    int bad = 0;
    for (long i = 0; i < k; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: faults_calls MODE N...\n");
        return 2;
    }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    version = lib ? (version_fn)dlsym(lib, "cuDriverGetVersion") : NULL;
    if (!version) {
        fprintf(stderr, "no cuDriverGetVersion: %s\n", dlerror());
        return 1;
    }
    if (strcmp(mode, "calls") == 0)
        return calls("main", n);
    if (strcmp(mode, "_exit") == 0) {
        int bad = calls("main", n);
        _exit(bad);
    }
    if (strcmp(mode, "setenv") == 0) {
        /* Read once, when the shim was loaded: none of this may change anything. */
        setenv("SHIMGEN_DRIVER", "/nonexistent/libcuda.so.1", 1);
        setenv("SHIMGEN_TRACE", "0", 1);
        setenv("SHIMGEN_TRACE_FILE", "/nonexistent/trace.json", 1);
        setenv("SHIMGEN_QUIET", "1", 1);
        return calls("main", n);
    }
    if (strcmp(mode, "forkexec") == 0 && argc > 3)
        return forkexec("/proc/self/exe", n, atol(argv[3]));
    if (strcmp(mode, "together") == 0 && argc > 3)
        return together("/proc/self/exe", n, atol(argv[3]),
                        argc > 4 ? (unsigned)atol(argv[4]) : 0);
    if (strcmp(mode, "gated") == 0 && argc > 5)
        return gated(n, atoi(argv[3]), atoi(argv[4]), (unsigned)atol(argv[5]));
    if (strcmp(mode, "pidfile") == 0) {
        int bad = calls("parent", n);
        pid_t p = fork();
        if (p == 0) {
            const char *base = getenv("SHIMGEN_TRACE_FILE");
            char path[4096];
            snprintf(path, sizeof path, "%s.%ld", base ? base : "trace", (long)getpid());
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
            if (fd < 0 || write(fd, "precious\n", 9) != 9) {
                fprintf(stderr, "cannot create %s: %s\n", path, strerror(errno));
                _exit(5);
            }
            close(fd);
            printf("child %ld precious\n", (long)getpid());
            exit(calls("child", n));
        }
        int status = 0;
        waitpid(p, &status, 0);
        return bad || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (strcmp(mode, "all") == 0 && argc > 3)
        return all_functions(n, atoi(argv[3]));
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
