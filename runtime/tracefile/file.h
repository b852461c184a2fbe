/*
 * file.h: the trace file's state and the steps of its making, inner to tracefile/:
 * tracefile.c makes the file and its blocks; fork.c moves a forked child's blocks onto a
 * file of its own. Declared hidden, as the build makes every definition, so that both files
 * address them directly, as one file did its statics.
 */
#ifndef SHIMGEN_TRACEFILE_FILE_H
#define SHIMGEN_TRACEFILE_FILE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "tracefile.h"

enum { TF_NONE, TF_CREATING, TF_READY, TF_FAILED };

#define IN_MEMORY "the trace is kept in memory and written at exit instead"

#pragma GCC visibility push(hidden)
extern int tf_state;
extern __thread int tf_creating_here __attribute__((tls_model("initial-exec")));
extern struct tf_header *tf_hdr; /* the header and the names, mapped shared */
extern size_t tf_hdr_len, tf_stride;
extern pid_t tf_owner; /* the process the file belongs to */
extern char tf_path[PATH_MAX];
void detach_parts(struct tf_header *h); /* a header about to be unmapped */
void say_once(const char *what, int e, const char *instead);
int grow(int fd, off_t off, off_t len); /* disk space for [off, off + len) */
/* The header's whole pages that a part never writes ([*from, *to), none when equal). */
void header_hole(size_t page, size_t *from, size_t *to);
extern const struct shimgen_tf_part *tf_parts[SHIMGEN_TF_PARTS]; /* joined, in order */
extern unsigned tf_nparts;
/* Disk space for what a new block at `off` holds from the start (its struct and each part's
 * first bytes; a part that grows as it fills has the rest later): 0, or -1 (errno). */
int grow_block(int fd, off_t off);
void placed_block(void *block, uint64_t off); /* each part told of a block at `off` */
void leave_note(int dirfd, const char *name); /* the note of no room, in the file's place */
int make_file(void); /* this process's file made and its header mapped: 0, or -1 (said) */
int reopen(void); /* the file again by its name, the same file: its descriptor, or -1 */
#pragma GCC visibility pop

#endif
