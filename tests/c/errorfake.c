/* Calls into the FAKE error driver (tests/c/fake_errors_libcuda.c) as its arguments say, so
 * that the test knows every call's result and length: "ret:CODE:N" (cuFakeReturn(CODE), N
 * times), "spin:TICKS:N" (cuFakeSpinTicks), "nores:V:N" (cudbgFakeNoResult(V), no CUresult).
 * argv[1]: library to dlopen; then the calls, in order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
    if (!ret || !spin || !nores)
        return 1;
    for (int a = 2; a < argc; a++) {
        char kind[8];
        unsigned long long v, n;
        if (sscanf(argv[a], "%7[a-z]:%llu:%llu", kind, &v, &n) != 3)
            return 2;
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
