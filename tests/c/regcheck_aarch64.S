/* regcheck_call(fn), AArch64: the counterpart of regcheck.S, for exactness.c cross-compiled
 * (tests/runtime/test_aarch64_timing.py). Calls fn() the way a compiler would, with known
 * values in every callee-saved register, and reports what changed. fn is expected to be
 * cuFakeEntryRsp (tests/c/fake_libcuda.c), which returns the stack pointer at its entry.
 *
 * Returns a bit mask, 0 when all is exact:
 *   bits 0-9   x19 to x28 came back changed
 *   bit 10     one of d8 to d15 came back changed
 *   bit 11     the callee saw another stack pointer than the one this code called with
 *   bit 12     the stack pointer after the return differs from the one before the call
 */
        .macro  CHECK reg, value, bit
        mov     x9, #\value
        cmp     \reg, x9
        b.eq    1f
        orr     x10, x10, #\bit
1:
        .endm

        .macro  CHECKD reg, value
        mov     x9, #\value
        fmov    x11, \reg
        cmp     x11, x9
        b.eq    1f
        orr     x10, x10, #1024
1:
        .endm

        .text
        .globl  regcheck_call
        .type   regcheck_call, %function
regcheck_call:
        stp     x29, x30, [sp, #-176]!
        mov     x29, sp
        stp     x19, x20, [sp, #16]
        stp     x21, x22, [sp, #32]
        stp     x23, x24, [sp, #48]
        stp     x25, x26, [sp, #64]
        stp     x27, x28, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        mov     x9, sp
        str     x9, [sp, #160]                  /* the stack pointer at the call */
        mov     x16, x0
        mov     x19, #0x1919
        mov     x20, #0x2020
        mov     x21, #0x2121
        mov     x22, #0x2222
        mov     x23, #0x2323
        mov     x24, #0x2424
        mov     x25, #0x2525
        mov     x26, #0x2626
        mov     x27, #0x2727
        mov     x28, #0x2828
        mov     x9, #0x0808
        fmov    d8, x9
        mov     x9, #0x0909
        fmov    d9, x9
        mov     x9, #0x1010
        fmov    d10, x9
        mov     x9, #0x1111
        fmov    d11, x9
        mov     x9, #0x1212
        fmov    d12, x9
        mov     x9, #0x1313
        fmov    d13, x9
        mov     x9, #0x1414
        fmov    d14, x9
        mov     x9, #0x1515
        fmov    d15, x9
        blr     x16
        mov     x10, #0
        CHECK   x19, 0x1919, 1
        CHECK   x20, 0x2020, 2
        CHECK   x21, 0x2121, 4
        CHECK   x22, 0x2222, 8
        CHECK   x23, 0x2323, 16
        CHECK   x24, 0x2424, 32
        CHECK   x25, 0x2525, 64
        CHECK   x26, 0x2626, 128
        CHECK   x27, 0x2727, 256
        CHECK   x28, 0x2828, 512
        CHECKD  d8, 0x0808
        CHECKD  d9, 0x0909
        CHECKD  d10, 0x1010
        CHECKD  d11, 0x1111
        CHECKD  d12, 0x1212
        CHECKD  d13, 0x1313
        CHECKD  d14, 0x1414
        CHECKD  d15, 0x1515
        ldr     x9, [sp, #160]
        cmp     x0, x9
        b.eq    1f
        orr     x10, x10, #2048
1:      mov     x11, sp
        cmp     x11, x9
        b.eq    1f
        orr     x10, x10, #4096
1:      mov     x0, x10
        ldp     d14, d15, [sp, #144]
        ldp     d12, d13, [sp, #128]
        ldp     d10, d11, [sp, #112]
        ldp     d8, d9, [sp, #96]
        ldp     x27, x28, [sp, #80]
        ldp     x25, x26, [sp, #64]
        ldp     x23, x24, [sp, #48]
        ldp     x21, x22, [sp, #32]
        ldp     x19, x20, [sp, #16]
        ldp     x29, x30, [sp], #176
        ret
        .size   regcheck_call, .-regcheck_call
        .section .note.GNU-stack, "", %progbits
