/* regcheck_call(fn): call fn() the way a compiler would, with known values in every
 * callee-saved register, and report what changed. fn is expected to be cuFakeEntryRsp
 * (tests/c/fake_libcuda.c), which returns the stack pointer its caller had at the call.
 *
 * Returns a bit mask, 0 when all is exact:
 *   bits 0-5  rbx, rbp, r12, r13, r14, r15 came back changed
 *   bit 6     the callee saw another stack pointer than the one this code called with
 *             (a shim that moved the stack, or the arguments on it, would show here)
 *   bit 7     the stack pointer after the return differs from the one before the call
 */
/* CHECK reg, value, bit: set `bit` in ecx unless reg holds value (uses rdx). */
        .macro  CHECK reg, value, bit
        movabs  $\value, %rdx
        cmp     %rdx, \reg
        je      1f
        or      $\bit, %ecx
1:
        .endm

        .text
        .globl  regcheck_call
        .type   regcheck_call, @function
regcheck_call:
        push    %rbx
        push    %rbp
        push    %r12
        push    %r13
        push    %r14
        push    %r15
        sub     $24, %rsp                   /* 16-byte aligned at the call, as the ABI says */
        mov     %rsp, 0(%rsp)
        mov     %rdi, %r11
        movabs  $0x1111111111111111, %rbx
        movabs  $0x2222222222222222, %rbp
        movabs  $0x3333333333333333, %r12
        movabs  $0x4444444444444444, %r13
        movabs  $0x5555555555555555, %r14
        movabs  $0x6666666666666666, %r15
        call    *%r11
        xor     %ecx, %ecx
        CHECK   %rbx, 0x1111111111111111, 1
        CHECK   %rbp, 0x2222222222222222, 2
        CHECK   %r12, 0x3333333333333333, 4
        CHECK   %r13, 0x4444444444444444, 8
        CHECK   %r14, 0x5555555555555555, 16
        CHECK   %r15, 0x6666666666666666, 32
        cmp     %rsp, %rax
        je      1f
        or      $64, %ecx
1:      cmp     0(%rsp), %rsp
        je      1f
        or      $128, %ecx
1:      mov     %rcx, %rax
        add     $24, %rsp
        pop     %r15
        pop     %r14
        pop     %r13
        pop     %r12
        pop     %rbp
        pop     %rbx
        ret
        .size   regcheck_call, .-regcheck_call
        .section .note.GNU-stack, "", @progbits
