/*
 * arch/aarch64/stubs.S: the AArch64 entry points of the shim, the counterpart of stubs.S (read
 * that file first: the same stubs, tables and slots, in the same order). Every stub only
 * branches, so arguments in registers (x0-x7, x8, q0-q7) and on the stack reach the target
 * untouched. A stub uses only the registers a call may clobber before its target runs: x16
 * and x17 (the intra-procedure-call scratch registers) and x9-x15 (temporaries).
 *
 *   exported trampoline i:  br shimgen_slots[i] (two instructions: ldr, br)
 *   lazy stub i:            w17 = i; save the argument registers; ask the C runtime for
 *                           the target (shimgen_lazy_resolve); restore; branch
 *   counting stub i:        this thread's counter of i incremented, then a branch through
 *                           the thread's copy of shimgen_targets[i], the word after it
 *   inject stub i:          w17 = i; ask shimgen_inject_decide(i): 0, branch through
 *                           shimgen_inject_next[i]; else return that code in w0
 *
 * The timing path (SHIMGEN_TRACE=time, timeline) is arch/aarch64/timing.S.
 */

#include "facts.h"
#include "shim.h"
#include "arch/layout.h"
#include "asm.h"

/* x16 = the 8-byte entry i of `table`: one PC-relative load (the tables are within the
 * +-1 MiB it reaches; the link fails, never the call, were they not). */
.macro load_entry table, i
        ldr     x16, \table+8*\i
.endm

        .text

/* ---- exported trampolines: one indirect branch each ---- */
.macro trampoline i, name
        .globl  \name
        .type   \name, %function
        .balign 16
\name:
.Lentry_\i:
        load_entry shimgen_slots, \i
        br      x16
        .size   \name, .-\name
.endm
#define SHIMGEN_FUNCTION(i, name) trampoline i, name
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* ---- dlopen wrapper: redirect libcuda names to the shim (dlopen.c), then branch to the
 * real dlopen with the caller's x30, so that glibc still sees the original caller. ---- */
        .globl  dlopen
        .type   dlopen, %function
        .balign 16
dlopen:
        .cfi_startproc
        stp     x29, x30, [sp, #-32]!
        .cfi_def_cfa_offset 32
        .cfi_offset x29, -32
        .cfi_offset x30, -24
        mov     x29, sp
        str     x1, [sp, #16]
        bl      shimgen_dlopen_filter
        ldr     x1, [sp, #16]
        ldp     x29, x30, [sp], #32
        .cfi_def_cfa_offset 0
        .cfi_restore x29
        .cfi_restore x30
        adrp    x16, shimgen_real_dlopen
        ldr     x16, [x16, #:lo12:shimgen_real_dlopen]
        br      x16
        .cfi_endproc
        .size   dlopen, .-dlopen

/* ---- counting stubs: one increment of this thread's own counter, then a branch through
 * the word after it, the thread's copy of the target. The counters are reached through an
 * initial-exec TLS pointer that is never NULL (shimgen_tls_fn, its offset from the thread
 * pointer kept in shimgen_tls_fn_offset; stats.c): a thread with no block yet counts into
 * the nursery, whose targets are the first-count stubs below, which get it one. ---- */
.macro count_stub i
        .balign 16
.Lcount_\i:
        mrs     x16, tpidr_el0
        ldr     x17, shimgen_tls_fn_offset      /* stats.c, set before any slot leads here */
        ldr     x16, [x16, x17]
.if TS_TARGET + TS_FSTATS_SIZE * \i <= 32760     /* an offset ldr and str can carry */
        ldr     x9, [x16, #(TS_COUNT + TS_FSTATS_SIZE * \i)]
        add     x9, x9, #1
        str     x9, [x16, #(TS_COUNT + TS_FSTATS_SIZE * \i)]   /* fn[i].count++ */
        ldr     x16, [x16, #(TS_TARGET + TS_FSTATS_SIZE * \i)] /* fn[i].target */
.else
        movz    x17, #((TS_COUNT + TS_FSTATS_SIZE * \i) & 0xffff)
        movk    x17, #(((TS_COUNT + TS_FSTATS_SIZE * \i) >> 16) & 0xffff), lsl #16
        add     x16, x16, x17
        ldr     x9, [x16, #TS_COUNT]
        add     x9, x9, #1
        str     x9, [x16, #TS_COUNT]
        ldr     x16, [x16, #TS_TARGET]
.endif
        br      x16
.endm
#define SHIMGEN_FUNCTION(i, name) count_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* A thread's first counted call of function i (its pointer still the nursery's). */
.macro count_first_stub i
        .balign 8
.Lcount_first_\i:
        mov     w17, #\i
        b       shimgen_count_slow
.endm
#define SHIMGEN_FUNCTION(i, name) count_first_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* `name`: save the argument registers, call `resolver`(w17), branch to what it returns. */
.macro resolve_and_branch name, resolver
        .balign 16
        .type   \name, %function
\name:
        .cfi_startproc
        save_argument_registers
        mov     w0, w17
        bl      \resolver
        mov     x16, x0
        restore_argument_registers
        br      x16
        .cfi_endproc
        .size   \name, .-\name
.endm

/* First counted call of a thread: the C runtime allocates its counters, counts, names the
 * target. */
        resolve_and_branch shimgen_count_slow, shimgen_count_first

/* ---- lazy stubs: first call of any function before the driver is loaded ---- */
.macro lazy_stub i
        .balign 16
.Llazy_\i:
        mov     w17, #\i
        b       shimgen_lazy_common
.endm
#define SHIMGEN_FUNCTION(i, name) lazy_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        resolve_and_branch shimgen_lazy_common, shimgen_lazy_resolve

/* ---- SHIMGEN_REAL(name) before the driver is loaded (userreal.S, w17 = i) ---- */
        .globl  shimgen_user_real_common
        .hidden shimgen_user_real_common
        resolve_and_branch shimgen_user_real_common, shimgen_user_real_resolve

/* ---- inject stubs (SHIMGEN_INJECT, inject.c): a matched function's target ---- */
.macro inject_stub i
        .balign 16
.Linject_\i:
        mov     w17, #\i
        b       shimgen_inject_common
.endm
#define SHIMGEN_FUNCTION(i, name) inject_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* i is kept at 88(sp) (saved with x8). The decision's code is returned as the function's
 * own; a call it lets through reaches the target with every argument register as the
 * caller left it. */
        .balign 16
        .type   shimgen_inject_common, %function
shimgen_inject_common:
        .cfi_startproc
        save_argument_registers
        mov     w0, w17
        bl      shimgen_inject_decide
        cbnz    w0, 1f
        ldr     x17, [sp, #88]
        adrp    x16, shimgen_inject_next
        add     x16, x16, #:lo12:shimgen_inject_next
        ldr     x16, [x16, x17, lsl #3]
        .cfi_remember_state
        restore_argument_registers
        br      x16
1:
        .cfi_restore_state
        ldp     x29, x30, [sp], #224
        .cfi_def_cfa_offset 0
        .cfi_restore x29
        .cfi_restore x30
        ret
        .cfi_endproc
        .size   shimgen_inject_common, .-shimgen_inject_common

/* ---- failure stubs: used when the driver cannot be loaded or lacks a function ---- */
.macro fail_stub name, code
        .globl  \name
        .hidden \name
        .type   \name, %function
        .balign 16
\name:
        mov     w0, #\code
        ret
        .size   \name, .-\name
.endm
        fail_stub shimgen_fail_init, SHIMGEN_CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
        fail_stub shimgen_fail_loading, SHIMGEN_CUDA_ERROR_NOT_INITIALIZED
        fail_stub shimgen_fail_missing, SHIMGEN_CUDA_ERROR_NOT_SUPPORTED

/* ---- tables: one entry per function, each the address of that function's stub (the
 * timing stubs' are arch/aarch64/timing.S's) ---- */
#include "arch/stubtables.h"

        .section .data.rel.ro, "aw"
        .balign 8
        table_start shimgen_count_first_stubs
#define SHIMGEN_FUNCTION(i, name) .quad .Lcount_first_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        .section .note.GNU-stack, "", %progbits
