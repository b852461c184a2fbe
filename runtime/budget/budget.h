/*
 * budget.h: the budget folder's face: one memory budget shared by many processes
 * (docs/memory.md, "One budget for many processes"), as the memory ledger (memory/ledger.c,
 * entries.c) uses it. SHIMGEN_BUDGET_FILE names the books (view.h), SHIMGEN_LIMIT_JOB_MEMORY
 * the size per device of a budget the first process makes. A reservation of the ledger takes
 * from the budget before the driver is called, and what the ledger gives back goes back.
 */
#ifndef SHIMGEN_BUDGET_H
#define SHIMGEN_BUDGET_H

#include <stddef.h>
#include <stdint.h>

extern int shimgen_budget_on; /* the books are mapped and this process has its slot */

/* The books of SHIMGEN_BUDGET_FILE opened (made when missing, with `limit` bytes per device;
 * 0: only joined) and a slot taken: at the driver's load, by the ledger's configuration. */
void shimgen_budget_config(uint64_t limit);
/* A forked child: a slot of its own (its ledger starts empty: nothing in it). */
void shimgen_budget_after_fork(void);
/* Bytes of a device (a ledger column: its ordinal) taken from the budget: 1, or 0 when the
 * device's budget has not that much left once the slots of processes gone are given back
 * (a refusal, recorded when `last`). Only while shimgen_budget_on. */
int shimgen_budget_take(int column, uint64_t size, int last);
/* `size` bytes given back; with `reserve`, in the same update, what this process's pools
 * and graphs reserve on the column beyond its allocations (the ledger's number there, read
 * under the books' lock: the last of concurrent updates stands) held in its slot: what it
 * grew by taken, never refused (the driver reserved it already: it can take the device's
 * use past the budget, and the next reservations are refused until memory comes back),
 * what it shrank by given back. (A free back to its pool, whose reserve grew by as much,
 * is one update: its bytes never counted twice, in the use or the peak, nor left out.) */
void shimgen_budget_settle(int column, uint64_t size, const uint64_t *reserve);
static inline void shimgen_budget_give(int column, uint64_t size)
{
    shimgen_budget_settle(column, size, NULL);
}
/* What cuMemGetInfo_v2 and cuDeviceTotalMem_v2 answer with (memory/routes.h): the budget's
 * size per device (0: no budget), and what a column's device has left of it (the slots of
 * processes gone still count until the next reservation that finds the budget short). */
uint64_t shimgen_budget_size(void);
uint64_t shimgen_budget_left(int column);

#endif
