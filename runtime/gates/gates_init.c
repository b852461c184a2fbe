/*
 * gates_init.c: SHIMGEN_GATE_METHOD=init, the driver's code changed at the gates' init sites
 * (docs/gates.md, "The init site"). The build bakes in, per gate and direction, the bytes
 * that shimgen chose and proved by emulation (gateplan.c); once, while the driver is loaded
 * and before any of its functions runs, those bytes are compared again and written, each
 * page made writable for the one store and its segment's protection put back, so that the
 * driver's own cuInit sets (or never sets) the bit. Compiled only into a shim whose plan has
 * init-site bytes: a shim without them does not import mprotect at all (the generated
 * gateplan.c then defines shimgen_gates_patch_init to refuse).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gates.h"
#include "base/base.h"

static const struct gate_plan *const plan = &shimgen_gate_plan;
static uintptr_t base;

struct prot_query {
    uintptr_t base, vaddr;
    int prot; /* -1: no loadable segment of the driver holds vaddr */
};

static int find_prot(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct prot_query *q = data;
    if (info->dlpi_addr != q->base)
        return 0;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && q->vaddr >= ph->p_vaddr &&
            q->vaddr < ph->p_vaddr + ph->p_memsz) {
            q->prot = (ph->p_flags & PF_R ? PROT_READ : 0) |
                      (ph->p_flags & PF_W ? PROT_WRITE : 0) |
                      (ph->p_flags & PF_X ? PROT_EXEC : 0);
            return 1;
        }
    }
    return 0;
}

/* One byte of code: the page made writable (still executable), the byte stored, the
 * segment's own protection put back. Returns 1, or 0 with the reason in `why` and the byte
 * as it was (`old`). */
static int poke_code(uintptr_t vaddr, uint8_t value, uint8_t old, char *why, size_t whycap)
{
    struct prot_query q = {.base = base, .vaddr = vaddr, .prot = -1};
    dl_iterate_phdr(find_prot, &q);
    if (q.prot < 0) {
        snprintf(why, whycap, "no loaded segment of the driver holds 0x%lx", (unsigned long)vaddr);
        return 0;
    }
    uintptr_t addr = base + vaddr, page = addr & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    size_t len = addr + 1 - page;
    if (mprotect((void *)page, len, q.prot | PROT_WRITE) != 0) {
        snprintf(why, whycap, "cannot make the driver's code at 0x%lx writable (errno %d)",
                 (unsigned long)vaddr, errno);
        return 0;
    }
    __atomic_store_n((uint8_t *)addr, value, __ATOMIC_RELEASE);
    if (mprotect((void *)page, len, q.prot) != 0) {
        snprintf(why, whycap, "cannot restore the protection of the driver's code at 0x%lx "
                 "(errno %d)", (unsigned long)vaddr, errno);
        __atomic_store_n((uint8_t *)addr, old, __ATOMIC_RELEASE); /* still writable */
        mprotect((void *)page, len, q.prot);
        return 0;
    }
    return 1;
}

/* The init-site bytes gate g's selection changes: its set bytes, or its mask bytes. */
static const struct gate_patch *selected_patches(unsigned g, unsigned *n)
{
    const struct gate *gt = &plan->gates[g];
    *n = plan->selection[g] > 0 ? gt->nset : gt->nmask;
    return plan->selection[g] > 0 ? gt->set : gt->mask;
}

/* Called once, in the driver's load, only after the caller's identity check accepted the
 * loaded image (build-id and every recorded byte, init sites included), and before any
 * driver function runs. The gates changed are the selected
 * ones with a proven init site for their direction; with `all`, every selected gate must
 * have one. Their bytes are compared again, then written; any failure puts back what was
 * written. Returns how many gates were changed, each marked in plan->at_init (the struct
 * method leaves those alone), or -1 with the reason in `why` (nothing changed).
 * The comparison here is this writer's own guard, not only a repeat: plan validation
 * (shimgen/gates/plan.py) puts every init-site byte in a window the identity check
 * compares, but this code does not depend on it (a plan baked in through the Python API is
 * not validated), and never stores a byte it has not just compared. tests/runtime/test_guards.py
 * runs this file as a unit: a byte that differs (nothing written) and a store that fails
 * (every byte put back). */
int shimgen_gates_patch_init(uintptr_t driver_base, int all, char *why, size_t whycap)
{
    const struct gate_patch *done[GATE_MAX_PATCHES * 8];
    unsigned ndone = 0, total = 0, changed = 0;
    base = driver_base;
    for (unsigned g = 0; g < plan->ngates; g++) {
        if (!plan->selection[g])
            continue;
        const struct gate *gt = &plan->gates[g];
        unsigned n;
        const struct gate_patch *p = selected_patches(g, &n);
        if (!n && all) {
            snprintf(why, whycap, "gate %s has no proven init site to %s on this driver "
                     "(shimgen gates says why)", gt->name, plan->selection[g] > 0 ? "set" : "mask");
            return -1;
        }
        total += n;
        for (unsigned k = 0; k < n; k++)
            if (*(const uint8_t *)(base + p[k].vaddr) != p[k].old) {
                snprintf(why, whycap, "the init-site byte at 0x%lx is not the profile's",
                         (unsigned long)p[k].vaddr);
                return -1;
            }
    }
    if (total > sizeof done / sizeof done[0]) {
        snprintf(why, whycap, "more init-site bytes (%u) than one selection may change", total);
        return -1;
    }
    for (unsigned g = 0; g < plan->ngates; g++) {
        if (!plan->selection[g])
            continue;
        unsigned n;
        const struct gate_patch *p = selected_patches(g, &n);
        for (unsigned k = 0; k < n; k++) {
            if (!poke_code(p[k].vaddr, p[k].new_, p[k].old, why, whycap)) {
                char ignored[128];
                while (ndone--)
                    poke_code(done[ndone]->vaddr, done[ndone]->old, done[ndone]->new_, ignored,
                              sizeof ignored);
                return -1;
            }
            done[ndone++] = &p[k];
        }
        changed += n > 0;
    }
    /* marked only once every byte is in: a failure above leaves every gate to the caller */
    for (unsigned g = 0; g < plan->ngates; g++) {
        unsigned n;
        if (plan->selection[g] && (selected_patches(g, &n), n))
            plan->at_init[g] = 1;
    }
    return (int)changed;
}
