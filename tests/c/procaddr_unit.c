/* Unit test of the cuGetProcAddress map, runtime/load/procaddr.c, compiled with it and a build's
 * generated headers (tests/runtime/test_guards.py). argv[1]: N, the exports the map holds (1 to 64);
 * argv[2]: a seed. N synthetic addresses, 16 apart, are added in a shuffled order, each with
 * its own slot index (also shuffled), and sorted; then every address is looked up, and the
 * addresses around them: between two exports, below the first, above the last, 0 and the
 * highest address. Prints one line per lookup, "hit ADDR IDX" (the answer is the entry
 * stub of slot IDX) or "miss ADDR" (the address came back unchanged), then
 * "unmapped COUNT" (shimgen_unmapped_proc_addresses). */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "load/load.h"

#define MAX 64
_Static_assert(SHIMGEN_NFUNCS >= MAX, "the map needs room for the test's exports");

/* Slot i's entry stub: a distinct address per slot, never one of the exports' addresses. */
static char stubs[MAX];
#define S(i) [i] = &stubs[i]
#define S8(i) S(i), S(i + 1), S(i + 2), S(i + 3), S(i + 4), S(i + 5), S(i + 6), S(i + 7)
void *const shimgen_entry_stubs[SHIMGEN_NFUNCS] = {
    S8(0), S8(8), S8(16), S8(24), S8(32), S8(40), S8(48), S8(56)};

#define FIRST ((uintptr_t)0x10000)

static void lookup(uintptr_t a)
{
    void *got = shimgen_map_proc_address((void *)a);
    if (got == (void *)a) {
        printf("miss %lx\n", (unsigned long)a);
        return;
    }
    for (unsigned i = 0; i < MAX; i++)
        if (got == (void *)&stubs[i]) {
            printf("hit %lx %u\n", (unsigned long)a, i);
            return;
        }
    printf("wrong %lx\n", (unsigned long)a);
}

static void shuffle(unsigned *v, unsigned n)
{
    for (unsigned i = n; i > 1; i--) {
        unsigned j = (unsigned)rand() % i, t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    unsigned n = (unsigned)atoi(argv[1]);
    if (n < 1 || n > MAX)
        return 2;
    srand((unsigned)atoi(argv[2]));
    unsigned order[MAX], idx[MAX];
    for (unsigned k = 0; k < n; k++)
        order[k] = idx[k] = k;
    shuffle(order, n);
    shuffle(idx, n);
    for (unsigned k = 0; k < n; k++) /* export order[k] at FIRST + 16 order[k], slot idx */
        shimgen_addr_map_add((void *)(FIRST + 16 * order[k]), idx[order[k]]);
    shimgen_addr_map_sort();
    for (unsigned k = 0; k < n; k++)
        printf("export %lx %u\n", (unsigned long)(FIRST + 16 * k), idx[k]);
    lookup(0);
    lookup(FIRST - 1);
    for (unsigned k = 0; k < n; k++) {
        lookup(FIRST + 16 * k);
        lookup(FIRST + 16 * k + 8);
    }
    lookup(FIRST + 16 * n);
    lookup(UINTPTR_MAX);
    printf("unmapped %lu\n", (unsigned long)shimgen_unmapped_proc_addresses);
    return 0;
}
