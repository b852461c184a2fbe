/*
 * ledger.h: the device memory ledger (ledger.c) as its hooks (hooks_memory.c), the trace
 * file's header (tracefile_header.c) and the driver's load (driver.c) use it. Per process
 * and column (a device ordinal, or pinned host memory): the bytes held and taken and the
 * allocations held, per route (shimgen/shim/memroutes.py), and the peak; kept in the trace
 * file's header as they change, so a process killed leaves its numbers at death.
 */
#ifndef SHIMGEN_LEDGER_H
#define SHIMGEN_LEDGER_H

#include <stdint.h>

#include "runtime.h"

struct tf_header;

/* What a live entry is keyed by: a device address, a host pointer, a VMM handle, an array. */
enum { LEDGER_ADDR = 1, LEDGER_HOST, LEDGER_HANDLE, LEDGER_ARRAY };

/* One allocation in progress: its route and column (-1: not followed), its bytes, and
 * whether they were reserved against the limit before the driver was called. */
struct ledger_op {
    unsigned route;
    int column;
    uint64_t size;
    int reserved;
};

extern uint64_t shimgen_ledger_limit; /* SHIMGEN_LIMIT_MEMORY, bytes per device; 0: none */

void shimgen_ledger_config(void); /* SHIMGEN_LIMIT_MEMORY, read once at the driver's load */
void shimgen_ledger_attach(struct tf_header *h);
/* An allocation: begin before the driver is called (0: refused by the limit, nothing
 * counted), end after it with the driver's answer and the new entry's key. */
int shimgen_ledger_begin(struct ledger_op *op);
void shimgen_ledger_end(struct ledger_op *op, int ok, unsigned tag, uint64_t key);
/* A free: the entry taken out before the driver is called, put back when the driver refused
 * the free. Returns 0 when nothing was taken, 1 the whole entry (its size, column and route
 * in `out`), 2 one reference of a handle that has more. */
int shimgen_ledger_take(unsigned tag, uint64_t key, uint64_t out[3]);
void shimgen_ledger_untake(unsigned tag, uint64_t key, int took, const uint64_t taken[3]);
/* One more reference to a handle held (cuMemRetainAllocationHandle). */
void shimgen_ledger_retain(uint64_t handle);
/* The bytes held on a device now (its column), for cuMemGetInfo under a limit. */
uint64_t shimgen_ledger_held(int column);

#endif
