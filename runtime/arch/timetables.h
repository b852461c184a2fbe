/*
 * timetables.h: the timing stubs' tables, one entry per function in slot order, the same for
 * every architecture (assembler directives only; included by timing.S and arch/aarch64/timing.S
 * after they defined the labels it names: .Ltime_i and .Ltimeline_i of each function i).
 */
        .section .data.rel.ro, "aw"
        .balign 8
        .globl  shimgen_time_stubs
        .hidden shimgen_time_stubs
shimgen_time_stubs:
#define SHIMGEN_FUNCTION(i, name) .quad .Ltime_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        .globl  shimgen_timeline_stubs
        .hidden shimgen_timeline_stubs
shimgen_timeline_stubs:
#define SHIMGEN_FUNCTION(i, name) .quad .Ltimeline_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
