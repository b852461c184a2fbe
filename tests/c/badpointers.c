/* Bad pointers given to the driver's functions (tests/runtime/test_badpointers.py): for
 * each case of the file it is given, one line "NAME MASK SLOT KIND" (MASK: the argument
 * words that are pointers, in hex; SLOT: the one made bad; KIND: 0 NULL, 1 0x10, 2 an
 * unmapped page), a forked child calls NAME with every other argument 0, every other
 * pointer a zeroed scratch buffer, and the bad one in SLOT, then exits with the call's
 * result; the parent prints "NAME SLOT KIND exit N" or "NAME SLOT KIND signal N", so that
 * a crash is one call's. Functions are found through the loader (the shim when it is
 * preloaded, else libcuda.so.1); one that is not there prints "absent".
 *   badpointers FILE [ctx]   ctx: cuInit(0) and cuCtxSetCurrent(device 0's) first
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef uintptr_t w;
typedef int (*fn_t)(w, w, w, w, w, w, w, w, w, w, w);

#define SCRATCH (1 << 16)

static void *lib;

static fn_t find(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    return (fn_t)(f ? f : lib ? dlsym(lib, name) : NULL);
}

static int one(const char *name, unsigned mask, unsigned slot, int kind, uintptr_t unmapped,
               int ctx)
{
    fn_t f = find(name);
    if (!f)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        if (ctx) {
            find("cuInit")(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
            find("cuCtxSetCurrent")(1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        }
        w a[11] = {0};
        for (unsigned k = 0; k < 11; k++)
            if (mask >> k & 1) {
                void *s = mmap(NULL, SCRATCH, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                a[k] = s == MAP_FAILED ? 0 : (w)s;
            }
        a[slot] = kind == 0 ? 0 : kind == 1 ? 0x10 : unmapped;
        int rc = f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
        _exit(rc & 0xff);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -2;
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: badpointers FILE [ctx]\n");
        return 2;
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    int ctx = argc > 2 && !strcmp(argv[2], "ctx");
    /* a page that was mapped and is no more: the middle one of three, so that the hole is
     * one page, which no scratch buffer fits */
    long page = sysconf(_SC_PAGESIZE);
    char *three = mmap(NULL, 3 * (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *gone = three + page;
    if (three == MAP_FAILED || munmap(gone, (size_t)page))
        return 2;
    FILE *in = fopen(argv[1], "r");
    if (!in)
        return 2;
    char name[256];
    unsigned mask, slot;
    int kind;
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    while (fscanf(in, "%255s %x %u %d", name, &mask, &slot, &kind) == 4) {
        if (slot > 10)
            return 2;
        int st = one(name, mask, slot, kind, (uintptr_t)gone, ctx);
        if (st == -1)
            printf("%s %u %d absent\n", name, slot, kind);
        else if (st == -2)
            printf("%s %u %d lost\n", name, slot, kind);
        else if (WIFSIGNALED(st))
            printf("%s %u %d signal %d\n", name, slot, kind, WTERMSIG(st));
        else
            printf("%s %u %d exit %d\n", name, slot, kind, WEXITSTATUS(st));
        fflush(stdout);
    }
    fclose(in);
    return 0;
}
