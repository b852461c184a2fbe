/* The cuGetProcAddress querier of `shimgen diff` (shimgen/diff_procaddr.py compiles it once
 * per user and runs it once per driver, each in a process of its own).
 *
 * argv[1]: the driver to dlopen; argv[2]: the highest grid version; argv[3]: the far version.
 * stdin: one line per name, "e NAME" (an export: its dlsym address names an answer), "q NAME"
 * (a name to query) or "b NAME" (both).
 * For every query name, cuGetProcAddress (api 1) and cuGetProcAddress_v2 (api 2, where the
 * driver has it: CUDA 12.0 on) are asked
 * with flags 0, 1 and 2 at every multiple of 10 from 0 to the grid's top (the top raised to
 * the driver's own cuDriverGetVersion + 10), and at the far version. Where two neighbouring
 * versions answer differently, the exact first version of each new answer is found by
 * bisection. The answer is a step function of the version; its steps are printed:
 *   s NAME API FLAGS VERSION RC STATUS SYMBOL
 * (STATUS is -1 for api 1; SYMBOL is the export at the address returned, "null", "-" when
 * RC is not 0, or "?" for an address that is no export). First line: "v CUDA_VERSION".
 * Exit 0, or 1 with one line on stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gpa1_fn)(const char *, void **, int, unsigned long long);
typedef int (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*version_fn)(int *);

struct addr_name {
    uintptr_t addr;
    const char *name;
};

struct answer {
    int rc, status;
    const char *sym;
};

static struct addr_name *exports;
static size_t nexports;
static gpa1_fn gpa1;
static gpa2_fn gpa2;

static int by_addr(const void *a, const void *b)
{
    const struct addr_name *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return strcmp(x->name, y->name); /* aliases: the first name in C order */
}

static const char *symbol(void *fn)
{
    if (!fn)
        return "null";
    size_t lo = 0, hi = nexports;
    while (lo < hi) { /* the first entry at or above fn */
        size_t mid = lo + (hi - lo) / 2;
        if (exports[mid].addr < (uintptr_t)fn)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nexports && exports[lo].addr == (uintptr_t)fn ? exports[lo].name : "?";
}

static struct answer ask(const char *name, int api, int version, unsigned long long flags)
{
    struct answer a = {0, -1, "-"};
    void *fn = NULL;
    if (api == 1) {
        a.rc = gpa1(name, &fn, version, flags);
    } else {
        a.status = -7;
        a.rc = gpa2(name, &fn, version, flags, &a.status);
    }
    if (a.rc == 0)
        a.sym = symbol(fn);
    return a;
}

static int same(struct answer a, struct answer b)
{
    return a.rc == b.rc && a.status == b.status && a.sym == b.sym;
}

static void step(const char *name, int api, unsigned long long flags, int v, struct answer a)
{
    printf("s %s %d %llu %d %d %d %s\n", name, api, flags, v, a.rc, a.status, a.sym);
}

/* Every step in (lo, hi], given the answers at lo and hi. */
static void steps_between(const char *name, int api, unsigned long long flags, int lo,
                          struct answer at_lo, int hi, struct answer at_hi)
{
    while (!same(at_lo, at_hi)) {
        int a = lo, b = hi; /* answer(a) == at_lo, answer(b) != at_lo */
        struct answer at_b = at_hi;
        while (b - a > 1) {
            int mid = a + (b - a) / 2;
            struct answer m = ask(name, api, mid, flags);
            if (same(m, at_lo)) {
                a = mid;
            } else {
                b = mid;
                at_b = m;
            }
        }
        step(name, api, flags, b, at_b);
        lo = b;
        at_lo = at_b;
    }
}

static void query(const char *name, int top, int far)
{
    for (int api = 1; api <= (gpa2 ? 2 : 1); api++) {
        for (unsigned long long flags = 0; flags <= 2; flags++) {
            struct answer prev = ask(name, api, 0, flags);
            step(name, api, flags, 0, prev);
            int v = 0;
            for (int next = 10; next <= top; next += 10) {
                struct answer a = ask(name, api, next, flags);
                steps_between(name, api, flags, v, prev, next, a);
                v = next;
                prev = a;
            }
            steps_between(name, api, flags, v, prev, far, ask(name, api, far, flags));
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: diff_query LIB TOP FAR\n");
        return 1;
    }
    int top = atoi(argv[2]), far = atoi(argv[3]);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load it: %s\n", dlerror());
        return 1;
    }
    gpa1 = (gpa1_fn)dlsym(h, "cuGetProcAddress");
    gpa2 = (gpa2_fn)dlsym(h, "cuGetProcAddress_v2");
    version_fn getv = (version_fn)dlsym(h, "cuDriverGetVersion");
    int cuda = 0;
    if (!gpa1 || !getv || getv(&cuda) != 0) {
        fprintf(stderr, "no cuGetProcAddress or cuDriverGetVersion\n");
        return 1;
    }
    if (cuda + 10 > top)
        top = cuda + 10;
    if (far < top)
        far = top;
    size_t cap = 1024, nq = 0, qcap = 1024;
    char **queries = malloc(qcap * sizeof *queries);
    exports = malloc(cap * sizeof *exports);
    char line[512];
    while (exports && queries && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strlen(line) < 3 || line[1] != ' ')
            continue;
        char *name = strdup(line + 2);
        void *addr = name && line[0] != 'q' ? dlsym(h, name) : NULL;
        if (addr && nexports == cap)
            exports = realloc(exports, (cap *= 2) * sizeof *exports);
        if (addr && exports)
            exports[nexports++] = (struct addr_name){(uintptr_t)addr, name};
        if (line[0] != 'e' && nq == qcap)
            queries = realloc(queries, (qcap *= 2) * sizeof *queries);
        if (line[0] != 'e' && queries)
            queries[nq++] = name;
    }
    if (!exports || !queries) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    qsort(exports, nexports, sizeof *exports, by_addr);
    printf("v %d\n", cuda);
    for (size_t i = 0; i < nq; i++)
        query(queries[i], top, far);
    return fflush(stdout) == 0 ? 0 : 1;
}
