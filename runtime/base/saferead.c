/*
 * saferead.c: what saferead.h promises. process_vm_readv on this very process copies from
 * the program's pointers through the kernel, which answers EFAULT, or a short count, where
 * a page cannot be read; the remote side is split at page boundaries so that the count is
 * exact to the page (the kernel's partial transfers are by iovec element). The process's
 * pid is kept (getpid is a system call), forgotten in a forked child (its fork handler)
 * and taken again whenever the kernel says the pid it was given names no process (a child
 * made by a raw clone, whose parent is gone).
 *
 * Where the kernel refuses process_vm_readv (qemu-user, which does not emulate it; a
 * seccomp filter), a page is read directly when the kernel says it is mapped (mincore
 * answers ENOMEM for an address nothing maps): NULL, 0x10, an unmapped or freed page end
 * the copy as above; only a page mapped without read permission (a guard page) could still
 * fault. The libc wrappers, never syscall(): the shim imports no door to every system call.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "saferead.h"

#define PIECES 8
#define PAGE 4096u /* the smallest page: a split at 4 KiB is a split at every larger page too */

static pid_t self_pid;
static int refused; /* the kernel refused process_vm_readv outright: never asked again */

void shimgen_safe_read_after_fork(void)
{
    __atomic_store_n(&self_pid, getpid(), __ATOMIC_RELAXED);
}

/* A forked child (fork.c, first) takes its pid again at its first read (a child handler
 * is not the place for a system call). */
void shimgen_safe_read_forget_pid(void)
{
    __atomic_store_n(&self_pid, 0, __ATOMIC_RELAXED);
}

/* One system call over at most PIECES pages of src: the bytes copied (fewer than *planned
 * where a page could not be read), or -1 (errno) when the kernel refused the read. */
static long read_pieces(void *dst, uintptr_t src, size_t n, size_t *planned)
{
    struct iovec local, remote[PIECES];
    unsigned k = 0;
    size_t plan = 0;
    while (plan < n && k < PIECES) {
        uintptr_t at = src + plan;
        size_t room = PAGE - (at & (PAGE - 1)), len = n - plan < room ? n - plan : room;
        remote[k].iov_base = (void *)at;
        remote[k].iov_len = len;
        plan += len, k++;
    }
    local.iov_base = dst, local.iov_len = plan;
    *planned = plan;
    for (int tries = 0; tries < 2; tries++) {
        pid_t pid = __atomic_load_n(&self_pid, __ATOMIC_RELAXED);
        if (!pid) {
            shimgen_safe_read_after_fork();
            pid = __atomic_load_n(&self_pid, __ATOMIC_RELAXED);
        }
        long got = (long)process_vm_readv(pid, &local, 1UL, remote, (unsigned long)k, 0UL);
        if (got >= 0)
            return got;
        if (errno == EFAULT)
            return 0;
        if (errno != ESRCH)
            break;
        shimgen_safe_read_after_fork(); /* a pid of before a fork the handlers missed */
    }
    return -1;
}

/* The copy where process_vm_readv is refused: page by page, each page read only once the
 * kernel said it is mapped; -1 when mincore is refused too (or the page size is unknown). */
static long read_mapped(void *dst, uintptr_t src, size_t n)
{
    static uintptr_t page;
    uintptr_t pg = __atomic_load_n(&page, __ATOMIC_RELAXED);
    if (!pg) {
        pg = (uintptr_t)getauxval(AT_PAGESZ);
        if (!pg || pg & (pg - 1))
            return -1;
        __atomic_store_n(&page, pg, __ATOMIC_RELAXED);
    }
    size_t done = 0;
    while (done < n) {
        uintptr_t at = src + done, base = at & ~(pg - 1);
        size_t len = n - done < pg - (at - base) ? n - done : (size_t)(pg - (at - base));
        unsigned char resident;
        if (mincore((void *)base, (size_t)pg, &resident) != 0) {
            if (errno == ENOMEM || errno == EINVAL)
                break; /* nothing mapped there: the copy ends */
            return done ? (long)done : -1;
        }
        memcpy((char *)dst + done, (const void *)at, len);
        done += len;
    }
    return (long)done;
}

long shimgen_safe_read(void *dst, const void *src, size_t n)
{
    if (__atomic_load_n(&refused, __ATOMIC_RELAXED)) {
        int saved = errno;
        long got = read_mapped(dst, (uintptr_t)src, n);
        errno = saved;
        return got;
    }
    int saved = errno;
    size_t done = 0;
    while (done < n) {
        size_t planned = 0;
        long got = read_pieces((char *)dst + done, (uintptr_t)src + done, n - done, &planned);
        if (got < 0) {
            if (errno == EPERM || errno == ENOSYS || errno == EACCES) {
                __atomic_store_n(&refused, 1, __ATOMIC_RELAXED);
                long rest = read_mapped((char *)dst + done, (uintptr_t)src + done, n - done);
                errno = saved;
                return rest < 0 ? (done ? (long)done : -1) : (long)(done + (size_t)rest);
            }
            errno = saved;
            return done ? (long)done : -1;
        }
        done += (size_t)got;
        if ((size_t)got < planned)
            break; /* an unreadable page */
    }
    errno = saved;
    return (long)done;
}

long shimgen_safe_string(char *dst, size_t cap, const void *src)
{
    dst[0] = 0;
    if (!src || cap <= 1)
        return src ? 0 : -1;
    long got = shimgen_safe_read(dst, src, cap - 1);
    if (got <= 0) {
        dst[0] = 0;
        return -1;
    }
    size_t len = strnlen(dst, (size_t)got);
    dst[len] = 0;
    return (long)len;
}
