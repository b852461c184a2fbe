/*
 * timeline.c: SHIMGEN_TRACE=timeline, a ring of events per thread, written at exit as
 * Chrome/Perfetto trace JSON.
 *
 * Each thread records into its own ring of shimgen_cfg.timeline_events events (the
 * timeline stub in timing.S writes them) and keeps the most recent ones. A ring belongs to
 * its thread's block: it is mapped (mmap, async-signal-safe, since a thread's first call
 * may come from a signal handler) with the block's first use and reused with the block.
 * When a thread exits, what its ring holds is copied out for the output (only what it
 * holds) while the copies kept so far hold fewer than TIMELINE_KEPT_RINGS full rings of
 * events; beyond that, exited threads' events are dropped and counted.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tracefile/tracefile.h"
#include "base/base.h"
#include "output/output.h"
#include "timeline.h"

#define TIMELINE_KEPT_RINGS 64u

struct tl_ring {
    struct tl_event *ev;
    uint64_t head, mask;
    pid_t tid;
};

static struct tl_event tl_dummy; /* the ring of a thread whose own could not be allocated */
static struct tl_ring *tl_done;  /* rings of exited threads */
static size_t tl_done_len, tl_done_cap;
static uint64_t tl_done_events;   /* events in the kept rings of exited threads */
static uint64_t tl_done_recorded; /* events those threads recorded (some overwritten) */
static uint64_t tl_dropped_events, tl_dropped_threads;
static int tl_alloc_failed;

/* The events a ring still holds: the last mask+1 of the head recorded. */
static inline uint64_t ring_kept(uint64_t head, uint64_t mask)
{
    return head < mask + 1 ? head : mask + 1;
}

/* The block has a ring of its own (not none, not the dummy). */
static inline int own_ring(const struct tstats *s)
{
    return s->ev && s->ev != &tl_dummy;
}

void shimgen_timeline_ring(struct tstats *s)
{
    s->ev_head = 0;
    if (own_ring(s))
        return;
    void *p = mmap(NULL, shimgen_cfg.timeline_events * sizeof *s->ev, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    s->ev = p == MAP_FAILED ? NULL : p;
    s->ev_mask = shimgen_cfg.timeline_events - 1;
    if (!s->ev) {
        s->ev = &tl_dummy;
        s->ev_mask = 0;
        __atomic_store_n(&tl_alloc_failed, 1, __ATOMIC_RELAXED);
    }
}

/* A thread exits (shimgen_stats_lock held; never from a signal handler's first call): keep
 * a copy of what its ring holds for the output, or drop it. The ring stays with the block,
 * for the next thread. */
void shimgen_timeline_keep(struct tstats *s)
{
    uint64_t n = ring_kept(s->ev_head, s->ev_mask);
    if (n && own_ring(s) &&
        tl_done_events + n <= (uint64_t)TIMELINE_KEPT_RINGS * shimgen_cfg.timeline_events) {
        if (tl_done_len == tl_done_cap) {
            size_t cap = tl_done_cap ? 2 * tl_done_cap : 64;
            struct tl_ring *r = realloc(tl_done, cap * sizeof *r);
            if (r) {
                tl_done = r;
                tl_done_cap = cap;
            }
        }
        /* n events: all of a ring that wrapped, in place; else the first n */
        struct tl_event *ev = tl_done_len < tl_done_cap ? malloc((size_t)n * sizeof *ev) : NULL;
        if (ev) {
            memcpy(ev, s->ev, (size_t)n * sizeof *ev);
            tl_done[tl_done_len++] = (struct tl_ring){ev, s->ev_head, s->ev_mask, s->tid};
            tl_done_events += n;
            tl_done_recorded += s->ev_head;
            s->ev_head = 0;
            return;
        }
    }
    if (s->ev_head) {
        tl_dropped_threads++;
        tl_dropped_events += s->ev_head;
    }
    s->ev_head = 0;
}

/* In a forked child: the rings of the parent's exited threads are not this process's. */
void shimgen_timeline_after_fork(void)
{
    for (size_t i = 0; i < tl_done_len; i++)
        free(tl_done[i].ev);
    tl_done_len = 0;
    tl_done_events = tl_done_recorded = tl_dropped_events = tl_dropped_threads = 0;
}

/* The events of one ring, oldest first, as Chrome trace "X" events (ts and dur in us),
 * after a metadata event that names the thread and says how many calls it recorded. */
static void write_ring(struct shimgen_out *f, const struct tl_event *ev, uint64_t head,
                       uint64_t mask, pid_t tid, double k, int *first)
{
    uint64_t n = ring_kept(head, mask);
    if (!head)
        return;
    shimgen_out_printf(f, "%s\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %ld, "
                          "\"tid\": %ld, \"args\": {\"name\": \"thread %ld\", "
                          "\"calls_recorded\": %llu, \"calls_kept\": %llu}}",
                       *first ? "" : ",", (long)getpid(), (long)tid, (long)tid,
                       (unsigned long long)head, (unsigned long long)n);
    *first = 0;
    for (uint64_t j = head - n; j < head; j++) {
        const struct tl_event *e = &ev[head <= mask ? j : (j & mask)];
        uint64_t start = e->start, dur = e->dur_idx >> TL_INDEX_BITS;
        unsigned idx = (unsigned)(e->dur_idx & ((1u << TL_INDEX_BITS) - 1));
        if (idx >= SHIMGEN_NFUNCS || start < shimgen_tsc_start)
            continue; /* a slot being written at exit */
        shimgen_out_printf(f, ",\n  {\"name\": ");
        shimgen_out_json_str(f, shimgen_names[idx]);
        shimgen_out_printf(f, ", \"cat\": \"libcuda\", \"ph\": \"X\", \"pid\": %ld, "
                              "\"tid\": %ld, \"ts\": %.3f, \"dur\": %.3f}",
                           (long)getpid(), (long)tid,
                           (double)(start - shimgen_tsc_start) * k / 1e3,
                           (double)dur * k / 1e3);
    }
}

/* At exit, after the blocks are folded: every thread's ring as Chrome/Perfetto trace
 * JSON, written whole or not at all (output.c). */
void shimgen_write_timeline(struct tstats *blocks)
{
    int too_long;
    if (!shimgen_cfg.timeline_file[0])
        return; /* SHIMGEN_TIMELINE_FILE was refused at load */
    struct shimgen_out *f =
        shimgen_open_output(shimgen_cfg.timeline_file, "timeline", &too_long);
    if (!f)
        return;
    double k = shimgen_ns_per_tick();
    uint64_t recorded = tl_done_recorded, kept = tl_done_events;
    unsigned threads = (unsigned)tl_done_len;
    for (struct tstats *s = blocks; s; s = s->next) {
        uint64_t h = __atomic_load_n(&s->ev_head, __ATOMIC_RELAXED);
        recorded += h;
        kept += ring_kept(h, s->ev_mask);
        threads += h != 0;
    }
    shimgen_out_printf(f, "{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"shimgen\": ");
    shimgen_out_json_str(f, SHIMGEN_VERSION);
    shimgen_out_printf(f, ", \"driver\": ");
    shimgen_out_json_str(f, shimgen_cfg.driver_path);
    shimgen_out_printf(f, ", \"driver_version\": ");
    shimgen_out_json_str(f, shimgen_loaded_version);
    shimgen_out_printf(f, ", \"pid\": %ld, \"events_per_thread\": %lu, \"threads\": %u, "
                          "\"exited_threads_kept\": %u, \"events_kept\": %llu, "
                          "\"events_overwritten\": %llu, \"exited_threads_dropped\": %llu, "
                          "\"events_of_exited_threads_dropped\": %llu, "
                          "\"ring_allocation_failed\": %d},\n\"traceEvents\": [",
                       (long)getpid(), shimgen_cfg.timeline_events, threads,
                       (unsigned)tl_done_len, (unsigned long long)kept,
                       (unsigned long long)(recorded - kept),
                       (unsigned long long)tl_dropped_threads,
                       (unsigned long long)tl_dropped_events, tl_alloc_failed);
    shimgen_out_printf(f, "\n  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %ld, "
                          "\"tid\": 0, \"args\": {\"name\": ", (long)getpid());
    char name[128];
    snprintf(name, sizeof name, "shimgen: libcuda %s (pid %ld)", shimgen_loaded_version,
             (long)getpid());
    shimgen_out_json_str(f, name);
    shimgen_out_printf(f, "}}");
    int first = 0;
    for (size_t i = 0; i < tl_done_len; i++)
        write_ring(f, tl_done[i].ev, tl_done[i].head, tl_done[i].mask, tl_done[i].tid, k,
                   &first);
    for (struct tstats *s = blocks; s; s = s->next)
        if (own_ring(s))
            write_ring(f, s->ev, __atomic_load_n(&s->ev_head, __ATOMIC_RELAXED), s->ev_mask,
                       s->tid, k, &first);
    shimgen_out_printf(f, "\n]}\n");
    char path[PATH_MAX];
    if (shimgen_out_close(f, path, sizeof path) == 0)
        shimgen_say("shimgen: timeline of %llu calls written to %s\n", (unsigned long long)kept,
                    path);
}
