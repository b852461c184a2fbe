/*
 * calls.c: SHIMGEN_TRACE=calls, the C side of calls.S: each block's ring (its size,
 * SHIMGEN_CALLS_RING records per thread, read by config.c; right after the block in the
 * block's own mapping: in the trace file, so a process that is killed keeps its last calls,
 * or in anonymous memory for a block that is not in a file), the ring's facts in the file's
 * header (the ring is a part of the trace file, tracefile.h), the captures of the capture
 * table (calls_table.c: strings and structs at entry, the outputs of a successful call),
 * read through saferead.h so that a pointer the driver would refuse is recorded as not read
 * instead of faulting. Nothing here formats: a capture is bytes. A thread's first call in
 * calls mode is stats.c's.
 */

#define _GNU_SOURCE
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "tracefile/tracefile.h"
#include "arch/entry.h"
#include "calls.h"
#include "base/base.h"

_Static_assert(sizeof(struct calls_record) == SHIMGEN_CALLS_RECORD_SIZE, "calls_record");
_Static_assert(1u << REC_SHIFT == SHIMGEN_CALLS_RECORD_SIZE, "REC_SHIFT");
_Static_assert(offsetof(struct calls_record, seq) == REC_SEQ, "seq");
_Static_assert(offsetof(struct calls_record, idx) == REC_IDX, "idx");
_Static_assert(offsetof(struct calls_record, state) == REC_STATE, "state");
_Static_assert(offsetof(struct calls_record, tid) == REC_TID, "tid");
_Static_assert(offsetof(struct calls_record, start) == REC_START, "start");
_Static_assert(offsetof(struct calls_record, dur) == REC_DUR, "dur");
_Static_assert(offsetof(struct calls_record, result) == REC_RESULT, "result");
_Static_assert(offsetof(struct calls_record, args) == REC_ARGS, "args");
_Static_assert(offsetof(struct calls_record, capture) == SHIMGEN_CALLS_CAPTURE_OFF, "capture");
_Static_assert(offsetof(struct tstats, tid) == TS_TID, "tstats.tid");
_Static_assert(SHIMGEN_NFUNCS < 1u << 16, "a function index fits in a record's u16");

static size_t ring_off(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (sizeof(struct tstats) + page - 1) & ~(page - 1);
}

/* The bytes a block of the trace file has after its struct tstats: the ring. */
static size_t ring_bytes(void)
{
    return shimgen_cfg.calls_records * SHIMGEN_CALLS_RECORD_SIZE;
}

/* A block's ring (its thread's first call; async-signal-safe): right after the block, in
 * the same mapping. A reused block keeps its ring and its place: records say their
 * thread. */
void shimgen_calls_ring(struct tstats *s)
{
    s->ev = (void *)((char *)s + ring_off());
    s->ev_mask = shimgen_cfg.calls_records - 1;
}

/* The ring's facts in a new header of the trace file (a block of `stride` bytes). */
static void ring_header(struct tf_header *h, size_t stride)
{
    h->calls_ring_off = ring_off();
    h->calls_ring_records = stride > ring_off() ? shimgen_cfg.calls_records : 0;
    h->calls_record_size = SHIMGEN_CALLS_RECORD_SIZE;
    h->calls_capture_off = SHIMGEN_CALLS_CAPTURE_OFF;
    h->off_calls_head = TS_EV_HEAD;
    h->calls_string_max = SHIMGEN_CALLS_STRING_MAX;
}

/* The ring joins every block, in the trace file or anonymous (a forked child moves a block
 * and its ring at once): the one part with bytes, so right after the block's struct tstats
 * rounded up to a page (ring_off). */
static const struct shimgen_tf_part ring_part = {ring_bytes, ring_header, NULL};

void shimgen_calls_join(void)
{
    shimgen_tracefile_join(&ring_part);
}

/* An output the driver wrote as a pointer (after a successful return): the pointer, read
 * through the safe read, then at dst + 8 what it points to: the string (read through the
 * safe read too), or with `function` the shim's export it is, its slot + 1 as 4 bytes (0:
 * none of them; a linear search of the exports' trampolines, which only cuGetProcAddress's
 * captures do). 0, or -1 when the pointer or its string could not be read. */
static long pointed(unsigned char *dst, size_t size, const void *src, int function)
{
    uint64_t p;
    if (size < 8 || shimgen_safe_read(&p, src, sizeof p) != (long)sizeof p)
        return -1;
    memcpy(dst, &p, sizeof p);
    memset(dst + 8, 0, size - 8);
    if (function) {
        uint32_t slot = 0;
        for (unsigned i = 0; p && i < SHIMGEN_NFUNCS && !slot; i++)
            if ((uint64_t)(uintptr_t)shimgen_entry_stubs[i] == p)
                slot = i + 1;
        if (size >= 12)
            memcpy(dst + 8, &slot, sizeof slot);
        return 0;
    }
    if (!p)
        return 0; /* NULL: no string */
    return shimgen_safe_string((char *)dst + 8, size - 8, (const void *)(uintptr_t)p) < 0 ? -1 : 0;
}

/* The captures of the record's function at entry or after its return, each read through
 * saferead.h (a program's pointer may be garbage: an unreadable one is never touched, its
 * bytes are zeros and its bit set); the bits of those not read. */
static uint64_t capture(struct calls_record *r, int at_exit)
{
    unsigned i = r->idx, first = shimgen_calls_first[i];
    uint64_t unread = 0;
    for (unsigned k = first; k < shimgen_calls_first[i + 1]; k++) {
        const struct calls_capture *c = &shimgen_calls_captures[k];
        int output = (c->kind & SHIMGEN_CALLS_CAPTURE_KIND_MASK) == SHIMGEN_CALLS_CAPTURE_OUTPUT;
        const void *src = (const void *)(uintptr_t)r->args[c->slot];
        unsigned char *dst = r->capture + c->off;
        if (output != at_exit)
            continue;
        if (!src) {
            memset(dst, 0, c->size);
            continue;
        }
        long got;
        if (c->kind & (SHIMGEN_CALLS_CAPTURE_FLAG_POINTED | SHIMGEN_CALLS_CAPTURE_FLAG_FUNCTION))
            got = pointed(dst, c->size, src, c->kind & SHIMGEN_CALLS_CAPTURE_FLAG_FUNCTION);
        else if ((c->kind & SHIMGEN_CALLS_CAPTURE_KIND_MASK) == SHIMGEN_CALLS_CAPTURE_STRING
                 || (c->kind & SHIMGEN_CALLS_CAPTURE_FLAG_TEXT))
            got = shimgen_safe_string((char *)dst, c->size, src);
        else
            got = shimgen_safe_read(dst, src, c->size) == (long)c->size ? 0 : -1;
        if (got < 0) {
            memset(dst, 0, c->size);
            unread |= 1ull << (k - first);
        }
    }
    return unread;
}

/* calls.S has published the record (entered, its unread word all ones): the captures at
 * entry, then which were not read. */
void shimgen_calls_capture_entry(struct calls_record *r)
{
    uint64_t unread = capture(r, 0);
    __atomic_store_n(&r->args[SHIMGEN_CALLS_UNREAD_WORD], unread, __ATOMIC_RELEASE);
}

/* A successful return: the outputs, which were not read (with those of the entry), then
 * the state, last, so that a returned record has its outputs. */
void shimgen_calls_capture_exit(struct calls_record *r)
{
    uint64_t unread = capture(r, 1);
    if (shimgen_calls_info[r->idx] & CALLS_INFO_ENTRY)
        unread |= r->args[SHIMGEN_CALLS_UNREAD_WORD];
    r->args[SHIMGEN_CALLS_UNREAD_WORD] = unread;
    __atomic_store_n(&r->state, REC_RETURNED, __ATOMIC_RELEASE);
}
