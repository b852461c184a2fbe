/*
 * timing_out.h: the out-of-line parts of timing.S's return path, one assembler macro that
 * the macro `timed` expands after its slow path, with its labels: the error count of a
 * non-zero eax (.L<name>_error, back to its 2:) and the log2 bucket of a call the fine table
 * has no slot for (.L<name>_nofine, back to its 10:). Both run inside the entry's CFI
 * (.cfi_restore_state: the return path's, as remembered before its error test).
 */
#ifndef SHIMGEN_TIMING_OUT_H
#define SHIMGEN_TIMING_OUT_H

.macro timed_out name, timeline, kind
/*
 * An error return: count (function, code) in the thread's err[], open addressing on the
 * key (i + 1) << 32 | code from a multiplicative hash, a free slot (key 0) claimed with
 * cmpxchg; every slot taken: err_overflow. All in registers that carry nothing now (rax,
 * rcx, rdx, rsi, rdi), with no stack and no call, so the frame's CFI is the one above and
 * no return value (rax:rdx in r8:r9, xmm0/xmm1 untouched) can be lost. Each write is one
 * instruction: a signal handler's timed call on this thread, between any two of them, either
 * claims another slot (our cmpxchg then fails and the probe goes on, or finds our key) or
 * counts in a slot as a whole. A function that does not return a CUresult (its byte in
 * shimgen_result_fns is 0, from shimgen/cuda.py) is never counted: its eax is not a code.
 * The entries of kinds 1 and 2 serve CUresult functions only (each of them has a 1 there),
 * so they count without looking.
 */
.L\name\()_error:
        .cfi_restore_state
.if \kind == 0
.if !\timeline
        shr     $TS_IDX_SHIFT, %rdi                 /* i (the timeline did this above) */
.endif
        lea     shimgen_result_fns(%rip), %rcx
        cmpb    $0, (%rcx,%rdi)
        je      2b
        lea     1(%rdi), %rsi
        shl     $32, %rsi
.elseif \timeline
        lea     1(%rdi), %rsi                       /* i + 1 (the timeline made rdi i above) */
        shl     $32, %rsi
.else
        lea     (1 << TS_IDX_SHIFT)(%rdi), %rsi     /* (i + 1) * 8 */
        shl     $(32 - TS_IDX_SHIFT), %rsi
.endif
        mov     %r8d, %ecx
        or      %rcx, %rsi                          /* the key */
        imul    $TS_ERR_HASH, %rsi, %rdx
        shr     $(64 - TS_ERR_SLOTS_SHIFT), %rdx    /* the first slot to look at */
        mov     $TS_ERR_SLOTS, %ecx                 /* slots left to look at */
3:
        lea     (%rdx,%rdx), %rdi                   /* slot * 16 = rdi * 8 */
        mov     TS_ERR(%r10,%rdi,8), %rax
        cmp     %rsi, %rax
        je      5f                                  /* ours */
        test    %rax, %rax
        jnz     4f                                  /* another key's */
        cmpxchg %rsi, TS_ERR(%r10,%rdi,8)           /* free: claim it (rax = 0) */
        je      5f
        cmp     %rsi, %rax                          /* a handler claimed it first: for us? */
        je      5f
4:
        inc     %edx
        and     $(TS_ERR_SLOTS - 1), %edx
        dec     %ecx
        jnz     3b
        incq    TS_ERR_OVERFLOW(%r10)               /* every slot is another key's */
        jmp     2b
5:
        incq    TS_ERR+8(%r10,%rdi,8)
        jmp     2b
/* A call the fine table had no slot for: counted in its log2 bucket, hist[i][e], e the
 * octave of its fine bucket f (the key less i's base): bsr(f | 1) below 64, else
 * (f >> 6) + 5. Then back to the path above, at the event (timeline) and the error test. The
 * frame's CFI is the one above, as on the error path. */
.L\name\()_nofine:
.if \timeline
        mov     -16(%rsp), %rcx                     /* i * 8 */
        mov     %edi, %eax                          /* the key */
.else
        mov     %rdi, %rcx
        mov     %esi, %eax
.endif
        imul    $(TS_FINE_STEP >> TS_IDX_SHIFT), %rcx, %rdx
        sub     %edx, %eax
        sub     $TS_FINE_STEP, %eax                 /* f */
        cmp     $(1 << TS_FINE_SUB_SHIFT), %eax
        jb      11f
        shr     $TS_FINE_SUB_SHIFT, %eax
        add     $(TS_FINE_SUB_SHIFT - 1), %eax      /* e */
        jmp     12f
11:
        or      $1, %eax
        bsr     %eax, %eax                          /* e */
12:
        lea     (%rax,%rcx,TS_HIST_IDX_SCALE), %rdx /* i * TS_HIST_BUCKETS + e */
        incq    TS_HIST(%r10,%rdx,8)
        jmp     10b
.endm

#endif
