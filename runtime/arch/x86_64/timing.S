/*
 * timing.S: the timing path of SHIMGEN_TRACE=time and SHIMGEN_TRACE=timeline, in x86-64
 * assembly with its call-frame information: per function, a stub that puts its index in
 * r11; the common entry that keeps the caller's return address on the thread's shadow
 * stack and calls the target; the return path that counts and times the call, keeps its
 * latency histograms (fine, or log2 for a call the fine one has no slot for) and error
 * returns (and, for the timeline, records an event); and the tables of these stubs. The C paths it takes on a thread's first call are
 * in stats.c.
 */

#include "facts.h"
#include "shim.h"
#include "arch/layout.h"
#include "asm.h"
#include "timing_out.h"

        .hidden shimgen_targets
        .hidden shimgen_result_fns
        .hidden shimgen_time_nursery_free

/*
 * Timing entry (r11 = i). The caller's return address goes into a free shadow frame of
 * the calling thread with the start time, and the real function is called in its place, so
 * it returns into shimgen_time_return. The fast path is all here. It changes only r10, r11
 * (no argument register) and rbx, which holds the frame across the call: the callee
 * preserves rbx (it is callee-saved), and the caller's rbx is kept in the frame and put
 * back before the return. rax and rdx are parked around rdtsc where they may carry
 * something: the macro is assembled once per kind of function (timedfns.inc, from its
 * declaration in the headers, shimgen/calls/model.py timing_kind): 0 (none known) keeps
 * rax and rdx at the entry and rdx at the return; 1 (a CUresult, no varargs: rax carries
 * no argument, and the result is eax alone) rdx at the entry only; 2 (the same with at most
 * two integer arguments: rdx carries none) nothing. Arguments in registers and on the
 * stack therefore reach the target untouched. The block is
 * shimgen_tls_time's (tls.c), never NULL: a thread without one yet (its first timed call)
 * has the nursery, which has no free frame, and the path without a frame sends it to the
 * C path, which gets the block.
 *
 * A call's frame is the one in rbx, never a position: the frames are not a stack but a
 * list of free frames, taken from and given back to its head. Calls may therefore end in
 * any order: stack-switching coroutines suspended inside driver calls (each coroutine's
 * rbx is saved and restored with its stack) return each to its own caller. Signal
 * handlers are safe: the head is read, then the frame taken (head = its next, with
 * push/pop of memory, one instruction each) before it is written; a handler that runs in
 * between takes and gives back frames in nested order, which leaves the list exactly as
 * it found it. The return reads the whole frame before giving it back (its next first,
 * then the head).
 *
 * Offsets into struct tstats and the shadow frames are layout.h's (block.h checks them
 * against the structs with _Static_assert).
 *
 * A timed call is counted on its return, with its total and maximum (one cache line,
 * no update at entry); a call that never returns (exit or pthread_exit inside it, or a
 * longjmp or exception out of it) is counted from its frame when its thread exits or at
 * process exit (stats.c). A call that cannot be timed is counted at entry.
 *
 * The same code is assembled twice from one macro: `time` (SHIMGEN_TRACE=time) and
 * `timeline` (SHIMGEN_TRACE=timeline), which also records each call in the thread's ring of events
 * (16 bytes each: start ticks, elapsed ticks << 16 | i), so that the time path carries no
 * test for the timeline.
 */

/* eax against the fine key: in edi (the timeline) or esi (time). */
.macro fine_key_cmp timeline
.if \timeline
        cmp     %edi, %eax
.else
        cmp     %esi, %eax
.endif
.endm

.macro timed name, timeline, kind
        .balign 16
        .type   shimgen_\name\()_enter, @function
shimgen_\name\()_enter:
        .cfi_startproc
        movq    shimgen_tls_time@gottpoff(%rip), %r10
        movq    %fs:(%r10), %r10                    /* the block, or the nursery */
        push    %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_offset rbx, -16
        mov     TS_FREE(%r10), %rbx                 /* a free frame */
        test    %rbx, %rbx
        jz      .L\name\()_untimed
        pushq   FRAME_NEXT(%rbx)                    /* take it (head = its next), */
        .cfi_adjust_cfa_offset 8
        popq    TS_FREE(%r10)                       /* then write it */
        .cfi_adjust_cfa_offset -8
        popq    FRAME_RBX(%rbx)                     /* the caller's rbx */
        .cfi_adjust_cfa_offset -8
        CFI_SAVED_AT_RBX(0x03, FRAME_RBX)           /* the caller's rbx is in the frame */
        popq    FRAME_RET(%rbx)                     /* the caller's return address */
        CFI_SAVED_AT_RBX(0x10, FRAME_RET)           /* and its return address */
        /* This frame now uses no stack: the caller's stack pointer is ours, and so is the
         * CFA of the function called below. Unwinders tell frames apart by CFA (libgcc
         * aborts an exception whose handler frame seems to recur), so the CFA is stated
         * as rsp + 1 and the caller's rsp is given by its own rule: rsp = our rsp. */
        .cfi_def_cfa_offset 1
        CFI_CALLER_RSP_IS_RSP
        /* rax and rdx are parked around rdtsc where they may carry an argument (kind 0:
         * both; 1, no varargs: rdx; 2, at most two integer arguments: neither): rax in
         * r10, rdx below the stack pointer (the caller's return address was there; a
         * signal handler leaves that area alone) or, with rax not kept, in r10; r11 keeps
         * the index. The start ticks are written before the index: the index word held a
         * free frame's link until now, and a reader of the trace file that sees an index
         * there sees this call's start (docs/traceformat.md). */
.if \kind == 0
        mov     %rax, %r10
        mov     %rdx, -8(%rsp)
.elseif \kind == 1
        mov     %rdx, %r10
.endif
        rdtsc
        mov     %eax, FRAME_START(%rbx)             /* start ticks, low and high half */
        mov     %edx, FRAME_START+4(%rbx)
.if \kind == 0
        mov     %r10, %rax
        mov     -8(%rsp), %rdx
.elseif \kind == 1
        mov     %r10, %rdx                          /* (the block is not needed here) */
.endif
        mov     %r11, FRAME_IDX(%rbx)               /* the frame is in use from here */
        /* The caller's return address is off the stack (it is in the frame): call the
         * target, so that the callee sees the same stack, and its return is predicted,
         * because this call pushed the return-stack-buffer entry that its ret consumes. */
        lea     shimgen_targets(%rip), %r10
        call    *(%r10,%r11,8)
/*
 * shimgen_time_return, shimgen_timeline_return: the timed function returns here (right
 * after the call above, or, on the slow path, through the swapped return address), with
 * rbx = its frame (whatever calls of this thread ended in between, in whatever order) and
 * the stack pointer one slot above where the caller's return address was. Only rax and rdx (and xmm0/xmm1, which this code does not touch) carry return
 * values; every other caller-saved register is free now. Read the frame, give it back, count the call, add
 * the elapsed ticks to this thread's total and maximum, count it in the fine histogram (the
 * bucket's slot found by a short probe from the key's own) or, with no slot there, in the
 * log2 histogram (out of line, timing_out.h), count a non-zero
 * eax of a CUresult function as an error (out of line), and return to the original
 * return address with push+ret: the caller's own call left the matching
 * return-stack-buffer entry, so this return is predicted too.
 */
        .globl  shimgen_\name\()_return
        .hidden shimgen_\name\()_return
shimgen_\name\()_return:
        mov     %rax, %r8
.if \kind == 0
        mov     %rdx, %r9                           /* (a CUresult is eax alone) */
.endif
        rdtsc
        shl     $32, %rdx
        or      %rdx, %rax                          /* end ticks */
        mov     %rbx, %rsi                          /* the frame */
.if \timeline
        mov     FRAME_START(%rsi), %rcx             /* start ticks */
        sub     %rcx, %rax                          /* elapsed ticks */
.else
        sub     FRAME_START(%rsi), %rax             /* elapsed ticks */
.endif
        mov     FRAME_IDX(%rsi), %rdi               /* i */
        shl     $TS_IDX_SHIFT, %rdi                 /* i * 8 (layout.h) */
        mov     FRAME_RET(%rsi), %r11               /* the caller's return address */
        .cfi_register rip, r11
        mov     FRAME_RBX(%rsi), %rbx               /* the caller's rbx */
        .cfi_restore rbx
        movq    shimgen_tls_stats@gottpoff(%rip), %r10
        movq    %fs:(%r10), %r10
        mov     TS_FREE(%r10), %rdx                 /* frame read: give it back */
        mov     %rdx, FRAME_NEXT(%rsi)
        mov     %rsi, TS_FREE(%r10)
.if \timeline
        mov     %rcx, %rsi                          /* start ticks, kept for the event */
.endif
        incq    TS_COUNT(%r10,%rdi,TS_FSTATS_SCALE)
        add     %rax, TS_TOTAL(%r10,%rdi,TS_FSTATS_SCALE)
        cmp     TS_MAX(%r10,%rdi,TS_FSTATS_SCALE), %rax
        jbe     1f
        mov     %rax, TS_MAX(%r10,%rdi,TS_FSTATS_SCALE)
1:
        /* The fine histogram (layout.h): bucket f of the elapsed ticks v (v below 64: v;
         * else v >> (e - 6), from 64 to 127, plus (e - 6) << 6, e = bsr(v)), made in eax
         * (v is not needed after it), its key (i + 1) * TS_FINE_STEP + f, counted in the
         * slot that holds the key, or claimed (cmpxchg) in the first free one, from the
         * key's own slot (the key modulo TS_FINE_SLOTS), at most TS_FINE_PROBES slots on;
         * none: the call is counted in its log2 bucket, hist[i][e], instead (out of line).
         * The key is i * 8 (rdi) times TS_FINE_STEP / 8, plus a step and f, built in esi
         * (time: free now) or edi (timeline: rsi holds the start ticks, so rdi, and rax for
         * the event, are kept below the stack pointer meanwhile: the caller's own call gave
         * up that area, and a signal handler leaves its 128 bytes alone); the slot is in
         * edx. */
.if \timeline
        mov     %rax, -8(%rsp)
        mov     %rdi, -16(%rsp)
.endif
        cmp     $(1 << TS_FINE_SUB_SHIFT), %rax
        jb      6f                                  /* f = v below 64 */
        bsr     %rax, %rcx                          /* e */
        sub     $TS_FINE_SUB_SHIFT, %ecx            /* e - 6 */
        shr     %cl, %rax                           /* v >> (e - 6), from 64 to 127 */
        shl     $TS_FINE_SUB_SHIFT, %ecx
        add     %ecx, %eax                          /* f */
6:
        imul    $(TS_FINE_STEP >> TS_IDX_SHIFT), %rdi, %rdx     /* i * TS_FINE_STEP */
.if \timeline
        lea     TS_FINE_STEP(%rdx,%rax), %edi       /* the key */
        mov     %edi, %edx
.else
        lea     TS_FINE_STEP(%rdx,%rax), %esi
        mov     %esi, %edx
.endif
        and     $(TS_FINE_SLOTS - 1), %edx
        mov     TS_FINE(%r10,%rdx,8), %eax
        fine_key_cmp \timeline
        je      9f                                  /* ours: the usual case */
        mov     $TS_FINE_PROBES, %ecx               /* slots left to look at */
7:
        test    %eax, %eax
        jnz     8f                                  /* another key's */
.if \timeline
        cmpxchg %edi, TS_FINE(%r10,%rdx,8)          /* free: claim it (eax = 0) */
.else
        cmpxchg %esi, TS_FINE(%r10,%rdx,8)
.endif
        je      9f
        fine_key_cmp \timeline                     /* a handler claimed it first: for us? */
        je      9f
8:
        dec     %ecx
        jz      .L\name\()_nofine                  /* none: the log2 bucket counts the call */
        inc     %edx
        and     $(TS_FINE_SLOTS - 1), %edx
        mov     TS_FINE(%r10,%rdx,8), %eax
        fine_key_cmp \timeline
        jne     7b
9:
        incl    TS_FINE+4(%r10,%rdx,8)
10:
.if \timeline
        mov     -8(%rsp), %rax
        mov     -16(%rsp), %rdi
.endif
.if \timeline
        /* One event in the ring. xadd reserves the slot in one instruction, so a signal
         * handler's timed call records into the next one. */
        mov     $1, %edx
        xadd    %rdx, TS_EV_HEAD(%r10)
        and     TS_EV_MASK(%r10), %rdx
        shl     $TL_EVENT_SHIFT, %rdx
        add     TS_EV(%r10), %rdx
        mov     %rsi, 0(%rdx)                       /* start ticks */
        shl     $TL_INDEX_BITS, %rax
        shr     $TS_IDX_SHIFT, %rdi
        or      %rdi, %rax
        mov     %rax, 8(%rdx)                       /* elapsed << 16 | i */
.endif
        /* A non-zero eax may be an error: the out-of-line path (timing_out.h) counts it when the
         * function returns a CUresult. The success path pays this test and branch only. */
        test    %r8d, %r8d
        .cfi_remember_state
        jnz     .L\name\()_error
2:
        mov     %r8, %rax
.if \kind == 0
        mov     %r9, %rdx
.endif
        push    %r11
        .cfi_def_cfa_offset 8
        .cfi_restore rsp
        .cfi_offset rip, -8
        ret
.L\name\()_untimed:                               /* no free frame: count only */
        .cfi_adjust_cfa_offset 8                    /* as after the push of rbx above */
        .cfi_offset rbx, -16
        lea     (shimgen_time_nursery_free - TS_FREE)(%rip), %rbx
        cmp     %rbx, %r10
        je      .L\name\()_first                  /* the nursery: no block yet */
        mov     %r11, %rbx
        shl     $TS_FSTATS_SHIFT, %rbx
        incq    TS_COUNT(%r10,%rbx)
        pop     %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
        incq    TS_UNTIMED(%r10)
        lea     shimgen_targets(%rip), %r10
        jmp     *(%r10,%r11,8)
.L\name\()_first:                                 /* the nursery: the C path */
        .cfi_adjust_cfa_offset 8                    /* as after the push of rbx above */
        .cfi_offset rbx, -16
        pop     %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
.L\name\()_slow:
        save_argument_registers
        mov     %r11d, %edi
        lea     8(%rbp), %rsi                       /* where the caller's return address is */
        mov     %rbx, %rdx                          /* the caller's rbx, kept in the frame */
        lea     shimgen_\name\()_return(%rip), %rcx
        /* rax = target, rdx = frame (NULL: untimed) */
        call    shimgen_time_push
        mov     %rax, %r11
        test    %rdx, %rdx
        cmovnz  %rdx, %rbx                          /* timed: rbx = frame, as fast */
        restore_argument_registers
        jmp     *%r11
        timed_out \name, \timeline, \kind           /* timing_out.h */
        .cfi_endproc
        .size   shimgen_\name\()_enter, .-shimgen_\name\()_enter
.endm

/* A function's timing stub: the entry of its kind (timedfns.inc, from its declaration):
 * 0 shimgen_<name>_enter, 1 shimgen_<name>_cu_enter, 2 shimgen_<name>_cu2_enter. */
.macro timed_stub name, i, kind
        .balign 16
.L\name\()_\i:
        ENDBR
        mov     $\i, %r11d
.if \kind == 2
        jmp     shimgen_\name\()_cu2_enter
.elseif \kind == 1
        jmp     shimgen_\name\()_cu_enter
.else
        jmp     shimgen_\name\()_enter
.endif
.endm

        .text
/* time stubs: r11 = i, then the common entry of their kind */
#define SHIMGEN_TIMED(i, kind) timed_stub time, i, kind
#include "timedfns.inc"
#undef SHIMGEN_TIMED
        timed time, 0, 0
        timed time_cu, 0, 1
        timed time_cu2, 0, 2

/* timeline stubs: r11 = i, then the common entry of their kind */
#define SHIMGEN_TIMED(i, kind) timed_stub timeline, i, kind
#include "timedfns.inc"
#undef SHIMGEN_TIMED
        timed timeline, 1, 0
        timed timeline_cu, 1, 1
        timed timeline_cu2, 1, 2

/* ---- tables: one entry per function, the address of its timing stub ---- */
#include "arch/timetables.h"

/* Where timed calls return first, every entry's (first.c), then 0. */
        .globl  shimgen_timed_returns
        .hidden shimgen_timed_returns
        .balign 8
shimgen_timed_returns:
        .quad   shimgen_time_return, shimgen_time_cu_return, shimgen_time_cu2_return
        .quad   shimgen_timeline_return, shimgen_timeline_cu_return
        .quad   shimgen_timeline_cu2_return, 0

        .section .note.GNU-stack, "", @progbits
