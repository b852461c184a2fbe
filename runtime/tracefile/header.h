/*
 * header.h: the header at offset 0 of the binary trace file of SHIMGEN_TRACE_DIR
 * (version 2, documented field by field in docs/traceformat.md, read by
 * shimgen/trace/binary.py), declared from the one list of its fields (shimgen/runenv.py) that
 * the reader uses too; and what writes it (tracefile/header.c). The blocks after it are
 * struct tstats (block.h, layout.h), whose offsets and sizes the header records.
 */
#ifndef SHIMGEN_TRACEFILE_HEADER_H
#define SHIMGEN_TRACEFILE_HEADER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define TF_MAGIC SHIMGEN_TRACEFILE_MAGIC /* shimgen/runenv.py, through facts.h */
#define TF_VERSION SHIMGEN_TRACEFILE_VERSION
#define TF_BYTE_ORDER SHIMGEN_TRACEFILE_BYTE_ORDER
enum { TF_RUNNING = SHIMGEN_TRACEFILE_RUNNING, TF_COMPLETE = SHIMGEN_TRACEFILE_COMPLETE };

/* The header, at offset 0, field by field as shimgen/runenv.py TRACE_HEADER lists them
 * (facts.h): every number little-endian (x86-64), each field where the list puts it, which
 * the asserts below check, so the reader's struct and this one cannot differ. Its meaning,
 * field by field, is in docs/traceformat.md. */
struct tf_header {
    SHIMGEN_TRACEFILE_HEADER_MEMBERS
};
#define TF_AT(name, offset)                                                                \
    _Static_assert(offsetof(struct tf_header, name) == (offset), "header field " #name);
SHIMGEN_TRACEFILE_HEADER_OFFSETS(TF_AT)
#undef TF_AT
_Static_assert(sizeof(struct tf_header) == SHIMGEN_TRACEFILE_HEADER_SIZE, "header size");
_Static_assert(PATH_MAX == sizeof(((struct tf_header *)0)->driver_path), "driver_path");

/* tracefile/header.c, on the header in the file's shared mapping: a new file's header
 * (page-aligned, zeroed; then the parts' fields; the magic written last, sealed), the calibration's pair 1 bettered as
 * blocks are added (async-signal-safe), the header finished at exit. */
void shimgen_tracefile_header_init(struct tf_header *h, size_t page, size_t names, size_t hlen,
                                   size_t stride);
void shimgen_tracefile_header_seal(struct tf_header *h);
void shimgen_tracefile_calibrate(struct tf_header *h);
void shimgen_tracefile_header_finish(struct tf_header *h, uint64_t calls_missing);

#endif
