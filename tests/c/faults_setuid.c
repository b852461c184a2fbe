/* Run set-user-ID: tells whether a preloaded library defines cuDriverGetVersion, then opens
 * LIB with dlopen and calls its cuDriverGetVersion.
 *   faults_setuid LIB
 * Prints "ruid <r> euid <e> secure <AT_SECURE> preloaded <0|1> rc <rc> version <v>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <unistd.h>

typedef int (*version_fn)(int *);

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: faults_setuid LIB\n");
        return 2;
    }
    int preloaded = dlsym(RTLD_DEFAULT, "cuDriverGetVersion") != NULL;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    version_fn fn = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    int v = 0, rc = fn ? fn(&v) : -1;
    printf("ruid %ld euid %ld secure %lu preloaded %d rc %d version %d\n", (long)getuid(),
           (long)geteuid(), getauxval(AT_SECURE), preloaded, rc, v);
    return fn ? 0 : 1;
}
