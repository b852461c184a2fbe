/*
 * stubs.S: the x86-64 entry points of the shim. No prototypes are needed: every stub only
 * jumps, so arguments in registers and on the stack reach the target untouched.
 *
 *   exported trampoline i:  jmp *shimgen_slots[i]
 *   shimgen_slots[i]:       lazy stub i until the driver is loaded, then the counting
 *                           stub i (SHIMGEN_TRACE=1), the timing stub i (SHIMGEN_TRACE=time,
 *                           or its twin for SHIMGEN_TRACE=timeline)
 *                           or shimgen_targets[i] (hook or real)
 *   lazy stub i:            r11 = i; save argument registers; ask the C runtime for the
 *                           target (loads the driver once, thread-safe); restore; jump
 *   inject stub i:          (SHIMGEN_INJECT, only in shimgen_targets[i] of a function a
 *                           rule matches) r11 = i; save argument registers; ask
 *                           shimgen_inject_decide(i): 0, restore and jump through
 *                           shimgen_inject_next[i]; else return that code in eax
 *   shimgen_user_real_common: SHIMGEN_REAL(name) of a user hook file before the driver is
 *                           loaded (userreal.S, r11 = i): the load, then what export i
 *                           reaches without the user's hook
 *
 * The timing stubs (SHIMGEN_TRACE=time, timeline) are in timing.S.
 *
 * The per-function code comes from the build's generated list, functions.inc: one
 * SHIMGEN_FUNCTION(i, name) line per exported function, in slot order. This file defines
 * what a line expands to (an assembler macro per kind of stub) and includes the list once
 * per kind. The numbers it needs come from the generated headers: SHIMGEN_NFUNCS (shim.h)
 * and the result codes of the failure stubs (facts.h); the offsets into a thread's counter
 * block come from layout.h, which the C runtime checks against its structs.
 */

#include "facts.h"
#include "shim.h"
#include "arch/layout.h"

#include "asm.h"

        .text

/* ---- exported trampolines: one indirect jump each ---- */
.macro trampoline i, name
        .globl  \name
        .type   \name, @function
        .balign 16
\name:
.Lentry_\i:
        ENDBR
        jmp     *shimgen_slots+8*\i(%rip)
        .size   \name, .-\name
.endm
#define SHIMGEN_FUNCTION(i, name) trampoline i, name
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* ---- dlopen wrapper: redirect libcuda names to the shim (dlopen.c), then tail-jump to the
 * real dlopen so that glibc still sees the original caller (RUNPATH, $ORIGIN, namespace). */
        .globl  dlopen
        .type   dlopen, @function
        .balign 16
dlopen:
        ENDBR
        push    %rsi
        call    shimgen_dlopen_filter
        pop     %rsi
        mov     %rax, %rdi
        jmp     *shimgen_real_dlopen(%rip)
        .size   dlopen, .-dlopen

/* ---- counting stubs: one increment of this thread's own counter, then the target.
 * The per-thread block is reached through an initial-exec TLS pointer; a thread's first
 * counted call (pointer still NULL) takes shimgen_count_slow, which allocates it. ---- */
.macro count_stub i
        .balign 16
.Lcount_\i:
        ENDBR
        movq    shimgen_tls_stats@gottpoff(%rip), %r11
        movq    %fs:(%r11), %r11
        testq   %r11, %r11
        jz      1f
        incq    TS_COUNT+TS_FSTATS_SIZE*\i(%r11)    /* fn[i].count++ */
        jmp     *shimgen_targets+8*\i(%rip)
1:      mov     $\i, %r11d
        jmp     shimgen_count_slow
.endm
#define SHIMGEN_FUNCTION(i, name) count_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* First counted call of a thread: like the lazy path, save the argument registers and
 * let the C runtime allocate the thread's counters, count, and name the target. */
        .balign 16
        .type   shimgen_count_slow, @function
shimgen_count_slow:
        .cfi_startproc
        save_argument_registers
        mov     %r11d, %edi
        call    shimgen_count_first
        mov     %rax, %r11
        restore_argument_registers
        jmp     *%r11
        .cfi_endproc
        .size   shimgen_count_slow, .-shimgen_count_slow

/* ---- lazy stubs: first call of any function before the driver is loaded ---- */
.macro lazy_stub i
        .balign 16
.Llazy_\i:
        ENDBR
        mov     $\i, %r11d
        jmp     shimgen_lazy_common
.endm
#define SHIMGEN_FUNCTION(i, name) lazy_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        .balign 16
        .type   shimgen_lazy_common, @function
shimgen_lazy_common:
        .cfi_startproc
        save_argument_registers
        mov     %r11d, %edi
        call    shimgen_lazy_resolve
        mov     %rax, %r11
        restore_argument_registers
        jmp     *%r11
        .cfi_endproc
        .size   shimgen_lazy_common, .-shimgen_lazy_common

/* ---- SHIMGEN_REAL(name) before the driver is loaded (userreal.S, r11 = i): the load,
 * then what export i reaches without the user's hook (userhooks.c) ---- */
        .globl  shimgen_user_real_common
        .hidden shimgen_user_real_common
        .balign 16
        .type   shimgen_user_real_common, @function
shimgen_user_real_common:
        .cfi_startproc
        save_argument_registers
        mov     %r11d, %edi
        call    shimgen_user_real_resolve
        mov     %rax, %r11
        restore_argument_registers
        jmp     *%r11
        .cfi_endproc
        .size   shimgen_user_real_common, .-shimgen_user_real_common

/* ---- inject stubs (SHIMGEN_INJECT, inject.c): a matched function's target ---- */
.macro inject_stub i
        .balign 16
.Linject_\i:
        ENDBR
        mov     $\i, %r11d
        jmp     shimgen_inject_common
.endm
#define SHIMGEN_FUNCTION(i, name) inject_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

/* i is kept at 192(%rsp), above the saved registers (the frame has 208 bytes). The
 * decision's code is returned as the function's own; a call it lets through reaches the
 * target with every argument register as the caller left it. */
        .balign 16
        .type   shimgen_inject_common, @function
shimgen_inject_common:
        .cfi_startproc
        save_argument_registers
        mov     %r11, 192(%rsp)
        mov     %r11d, %edi
        call    shimgen_inject_decide
        test    %eax, %eax
        jnz     1f
        mov     192(%rsp), %r11
        lea     shimgen_inject_next(%rip), %rax
        mov     (%rax,%r11,8), %r11
        .cfi_remember_state
        restore_argument_registers
        jmp     *%r11
1:
        .cfi_restore_state
        leave
        .cfi_def_cfa rsp, 8
        .cfi_restore rbp
        ret
        .cfi_endproc
        .size   shimgen_inject_common, .-shimgen_inject_common

/* ---- failure stubs: used when the driver cannot be loaded or lacks a function ---- */
        .globl  shimgen_fail_init
        .hidden shimgen_fail_init
        .type   shimgen_fail_init, @function
        .balign 16
shimgen_fail_init:
        ENDBR
        mov     $SHIMGEN_CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, %eax
        ret
        .size   shimgen_fail_init, .-shimgen_fail_init

/* A call from a signal handler on the thread that is loading the driver (or holding the
 * load across its own fork): the load cannot be waited for there, so the call returns
 * CUDA_ERROR_NOT_INITIALIZED at once; the slot stays lazy for the next call. */
        .globl  shimgen_fail_loading
        .hidden shimgen_fail_loading
        .type   shimgen_fail_loading, @function
        .balign 16
shimgen_fail_loading:
        ENDBR
        mov     $SHIMGEN_CUDA_ERROR_NOT_INITIALIZED, %eax
        ret
        .size   shimgen_fail_loading, .-shimgen_fail_loading

        .globl  shimgen_fail_missing
        .hidden shimgen_fail_missing
        .type   shimgen_fail_missing, @function
        .balign 16
shimgen_fail_missing:
        ENDBR
        mov     $SHIMGEN_CUDA_ERROR_NOT_SUPPORTED, %eax
        ret
        .size   shimgen_fail_missing, .-shimgen_fail_missing

/* ---- tables: one entry per function, each the address of that function's stub (the
 * timing stubs' tables are in timing.S) ---- */
#include "arch/stubtables.h"

        .section .note.GNU-stack, "", @progbits
