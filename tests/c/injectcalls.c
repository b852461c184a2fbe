/* Fault injection's routes (tests/runtime/test_inject.py): cuDriverGetVersion called through each
 * route an argument names, in order, and each call's result code printed on one line:
 *   injectcalls ROUTE[:N] ...       (N calls, default 1)
 * ROUTE: linked (the symbol bound at link time, DT_NEEDED libcuda.so.1), dlsym (dlopen of
 * libcuda.so.1), gpa<V>.<F> (the address cuGetProcAddress gives for version V, flags F),
 * gpa2<V>.<F> (the same of cuGetProcAddress_v2), fork (the rest of the line in a forked
 * child, which the parent waits for; then the parent goes on).
 * Prints "ROUTE: c1 c2 ..." per argument; exits 1 when a route cannot be had. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef int (*gpa_v1)(const char *, void **, int, unsigned long long);
typedef int (*gpa_v2)(const char *, void **, int, unsigned long long, int *);

int cuDriverGetVersion(int *version); /* tests/c/link_stub_not_a_driver.c at link time */

static version_fn route(void *h, const char *name)
{
    if (strcmp(name, "linked") == 0)
        return cuDriverGetVersion;
    if (strcmp(name, "dlsym") == 0)
        return (version_fn)dlsym(h, "cuDriverGetVersion");
    int v = 0;
    unsigned long long flags = 0;
    void *fn = NULL;
    if (sscanf(name, "gpa2%d.%llu", &v, &flags) == 2) {
        gpa_v2 g = (gpa_v2)dlsym(h, "cuGetProcAddress_v2");
        int status = -1;
        return g && g("cuDriverGetVersion", &fn, v, flags, &status) == 0 ? (version_fn)fn : NULL;
    }
    if (sscanf(name, "gpa%d.%llu", &v, &flags) == 2) {
        gpa_v1 g = (gpa_v1)dlsym(h, "cuGetProcAddress");
        return g && g("cuDriverGetVersion", &fn, v, flags) == 0 ? (version_fn)fn : NULL;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "fork") == 0) {
            fflush(stdout);
            pid_t p = fork();
            if (p > 0) {
                int status = 0;
                waitpid(p, &status, 0);
                printf("child: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 99);
                continue;
            }
            printf("in child:\n");
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "%s", argv[a]);
        char *colon = strchr(name, ':');
        int n = colon ? atoi(colon + 1) : 1;
        if (colon)
            *colon = '\0';
        version_fn fn = route(h, name);
        if (!fn) {
            printf("%s: no route\n", name);
            return 1;
        }
        printf("%s:", name);
        for (int i = 0; i < n; i++) {
            int v = 0;
            printf(" %d", fn(&v));
        }
        printf("\n");
    }
    fflush(stdout);
    return 0;
}
