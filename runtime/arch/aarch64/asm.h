/*
 * asm_aarch64.h: for the two AArch64 assembly files (arch/aarch64/stubs.S, arch/aarch64/timing.S), as
 * asm.h is for x86-64's: the assembler macros that save and restore every argument register
 * around a call into C.
 */
#ifndef SHIMGEN_ASM_AARCH64_H
#define SHIMGEN_ASM_AARCH64_H

/* Save and restore every register a call may carry an argument in (x0-x8, q0-q7), with
 * the frame record (x29, x30): 224 bytes, 16-aligned. */
.macro save_argument_registers
        stp     x29, x30, [sp, #-224]!
        .cfi_def_cfa_offset 224
        .cfi_offset x29, -224
        .cfi_offset x30, -216
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        stp     x2, x3, [sp, #32]
        stp     x4, x5, [sp, #48]
        stp     x6, x7, [sp, #64]
        stp     x8, x17, [sp, #80]
        stp     q0, q1, [sp, #96]
        stp     q2, q3, [sp, #128]
        stp     q4, q5, [sp, #160]
        stp     q6, q7, [sp, #192]
.endm

.macro restore_argument_registers
        ldp     x0, x1, [sp, #16]
        ldp     x2, x3, [sp, #32]
        ldp     x4, x5, [sp, #48]
        ldp     x6, x7, [sp, #64]
        ldr     x8, [sp, #80]
        ldp     q0, q1, [sp, #96]
        ldp     q2, q3, [sp, #128]
        ldp     q4, q5, [sp, #160]
        ldp     q6, q7, [sp, #192]
        ldp     x29, x30, [sp], #224
        .cfi_def_cfa_offset 0
        .cfi_restore x29
        .cfi_restore x30
.endm

/* SHIMGEN_REAL(name)'s trampoline of the user's hooks (userreal.S, rendered): the same as
 * x86-64's, through x16 and w17 (stubs.S); the entry's address by adrp, wherever the linker
 * puts shimgen_user_next (a literal ldr reaches 1 MiB only). */
.macro user_real name, idx
        .globl  shimgen_real_\name
        .hidden shimgen_real_\name
        .type   shimgen_real_\name, %function
        .balign 16
shimgen_real_\name:
        adrp    x16, shimgen_user_next+8*\idx
        ldr     x16, [x16, #:lo12:shimgen_user_next+8*\idx]
        cbz     x16, 1f
        br      x16
1:      mov     w17, #\idx
        b       shimgen_user_real_common
        .size   shimgen_real_\name, .-shimgen_real_\name
.endm

#endif
