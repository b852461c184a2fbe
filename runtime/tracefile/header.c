/*
 * header.c: what the header of a binary trace file (SHIMGEN_TRACE_DIR,
 * docs/traceformat.md) holds, written into the file's shared mapping (tracefile.c makes
 * the file and maps it). When the file is made: the blocks' layout, the process (pid,
 * start time, boot id, rank), the loaded driver's identity, the function names, and the
 * first calibration pairs; the magic last, once the file's parts (tracefile.h) have put
 * their fields. While blocks are added: a better pair 1. At
 * exit: the end time, the calls the file could not take, and the state complete.
 * Async-signal-safe, as a thread's first traced call needs (no malloc, stdio or lock).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "block.h"
#include "base/base.h"
#include "header.h"

static uint64_t tf_clock(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int tf_calib_busy;

/* Pair 1 replaced by a new reading when that one is better (calib.h); one thread at a time
 * (another's update is skipped: it is as good), with calib_seq odd meanwhile, so that a
 * reader of a file whose process died in between uses pair a. */
void shimgen_tracefile_calibrate(struct tf_header *h)
{
    if (__atomic_exchange_n(&tf_calib_busy, 1, __ATOMIC_ACQUIRE))
        return;
    struct shimgen_calib start = {h->calib_ticks0, h->calib_ns0, h->calib_width0};
    struct shimgen_calib now, cur = {h->calib_ticks1, h->calib_ns1, h->calib_width1};
    shimgen_calib_read(&now);
    if (shimgen_calib_better(&start, &cur, &now)) {
        __atomic_store_n(&h->calib_seq, h->calib_seq + 1, __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        h->calib_ticks1 = now.ticks;
        h->calib_ns1 = now.ns;
        h->calib_width1 = now.width;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(&h->calib_seq, h->calib_seq + 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&tf_calib_busy, 0, __ATOMIC_RELEASE);
}

/* The first two pairs of a new file: pair 0 now, pair a (and 1) once far enough on. */
static void start_calibration(struct tf_header *h)
{
    struct shimgen_calib c0, ca;
    shimgen_calib_read(&c0);
    shimgen_calib_after(&c0, &ca);
    h->calib_ticks0 = c0.ticks, h->calib_ns0 = c0.ns, h->calib_width0 = c0.width;
    h->calib_ticks_a = ca.ticks, h->calib_ns_a = ca.ns, h->calib_width_a = ca.width;
    h->calib_ticks1 = ca.ticks, h->calib_ns1 = ca.ns, h->calib_width1 = ca.width;
}

/* Reads a small /proc file into buf (NUL-terminated); its length, 0 when it cannot. */
static size_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return n;
}

/* The process's start time (field 22 of /proc/self/stat, after the name in parentheses,
 * which may hold anything but ends at the last ')'); 0 when it cannot be read. */
static uint64_t proc_start_time(void)
{
    char st[1024];
    if (!read_small("/proc/self/stat", st, sizeof st))
        return 0;
    char *p = strrchr(st, ')');
    if (!p)
        return 0;
    /* ") S ppid ...": field 3 is the state; field 22 is 19 fields further on */
    for (int field = 2; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return 0;
    }
    uint64_t v = 0;
    for (p++; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    return v;
}

static void boot_id(char *out, size_t cap)
{
    char b[64];
    size_t n = read_small("/proc/sys/kernel/random/boot_id", b, sizeof b);
    while (n && (b[n - 1] == '\n' || b[n - 1] == ' '))
        b[--n] = '\0';
    shimgen_copy_str(out, cap, b);
}

/* A new file's header, over its zeroed first pages: `names` bytes of names after it, the
 * blocks from `hlen` on, `stride` bytes apart. */
/* The layout of the file and of its blocks, field by field on the new file's zeros: an
 * assignment of the whole struct would write every page of it, the holes a part leaves
 * unwritten too (header_unused). */
static void header_layout(struct tf_header *h, size_t page, size_t names, size_t hlen,
                          size_t stride)
{
    h->version = TF_VERSION;
    h->header_size = sizeof *h;
    h->byte_order = TF_BYTE_ORDER;
    h->nfuncs = SHIMGEN_NFUNCS;
    h->page_size = (uint32_t)page;
    h->block_size = sizeof(struct tstats);
    h->block_stride = stride;
    h->names_off = sizeof *h;
    h->names_size = names;
    h->blocks_off = hlen;
    h->off_fn = offsetof(struct tstats, fn);
    h->fstats_size = TS_FSTATS_SIZE;
    h->off_count = TS_COUNT;
    h->off_untimed = TS_UNTIMED;
    h->off_err_overflow = TS_ERR_OVERFLOW;
    h->off_err = TS_ERR;
    h->err_slots = TS_ERR_SLOTS;
    h->errslot_size = TS_ERRSLOT_SIZE;
    h->off_hist = TS_HIST;
    h->hist_buckets = TS_HIST_BUCKETS;
    h->off_tid = offsetof(struct tstats, tid);
    h->off_state = offsetof(struct tstats, state);
    h->off_fine = TS_FINE;
    h->fine_slots = TS_FINE_SLOTS;
    h->fine_bits = TS_FINE_BITS;
    h->fine_sub_shift = TS_FINE_SUB_SHIFT;
    h->fine_probes = TS_FINE_PROBES;
    h->fine_hash = TS_FINE_STEP;
    h->off_frames = TS_FRAMES;
    h->frame_slots = TS_SHADOW_DEPTH;
    h->frame_size = TS_FRAME_SIZE;
    h->frame_off_start = FRAME_START;
    h->frame_off_idx = FRAME_IDX;
    h->frame_off_ret = FRAME_RET;
}

void shimgen_tracefile_header_init(struct tf_header *h, size_t page, size_t names, size_t hlen,
                                   size_t stride)
{
    header_layout(h, page, names, hlen, stride);
    h->pid = getpid();
    h->ppid = getppid();
    h->state = TF_RUNNING;
    h->mode = shimgen_cfg.calls                 ? SHIMGEN_TRACEFILE_MODE_CALLS
              : shimgen_cfg.timeline            ? SHIMGEN_TRACEFILE_MODE_TIMELINE
              : shimgen_cfg.trace == TRACE_TIME ? SHIMGEN_TRACEFILE_MODE_TIME
                                                : SHIMGEN_TRACEFILE_MODE_COUNTS;
    h->start_ns = tf_clock(CLOCK_REALTIME);
    h->proc_start = proc_start_time();
    shimgen_copy_str(h->rank, sizeof h->rank, shimgen_cfg.rank);
    boot_id(h->boot_id, sizeof h->boot_id);
    start_calibration(h);
    shimgen_copy_str(h->shimgen_version, sizeof h->shimgen_version, SHIMGEN_VERSION);
    shimgen_copy_str(h->driver_version, sizeof h->driver_version, shimgen_loaded_version);
    shimgen_copy_str(h->driver_build_id, sizeof h->driver_build_id, shimgen_loaded_build_id);
    shimgen_copy_str(h->driver_path, sizeof h->driver_path, shimgen_cfg.driver_path);
    char *np = (char *)h + h->names_off;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        size_t n = strlen(shimgen_names[i]) + 1;
        memcpy(np, shimgen_names[i], n);
        np += n;
    }
}

/* The header complete (the parts' fields too): its magic, last, so that a file cut short
 * has none. */
void shimgen_tracefile_header_seal(struct tf_header *h)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(h->magic, TF_MAGIC, sizeof h->magic); /* last: a file cut short has none */
}

/* At exit: the header finished, the state complete last. */
void shimgen_tracefile_header_finish(struct tf_header *h, uint64_t calls_missing)
{
    h->unmapped_proc_addresses =
        __atomic_load_n(&shimgen_unmapped_proc_addresses, __ATOMIC_RELAXED);
    h->calls_missing = calls_missing;
    h->end_ns = tf_clock(CLOCK_REALTIME);
    shimgen_tracefile_calibrate(h);
    __atomic_store_n(&h->state, TF_COMPLETE, __ATOMIC_RELEASE);
}
