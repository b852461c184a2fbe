/*
 * calls.S: the entry path of SHIMGEN_TRACE=calls (x86-64): per function, a stub that puts
 * its index in r11; the common entry that writes the call's record into the thread's ring
 * (its place reserved with one xadd; the function, the entry ticks, the six argument
 * registers and, for a function of more than six arguments, five stack words; the strings
 * and structs of the capture table through calls.c), keeps the caller's return address in a
 * shadow frame as the timing path does (timing.S, whose frame rules this follows) and calls
 * the target; the return path that writes the duration and the result into the record (and
 * the outputs of a successful call, through calls.c), counts and times the call and counts
 * an error return in the block's error slots. No formatting: the record is raw words.
 *
 * A record is written as: seq = 0, its words, seq = place + 1 (calls.h); a function with
 * captures at entry is published so (its unread word all ones: calls.h REC_UNREAD) before
 * they are read, so that a process that dies while they are read keeps the call as
 * entered, and its start taken again after them. A returned record gets its state last,
 * after its outputs. A call's frame
 * keeps its place (FRAME_START) instead of its start ticks, which are in the record; the
 * return finds the record from the place and writes it only when its seq is still the
 * place's (a ring that wrapped during the call has given the slot to a later call).
 */

#include "facts.h"
#include "shim.h"
#include "arch/layout.h"
#include "asm.h"

/* The argument registers (and rax, the caller's) back from the record at rdi, whose words
 * the entry saved them in; r10 = shimgen_targets, for the call or jump through slot r11. */
.macro args_from_record
        mov     REC_RESULT(%rdi), %rax
        mov     REC_ARGS+8(%rdi), %rsi
        mov     REC_ARGS+16(%rdi), %rdx
        mov     REC_ARGS+24(%rdi), %rcx
        mov     REC_ARGS+32(%rdi), %r8
        mov     REC_ARGS+40(%rdi), %r9
        mov     REC_ARGS+0(%rdi), %rdi
        lea     shimgen_targets(%rip), %r10
.endm

        .hidden shimgen_targets
        .hidden shimgen_result_fns
        .hidden shimgen_calls_info
        .hidden shimgen_calls_first_call
        .hidden shimgen_calls_capture_entry
        .hidden shimgen_calls_capture_exit
        .hidden shimgen_calls_grow

        .text
        .balign 16
        .type   shimgen_calls_enter, @function
shimgen_calls_enter:
        .cfi_startproc
        movq    shimgen_tls_stats@gottpoff(%rip), %r10
        movq    %fs:(%r10), %r10
        testq   %r10, %r10
        jz      .Lcalls_slow
        /* rax and rdx below the stack pointer (the red zone, which a signal handler leaves
         * alone) until the record has them */
        mov     %rax, -8(%rsp)
        mov     %rdx, -16(%rsp)
        mov     $1, %eax
        xadd    %rax, TS_EV_HEAD(%r10)              /* the place */
        mov     TS_EV(%r10), %rdx
        cmp     RING_ROOM(%rdx), %rax
        jae     .Lcalls_grow                        /* no disk space for it yet */
14:
        mov     %rax, %rdx
        and     TS_EV_MASK(%r10), %rdx
        shl     $REC_SHIFT, %rdx
        add     TS_EV(%r10), %rdx                   /* the record */
        movq    $0, REC_SEQ(%rdx)
        mov     %rax, REC_DUR(%rdx)                 /* the place, until the return */
        mov     -8(%rsp), %rax
        mov     %rax, REC_RESULT(%rdx)              /* the caller's rax, until the return */
        mov     -16(%rsp), %rax
        mov     %rax, REC_ARGS+16(%rdx)
        mov     %r11w, REC_IDX(%rdx)
        movw    $REC_ENTERED, REC_STATE(%rdx)
        mov     %rdi, REC_ARGS+0(%rdx)
        mov     %rsi, REC_ARGS+8(%rdx)
        mov     %rcx, REC_ARGS+24(%rdx)
        mov     %r8, REC_ARGS+32(%rdx)
        mov     %r9, REC_ARGS+40(%rdx)
        /* every argument register is in the record: rax, rcx, rsi, rdi, r8, r9 are free
         * until they are loaded back from it */
        mov     TS_TID(%r10), %eax
        mov     %eax, REC_TID(%rdx)
        lea     shimgen_calls_info(%rip), %rax
        movzwl  (%rax,%r11,2), %eax
        test    $CALLS_INFO_STACK, %al
        jz      1f
        mov     8(%rsp), %rcx                       /* the stack arguments */
        mov     %rcx, REC_ARGS+48(%rdx)
        mov     16(%rsp), %rcx
        mov     %rcx, REC_ARGS+56(%rdx)
        mov     24(%rsp), %rcx
        mov     %rcx, REC_ARGS+64(%rdx)
        mov     32(%rsp), %rcx
        mov     %rcx, REC_ARGS+72(%rdx)
        mov     40(%rsp), %rcx
        mov     %rcx, REC_ARGS+80(%rdx)
1:
        test    $CALLS_INFO_ENTRY, %al
        jnz     .Lcalls_capture_entry
2:
        push    %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_offset rbx, -16
        mov     TS_FREE(%r10), %rbx                 /* a free frame */
        test    %rbx, %rbx
        jz      .Lcalls_untimed
        pushq   FRAME_NEXT(%rbx)                    /* take it (head = its next), */
        .cfi_adjust_cfa_offset 8
        popq    TS_FREE(%r10)                       /* then write it */
        .cfi_adjust_cfa_offset -8
        popq    FRAME_RBX(%rbx)                     /* the caller's rbx */
        .cfi_adjust_cfa_offset -8
        CFI_SAVED_AT_RBX(0x03, FRAME_RBX)
        popq    FRAME_RET(%rbx)                     /* the caller's return address */
        CFI_SAVED_AT_RBX(0x10, FRAME_RET)
        .cfi_def_cfa_offset 1
        CFI_CALLER_RSP_IS_RSP
        mov     %rdx, %rdi                          /* the record */
        movzwl  REC_IDX(%rdi), %r11d
        mov     REC_DUR(%rdi), %rax
        mov     %rax, FRAME_START(%rbx)             /* the place, */
        mov     %r11, FRAME_IDX(%rbx)               /* then i: in use from here (timing.S) */
        rdtsc
        mov     %eax, REC_START(%rdi)
        mov     %edx, REC_START+4(%rdi)
        mov     FRAME_START(%rbx), %rax
        inc     %rax
        mov     %rax, REC_SEQ(%rdi)                 /* the record is whole */
        args_from_record
        call    *(%r10,%r11,8)
/*
 * shimgen_calls_return: the function returns here with rbx = its frame (as timing.S's
 * return). The record gets the elapsed ticks, the result and its state; a successful
 * call's outputs are read by calls.c; then the call is counted, timed and its error
 * counted as on the time path, and the caller's return address is pushed and returned to.
 */
        .globl  shimgen_calls_return
        .hidden shimgen_calls_return
shimgen_calls_return:
        mov     %rax, %r8
        mov     %rdx, %r9
        rdtsc
        shl     $32, %rdx
        or      %rdx, %rax                          /* end ticks */
        movq    shimgen_tls_stats@gottpoff(%rip), %r10
        movq    %fs:(%r10), %r10
        mov     FRAME_START(%rbx), %rcx             /* the place */
        mov     %rcx, %rdx
        and     TS_EV_MASK(%r10), %rdx
        shl     $REC_SHIFT, %rdx
        add     TS_EV(%r10), %rdx                   /* the record */
        inc     %rcx
        cmp     REC_SEQ(%rdx), %rcx
        jne     3f                                  /* taken by a later call: not ours */
        sub     REC_START(%rdx), %rax               /* elapsed ticks */
        mov     %rax, REC_DUR(%rdx)
        mov     %r8, REC_RESULT(%rdx)
        mov     FRAME_IDX(%rbx), %rcx
        lea     shimgen_calls_info(%rip), %rsi
        movzwl  (%rsi,%rcx,2), %esi
        test    $(CALLS_INFO_EXIT | CALLS_INFO_WORD), %esi
        jz      13f
        test    %r8d, %r8d
        jnz     13f
        test    $CALLS_INFO_WORD, %esi
        jz      12f
        /* the one output word, here: its pointer is argument word info >> 8. Read as it
         * is: the driver has just written it (a successful return), so it is readable */
        movq    $0, REC_UNREAD(%rdx)
        mov     %esi, %edi
        shr     $CALLS_INFO_SLOT_SHIFT, %edi
        mov     REC_ARGS(%rdx,%rdi,8), %rdi
        test    %rdi, %rdi
        jz      13f
        test    $CALLS_INFO_WORD8, %esi
        jz      11f
        mov     (%rdi), %rcx
        mov     %rcx, SHIMGEN_CALLS_CAPTURE_OFF(%rdx)
        jmp     13f
11:
        mov     (%rdi), %ecx
        mov     %ecx, SHIMGEN_CALLS_CAPTURE_OFF(%rdx)
        jmp     13f
12:
        /* outputs of a successful call: through C, which writes the state after them, with
         * what is needed kept on the stack (16-byte aligned: the caller's own stack pointer
         * before its call, plus 32) */
        push    %r8
        push    %r9
        push    %rax
        push    %r10
        mov     %rdx, %rdi
        call    shimgen_calls_capture_exit
        pop     %r10
        pop     %rax
        pop     %r9
        pop     %r8
        jmp     4f
3:
        xor     %eax, %eax                          /* no record: the time is not known */
        jmp     4f
13:
        movw    $REC_RETURNED, REC_STATE(%rdx)      /* after its outputs */
4:
        mov     %rbx, %rsi                          /* the frame */
        mov     FRAME_IDX(%rsi), %rdi               /* i */
        shl     $TS_FSTATS_SHIFT, %rdi              /* i * sizeof fn[i] */
        mov     FRAME_RET(%rsi), %r11               /* the caller's return address */
        .cfi_register rip, r11
        mov     FRAME_RBX(%rsi), %rbx               /* the caller's rbx */
        .cfi_restore rbx
        mov     TS_FREE(%r10), %rdx                 /* frame read: give it back */
        mov     %rdx, FRAME_NEXT(%rsi)
        mov     %rsi, TS_FREE(%r10)
        incq    TS_COUNT(%r10,%rdi)
        add     %rax, TS_TOTAL(%r10,%rdi)
        cmp     TS_MAX(%r10,%rdi), %rax
        jbe     5f
        mov     %rax, TS_MAX(%r10,%rdi)
5:
        mov     %rax, %rdx                          /* hist[i][bsr(elapsed | 1)]++ */
        or      $1, %rdx
        bsr     %rdx, %rdx
        lea     (%rdx,%rdi,TS_HIST_SCALE), %rdx
        incq    TS_HIST(%r10,%rdx,8)
        test    %r8d, %r8d
        .cfi_remember_state
        jnz     .Lcalls_error
6:
        mov     %r8, %rax
        mov     %r9, %rdx
        push    %r11
        .cfi_def_cfa_offset 8
        .cfi_restore rsp
        .cfi_offset rip, -8
        ret
.Lcalls_untimed:                                    /* no free frame: count only */
        .cfi_adjust_cfa_offset 8
        .cfi_offset rbx, -16
        pop     %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
        mov     %rdx, %rdi
        movzwl  REC_IDX(%rdi), %r11d
        mov     %r11, %rax
        shl     $TS_FSTATS_SHIFT, %rax
        incq    TS_COUNT(%r10,%rax)
        incq    TS_UNTIMED(%r10)
        mov     REC_DUR(%rdi), %rax
        inc     %rax
        mov     %rax, REC_SEQ(%rdi)                 /* entered; its end is not recorded */
        args_from_record
        jmp     *(%r10,%r11,8)
.Lcalls_capture_entry:                              /* strings and structs, through C */
        save_argument_registers                     /* rdx (the record) and r10 kept */
        mov     %rdx, %rdi
        movq    $-1, REC_UNREAD(%rdi)               /* its captures: not read yet */
        rdtsc
        mov     %eax, REC_START(%rdi)
        mov     %edx, REC_START+4(%rdi)
        mov     REC_DUR(%rdi), %rax
        inc     %rax
        mov     %rax, REC_SEQ(%rdi)                 /* entered, before any capture */
        call    shimgen_calls_capture_entry
        restore_argument_registers
        jmp     2b
.Lcalls_grow:                                       /* the ring's file grows first (calls.c) */
        lea     -128(%rsp), %rsp                    /* past the red zone, which holds rax, rdx */
        .cfi_adjust_cfa_offset 128
        mov     %r11, %rdx                          /* i, kept (rdx is in the red zone) */
        save_argument_registers 128
        mov     %r10, %rdi
        mov     %rax, %rsi
        call    shimgen_calls_grow
        restore_argument_registers 128              /* rax: the place again, r10 the block */
        mov     %rdx, %r11
        lea     128(%rsp), %rsp
        .cfi_adjust_cfa_offset -128
        jmp     14b
.Lcalls_slow:                                       /* the thread's first call: its block */
        mov     %r11, %r10
        save_argument_registers
        mov     %r10d, %edi
        call    shimgen_calls_first_call
        mov     %rax, %r11
        restore_argument_registers
        test    %r11, %r11
        jnz     7f
        mov     %r10, %r11
        jmp     shimgen_calls_enter                 /* it has one now */
7:
        jmp     *%r11                               /* none: forwarded, counted in C */
/* An error return: as timing.S's (its comment says why each write is one instruction). */
.Lcalls_error:
        .cfi_restore_state
        shr     $TS_FSTATS_SHIFT, %rdi
        lea     shimgen_result_fns(%rip), %rcx
        cmpb    $0, (%rcx,%rdi)
        je      6b
        lea     1(%rdi), %rsi
        shl     $32, %rsi
        mov     %r8d, %ecx
        or      %rcx, %rsi                          /* the key */
        imul    $TS_ERR_HASH, %rsi, %rdx
        shr     $(64 - TS_ERR_SLOTS_SHIFT), %rdx
        mov     $TS_ERR_SLOTS, %ecx
8:
        lea     (%rdx,%rdx), %rdi
        mov     TS_ERR(%r10,%rdi,8), %rax
        cmp     %rsi, %rax
        je      10f
        test    %rax, %rax
        jnz     9f
        cmpxchg %rsi, TS_ERR(%r10,%rdi,8)
        je      10f
        cmp     %rsi, %rax
        je      10f
9:
        inc     %edx
        and     $(TS_ERR_SLOTS - 1), %edx
        dec     %ecx
        jnz     8b
        incq    TS_ERR_OVERFLOW(%r10)
        jmp     6b
10:
        incq    TS_ERR+8(%r10,%rdi,8)
        jmp     6b
        .cfi_endproc
        .size   shimgen_calls_enter, .-shimgen_calls_enter

.macro calls_stub i
        .balign 16
.Lcalls_\i:
        ENDBR
        mov     $\i, %r11d
        jmp     shimgen_calls_enter
.endm

#define SHIMGEN_FUNCTION(i, name) calls_stub i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        .section .data.rel.ro, "aw"
        .balign 8
        .globl  shimgen_calls_stubs
        .hidden shimgen_calls_stubs
shimgen_calls_stubs:
#define SHIMGEN_FUNCTION(i, name) .quad .Lcalls_##i
#include "functions.inc"
#undef SHIMGEN_FUNCTION

        .section .note.GNU-stack, "", @progbits
