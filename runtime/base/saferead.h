/*
 * saferead.h: reading what a program passed without ever faulting where the driver would
 * not have (saferead.c). The program's pointers may be garbage (NULL, 0x10, an unmapped or
 * unreadable page): the shim reads them only through these, which copy with the kernel's
 * process_vm_readv on the process itself, page by page, so an unreadable page ends the copy
 * instead of raising SIGSEGV; where the kernel refuses that (qemu-user, a seccomp filter), a
 * page is read only once mincore says it is mapped. Memory of the calling thread's own stack,
 * at or above its stack pointer, is copied directly, with no system call (saferead.c,
 * docs/security.md). Async-signal-safe, no allocation, no lock.
 */
#ifndef SHIMGEN_SAFEREAD_H
#define SHIMGEN_SAFEREAD_H

#include <stddef.h>

/* Up to n bytes of src copied to dst: the number copied, n or fewer (the first unreadable
 * page ends the copy; 0 when src itself cannot be read). -1 when no read can be made here
 * (the kernel refuses both process_vm_readv and mincore); nothing is copied then. */
long shimgen_safe_read(void *dst, const void *src, size_t n);

/* A string at src copied to dst (cap bytes, cap >= 1), cut at cap - 1 bytes and always
 * terminated: its length, or -1 when not one byte of it can be read (dst is then ""). A
 * string cut by an unreadable page is kept up to that page. */
long shimgen_safe_string(char *dst, size_t cap, const void *src);

/* The process's pid as the reads use it, taken again now (asked again too when the kernel
 * says the pid is gone); forgotten in a forked child (fork.c), taken at its first read. */
void shimgen_safe_read_after_fork(void);
void shimgen_safe_read_forget_pid(void);

#endif
