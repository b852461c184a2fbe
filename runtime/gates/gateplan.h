/*
 * gateplan.h: the shape of the gate plan that a build bakes into the shim (the generated
 * gateplan.c, from templates/gateplan.c.j2 and shimgen's GatePlan), read by the gate
 * engine in gates.c. A shim built without gates has a plan with no gates.
 */
#ifndef SHIMGEN_GATEPLAN_H
#define SHIMGEN_GATEPLAN_H

#include <stdint.h>

#define GATE_MAX_FIELDS 8
#define GATE_MAX_GLOBALS 8
#define GATE_MAX_DEVICES 64
#define GATE_MAX_PATCHES 8 /* init-site bytes per gate and direction */

struct gate_field {
    uint32_t offset;
    uint8_t mask;
};
struct gate_global {
    uintptr_t vaddr;
    unsigned size;
};
/* One byte of the driver's code changed by SHIMGEN_GATE_METHOD=init, before cuInit. */
struct gate_patch {
    uintptr_t vaddr;
    uint8_t old, new_;
};
struct gate {
    const char *name;
    unsigned nfields, nglobals;
    struct gate_field fields[GATE_MAX_FIELDS];
    struct gate_global globals[GATE_MAX_GLOBALS];
    unsigned nset, nmask; /* 0: no proven init site for that direction */
    struct gate_patch set[GATE_MAX_PATCHES], mask[GATE_MAX_PATCHES];
};
struct gate_check {
    uintptr_t vaddr;
    unsigned len;
    unsigned char bytes[16];
};

struct gate_plan {
    const char *build_id;       /* the profile's driver */
    const char *driver_version;
    uintptr_t table_vaddr, table_offset, table_stride; /* the per-device struct pointers */
    uintptr_t count_vaddr;      /* the device count, or 0: GATE_MAX_DEVICES */
    unsigned count_size;
    const struct gate *gates;
    unsigned ngates;            /* 0: the shim was built without gates */
    const struct gate_check *checks;
    unsigned nchecks;
    int *selection;             /* per gate: +1 set, -1 mask, 0 leave alone */
    unsigned char *at_init;     /* per gate: 1 once applied at its init site (gates_init.c) */
};

extern const struct gate_plan shimgen_gate_plan;

#endif
