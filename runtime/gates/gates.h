/*
 * gates/gates.h: attribute and P2P gates at run time (docs/design.md, "Gates at run time"):
 * the plan a build bakes in (gateplan.h), the engine (gates.c), the init-site writer
 * (gates_init.c) and the gate hooks (hooks_gates.c).
 */
#ifndef SHIMGEN_GATES_H
#define SHIMGEN_GATES_H

#include <stddef.h>
#include <stdint.h>

#include "gateplan.h"

/* ---- gates (gates.c) ---- */
void shimgen_gates_config(void); /* SHIMGEN_GATES and SHIMGEN_GATE_METHOD, read once */
int shimgen_gates_verify(uintptr_t driver_base, const char *loaded_build_id, char *why,
                         size_t whycap);
void shimgen_gates_apply(void);
void shimgen_gates_arm(uintptr_t driver_base, const char *loaded_build_id);
int shimgen_gates_patch_init(uintptr_t driver_base, int all, char *why, size_t whycap);
int shimgen_gates_armed(void);

#endif
