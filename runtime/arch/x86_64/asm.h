/*
 * asm.h: what the shim's two assembly files (stubs.S, timing.S) share: the CET landing
 * pad, two CFI escapes of the timing frame, and the assembler macros that save and restore
 * every argument register around a call into the C runtime.
 */
#ifndef SHIMGEN_ASM_H
#define SHIMGEN_ASM_H

#if defined(__CET__)
# define ENDBR endbr64
#else
# define ENDBR
#endif

/* CFI: DWARF register REG (3 = rbx, 16 = the return address) is saved at OFF(%rbx), the
 * timing frame: DW_CFA_expression REG, { DW_OP_breg3 OFF } (OFF < 64, one byte). */
#define CFI_SAVED_AT_RBX(REG, OFF) .cfi_escape 0x10, REG, 0x02, 0x73, OFF
/* CFI: the caller's rsp is this frame's rsp: DW_CFA_val_expression 7, { DW_OP_breg7 0 }. */
#define CFI_CALLER_RSP_IS_RSP .cfi_escape 0x16, 0x07, 0x02, 0x77, 0x00

/*
 * Argument registers of the x86-64 SysV ABI (plus %rax, which carries the vector-register
 * count of a varargs call, and %r10, the static chain), saved in a 16-byte aligned frame
 * below %rbp, so a C helper can run before the real function gets its arguments untouched.
 * Both macros carry their call-frame information (CFI): they are used inside functions
 * with .cfi_startproc, entered by a jump with the caller's return address on top of the
 * stack, so a debugger or an unwinder can walk from the C helper back to the caller.
 * `below`: bytes the stack pointer is already below that return address (0 unless the
 * caller moved it, as calls.S past the red zone); both macros must be given the same.
 */
.macro save_argument_registers below=0
        push    %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_offset rbp, -16-\below
        mov     %rsp, %rbp
        .cfi_def_cfa_register rbp
        sub     $208, %rsp
        and     $-16, %rsp
        mov     %rdi, 0(%rsp)
        mov     %rsi, 8(%rsp)
        mov     %rdx, 16(%rsp)
        mov     %rcx, 24(%rsp)
        mov     %r8, 32(%rsp)
        mov     %r9, 40(%rsp)
        mov     %rax, 48(%rsp)
        mov     %r10, 56(%rsp)
        movdqa  %xmm0, 64(%rsp)
        movdqa  %xmm1, 80(%rsp)
        movdqa  %xmm2, 96(%rsp)
        movdqa  %xmm3, 112(%rsp)
        movdqa  %xmm4, 128(%rsp)
        movdqa  %xmm5, 144(%rsp)
        movdqa  %xmm6, 160(%rsp)
        movdqa  %xmm7, 176(%rsp)
.endm

.macro restore_argument_registers below=0
        mov     0(%rsp), %rdi
        mov     8(%rsp), %rsi
        mov     16(%rsp), %rdx
        mov     24(%rsp), %rcx
        mov     32(%rsp), %r8
        mov     40(%rsp), %r9
        mov     48(%rsp), %rax
        mov     56(%rsp), %r10
        movdqa  64(%rsp), %xmm0
        movdqa  80(%rsp), %xmm1
        movdqa  96(%rsp), %xmm2
        movdqa  112(%rsp), %xmm3
        movdqa  128(%rsp), %xmm4
        movdqa  144(%rsp), %xmm5
        movdqa  160(%rsp), %xmm6
        movdqa  176(%rsp), %xmm7
        leave
        .cfi_def_cfa rsp, 8+\below
        .cfi_restore rbp
.endm

/* SHIMGEN_REAL(name)'s trampoline of the user's hooks (userreal.S, rendered): jump to what
 * the export reaches without the user's hook, or load the driver first. */
.macro user_real name, idx
        .globl  shimgen_real_\name
        .hidden shimgen_real_\name
        .type   shimgen_real_\name, @function
        .balign 16
shimgen_real_\name:
        ENDBR
        movq    shimgen_user_next+8*\idx(%rip), %r11
        testq   %r11, %r11
        jz      1f
        jmp     *%r11
1:      mov     $\idx, %r11d
        jmp     shimgen_user_real_common
        .size   shimgen_real_\name, .-shimgen_real_\name
.endm

#endif
