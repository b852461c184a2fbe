/*
 * gates.c: the gate engine. Capability gates are bits in the driver's private per-device
 * struct (see docs/gates.md); the build bakes in where they are (gateplan.c: the device
 * table, each gate's bits and globals, and the instruction bytes they were read from).
 * SHIMGEN_GATES selects gates to set ("gdr") or mask ("-gdr"). Nothing is ever written
 * unless the loaded driver has the profile's build-id and every recorded instruction byte
 * matches the image in memory; otherwise the shim says so once and only forwards. The
 * hooks that apply the gates are in hooks_gates.c and hooks_attributes.c.
 * SHIMGEN_GATE_METHOD=init changes the driver's code instead (gates_init.c) for each gate
 * that has a proven init site, and this file writes the structs of the others only;
 * =init-all changes every selected gate's code or nothing. shimgen_gates_arm decides, once,
 * while the driver is loaded, and says in one line which gate went which way.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gates.h"
#include "base/base.h"

static const struct gate_plan *const plan = &shimgen_gate_plan;

static uintptr_t base;
static int active;

/* SHIMGEN_GATES, at configuration: 1 when gates are selected, 0 for none, -1 (with the
 * reason in `err`) when the value names a gate this shim does not have. */
static int configure(const char *spec, char *err, size_t errcap)
{
    if (!spec || !*spec)
        return 0;
    if (!plan->ngates) {
        snprintf(err, errcap, "this shim was built without gates (shimgen run --gates SEL "
                 "builds one; or shimgen build --gate-profile auto)");
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
    return 1;
}

/* Whether the struct method can apply the selected gates that it would be given (every one,
 * or with `without_init` those that have no init site for their direction): a gate with no
 * field and no global (p2p-mixed, a branch of the driver's code) is applied only at its init
 * site. Returns 1, or 0 with the reason in `why`. */
static int struct_possible(int without_init, char *why, size_t whycap)
{
    for (unsigned g = 0; g < plan->ngates; g++) {
        const struct gate *gt = &plan->gates[g];
        if (!plan->selection[g] || gt->nfields || gt->nglobals)
            continue;
        if (without_init && (plan->selection[g] > 0 ? gt->nset : gt->nmask))
            continue;
        snprintf(why, whycap, "gate %s changes the driver's code only (give "
                 "SHIMGEN_GATE_METHOD=" SHIMGEN_GATE_METHOD_NAME_INIT ")", gt->name);
        return 0;
    }
    return 1;
}

/* "gdr set at its init site, dmabuf set in the device structs": how each selected gate is
 * applied, for the notice. */
static void describe(char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (unsigned g = 0; g < plan->ngates && o < cap; g++) {
        if (!plan->selection[g])
            continue;
        o += (size_t)snprintf(out + o, cap - o, "%s%s %s %s", o ? ", " : "", plan->gates[g].name,
                              plan->selection[g] > 0 ? "set" : "masked",
                              plan->at_init[g] ? "at its init site (changed before cuInit)"
                                               : "in the device structs once cuInit succeeds");
    }
}

/* SHIMGEN_GATES (parsed at the shim's load, applied once the driver is loaded) and
 * SHIMGEN_GATE_METHOD, read once after the configuration (config.c), by this file's
 * constructor or by the first load of the driver, whichever comes first (a hook file's
 * constructor can load the driver before the shim's constructors run). */
static pthread_once_t gates_once = PTHREAD_ONCE_INIT;

static void read_gates(void)
{
    shimgen_config();
    const char *v = secure_getenv(SHIMGEN_ENV_GATES);
    if (!v || !*v)
        return;
    char err[256] = "";
    int r = configure(v, err, sizeof err);
    if (r < 0)
        shimgen_say("shimgen: SHIMGEN_GATES=%s ignored: %s; nothing is written\n", v, err);
    shimgen_cfg.gates_requested = r > 0;
    shimgen_copy_str(shimgen_cfg.gates_spec, sizeof shimgen_cfg.gates_spec, v);
    const char *m = secure_getenv(SHIMGEN_ENV_GATE_METHOD);
    shimgen_cfg.gate_method = SHIMGEN_GATE_METHOD_STRUCT;
    if (!m || !*m || strcmp(m, SHIMGEN_GATE_METHOD_NAME_STRUCT) == 0)
        return;
    if (strcmp(m, SHIMGEN_GATE_METHOD_NAME_INIT) == 0) {
        shimgen_cfg.gate_method = SHIMGEN_GATE_METHOD_INIT;
    } else if (strcmp(m, SHIMGEN_GATE_METHOD_NAME_INIT_ALL) == 0) {
        shimgen_cfg.gate_method = SHIMGEN_GATE_METHOD_INIT_ALL;
    } else if (r > 0) {
        shimgen_say("shimgen: SHIMGEN_GATE_METHOD=%s ignored (" SHIMGEN_GATE_METHOD_NAME_STRUCT
                    ", " SHIMGEN_GATE_METHOD_NAME_INIT " or " SHIMGEN_GATE_METHOD_NAME_INIT_ALL
                    "); SHIMGEN_GATES=%s is not applied, nothing is written\n", m, v);
        shimgen_cfg.gates_requested = 0;
    }
}

void shimgen_gates_config(void)
{
    pthread_once(&gates_once, read_gates);
}

__attribute__((constructor)) static void gates_load(void)
{
    shimgen_gates_config();
}

/* Called once, while the driver is loaded and before any of its functions runs, when
 * SHIMGEN_GATES selected gates: the identity check, then each gate applied by the method
 * SHIMGEN_GATE_METHOD asks for (the init site now, or the structs from cuInit on, through
 * the hooks' shimgen_gates_apply). One notice says what was done, or why nothing was. */
void shimgen_gates_arm(uintptr_t driver_base, const char *loaded_build_id)
{
    char why[256] = "", how[256];
    const char *spec = shimgen_cfg.gates_spec;
    if (!shimgen_gates_verify(driver_base, loaded_build_id, why, sizeof why)) {
        shimgen_say("shimgen: SHIMGEN_GATES=%s ignored: %s; nothing is written\n", spec, why);
        return;
    }
    int method = shimgen_cfg.gate_method;
    if (method != SHIMGEN_GATE_METHOD_INIT_ALL &&
        !struct_possible(method == SHIMGEN_GATE_METHOD_INIT, why, sizeof why)) {
        shimgen_say("shimgen: SHIMGEN_GATES=%s ignored: %s; nothing is written\n", spec, why);
        return;
    }
    if (method != SHIMGEN_GATE_METHOD_STRUCT &&
        shimgen_gates_patch_init(driver_base, method == SHIMGEN_GATE_METHOD_INIT_ALL, why,
                                 sizeof why) < 0) {
        if (method == SHIMGEN_GATE_METHOD_INIT_ALL) {
            shimgen_say("shimgen: SHIMGEN_GATES=%s ignored: %s; nothing is written\n", spec,
                        why);
            return;
        }
        char init_why[256];
        shimgen_copy_str(init_why, sizeof init_why, why);
        if (!struct_possible(0, why, sizeof why)) {
            shimgen_say("shimgen: SHIMGEN_GATES=%s ignored: %s; %s; nothing is written\n", spec,
                        init_why, why);
            return;
        }
        shimgen_say("shimgen: SHIMGEN_GATE_METHOD=" SHIMGEN_GATE_METHOD_NAME_INIT ": no init "
                    "site changed (%s); every gate goes to the device structs\n", init_why);
    }
    for (unsigned g = 0; g < plan->ngates; g++)
        if (plan->selection[g] && !plan->at_init[g])
            active = 1;
    if (active)
        shimgen_cfg.features |=
            SHIMGEN_FEATURE_GATES | SHIMGEN_FEATURE_ATTRS | SHIMGEN_FEATURE_MEMORY;
    if (method == SHIMGEN_GATE_METHOD_STRUCT) {
        shimgen_say("shimgen: SHIMGEN_GATES=%s armed on %s (build-id %s): applied to each "
                    "device once cuInit succeeds\n", spec, shimgen_cfg.driver_path,
                    loaded_build_id);
        return;
    }
    describe(how, sizeof how);
    shimgen_say("shimgen: SHIMGEN_GATES=%s armed on %s (build-id %s): %s\n", spec,
                shimgen_cfg.driver_path, loaded_build_id, how);
}

/* Whether the struct method is armed (shimgen_gates_activate was called). */
int shimgen_gates_armed(void)
{
    return active;
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
        if (!plan->selection[g] || plan->at_init[g])
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
