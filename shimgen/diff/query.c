/* The cuGetProcAddress querier of `shimgen diff` (shimgen/diff/procaddr.py compiles it once
 * per user and runs it once per driver, each in a process of its own).
 *
 * argv[1]: the driver to dlopen; argv[2]: the highest grid version; argv[3]: the far version;
 * argv[4]: a file of names, read whole before the driver is loaded: one line per name,
 * "e NAME" (an export: its dlsym address names an answer), "q NAME" (a name to query) or
 * "b NAME" (both).
 * For every query name, cuGetProcAddress (api 1) and cuGetProcAddress_v2 (api 2, where the
 * driver has it: CUDA 12.0 on) are asked
 * with flags 0, 1 and 2 at every multiple of 10 from 0 to the grid's top (the top raised to
 * the driver's own cuDriverGetVersion + 10, never above the far version), and at the far
 * version. Where two neighbouring versions answer differently, the exact first version of
 * each new answer is found by bisection. The answer is a step function of the version; its
 * steps are written:
 *   s NAME API FLAGS VERSION RC STATUS SYMBOL
 * (STATUS is -1 for api 1; SYMBOL is the export at the address returned, "null", "-" when
 * RC is not 0, or "?" for an address that is no export). First line: "v CUDA_VERSION".
 * A driver's answers change a few times over all versions: more than MAX_STEPS steps for one
 * name, api and flags is not a driver's step function, and stops the querier, so its work
 * and output are bounded by the number of names.
 * The lines go to the descriptor that was stdout when it started; stdout itself is then
 * /dev/null, so what the driver prints is not mixed in. Exit 0, or 1 with a last line
 * "x WHY". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STEPS 64

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
static FILE *out;
static unsigned steps_of_query;

static void fail(const char *why, const char *detail)
{
    fflush(out);
    fprintf(out, "x %s%s\n", why, detail);
    fflush(out);
    exit(1);
}

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
    if (++steps_of_query > MAX_STEPS)
        fail("answers that change at too many versions (not a step function) for ", name);
    fprintf(out, "s %s %d %llu %d %d %d %s\n", name, api, flags, v, a.rc, a.status, a.sym);
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
            steps_of_query = 0;
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

/* The names file, read whole: each line "e NAME", "q NAME" or "b NAME". */
static char **read_names(const char *path, size_t *count)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    size_t n = 0, cap = 1024;
    char **lines = malloc(cap * sizeof *lines);
    char line[512];
    while (lines && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strlen(line) < 3 || line[1] != ' ' || !strchr("eqb", line[0]))
            continue;
        if (n == cap)
            lines = realloc(lines, (cap *= 2) * sizeof *lines);
        if (lines && !(lines[n++] = strdup(line)))
            lines = NULL;
    }
    fclose(f);
    *count = n;
    return lines;
}

int main(int argc, char **argv)
{
    /* The answers go to the descriptor given as stdout; stdout becomes /dev/null. */
    int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0 || !(out = fdopen(fd, "w")))
        return 1;
    close(null);
    if (argc != 5)
        fail("usage: diff_query LIB TOP FAR NAMES", "");
    int top = atoi(argv[2]), far = atoi(argv[3]);
    size_t nlines = 0;
    char **lines = read_names(argv[4], &nlines);
    if (!lines)
        fail("cannot read the names: ", argv[4]);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail("cannot load it: ", dlerror());
    gpa1 = (gpa1_fn)dlsym(h, "cuGetProcAddress");
    gpa2 = (gpa2_fn)dlsym(h, "cuGetProcAddress_v2");
    version_fn getv = (version_fn)dlsym(h, "cuDriverGetVersion");
    int cuda = 0;
    if (!gpa1 || !getv || getv(&cuda) != 0)
        fail("no cuGetProcAddress or cuDriverGetVersion", "");
    if (far < top)
        far = top;
    if (cuda > top - 10) /* never above the far version, whatever the driver says */
        top = cuda > far - 10 ? far : cuda + 10;
    size_t nq = 0;
    char **queries = malloc((nlines + 1) * sizeof *queries);
    exports = malloc((nlines + 1) * sizeof *exports);
    if (!exports || !queries)
        fail("out of memory", "");
    for (size_t i = 0; i < nlines; i++) {
        char *name = lines[i] + 2;
        void *addr = lines[i][0] != 'q' ? dlsym(h, name) : NULL;
        if (addr)
            exports[nexports++] = (struct addr_name){(uintptr_t)addr, name};
        if (lines[i][0] != 'e')
            queries[nq++] = name;
    }
    qsort(exports, nexports, sizeof *exports, by_addr);
    fprintf(out, "v %d\n", cuda);
    for (size_t i = 0; i < nq; i++)
        query(queries[i], top, far);
    return fflush(out) == 0 ? 0 : 1;
}
