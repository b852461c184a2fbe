/*
 * stubtables.h: the stub tables, the jump slots and the zeroed tables of the shim, the same
 * for every architecture (assembler directives only; included by stubs.S and
 * arch/aarch64/stubs.S after they defined the labels it names: .Llazy_i, .Lcount_i, .Linject_i
 * and .Lentry_i of each function i). One entry per function, in slot order; each slot and
 * target starts at the function's lazy stub.
 */

.macro table_start table
        .globl  \table
        .hidden \table
\table:
.endm

        .section .data.rel.ro, "aw"
        .balign 8
        table_start shimgen_lazy_stubs
#define SHIMGEN_FUNCTION(i, name) .quad .Llazy_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        table_start shimgen_count_stubs
#define SHIMGEN_FUNCTION(i, name) .quad .Lcount_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        table_start shimgen_inject_stubs
#define SHIMGEN_FUNCTION(i, name) .quad .Linject_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        table_start shimgen_entry_stubs
#define SHIMGEN_FUNCTION(i, name) .quad .Lentry_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* ---- jump slots: each starts at its lazy stub ---- */
        .data
        .balign 64
        table_start shimgen_slots
#define SHIMGEN_FUNCTION(i, name) .quad .Llazy_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        .balign 64
        table_start shimgen_targets
#define SHIMGEN_FUNCTION(i, name) .quad .Llazy_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        .bss
        .balign 64
        .globl  shimgen_real
        .hidden shimgen_real
shimgen_real:
        .zero   8*SHIMGEN_NFUNCS
        .balign 64
        .globl  shimgen_counts
        .hidden shimgen_counts
shimgen_counts:
        .zero   8*SHIMGEN_NFUNCS
