/*
 * procaddr.c: the address map behind the cuGetProcAddress hooks. The real driver decides
 * which function a query gets; this map turns that address back into the shim's own
 * trampoline of the same export, so later calls go through the shim. Filled once when the
 * driver is loaded (driver.c), sorted, then searched without a lock.
 */

#include <stdlib.h>

#include "base/base.h"
#include "load.h"

struct addr_entry {
    uintptr_t addr;
    unsigned idx;
};
static struct addr_entry addr_map[SHIMGEN_NFUNCS];
static unsigned addr_map_len;

void shimgen_addr_map_add(void *real_fn, unsigned idx)
{
    addr_map[addr_map_len].addr = (uintptr_t)real_fn;
    addr_map[addr_map_len].idx = idx;
    addr_map_len++;
}

static int addr_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const struct addr_entry *)a)->addr, y = ((const struct addr_entry *)b)->addr;
    return x < y ? -1 : x > y;
}

void shimgen_addr_map_sort(void)
{
    qsort(addr_map, addr_map_len, sizeof addr_map[0], addr_cmp);
}

/* The shim's trampoline for a real function's address; an address that is no export is
 * passed through unchanged and counted. */
void *shimgen_map_proc_address(void *real_fn)
{
    uintptr_t a = (uintptr_t)real_fn;
    unsigned lo = 0, hi = addr_map_len;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (addr_map[mid].addr < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < addr_map_len && addr_map[lo].addr == a)
        return shimgen_entry_stubs[addr_map[lo].idx];
    __atomic_fetch_add(&shimgen_unmapped_proc_addresses, 1, __ATOMIC_RELAXED);
    return real_fn;
}
