/*
 * tracefile.h: the on-disk format of the binary trace file of SHIMGEN_TRACE_DIR (version 2,
 * documented field by field in docs/traceformat.md, read by shimgen/tracefile.py): the
 * header at offset 0, declared from the one list of its fields (shimgen/runenv.py) that
 * the reader uses too. The blocks after it are struct tstats (stats.h, layout.h), whose
 * offsets and sizes the header records.
 */
#ifndef SHIMGEN_TRACEFILE_H
#define SHIMGEN_TRACEFILE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

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

struct tstats;

/* The shim's side (tracefile.c): the file made at a thread's first traced call, blocks
 * added to it, the header finished at exit, a forked child's blocks moved onto its own. */
void *shimgen_tracefile_block(int *anon); /* async-signal-safe */
int shimgen_tracefile_ready(void);        /* this process's file is the record */
int shimgen_tracefile_finish(uint64_t calls_missing);
extern uint64_t shimgen_calls_missing; /* at exit: calls the trace file could not take */
void shimgen_tracefile_after_fork(struct tstats *blocks); /* every block of the process */

#endif
