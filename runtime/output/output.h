/*
 * output.h: the files the shim writes at exit (the trace JSON, the timeline), written whole
 * or not at all: a buffered writer that checks every write, the one JSON string writer, and
 * the temporary file that is renamed over the target only when it is complete (output.c).
 */
#ifndef SHIMGEN_OUTPUT_H
#define SHIMGEN_OUTPUT_H

#include <stddef.h>

#include "claim.h"

struct shimgen_out;

/* How the name of an output relates to what the user gave. */
enum shimgen_out_name {
    OUT_NAMED,   /* the user's name: replaces a file there */
    OUT_DERIVED, /* a name the user did not give: replaces no file */
    OUT_SHARED,  /* a name the processes of a job share (no %p, %r): the first to write
                  * takes it, the others write "<name>.<pid>" (claim.c) */
};

/* Open the file at `path` (already expanded) for writing. NULL, said once on stderr, when
 * it cannot be. */
struct shimgen_out *shimgen_out_open(const char *path, enum shimgen_out_name name,
                                     const char *what);
/* Finish: flush, check, put the file in place. 0 when it is written whole (the path it was
 * written to copied to `path` when that is not NULL: for OUT_SHARED, "<name>.<pid>" when
 * another process of the job has the plain name); otherwise -1, said once on stderr, and
 * the target is left as it was (a device or FIFO written in place may have part of it). */
int shimgen_out_close(struct shimgen_out *o, char *path, size_t cap);
/* Formatted text; an error is kept and reported by shimgen_out_close. */
void shimgen_out_printf(struct shimgen_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A JSON string, quoted and escaped (RFC 8259): '"', '\\' and control characters escaped;
 * each byte that is not part of valid UTF-8 becomes \udcXX (XX the byte), as Python's
 * surrogateescape (os.fsdecode) reads it, so the bytes of a path can be recovered. */
void shimgen_out_json_str(struct shimgen_out *o, const char *s);

/* output_name.c: the output named by a SHIMGEN_TRACE_FILE or SHIMGEN_TIMELINE_FILE pattern (%p,
 * %r, and the name each process of a job writes). NULL when it cannot be written (said);
 * *too_long set when the expanded name does not fit. */
struct shimgen_out *shimgen_open_output(const char *pattern, const char *what, int *too_long);

#endif
