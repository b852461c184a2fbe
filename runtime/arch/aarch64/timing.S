/*
 * arch/aarch64/timing.S: the timing path of SHIMGEN_TRACE=time and SHIMGEN_TRACE=timeline in
 * AArch64 assembly with its call-frame information, the counterpart of timing.S (read that
 * file first: the same frames, counters, histograms, error returns and events, at the same
 * offsets of layout.h). Per function, a stub that puts its index in w17; the common entry
 * that keeps the caller's return address (x30) in a free shadow frame and calls the target;
 * the return path that counts and times the call; and the tables of these stubs. Ticks are
 * the virtual counter cntvct_el0, read after an isb, as block.h's shimgen_ticks reads it.
 * The C path of a thread's first timed call is stats.c's shimgen_time_push.
 *
 * x19 (callee-saved) holds the call's frame across the call, as rbx does on x86-64; the
 * caller's x19 is kept in the frame's FRAME_RBX word and put back before the return. The
 * entry changes only x9, x10, x16, x17 (temporaries and the intra-procedure-call registers,
 * never an argument register), x19 and x30, and no stack: arguments in x0-x8, q0-q7 and
 * on the stack reach the target untouched. The return path uses only what a return leaves
 * free (x8-x17; x0-x7 and q0-q7 may carry the results) and no stack (AArch64 Linux has no
 * red zone below sp).
 *
 * A signal handler may run between any two instructions and time its own calls on this
 * thread. The frame list is changed as in timing.S (head read, its next read, head written,
 * then the frame written; given back with its next written before the head), which a
 * handler's nested takes and gives leave as it found them. Every counter is incremented
 * with a load-exclusive/store-exclusive pair (an exception return clears the exclusive
 * monitor, so an update that a handler's call came between is done again, never lost), and
 * a free histogram or error slot is claimed the same way. Only the maximum is a plain
 * compare and store, as on x86-64.
 */

#include "facts.h"
#include "shim.h"
#include "arch/layout.h"
#include "asm.h"

        .hidden shimgen_targets
        .hidden shimgen_result_fns

.if TS_COUNT != 0 || TS_TOTAL != 8 || FRAME_RET != 0 || FRAME_START != 8 || FRAME_IDX != 16 || FRAME_RBX != 24
        .error "arch/aarch64/timing.S loads and stores these words in pairs"
.endif
.if TS_FINE >= (1 << 24) || TS_ERR_OVERFLOW != TS_ERR - 8 || TS_FREE > 32760 || TS_EV_MASK > 32760
        .error "arch/aarch64/timing.S adds these offsets in two 12-bit halves, or loads at them"
.endif

/* CFI: DWARF register REG (19 = x19, 30 = x30, the return address) is saved at OFF(x19),
 * the timing frame: DW_CFA_expression REG, { DW_OP_breg19 OFF }. */
#define CFI_SAVED_AT_X19(REG, OFF) .cfi_escape 0x10, REG, 0x02, 0x83, OFF
/* CFI: the caller's sp is this frame's sp: DW_CFA_val_expression 31, { DW_OP_breg31 0 }. */
#define CFI_CALLER_SP_IS_SP .cfi_escape 0x16, 0x1f, 0x02, 0x8f, 0x00

/* xreg = base + a constant below 2^24 (an add of each non-zero 12-bit half). */
.macro add_big xd, base, value
.if ((\value) & 0xfff) && ((\value) >> 12)
        add     \xd, \base, #((\value) & 0xfff)
        add     \xd, \xd, #((\value) >> 12), lsl #12
.elseif (\value) >> 12
        add     \xd, \base, #((\value) >> 12), lsl #12
.else
        add     \xd, \base, #(\value)
.endif
.endm

/* The 64-bit (x) or 32-bit (w) word at [addr] incremented, done again if a signal handler
 * came between its load and its store. */
.macro inc_exclusive val, addr, status
.Linc\@:
        ldxr    \val, [\addr]
        add     \val, \val, #1
        stxr    \status, \val, [\addr]
        cbnz    \status, .Linc\@
.endm

/* xd = shimgen_targets[x17] */
.macro load_target xd
        adrp    \xd, shimgen_targets
        add     \xd, \xd, :lo12:shimgen_targets
        ldr     \xd, [\xd, x17, lsl #3]
.endm

.macro timed name, timeline
        .balign 16
        .type   shimgen_\name\()_enter, %function
shimgen_\name\()_enter:
        .cfi_startproc
        mrs     x16, tpidr_el0
        ldr     x9, shimgen_tls_stats_offset        /* stats.c */
        ldr     x16, [x16, x9]                      /* this thread's block */
        cbz     x16, .L\name\()_slow
        ldr     x9, [x16, #TS_FREE]                 /* a free frame */
        cbz     x9, .L\name\()_untimed
        ldr     x10, [x9, #FRAME_NEXT]              /* take it (head = its next), */
        str     x10, [x16, #TS_FREE]
        str     x30, [x9, #FRAME_RET]               /* then write it: the return address, */
        str     x19, [x9, #FRAME_RBX]               /* the caller's x19 */
        .cfi_remember_state
        mov     x19, x9
        CFI_SAVED_AT_X19(19, FRAME_RBX)             /* the caller's x19 is in the frame */
        CFI_SAVED_AT_X19(30, FRAME_RET)             /* and its return address */
        /* This frame uses no stack: the caller's sp is ours, and so is the CFA of the
         * function called below. Unwinders tell frames apart by CFA, so the CFA is stated
         * as sp + 1 and the caller's sp is given by its own rule: sp = our sp. */
        .cfi_def_cfa_offset 1
        CFI_CALLER_SP_IS_SP
        isb
        mrs     x10, cntvct_el0
        /* The start ticks are written before the index: the index word held a free
         * frame's link until now, and a reader of the trace file that sees an index there
         * sees this call (docs/traceformat.md, "Calls in progress"). */
        str     x10, [x19, #FRAME_START]            /* start ticks, */
        str     x17, [x19, #FRAME_IDX]              /* then i: the frame is in use from here */
        load_target x16
        blr     x16
/*
 * shimgen_time_return, shimgen_timeline_return: the timed function returns here (right
 * after the blr above, or, on the slow path, through the x30 that shimgen_time_push gave),
 * with x19 = its frame. Read the frame, give it back, count the call, add the elapsed ticks
 * to this thread's total and maximum, count it in the fine histogram (or, with no slot
 * there, the log2 histogram), record the event (timeline),
 * count a non-zero w0 of a CUresult function as an error (out of line), return to the
 * caller.
 */
        .globl  shimgen_\name\()_return
        .hidden shimgen_\name\()_return
shimgen_\name\()_return:
        isb
        mrs     x10, cntvct_el0                     /* end ticks */
        mov     x9, x19                             /* the frame */
        ldp     x30, x11, [x9, #FRAME_RET]          /* the caller's return address, start */
        .cfi_restore x30
        ldp     x12, x19, [x9, #FRAME_IDX]          /* i, the caller's x19 */
        .cfi_restore x19
        sub     x10, x10, x11                       /* elapsed ticks */
        mrs     x16, tpidr_el0
        ldr     x13, shimgen_tls_stats_offset
        ldr     x16, [x16, x13]                     /* the block */
        ldr     x13, [x16, #TS_FREE]                /* frame read: give it back */
        str     x13, [x9, #FRAME_NEXT]
        str     x9, [x16, #TS_FREE]
        /* fn[i]: count and total as one pair, then the maximum */
        add     x14, x16, x12, lsl #TS_FSTATS_SHIFT
.L\name\()_pair:
        ldxp    x13, x15, [x14]
        add     x13, x13, #1
        add     x15, x15, x10
        stxp    w17, x13, x15, [x14]
        cbnz    w17, .L\name\()_pair
        ldr     x13, [x14, #TS_MAX]
        cmp     x10, x13
        b.ls    1f
        str     x10, [x14, #TS_MAX]
1:
        /* The fine histogram (layout.h): bucket f, key (i + 1) * TS_FINE_STEP + f, counted
         * in the slot that holds the key or claimed in the first free one from the key's
         * own slot (the key modulo TS_FINE_SLOTS), at most TS_FINE_PROBES slots on; none:
         * the call is counted in its log2 bucket, hist[i][63 - clz(elapsed | 1)], instead. */
        mov     x13, x10                            /* f = v below 64 */
        cmp     x10, #(1 << TS_FINE_SUB_SHIFT)
        b.lo    6f
        clz     x15, x10
        mov     x17, #(63 - TS_FINE_SUB_SHIFT)
        sub     x15, x17, x15                       /* e - 6 */
        lsr     x13, x10, x15                       /* v >> (e - 6), from 64 to 127 */
        add     x13, x13, x15, lsl #TS_FINE_SUB_SHIFT   /* f */
6:
        mov     w15, #TS_FINE_STEP
        madd    w15, w12, w15, w15                  /* (i + 1) * TS_FINE_STEP */
        add     w13, w13, w15                       /* the key */
        mov     w17, w13                            /* its first slot (less its high bits) */
        add_big x15, x16, TS_FINE                   /* fine[0] */
        mov     w9, #TS_FINE_PROBES                 /* slots left to look at */
7:
        and     w17, w17, #(TS_FINE_SLOTS - 1)
        add     x14, x15, x17, lsl #3
71:
        ldxr    w8, [x14]
        cmp     w8, w13
        b.eq    9f                                  /* ours */
        cbnz    w8, 8f                              /* another key's */
        stxr    w8, w13, [x14]                      /* free: claim it */
        cbnz    w8, 71b                             /* a handler came between: look again */
        b       9f
8:
        add     w17, w17, #1
        subs    w9, w9, #1
        b.ne    7b
        orr     x13, x10, #1                        /* none: hist[i][63 - clz(elapsed | 1)]++ */
        clz     x13, x13
        eor     x13, x13, #63                       /* the bucket */
        add     x13, x13, x12, lsl #(TS_HIST_SHIFT - 3)
        add_big x14, x16, TS_HIST
        add     x14, x14, x13, lsl #3
        inc_exclusive x13, x14, w17
        b       10f
9:
        add     x14, x14, #4
        inc_exclusive w8, x14, w9
10:
.if \timeline
        /* One event in the ring, its slot reserved by one exclusive increment of the head
         * (a handler's timed call records into the next one). */
        add_big x14, x16, TS_EV_HEAD
.L\name\()_head:
        ldxr    x13, [x14]
        add     x15, x13, #1
        stxr    w9, x15, [x14]
        cbnz    w9, .L\name\()_head
        ldr     x15, [x16, #TS_EV_MASK]
        and     x13, x13, x15
        ldr     x15, [x16, #TS_EV]
        add     x13, x15, x13, lsl #TL_EVENT_SHIFT
        orr     x15, x12, x10, lsl #TL_INDEX_BITS   /* elapsed << 16 | i */
        stp     x11, x15, [x13]                     /* start ticks, then that */
.endif
        /* A non-zero w0 may be an error: counted out of line when the function returns a
         * CUresult. The success path pays this test only. */
        cbnz    w0, .L\name\()_error
2:
        ret
/*
 * An error return: (function, code) counted in the thread's err[] (timing.S), a free slot
 * claimed with a load-exclusive/store-exclusive pair; every slot taken: err_overflow. In
 * x8-x17 only, with no stack and no call; x0-x7 and q0-q7 are untouched.
 */
.L\name\()_error:
        adrp    x13, shimgen_result_fns
        add     x13, x13, :lo12:shimgen_result_fns
        ldrb    w13, [x13, x12]
        cbz     w13, 2b                             /* not a CUresult function */
        add     x13, x12, #1
        mov     w14, w0
        orr     x13, x14, x13, lsl #32              /* the key */
        movz    x15, #(TS_ERR_HASH & 0xffff)
        movk    x15, #((TS_ERR_HASH >> 16) & 0xffff), lsl #16
        mul     x15, x13, x15
        lsr     x15, x15, #(64 - TS_ERR_SLOTS_SHIFT)    /* the first slot to look at */
        add_big x9, x16, TS_ERR                     /* err[0] */
        mov     w17, #TS_ERR_SLOTS                  /* slots left to look at */
3:
        add     x14, x9, x15, lsl #4
31:
        ldxr    x8, [x14]
        cmp     x8, x13
        b.eq    5f                                  /* ours */
        cbnz    x8, 4f                              /* another key's */
        stxr    w8, x13, [x14]                      /* free: claim it */
        cbnz    w8, 31b
        b       5f
4:
        add     w15, w15, #1
        and     w15, w15, #(TS_ERR_SLOTS - 1)
        subs    w17, w17, #1
        b.ne    3b
        sub     x14, x9, #8                         /* err_overflow: every slot is taken */
        inc_exclusive x8, x14, w17
        b       2b
5:
        add     x14, x14, #8                        /* the slot's count */
        inc_exclusive x8, x14, w17
        b       2b
        .cfi_restore_state
.L\name\()_untimed:                                 /* no free frame: count only */
        add     x9, x16, x17, lsl #TS_FSTATS_SHIFT
        inc_exclusive x10, x9, w11
        add_big x9, x16, TS_UNTIMED
        inc_exclusive x10, x9, w11
        load_target x16
        br      x16
.L\name\()_slow:                                    /* no block yet: stats.c */
        save_argument_registers
        mov     w0, w17
        add     x1, sp, #8                          /* where the caller's return address is */
        mov     x2, x19                             /* the caller's x19, kept in the frame */
        adrp    x3, shimgen_\name\()_return
        add     x3, x3, :lo12:shimgen_\name\()_return
        bl      shimgen_time_push                   /* x0 = target, x1 = frame (NULL: untimed) */
        mov     x16, x0
        cbz     x1, 1f
        mov     x19, x1                             /* timed: x19 = frame, as fast */
1:
        restore_argument_registers                  /* x30: the timed return, when timed */
        br      x16
        .cfi_endproc
        .size   shimgen_\name\()_enter, .-shimgen_\name\()_enter
.endm

.macro timed_stub name, i
        .balign 8
.L\name\()_\i:
        mov     w17, #\i
        b       shimgen_\name\()_enter
.endm

        .text
/* time stubs: w17 = i, then the common entry */
#define SHIMGEN_FUNCTION(i, name) timed_stub time, i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        timed time, 0

/* timeline stubs: w17 = i, then the common entry */
#define SHIMGEN_FUNCTION(i, name) timed_stub timeline, i
#include "functions.inc"
#undef SHIMGEN_FUNCTION
        timed timeline, 1

/* ---- tables: one entry per function, the address of its timing stub ---- */
#include "arch/timetables.h"

/* Where timed calls return first (first.c), then 0: one entry serves every function here
 * (x86-64 has one per kind of declaration, timedfns.inc). */
        .globl  shimgen_timed_returns
        .hidden shimgen_timed_returns
        .balign 8
shimgen_timed_returns:
        .quad   shimgen_time_return, shimgen_timeline_return, 0

/* Calls mode is x86-64 only, for now (arches.py: calls=False; config.c turns it off): the
 * names the C runtime takes of calls.S are the timing stubs' and return. */
        .globl  shimgen_calls_stubs
        .hidden shimgen_calls_stubs
        .set    shimgen_calls_stubs, shimgen_time_stubs
        .globl  shimgen_calls_return
        .hidden shimgen_calls_return
        .set    shimgen_calls_return, shimgen_time_return

        .section .note.GNU-stack, "", %progbits
