/* Ask cuGetProcAddress and cuGetProcAddress_v2 for every name (one per line on stdin)
 * at every version and flag given on the command line; print, per query:
 *   name version flags rc1 sym1 rc2 status2 sym2
 * where sym is the exported symbol the returned address is (via dladdr), "null" for NULL,
 * or "nosym" when the address is not exactly an exported symbol. A driver without
 * cuGetProcAddress_v2 (CUDA 11.x) gives "- - absent" for its three fields.
 * argv[1]: library to dlopen; argv[2..]: versions; flags 0, 1 and 2 are always tried. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gpa_v1)(const char *, void **, int, unsigned long long);
typedef int (*gpa_v2)(const char *, void **, int, unsigned long long, int *);

static const char *name_of(void *fn, const char *lib_wanted, int *outside)
{
    if (!fn)
        return "null";
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_sname || info.dli_saddr != fn)
        return "nosym";
    if (lib_wanted && (!info.dli_fname || strcmp(info.dli_fname, lib_wanted) != 0))
        (*outside)++;
    return info.dli_sname;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: procgrid LIB VERSION...\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    gpa_v1 g1 = (gpa_v1)dlsym(h, "cuGetProcAddress");
    gpa_v2 g2 = (gpa_v2)dlsym(h, "cuGetProcAddress_v2");
    if (!g1) {
        fprintf(stderr, "no cuGetProcAddress in %s\n", argv[1]);
        return 1;
    }
    Dl_info self;
    const char *lib = dladdr((void *)g1, &self) ? self.dli_fname : NULL;
    int outside = 0;
    char line[512];
    long queries = 0;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        for (int a = 2; a < argc; a++) {
            int version = atoi(argv[a]);
            for (unsigned long long flags = 0; flags <= 2; flags++) {
                void *f1 = (void *)0x1, *f2 = (void *)0x1;
                int st = -7;
                int rc1 = g1(line, &f1, version, flags);
                const char *n1 = rc1 == 0 ? name_of(f1, lib, &outside) : "-";
                queries++;
                if (!g2) {
                    printf("%s %d %llu %d %s - - absent\n", line, version, flags, rc1, n1);
                    continue;
                }
                int rc2 = g2(line, &f2, version, flags, &st);
                const char *n2 = rc2 == 0 ? name_of(f2, lib, &outside) : "-";
                printf("%s %d %llu %d %s %d %d %s\n", line, version, flags, rc1, n1, rc2, st, n2);
                queries++;
            }
        }
    }
    fprintf(stderr, "queries %ld outside %d\n", queries, outside);
    return 0;
}
