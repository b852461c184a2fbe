/*
 * saferead.c: what saferead.h promises. process_vm_readv on this very process copies from
 * the program's pointers through the kernel, which answers EFAULT, or a short count, where
 * a page cannot be read; the remote side is split at page boundaries so that the count is
 * exact to the page (the kernel's partial transfers are by iovec element). The process's
 * pid is kept (getpid is a system call), forgotten in a forked child (its fork handler)
 * and taken again whenever the kernel says the pid it was given names no process (a child
 * made by a raw clone, whose parent is gone).
 *
 * Before any of that, memory of the calling thread's own stack at or above the stack pointer
 * is copied directly (on_own_stack: the thread's live frames, readable whatever the pointer
 * means; the stack found once per thread in /proc/self/maps, docs/security.md).
 *
 * Where the kernel refuses process_vm_readv (qemu-user, which does not emulate it; a
 * seccomp filter), a page is read directly when the kernel says it is mapped (mincore
 * answers ENOMEM for an address nothing maps): NULL, 0x10, an unmapped or freed page end
 * the copy as above; only a page mapped without read permission (a guard page) could still
 * fault. The libc wrappers, never syscall(): the shim imports no door to every system call.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

/* The calling thread's own stack, found once per thread (stack_state: 0 not yet, 1 being
 * looked for, 2 known, 3 none): [stack_lo, stack_hi), one readable mapping that lives as
 * long as the thread, whose part above the stack pointer holds the thread's live frames
 * (docs/security.md, "What a program passes"). */
static __thread uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
static __thread int stack_state __attribute__((tls_model("initial-exec")));

static uintptr_t hex(const char **p)
{
    uintptr_t v = 0;
    for (;; (*p)++) {
        unsigned c = (unsigned char)**p, d = c - '0' < 10 ? c - '0'
                                         : (c | 0x20) - 'a' < 6 ? (c | 0x20) - 'a' + 10 : 16;
        if (d > 15)
            return v;
        v = v << 4 | d;
    }
}

/* One line of /proc/self/maps (NUL-terminated; a line longer than the buffer: its start)
 * against the stack pointer `sp` and the thread pointer `tp`; *end and *guard: the line
 * before's end and whether it was a mapping without any access (a guard page), updated.
 * 1: the stack is this line's mapping, its range set. */
static int stack_line(const char *l, uintptr_t sp, uintptr_t tp, uintptr_t *end, int *guard)
{
    const char *p = l;
    uintptr_t lo = hex(&p), hi = *p == '-' ? (p++, hex(&p)) : 0, below = *end;
    int was_guard = *guard;
    const char *perms = *p == ' ' ? p + 1 : "";
    size_t len = strlen(l);
    *end = hi;
    *guard = strncmp(perms, "---p", 4) == 0;
    if (sp < lo || sp >= hi || strncmp(perms, "rw", 2) != 0)
        return 0;
    if (len > 8 && strcmp(l + len - 8, " [stack]") == 0) {
        stack_lo = lo, stack_hi = hi; /* the process's first thread: the kernel's stack */
        return 1;
    }
    if (tp && tp > sp && tp < hi && below == lo && was_guard) {
        stack_lo = lo, stack_hi = tp; /* a thread the C library made: up to its own TCB */
        return 1;
    }
    return 0;
}

/* The calling thread's stack: the mapping of /proc/self/maps that holds `sp`, readable and
 * writable, when it is the kernel's stack of the process's first thread, or, in any other
 * thread, when it also holds the thread's descriptor (pthread_self) and lies right above a
 * guard page: a stack that the C library made for the thread, the descriptor at its top,
 * the guard keeping any other mapping from having merged with it below. (The first
 * thread's descriptor is the loader's memory, which a mapping of the program's own may have
 * merged with: never taken.) Otherwise none: every read goes through the kernel. */
static void find_stack(uintptr_t sp)
{
    uintptr_t tp = gettid() == getpid() ? 0 : (uintptr_t)pthread_self(), end = 0;
    int guard = 0, found = 0, fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[2048];
        size_t have = 0;
        int skipping = 0;
        while (!found) {
            ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
            if (got <= 0)
                break;
            have += (size_t)got;
            buf[have] = 0;
            char *line = buf, *nl;
            while (!found && (nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
                *nl = 0;
                if (!skipping)
                    found = stack_line(line, sp, tp, &end, &guard);
                skipping = 0;
                line = nl + 1;
            }
            have -= (size_t)(line - buf);
            memmove(buf, line, have);
            if (have == sizeof buf - 1) { /* a line longer than the buffer: its start */
                buf[have] = 0;
                if (!skipping)
                    found = stack_line(buf, sp, tp, &end, &guard);
                skipping = 1, have = 0;
            }
        }
        close(fd);
    }
    __atomic_store_n(&stack_state, found ? 2 : 3, __ATOMIC_RELAXED);
}

/* Whether [src, src + n) lies in the calling thread's own stack, at or above this frame. */
static int on_own_stack(uintptr_t src, size_t n)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    int st = __atomic_load_n(&stack_state, __ATOMIC_RELAXED);
    if (st == 0 && src >= sp) {
        /* a signal handler's read meanwhile finds 1: the safe read */
        __atomic_store_n(&stack_state, 1, __ATOMIC_RELAXED);
        int saved = errno;
        find_stack(sp);
        errno = saved;
        st = __atomic_load_n(&stack_state, __ATOMIC_RELAXED);
    }
    return st == 2 && sp >= stack_lo && sp < stack_hi && src >= sp && src < stack_hi &&
           n <= stack_hi - src;
}

long shimgen_safe_read(void *dst, const void *src, size_t n)
{
    if (on_own_stack((uintptr_t)src, n)) {
        memcpy(dst, src, n);
        return (long)n;
    }
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
