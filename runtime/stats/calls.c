/*
 * calls.c: SHIMGEN_TRACE=calls, the C side of calls.S: each block's ring (its size,
 * SHIMGEN_CALLS_RING records per thread, read by config.c; right after the block in the
 * block's own mapping: in the trace file, so a process that is killed keeps its last calls,
 * or in anonymous memory for a block that is not in a file), the ring's facts in the file's
 * header (the ring is a part of the trace file, tracefile.h), the captures of the capture
 * table (calls_table.c: strings and structs at entry, the outputs of a successful call),
 * read through saferead.h so that a pointer the driver would refuse is recorded as not read
 * instead of faulting. A ring in the file has disk space for its first records when its
 * block is made and grows, doubling, as it fills (shimgen_calls_grow), so that a trace of
 * few calls is small. Nothing here formats: a capture is bytes. A thread's first call in
 * calls mode is stats.c's.
 */

#define _GNU_SOURCE
#include <errno.h>
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

/* Right before a block's ring: where the block lies in the trace file, and the places that
 * have disk space (room: places below it; ~0: every place, the whole ring or a block in
 * anonymous memory). Written by the block's own thread and its signal handlers only. */
struct ring_ctl {
    uint64_t off;  /* the block's offset in the file (0: none) */
    uint64_t room; /* a power of two from RING_FIRST, or ~0 */
};
_Static_assert(sizeof(struct ring_ctl) + RING_ROOM == offsetof(struct ring_ctl, room),
               "RING_ROOM");

/* The records of a ring with disk space when its block is made (the rest as it fills): the
 * smallest ring's (shimgen/runenv.py CALLS_RING_MIN), which readers check the file's end by. */
#define RING_FIRST SHIMGEN_CALLS_RING_MIN

static size_t page_up(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

/* The ring's start in a block: after its struct tstats and the ring's struct ring_ctl,
 * rounded up to a page. */
static size_t ring_off(void)
{
    return page_up(sizeof(struct tstats) + sizeof(struct ring_ctl));
}

static struct ring_ctl *ring_ctl(void *block)
{
    return (struct ring_ctl *)((char *)block + ring_off() - sizeof(struct ring_ctl));
}

/* The bytes a block of the trace file has after its struct tstats rounded up to a page:
 * the ring (and the page its struct ring_ctl needs, when the struct leaves no room). */
static size_t ring_bytes(void)
{
    return ring_off() - page_up(sizeof(struct tstats)) +
           shimgen_cfg.calls_records * SHIMGEN_CALLS_RECORD_SIZE;
}

static uint64_t ring_first(void)
{
    return shimgen_cfg.calls_records < RING_FIRST ? shimgen_cfg.calls_records : RING_FIRST;
}

/* Of those, the ones with disk space when the block is made. */
static size_t ring_first_bytes(void)
{
    return ring_off() - page_up(sizeof(struct tstats)) + ring_first() * SHIMGEN_CALLS_RECORD_SIZE;
}

/* A block made in the file at `off`, or a forked child's moved onto its own file there: its
 * first records have disk space. */
static void ring_placed(void *block, uint64_t off)
{
    struct ring_ctl *c = ring_ctl(block);
    c->off = off;
    __atomic_store_n(&c->room,
                     ring_first() == shimgen_cfg.calls_records ? ~0ull : ring_first(),
                     __ATOMIC_RELEASE);
}

/* A block's ring (its thread's first call; async-signal-safe): right after the block, in
 * the same mapping. A reused block keeps its ring, its place and its room: records say
 * their thread. A ring in anonymous memory has room for every place. */
void shimgen_calls_ring(struct tstats *s)
{
    if (s->ev)
        return;
    s->ev_mask = shimgen_cfg.calls_records - 1;
    if (!s->in_file)
        __atomic_store_n(&ring_ctl(s)->room, ~0ull, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ev, (void *)((char *)s + ring_off()), __ATOMIC_RELEASE);
}

/* calls.S, for a place at or above the ring's room (async-signal-safe: no lock, no
 * allocation): disk space for the ring up to the place, doubling what it had (at most the
 * whole ring). When the file cannot grow (a full disk), the ring keeps its last `room`
 * records instead (ev_mask lowered: the places below room keep their slots), said once;
 * the file tells readers so by the block's ev_mask (docs/traceformat.md). */
void shimgen_calls_grow(struct tstats *s, uint64_t place)
{
    static int said;
    struct ring_ctl *c = ring_ctl(s);
    uint64_t n = s->ev_mask + 1, room = __atomic_load_n(&c->room, __ATOMIC_ACQUIRE);
    if (place < room)
        return; /* a signal handler's call grew it meanwhile */
    uint64_t want = n;
    if (place < n) {
        want = room < RING_FIRST ? RING_FIRST : room * 2;
        while (want <= place)
            want <<= 1;
        want = want < n ? want : n;
    }
    if (!s->in_file || !c->off || want <= room) {
        __atomic_store_n(&c->room, ~0ull, __ATOMIC_RELEASE);
        return;
    }
    if (shimgen_tracefile_grow(c->off + ring_off() + room * SHIMGEN_CALLS_RECORD_SIZE,
                               (want - room) * SHIMGEN_CALLS_RECORD_SIZE) == 0) {
        uint64_t cur = room, to = want == n ? ~0ull : want;
        while (cur < to && !__atomic_compare_exchange_n(&c->room, &cur, to, 0,
                                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
        return;
    }
    int e = errno;
    __atomic_store_n(&s->ev_mask, room - 1, __ATOMIC_RELEASE);
    __atomic_store_n(&c->room, ~0ull, __ATOMIC_RELEASE);
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        shimgen_say("shimgen: SHIMGEN_TRACE_DIR=%s: a ring of calls cannot grow in the trace "
                    "file (%s); it keeps its thread's last %llu calls\n", shimgen_cfg.trace_dir,
                    strerror(e), (unsigned long long)room);
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
    h->calls_table_digest = shimgen_calls_table_digest;
}

/* The ring joins every block, in the trace file or anonymous (a forked child moves a block
 * and its ring at once): the one part with bytes, so right after the block's struct tstats
 * rounded up to a page (ring_off). */
static const struct shimgen_tf_part ring_part = {ring_bytes, ring_header, NULL, ring_first_bytes,
                                                  ring_placed, NULL};

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
