/*
 * fork.c: what happens at a fork, in one written order (docs/design.md, "One after-fork"):
 * one pthread_atfork, registered when the shim is loaded, before any load can start, that
 * calls each concern in turn. Each step does nothing where its concern never started (a
 * child of a process that never called the driver does what that process would).
 *
 *   prepare, parent: the load (driver.c): no fork while the driver loads.
 *   child: 1. the safe reads forget the parent's pid (every later step may read memory);
 *          2. the load released; 3. the memory ledger, then pools and graphs (the child's
 *          file, made in step 5, attaches the ledger, which is then the child's already);
 *          4. the fault rules' counts; the kernels' counts (their names kept); 5. the
 *          trace: its counts, blocks and file, last (it makes a file and maps memory).
 */

#include <pthread.h>

#include "budget/budget.h"
#include "hooks/hooks.h"
#include "kernels/kernels.h"
#include "memory/memory.h"
#include "base/base.h"
#include "load.h"
#include "stats/stats.h"

static void fork_child(void)
{
    shimgen_safe_read_forget_pid();
    shimgen_load_after_fork();
    shimgen_ledger_after_fork();
    shimgen_budget_after_fork();
    shimgen_reserve_after_fork();
    shimgen_inject_after_fork();
    shimgen_kernels_after_fork();
    shimgen_gpu_after_fork(); /* (after the kernels' tables: it clears its own of them) */
    shimgen_trace_after_fork();
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(shimgen_load_before_fork, shimgen_load_after_fork, fork_child);
}
