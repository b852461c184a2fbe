/*
 * kernels.h: the kernels folder's face (docs/design.md, "Kernels by name and each stream's
 * last launch"): per handle (a CUfunction or a CUkernel) its name, launches, host ticks of
 * its launch calls and shapes; per stream its launches and its last kernel. Kept in the
 * trace file's header (tracefile/header.h, version 7's kern_* and kstream_* fields), so a
 * process killed leaves them; the process's own memory until the file is made. table.c
 * keeps the tables; hooks_kernels.c, the hooks of feature "kernels", fills them; gputime.c
 * times launches on the GPU (SHIMGEN_GPU_TIME: version 8's kgpu_* fields).
 */
#ifndef SHIMGEN_KERNELS_H
#define SHIMGEN_KERNELS_H

#include <stdint.h>

#include "base/base.h"

/* Joins the trace file's parts (at the driver's load); 1 when the hooks are to be installed
 * (a trace into a directory, any mode). */
int shimgen_kernels_config(void);
/* A forked child: the names kept, its counts its own from zero (load/fork.c). */
/* GPU time is on: the header's GPU arrays are written, so given disk space and copied. */
void shimgen_kern_gpu_arrays(void);
void shimgen_kernels_after_fork(void);

/* A handle's slot, claimed when new; -1 when the table is full (counted lost). */
int shimgen_kern_slot(uint64_t handle);
/* A name for a slot that has none, with how it was learned (SHIMGEN_KERN_FROM_*): up to
 * SHIMGEN_KERN_NAME_MAX bytes of it kept (a longer one is cut, so a caller passes a buffer
 * that holds one byte more), as many as the names' arena has left. */
void shimgen_kern_name(int slot, const char *name, unsigned from);
/* Slot `of`'s name (when it has one) given to a slot that has none, the same bytes. */
void shimgen_kern_name_as(int slot, int of, unsigned from);
/* 1 when the slot has no name and the driver was not asked yet. */
int shimgen_kern_unnamed(int slot);
/* A launch: counted on its kernel's slot (-1: none) and its stream, with its shape and the
 * ticks at its start and end. */
void shimgen_kern_launch(int slot, uint64_t stream, const uint32_t shape[6], uint64_t t0,
                         uint64_t t1);
/* The driver could be asked names (it exports cuFuncGetName): said in the header. */
void shimgen_kern_asks(unsigned yes);
/* The header the tables are in now: the trace file's, or the process's own before it. */
struct tf_header *shimgen_kern_header(void);

/* GPU time per kernel (gputime.c): 1 in shimgen_gpu_every launches timed, 0 off. Read
 * SHIMGEN_GPU_TIME (at the driver's load, with the kernels' hooks). */
extern unsigned shimgen_gpu_every;
void shimgen_gpu_config(void);
/* Before a launch on `stream`: its start event recorded; the pair's number, -1 not timed. */
int shimgen_gpu_begin(void *stream);
/* After it (`ok`: the driver launched it; `slot`: its kernel's): its end event recorded on
 * the start's stream and the pair left pending, or the pair given back. */
void shimgen_gpu_end(int pair, int ok, int slot);
/* At a synchronisation the program made: the pending pairs that are done added. */
void shimgen_gpu_resolve(void);
/* A context about to be destroyed: its pairs dropped. */
void shimgen_gpu_ctx_gone(void *ctx);
/* A forked child: the parent's pairs forgotten. */
void shimgen_gpu_after_fork(void);
/* The GPU track (gputrack.c): context `ctx`'s reference event (recorded on `stream` when it
 * has none), -1 none; a resolved launch placed after reference `ref` by its start event;
 * a destroyed context's reference forgotten; a forked child's all. */
int shimgen_gpu_ref(void *ctx, void *stream);
void shimgen_gpu_track(int ref, void *ctx, void *start, int slot, uint64_t stream, uint64_t ns);
void shimgen_gpu_refs_gone(void *ctx);
void shimgen_gpu_refs_after_fork(void);

#endif
