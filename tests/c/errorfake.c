/* Calls into the FAKE error driver (tests/c/fake_errors_libcuda.c) as its arguments say, so
 * that the test knows every call's result and length: "ret:CODE:N" (cuFakeReturn(CODE), N
 * times), "spin:TICKS:N" (cuFakeSpinTicks), "nores:V:N" (cudbgFakeNoResult(V), no CUresult),
 * "ns:NS:N" (cuFakeSpinNs(NS), each call's length as CLOCK_MONOTONIC measured it around the
 * call printed on stdout, one "ns N" line a call), "kill:0:0" (SIGKILL itself: no exit),
 * "tret:CODE:N" (cuFakeReturn(CODE) N times on a thread of its own, which exits), "fork:0:0"
 * (fork: the child, which prints "child PID", goes on with the calls that follow; the
 * parent waits for it and ends there), "init:FLAGS:N" (cuInit(FLAGS), N times: 1 for any
 * non-zero FLAGS) and "proc:0:N" (cuGetProcAddress of a name the driver lacks, N times: 500),
 * two CUresult functions of the headers, timed through the entries of their declarations
 * (runtime/arch/x86_64/timing.S). argv[1]: library to dlopen; then the calls, in order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*ret_fn)(int);
typedef int (*spin_fn)(uint64_t);
typedef int (*init_fn)(unsigned);
typedef int (*proc_fn)(const char *, void **, int, uint64_t);

struct thread_calls {
    ret_fn ret;
    int code;
    unsigned long long n;
};

static void *thread_calls(void *arg)
{
    struct thread_calls *t = arg;
    for (unsigned long long i = 0; i < t->n; i++)
        t->ret(t->code);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    ret_fn ret = (ret_fn)dlsym(h, "cuFakeReturn");
    spin_fn spin = (spin_fn)dlsym(h, "cuFakeSpinTicks");
    ret_fn nores = (ret_fn)dlsym(h, "cudbgFakeNoResult");
    spin_fn spin_ns = (spin_fn)dlsym(h, "cuFakeSpinNs");
    init_fn init = (init_fn)dlsym(h, "cuInit");
    proc_fn proc = (proc_fn)dlsym(h, "cuGetProcAddress");
    if (!ret || !spin || !nores || !spin_ns || !init || !proc)
        return 1;
    for (int a = 2; a < argc; a++) {
        char kind[8];
        unsigned long long v, n;
        if (sscanf(argv[a], "%7[a-z]:%llu:%llu", kind, &v, &n) != 3)
            return 2;
        for (unsigned long long i = 0; kind[0] == 'n' && kind[1] == 's' && i < n; i++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            spin_ns(v);
            clock_gettime(CLOCK_MONOTONIC, &b);
            printf("ns %lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL +
                                     (b.tv_nsec - a.tv_nsec));
        }
        if (kind[0] == 'n' && kind[1] == 's')
            continue;
        if (kind[0] == 'k') {
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        if (kind[0] == 't') {
            struct thread_calls t = {ret, (int)v, n};
            pthread_t th;
            if (pthread_create(&th, NULL, thread_calls, &t) != 0 || pthread_join(th, NULL) != 0)
                return 1;
            continue;
        }
        if (kind[0] == 'f') {
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0)
                return 1;
            if (pid == 0) {
                printf("child %ld\n", (long)getpid());
                continue;
            }
            int status;
            return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        }
        for (unsigned long long i = 0; kind[0] == 'i' && i < n; i++)
            if (init((unsigned)v) != (v ? 1 : 0))
                return 1;
        for (unsigned long long i = 0; kind[0] == 'p' && i < n; i++) {
            void *fn = NULL;
            if (proc("cuFakeNothing", &fn, 12000, 0) != 500)
                return 1;
        }
        if (kind[0] == 'i' || kind[0] == 'p')
            continue;
        for (unsigned long long i = 0; i < n; i++) {
            int rc = kind[0] == 'r' ? ret((int)v) : kind[0] == 's' ? spin(v) : nores((int)v);
            if (kind[0] != 's' && rc != (int)v) {
                fprintf(stderr, "%s returned %d\n", argv[a], rc);
                return 1;
            }
        }
    }
    return 0;
}
