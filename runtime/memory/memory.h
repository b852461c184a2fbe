/*
 * memory.h: the memory folder's face: the device memory ledger (ledger.c, entries.c) as its
 * hooks (hooks_memory.c), the trace file's header (tracefile/header.c) and the driver's load
 * (load/driver.c) use it. Per process and column (a device ordinal, or pinned host memory):
 * the bytes held and taken and the allocations held, per route (shimgen/shim/memroutes.py),
 * and the peak; kept in the trace file's header as they change, so a process killed leaves
 * its numbers at death.
 */
#ifndef SHIMGEN_LEDGER_H
#define SHIMGEN_LEDGER_H

#include <stdint.h>

#include "base/base.h"

struct tf_header;

/* What a live entry is keyed by: a device address, a host pointer, a VMM handle, an array. */
enum { LEDGER_ADDR = 1, LEDGER_HOST, LEDGER_HANDLE, LEDGER_ARRAY };

extern uint64_t shimgen_ledger_limit; /* SHIMGEN_LIMIT_MEMORY, bytes per device; 0: none */

void shimgen_ledger_config(void); /* SHIMGEN_LIMIT_MEMORY, read once at the driver's load */
void shimgen_ledger_after_fork(void); /* a forked child's ledger: its own, empty (fork.c) */
void shimgen_ledger_attach(struct tf_header *h);
/* A header about to be unmapped (a child's file given up): the numbers back in memory. */
void shimgen_ledger_detach(struct tf_header *h);
/* An allocation. Under a limit, before the driver is called: its bytes reserved on its
 * column (reserved[0]; 0 when the column is not one the limit applies to; reserved[1] what
 * the column held with them), or 0 returned when they would take the device past the limit
 * (nothing counted, `refused` one more). `grow` reserves more for an allocation the driver
 * made larger than reserved (0: past the limit, refused). After the driver answered: the
 * new entry (its key, column, bytes, and its route and tag in `meta`, LEDGER_META) counted;
 * a column < 0 counts it untracked. `settle` trades a reservation (NULL: none) for it, or
 * only gives the reservation back when `meta`'s tag is 0 (the driver failed). Both return
 * CUDA_SUCCESS (the hook's answer after a success: a tail call).
 * `last` 0: a refusal is not counted (the caller asks pools and graphs again and retries). */
int shimgen_ledger_reserve(int column, uint64_t size, uint64_t reserved[2], int last);
int shimgen_ledger_grow(int column, uint64_t reserved[2], uint64_t size);
shimgen_CUresult shimgen_ledger_add(int column, uint64_t meta, uint64_t size, uint64_t key);
shimgen_CUresult shimgen_ledger_settle(int column, uint64_t meta, uint64_t size, uint64_t key,
                                       const uint64_t *reserved);
/* The shared budget alone limits (budget/: no limit of the process's own): a reservation
 * is the budget's alone (reserved[1] LEDGER_BUDGET_ONLY), and its entry is counted as
 * without a limit (`settle_shared`: what the driver did not take given back first). */
#define LEDGER_BUDGET_ONLY UINT64_MAX
shimgen_CUresult shimgen_ledger_settle_shared(int column, uint64_t meta, uint64_t size,
                                              uint64_t key, uint64_t reserved);
/* A live entry's route and tag, as its slot keeps them (a reference count of 1, the column
 * put in bits 40-47). */
#define LEDGER_META(route, tag) (1 | (uint64_t)(tag) << 32 | (uint64_t)(route) << 48)
/* A free: the entry taken out before the driver is called (an address the driver hands to
 * another thread's allocation before the free returned is then a new entry), its bytes
 * still held; `given` gives them back once the driver freed them, `untake` puts the entry
 * back when the driver refused the free. `take` returns 0 when nothing was taken, 1 the
 * whole entry (its size, column and route in `out`), 2 one reference of a handle that has
 * more. So what the ledger holds is never less than what the driver holds. */
int shimgen_ledger_take(unsigned tag, uint64_t key, uint64_t out[3]);
void shimgen_ledger_given(int took, const uint64_t taken[3]);
void shimgen_ledger_untake(unsigned tag, uint64_t key, int took, const uint64_t taken[3]);
/* One more reference to a handle held (cuMemRetainAllocationHandle). */
void shimgen_ledger_retain(uint64_t handle);
/* The bytes held on a device now (its column), for cuMemGetInfo under a limit. */
uint64_t shimgen_ledger_held(int column);
/* What pools and graphs reserve on a column beyond what the pool routes hold there. */
uint64_t shimgen_ledger_extra(int column);
/* What a column's pools (`graphs` 0: summed over them) or graphs hold, as the driver says:
 * runenv.MEM_RESERVE_FIELDS (reserved, its high, used, its high; the highs kept at their
 * most). The pools known now, and graph allocations seen since the last call. */
void shimgen_ledger_reservation(int graphs, int column, const uint64_t v[4]);
/* What pools and graphs reserve on a column beyond what the pool routes hold there, as the
 * shared budget holds it (budget/budget.h, shimgen_budget_settle; nothing without one):
 * called after `reservation`, with no lock held (the budget may ask the driver). */
void shimgen_ledger_charge(int column);
void shimgen_ledger_counts(uint64_t pools, uint64_t graph_allocs);

/* reserve.c: pools and graphs. A pool's device (-1 not known), a pool seen (a column < 0:
 * not followed), a pool destroyed, a device's current pool (0: not known; asked of the driver once), a stream
 * capturing (only asked while captures are in progress), what pools and graphs reserve
 * asked of the driver again (a pool, a device's graphs, or all of them). */
int shimgen_pool_column(uint64_t pool);
void shimgen_reserve_after_fork(void); /* a forked child: no pools yet (fork.c) */
extern int shimgen_reserve_any; /* any pool or graph allocation seen (0: nothing to ask) */
void shimgen_pool_seen(uint64_t pool, int column, int is_current);
void shimgen_pool_gone(uint64_t pool);
uint64_t shimgen_device_pool(int column);
int shimgen_in_capture(void *stream);
/* Listeners another folder sets at the driver's load (kernels/: GPU time): called after a
 * synchronisation the program made succeeded, and before a context is destroyed. NULL:
 * none. */
extern void (*shimgen_on_sync)(void);
extern void (*shimgen_on_ctx_destroy)(void *ctx);
void shimgen_capture(int delta);
void shimgen_graph_alloc(int column);
void shimgen_pool_refresh(uint64_t pool);
void shimgen_graph_refresh(int column);
void shimgen_reserve_refresh(void);
/* shimgen_ledger_reserve (the process's limit, the shared budget, or both), asking pools
 * and graphs again before a refusal when they hold memory reserved on the column. */
int shimgen_reserve_or_refresh(int column, uint64_t size, uint64_t reserved[2]);

#endif
