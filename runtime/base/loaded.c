/*
 * loaded.c: the facts of the driver this process loaded, which the load (driver.c,
 * procaddr.c) fills and the trace (its file's header, the exit JSON) reads: its build id,
 * its version, and the cuGetProcAddress answers that named no export of the shim.
 */

#include "base.h"

char shimgen_loaded_build_id[129];
char shimgen_loaded_version[32] = SHIMGEN_DRIVER_VERSION;
uint64_t shimgen_unmapped_proc_addresses;
