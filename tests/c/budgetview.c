/* The read-only view of a shared memory budget's books (runtime/budget/view.h), as another
 * library of the machine (an NVML shim) reads them (tests/run/test_budget.py): the limit,
 * what is used per device, and each live process's bytes, or "no view". With "layout": the
 * offsets of the books' fields, for shimgen/trace/budget.py's reader. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../../runtime/budget/view.h"

#define AT(f) printf(#f " %zu\n", offsetof(struct books, f))

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "layout")) {
        AT(limit), AT(seq), AT(refused), AT(lock), AT(device), AT(slot), AT(refusals);
        printf("size_device %zu size_slot %zu size_refusal %zu size_books %zu\n",
               sizeof(struct books_device),
               sizeof(struct books_slot), sizeof(struct books_refusal), sizeof(struct books));
        return 0;
    }
    static struct shimgen_budget_view v;
    if (argc < 2 || shimgen_budget_read(argv[1], &v) != 0)
        return printf("no view\n"), 1;
    printf("limit %llu devices %u procs %u\n", (unsigned long long)v.limit, v.ndevices,
           v.nprocs);
    for (unsigned d = 0; d < v.ndevices; d++)
        printf("device %.16s used %llu peak %llu\n", (const char *)v.device[d].uuid,
               (unsigned long long)v.device[d].used, (unsigned long long)v.device[d].peak);
    for (unsigned i = 0; i < v.nprocs; i++)
        printf("pid %d bytes %llu\n", v.proc[i].pid, (unsigned long long)v.proc[i].bytes[0]);
    return 0;
}
