/*
 * gates.c: the gate engine. Capability gates are bits in the driver's private per-device
 * struct (see docs/gates.md); the build bakes in where they are (gateplan.c: the device
 * table, each gate's bits and globals, and the instruction bytes they were read from).
 * SHIMGEN_GATES selects gates to set ("gdr") or mask ("-gdr"). Nothing is ever written
 * unless the loaded driver has the profile's build-id and every recorded instruction byte
 * matches the image in memory; otherwise the shim says so once and only forwards. The
 * hooks that apply the gates are in hooks_gates.c and hooks_attributes.c.
 * SHIMGEN_GATE_METHOD=init instead changes the proven init-site bytes of the driver's code
 * (shimgen_gates_patch_init), once, while the driver is loaded and before any of its
 * functions runs, so that the driver itself sets (or never sets) the bit in cuInit.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gates.h"
#include "runtime.h"

static const struct gate_plan *const plan = &shimgen_gate_plan;

static uintptr_t base;
static int active;

/* SHIMGEN_GATES, at configuration: 1 when gates are selected, 0 for none, -1 (with the
 * reason in `err`) when the value names a gate this shim does not have. */
int shimgen_gates_configure(const char *spec, char *err, size_t errcap)
{
    if (!spec || !*spec)
        return 0;
    if (!plan->ngates) {
        snprintf(err, errcap, "this shim was built without gates (shimgen build --gates auto)");
        return -1;
    }
    char buf[256];
    size_t n = strlen(spec);
    if (n >= sizeof buf) {
        snprintf(err, errcap, "SHIMGEN_GATES is too long");
        return -1;
    }
    memcpy(buf, spec, n + 1);
    int any = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int sign = 1;
        if (*tok == '-' || *tok == '+') {
            sign = *tok == '-' ? -1 : 1;
            tok++;
        }
        unsigned i = 0;
        while (i < plan->ngates && strcmp(plan->gates[i].name, tok) != 0)
            i++;
        if (i == plan->ngates) {
            size_t o = (size_t)snprintf(err, errcap, "unknown gate '%s' (this shim has:", tok);
            for (unsigned k = 0; k < plan->ngates && o < errcap; k++)
                o += (size_t)snprintf(err + o, errcap - o, " %s", plan->gates[k].name);
            if (o < errcap)
                snprintf(err + o, errcap - o, ")");
            return -1;
        }
        plan->selection[i] = sign;
        any = 1;
    }
    return any;
}

/* Called once the driver is loaded, before any hook is installed. Returns 1 when gates may
 * be written; otherwise explains why not in `why`. */
int shimgen_gates_verify(uintptr_t driver_base, const char *loaded_build_id, char *why,
                         size_t whycap)
{
    if (!plan->ngates) {
        snprintf(why, whycap, "this shim was built without gates");
        return 0;
    }
    if (strcmp(loaded_build_id, plan->build_id) != 0) {
        snprintf(why, whycap, "loaded driver build-id %s is not the profile's %s (libcuda %s)",
                 loaded_build_id[0] ? loaded_build_id : "none", plan->build_id,
                 plan->driver_version);
        return 0;
    }
    for (unsigned i = 0; i < plan->nchecks; i++) {
        if (memcmp((const void *)(driver_base + plan->checks[i].vaddr), plan->checks[i].bytes,
                   plan->checks[i].len) != 0) {
            snprintf(why, whycap, "instruction bytes at 0x%lx differ from the profile",
                     (unsigned long)plan->checks[i].vaddr);
            return 0;
        }
    }
    base = driver_base;
    active = 1;
    return 1;
}

static void write_global(uintptr_t addr, unsigned size, int set)
{
    uint64_t v = set > 0 ? 1u : 0u;
    switch (size) {
    case 1: __atomic_store_n((uint8_t *)addr, (uint8_t)v, __ATOMIC_RELAXED); break;
    case 2: __atomic_store_n((uint16_t *)addr, (uint16_t)v, __ATOMIC_RELAXED); break;
    case 4: __atomic_store_n((uint32_t *)addr, (uint32_t)v, __ATOMIC_RELAXED); break;
    default: __atomic_store_n((uint64_t *)addr, v, __ATOMIC_RELAXED); break;
    }
}

static unsigned device_count(void)
{
    if (!plan->count_vaddr)
        return GATE_MAX_DEVICES;
    uintptr_t a = base + plan->count_vaddr;
    uint64_t n;
    switch (plan->count_size) {
    case 1: n = *(const uint8_t *)a; break;
    case 2: n = *(const uint16_t *)a; break;
    case 8: n = *(const uint64_t *)a; break;
    default: n = *(const uint32_t *)a; break;
    }
    return n > GATE_MAX_DEVICES ? GATE_MAX_DEVICES : (unsigned)n;
}

/* Set or mask the selected gates on every device the driver has set up. */
void shimgen_gates_apply(void)
{
    if (!active)
        return;
    unsigned n = device_count();
    for (unsigned g = 0; g < plan->ngates; g++) {
        if (!plan->selection[g])
            continue;
        for (unsigned k = 0; k < plan->gates[g].nglobals; k++)
            write_global(base + plan->gates[g].globals[k].vaddr, plan->gates[g].globals[k].size,
                         plan->selection[g]);
        for (unsigned d = 0; d < n; d++) {
            uintptr_t dev = *(const uintptr_t *)(base + plan->table_vaddr + plan->table_offset +
                                                 d * plan->table_stride);
            if (!dev)
                continue;
            for (unsigned k = 0; k < plan->gates[g].nfields; k++) {
                uint8_t *p = (uint8_t *)(dev + plan->gates[g].fields[k].offset);
                if (plan->selection[g] > 0)
                    __atomic_fetch_or(p, plan->gates[g].fields[k].mask, __ATOMIC_RELAXED);
                else
                    __atomic_fetch_and(p, (uint8_t)~plan->gates[g].fields[k].mask,
                                       __ATOMIC_RELAXED);
            }
        }
    }
}

/* ---- SHIMGEN_GATE_METHOD=init: the driver's code changed at the init sites ---- */

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
 * segment's own protection put back. Returns 1, or 0 with the reason in `why`. */
static int poke_code(uintptr_t vaddr, uint8_t value, char *why, size_t whycap)
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
        return 0;
    }
    return 1;
}

/* Called once, in the driver's load, only after shimgen_gates_verify accepted the loaded
 * image (build-id and every recorded byte, init sites included: the caller's check is the
 * identity check), and before any driver function runs. Every selected gate must have a proven init site for its direction; the bytes are
 * compared again, then written; any failure puts back what was written. Returns 1, or 0 with
 * the reason in `why` (nothing changed). The struct method stays off. */
int shimgen_gates_patch_init(uintptr_t driver_base, char *why, size_t whycap)
{
    const struct gate_patch *done[GATE_MAX_PATCHES * 8];
    unsigned ndone = 0;
    base = driver_base;
    active = 0; /* this method never writes the device structs */
    for (unsigned g = 0; g < plan->ngates; g++) {
        if (!plan->selection[g])
            continue;
        const struct gate *gt = &plan->gates[g];
        unsigned n = plan->selection[g] > 0 ? gt->nset : gt->nmask;
        const struct gate_patch *p = plan->selection[g] > 0 ? gt->set : gt->mask;
        if (!n) {
            snprintf(why, whycap, "gate %s has no proven init site to %s on this driver "
                     "(shimgen gates says why)", gt->name, plan->selection[g] > 0 ? "set" : "mask");
            return 0;
        }
        for (unsigned k = 0; k < n; k++)
            if (*(const uint8_t *)(base + p[k].vaddr) != p[k].old) {
                snprintf(why, whycap, "the init-site byte at 0x%lx is not the profile's",
                         (unsigned long)p[k].vaddr);
                return 0;
            }
    }
    for (unsigned g = 0; g < plan->ngates; g++) {
        if (!plan->selection[g])
            continue;
        const struct gate *gt = &plan->gates[g];
        unsigned n = plan->selection[g] > 0 ? gt->nset : gt->nmask;
        const struct gate_patch *p = plan->selection[g] > 0 ? gt->set : gt->mask;
        for (unsigned k = 0; k < n && ndone < sizeof done / sizeof done[0]; k++) {
            if (!poke_code(p[k].vaddr, p[k].new_, why, whycap)) {
                char ignored[128];
                while (ndone--)
                    poke_code(done[ndone]->vaddr, done[ndone]->old, ignored, sizeof ignored);
                return 0;
            }
            done[ndone++] = &p[k];
        }
    }
    return 1;
}
