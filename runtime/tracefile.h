/*
 * tracefile.h: the on-disk format of the binary trace file of SHIMGEN_TRACE_DIR (version 1,
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
};
_Static_assert(offsetof(struct tf_header, blocks_reserved) == 120, "header layout");
_Static_assert(offsetof(struct tf_header, pid) == 136, "header layout");
_Static_assert(offsetof(struct tf_header, mode) == 168, "header layout");
_Static_assert(offsetof(struct tf_header, calib_ns0) == 192, "header layout");
_Static_assert(offsetof(struct tf_header, shimgen_version) == 240, "header layout");
_Static_assert(offsetof(struct tf_header, driver_path) == 440, "header layout");
_Static_assert(sizeof(struct tf_header) == 440 + PATH_MAX, "header layout");

#endif
