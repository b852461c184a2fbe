/*
 * nvml_stubs.S: the x86-64 entry points of the NVML shim (runtime/nvml/nvml.h). Every stub
 * only jumps, so arguments in registers and on the stack reach the target untouched.
 *
 *   exported trampoline i:  jmp *shimgen_nvml_slots[i]
 *   lazy stub i:            r11 = i; save argument registers; ask the C runtime for the
 *                           target (shimgen_nvml_resolve: the load, once, and the slot
 *                           set); restore; jump
 *   dlopen:                 NVML's names redirected to the shim (nvml/dlopen.c), then the
 *                           next dlopen
 *
 * The per-function list is the build's generated nvml_functions.inc: one
 * SHIMGEN_NVML_FUNCTION(i, name) line per export, in slot order. Only the NVML shim is
 * built from this file.
 */

#include "asm.h"

        .text

.macro nvml_trampoline i, name
        .globl  \name
        .type   \name, @function
        .balign 16
\name:
        ENDBR
        jmp     *shimgen_nvml_slots+8*\i(%rip)
        .size   \name, .-\name
.endm
#define SHIMGEN_NVML_FUNCTION(i, name) nvml_trampoline i, name
#include "nvml_functions.inc"
#undef SHIMGEN_NVML_FUNCTION

/* ---- dlopen wrapper: NVML's names open the shim (nvml/dlopen.c), then a tail-jump to the
 * dlopen after the shim, so that glibc still sees the original caller ---- */
        .globl  dlopen
        .type   dlopen, @function
        .balign 16
dlopen:
        ENDBR
        push    %rsi
        call    shimgen_nvml_dlopen_filter
        pop     %rsi
        mov     %rax, %rdi
        jmp     *shimgen_nvml_real_dlopen(%rip)
        .size   dlopen, .-dlopen

.macro nvml_lazy i
        .balign 16
.Lnvml_lazy_\i:
        ENDBR
        mov     $\i, %r11d
        jmp     shimgen_nvml_lazy_common
.endm
#define SHIMGEN_NVML_FUNCTION(i, name) nvml_lazy i
#include "nvml_functions.inc"
#undef SHIMGEN_NVML_FUNCTION

        .balign 16
        .type   shimgen_nvml_lazy_common, @function
shimgen_nvml_lazy_common:
        .cfi_startproc
        save_argument_registers
        mov     %r11d, %edi
        call    shimgen_nvml_resolve
        mov     %rax, %r11
        restore_argument_registers
        jmp     *%r11
        .cfi_endproc
        .size   shimgen_nvml_lazy_common, .-shimgen_nvml_lazy_common

/* ---- the slots: each export's target, its lazy stub until the first call ---- */
        .data
        .balign 8
        .globl  shimgen_nvml_slots
        .hidden shimgen_nvml_slots
        .type   shimgen_nvml_slots, @object
shimgen_nvml_slots:
.macro nvml_slot i
        .quad   .Lnvml_lazy_\i
.endm
#define SHIMGEN_NVML_FUNCTION(i, name) nvml_slot i
#include "nvml_functions.inc"
#undef SHIMGEN_NVML_FUNCTION
        .size   shimgen_nvml_slots, .-shimgen_nvml_slots

        .section .note.GNU-stack,"",@progbits
