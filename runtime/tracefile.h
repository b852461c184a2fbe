/*
 * tracefile.h: the on-disk format of the binary trace file of SHIMGEN_TRACE_DIR (version 2,
 * documented field by field in docs/traceformat.md, read by shimgen/tracefile.py): the
 * header at offset 0, its offsets pinned here so that the document and the reader cannot
 * drift from the struct. The blocks after it are struct tstats (stats.h, layout.h), whose
 * offsets and sizes the header records.
 */
#ifndef SHIMGEN_TRACEFILE_H
#define SHIMGEN_TRACEFILE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define TF_MAGIC SHIMGEN_TRACEFILE_MAGIC /* shimgen/runenv.py, through facts.h */
#define TF_VERSION SHIMGEN_TRACEFILE_VERSION
#define TF_BYTE_ORDER 0x0102030405060708ull
enum { TF_RUNNING = 1, TF_COMPLETE = 2 };

/* The header, at offset 0. Every number is little-endian (x86-64); offsets are fixed by
 * the version and documented in docs/traceformat.md. */
struct tf_header {
    char magic[8];
    uint32_t version, header_size;
    uint64_t byte_order;
    uint32_t nfuncs, page_size;
    uint64_t block_size, block_stride, names_off, names_size, blocks_off;
    uint32_t off_fn, fstats_size, off_untimed, off_err_overflow;
    uint32_t off_err, err_slots, errslot_size, off_hist;
    uint32_t hist_buckets, off_tid, off_state, off_count;
    uint64_t blocks_reserved; /* blocks claimed (the file may not cover the last ones yet) */
    uint64_t blocks_mapped;   /* blocks the file covers and that were mapped */
    int64_t pid, ppid;
    char rank[16];
    uint32_t mode, state; /* mode: 1 counts, 2 time, 3 timeline; state: TF_RUNNING/COMPLETE */
    uint64_t start_ns, end_ns; /* CLOCK_REALTIME */
    uint64_t calib_ns0, calib_ticks0, calib_ns1, calib_ticks1; /* CLOCK_MONOTONIC, rdtsc */
    uint64_t unmapped_proc_addresses;
    uint64_t calls_missing; /* at exit: calls counted in memory that no block of the file holds */
    char shimgen_version[32];
    char driver_version[32];
    char driver_build_id[136];
    char driver_path[PATH_MAX];
    /* The clocks' readings (stats.h, struct shimgen_calib): the widths of pairs 0 and 1;
     * pair a, made with the file, before its magic, far enough from pair 0 to be exact to a
     * part in CALIB_PARTS, never rewritten; calib_seq, odd while pair 1 is rewritten. */
    uint64_t calib_width0, calib_width1;
    uint64_t calib_ns_a, calib_ticks_a, calib_width_a;
    uint64_t calib_seq;
    /* The process's identity across exec, which keeps its pid and its start time: the start
     * (/proc/self/stat field 22, clock ticks since boot) and the boot (boot_id). */
    uint64_t proc_start;
    char boot_id[40];
    /* The fine histograms of a block (layout.h). */
    uint32_t off_fine, fine_slots, fine_bits, fine_sub_shift, fine_probes, fine_hash;
};
_Static_assert(offsetof(struct tf_header, blocks_reserved) == 120, "header layout");
_Static_assert(offsetof(struct tf_header, pid) == 136, "header layout");
_Static_assert(offsetof(struct tf_header, mode) == 168, "header layout");
_Static_assert(offsetof(struct tf_header, calib_ns0) == 192, "header layout");
_Static_assert(offsetof(struct tf_header, shimgen_version) == 240, "header layout");
_Static_assert(offsetof(struct tf_header, driver_path) == 440, "header layout");
_Static_assert(offsetof(struct tf_header, calib_width0) == 440 + PATH_MAX, "header layout");
_Static_assert(offsetof(struct tf_header, proc_start) == 488 + PATH_MAX, "header layout");
_Static_assert(offsetof(struct tf_header, off_fine) == 536 + PATH_MAX, "header layout");
_Static_assert(sizeof(struct tf_header) == 560 + PATH_MAX, "header layout");

#endif
