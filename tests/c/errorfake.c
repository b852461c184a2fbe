/* Calls into the FAKE error driver (tests/c/fake_errors_libcuda.c) as its arguments say, so
 * that the test knows every call's result and length: "ret:CODE:N" (cuFakeReturn(CODE), N
 * times), "spin:TICKS:N" (cuFakeSpinTicks), "nores:V:N" (cudbgFakeNoResult(V), no CUresult),
 * "ns:NS:N" (cuFakeSpinNs(NS), each call's length as CLOCK_MONOTONIC measured it around the
 * call printed on stdout, one "ns N" line a call), "kill:0:0" (SIGKILL itself: no exit).
 * argv[1]: library to dlopen; then the calls, in order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int (*ret_fn)(int);
typedef int (*spin_fn)(uint64_t);

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
    if (!ret || !spin || !nores || !spin_ns)
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
