/*
 * load/load.h: the driver's load (driver.c), the first call that starts it, dlopen's
 * redirection (dlopen.c), the cuGetProcAddress address map (procaddr.c), the mark every
 * shim carries (selfcheck.c) and the one after-fork (fork.c).
 */
#ifndef SHIMGEN_LOAD_H
#define SHIMGEN_LOAD_H

#include "base/base.h"

/* ---- the real driver (driver.c) ---- */
void shimgen_init(void);
void *shimgen_lazy_resolve(unsigned idx);
/* fork() while a load runs: waits for it, holds off a new one until the fork is done */
void shimgen_load_before_fork(void);
void shimgen_load_after_fork(void);

/* ---- loading the driver safely (driver.c, selfcheck.c, stubs.S) ---- */
int shimgen_file_is_shim(const char *path);

/* ---- cuGetProcAddress answers (procaddr.c) ---- */
void shimgen_addr_map_add(void *real_fn, unsigned idx);
void shimgen_addr_map_sort(void);
void *shimgen_map_proc_address(void *real_fn);

/* ---- dlopen redirection (dlopen.c) ---- */
extern void *shimgen_real_dlopen;
void shimgen_dlopen_setup(void);
const char *shimgen_dlopen_filter(const char *file);

/* userreal.S before the driver is loaded: what SHIMGEN_REAL(name) of export idx jumps to
 * (driver.c). */
void *shimgen_user_real_resolve(unsigned idx);

#endif
