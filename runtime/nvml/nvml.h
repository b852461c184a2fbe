/*
 * nvml.h: the NVML shim's face. The NVML shim (libnvidia-ml.so.1) is built from this folder,
 * base/saferead.c and its architecture's nvml_stubs.S; the libcuda shim takes none of them.
 *
 *   exported trampoline i:  jmp *shimgen_nvml_slots[i]
 *   shimgen_nvml_slots[i]:  lazy stub i until the first call, then the answer of export i
 *                           (an answered export, when a limit is set), else the real
 *                           library's function, else a stand-in that returns an error
 *
 * The facts (result codes, structure offsets, the exports answered) are the generated
 * nvml_facts.h, from shimgen/driver/nvml.py; the list of exports is nvml_functions.inc.
 */
#ifndef SHIMGEN_NVML_H
#define SHIMGEN_NVML_H

#include "nvml_facts.h"

#ifndef __ASSEMBLER__
#include <stddef.h>

#include "../budget/view.h"

/* The entry code's table (nvml_stubs.S) and the C it calls. */
extern void *shimgen_nvml_slots[SHIMGEN_NVML_NFUNCS];
void *shimgen_nvml_resolve(unsigned idx);

/* nvml_table.c (generated): each export's name, in slot order. */
extern const char *const shimgen_nvml_names[SHIMGEN_NVML_NFUNCS];

/* load.c: the real library, loaded once, and its function of export idx (NULL: it has
 * none, or no real library was found). */
void *shimgen_nvml_real(unsigned idx);
/* What an export returns that cannot be forwarded: NVML_ERROR_LIBRARY_NOT_FOUND or
 * NVML_ERROR_FUNCTION_NOT_FOUND. */
unsigned int shimgen_nvml_missing(void);
/* load.c: 1 once the real library is loaded or found missing (0 on a thread that holds the
 * load or a fork); whether one was found. */
int shimgen_nvml_loaded(void);
int shimgen_nvml_found(void);

/* dlopen.c: the name the exported dlopen opens (the shim's own file for NVML's names),
 * the dlopen it then calls, and their setup. */
const char *shimgen_nvml_dlopen_filter(const char *file);
extern void *shimgen_nvml_real_dlopen;
void shimgen_nvml_dlopen_setup(void);

/* answers.c: the answer of export idx, NULL for an export that is forwarded. */
void *shimgen_nvml_answer(unsigned idx);

/*
 * view.c: the budget's view of one device, what the answers say: from the shared budget's
 * books (SHIMGEN_BUDGET_FILE, read through budget/view.h) when there are books, else from
 * the per-process limit of the environment (SHIMGEN_LIMIT_MEMORY).
 */
struct shimgen_nvml_proc {
    unsigned int pid;
    unsigned long long bytes; /* the process's bytes on the device, as its ledger holds them */
};
struct shimgen_nvml_view {
    unsigned long long limit; /* the budget's bytes on the device: the answers' total */
    unsigned long long used;  /* the budget's use of them now: the answers' used */
    int nprocs;               /* the budget's processes on the device; -1: not known */
    struct shimgen_nvml_proc procs[BOOKS_SLOTS];
};
/* Whether any limit is set (read once, at load): without one every export forwards. */
int shimgen_nvml_limited(void);
/* 1 with *out filled when a limit holds the device `dev` (an NVML device handle), 0 when
 * none does; `real_used`: the device's use as the real library says it. */
int shimgen_nvml_view(void *dev, unsigned long long real_used, struct shimgen_nvml_view *out);
/* NVML's UUID text ("GPU-" and 32 hex digits) as cuDeviceGetUuid's 16 bytes: 1, or 0. */
int shimgen_nvml_uuid_bytes(const char *text, uint8_t out[16]);
#endif

#endif
