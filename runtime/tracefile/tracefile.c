/*
 * tracefile.c: SHIMGEN_TRACE_DIR, the binary trace file of each process (docs/traceformat.md).
 *
 * At a process's first traced call its file is made in the directory (made 0700 if missing;
 * a symbolic link or someone else's is refused, once): "[r<rank>-]<pid>[-<k>].shimtrace"
 * (k when the name is taken: an exec keeps the pid), O_EXCL|O_NOFOLLOW, mode 0600. A
 * header and the function names (written by tracefile/header.c), then the per-thread
 * blocks (struct tstats): block k is the page-aligned region at blocks_off + k * stride,
 * mapped MAP_SHARED, so the stubs count into the file's pages in place and a SIGKILL loses
 * no count. The file only grows (fallocate, or zeros written): two threads adding blocks at
 * once never cut each other's off.
 *
 * What a first call may run here is async-signal-safe (open, pwrite, fallocate, mmap; no
 * malloc, stdio or lock). One thread makes the file (a compare-and-swap), others wait with
 * nanosleep; a signal handler on that thread does not wait: its calls are counted with
 * atomics and put in the file at exit. A forked child moves every block onto its own file
 * at the same address (MAP_FIXED), so a timed call's frame stays valid; it never writes
 * its parent's file (fork.c). At exit the header is finished (stats.c, shimgen_collect_stats).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "block.h"
#include "tracefile.h"
#include "header.h"
#include "file.h"
#include "base/base.h"

#define TF_SUFFIX SHIMGEN_TRACEFILE_SUFFIX /* shimgen/runenv.py, through facts.h */
#define TF_NAME_TRIES 1000u

int tf_state; /* (file.h: the state fork.c shares) */
__thread int tf_creating_here __attribute__((tls_model("initial-exec")));
struct tf_header *tf_hdr; /* the header and the names, mapped shared */
size_t tf_hdr_len, tf_stride;
const struct shimgen_tf_part *tf_parts[SHIMGEN_TF_PARTS];
unsigned tf_nparts;

void shimgen_tracefile_join(const struct shimgen_tf_part *p)
{
    if (tf_nparts < SHIMGEN_TF_PARTS)
        tf_parts[tf_nparts++] = p;
}

size_t shimgen_tracefile_block_bytes(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = (sizeof(struct tstats) + page - 1) & ~(page - 1);
    for (unsigned i = 0; i < tf_nparts; i++)
        n += tf_parts[i]->block_bytes ? tf_parts[i]->block_bytes() : 0;
    return n;
}

/* Disk space for a new block at `off`: its struct tstats (rounded up to a page) and, of each
 * part's bytes, its first ones (all of them for a part that does not grow). */
void placed_block(void *block, uint64_t off)
{
    for (unsigned i = 0; i < tf_nparts; i++)
        if (tf_parts[i]->placed)
            tf_parts[i]->placed(block, off);
}

/* A new header's fields of every part, in the order joined; the magic last. */
static void attach_parts(struct tf_header *h)
{
    for (unsigned i = 0; i < tf_nparts; i++)
        tf_parts[i]->attach(h, tf_stride);
    shimgen_tracefile_header_seal(h);
}

/* A header about to be unmapped. */
void detach_parts(struct tf_header *h)
{
    for (unsigned i = 0; i < tf_nparts; i++)
        if (tf_parts[i]->detach)
            tf_parts[i]->detach(h);
}

pid_t tf_owner; /* the process the file belongs to */
static struct stat tf_st; /* its device and inode */
char tf_path[PATH_MAX];
static int tf_said;

/* Appends decimal n at p (no stdio: async-signal-safe). */
static char *put_num(char *p, unsigned long n)
{
    char d[24];
    int k = 0;
    do
        d[k++] = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    while (k)
        *p++ = d[--k];
    return p;
}

#define ADDED_AT_EXIT                                                                      \
    "the calls of threads that start from now on are counted (not timed) in memory and "  \
    "added to a block of the file at exit (printed at exit when the file has none)"

void say_once(const char *what, int e, const char *instead)
{
    if (__atomic_exchange_n(&tf_said, 1, __ATOMIC_RELAXED))
        return;
    shimgen_say("shimgen: SHIMGEN_TRACE_DIR=%s: %s (%s); %s\n", shimgen_cfg.trace_dir, what,
                strerror(e), instead);
}

/* The directory, made 0700 when it is missing; a symbolic link or someone else's is
 * refused; under the run directory, reached only through the run directory the job started
 * with (shimgen_at_run_dir). -1 (said once) when it cannot be used. */
static int open_dir(void)
{
    const char *dir = shimgen_cfg.trace_dir, *rel;
    int at = shimgen_at_run_dir(dir, &rel);
    int fd = at == -1 ? -1 : openat(at, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && at != -1 && errno == ENOENT && (mkdir(dir, 0700) == 0 || errno == EEXIST))
        fd = openat(at, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (at >= 0)
        close(at);
    if (fd < 0) {
        say_once(at == -1 ? "the run directory is no longer the one this job started with"
                 : e == ELOOP || e == ENOTDIR ? "not a directory (a symbolic link is refused)"
                                              : "cannot open the directory", e, IN_MEMORY);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
        say_once("the directory is not yours", EPERM, IN_MEMORY);
        close(fd);
        return -1;
    }
    return fd;
}

/* A new file of this process: its name, O_EXCL; -1 when none can be made. */
static int create_file(int dirfd, char *name)
{
    char base[64], *p = base;
    if (shimgen_cfg.rank[0]) {
        *p++ = 'r';
        size_t n = strlen(shimgen_cfg.rank);
        memcpy(p, shimgen_cfg.rank, n);
        p += n;
        *p++ = '-';
    }
    p = put_num(p, (unsigned long)getpid());
    for (unsigned k = 0; k < TF_NAME_TRIES; k++) {
        char *q = p;
        if (k) {
            *q++ = '-';
            q = put_num(q, k);
        }
        memcpy(q, TF_SUFFIX, sizeof TF_SUFFIX);
        int fd = openat(dirfd, base, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) {
            memcpy(name, base, strlen(base) + 1);
            return fd;
        }
    }
    errno = EEXIST;
    return -1;
}

/* "<name>.nospace" for the "<name>.shimtrace" that the disk had no room for: empty,
 * O_EXCL, 0600, never through a symbolic link (docs/traceformat.md). `name` is relative to
 * dirfd (or a path, with AT_FDCWD). */
void leave_note(int dirfd, const char *name)
{
    char note[PATH_MAX];
    if (strlen(name) + sizeof SHIMGEN_TRACEFILE_NOSPACE_SUFFIX > sizeof note)
        return;
    size_t n = strlen(name) - (sizeof TF_SUFFIX - 1);
    memcpy(note, name, n);
    memcpy(note + n, SHIMGEN_TRACEFILE_NOSPACE_SUFFIX, sizeof SHIMGEN_TRACEFILE_NOSPACE_SUFFIX);
    int fd = openat(dirfd, note, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

/* Make and map this process's file: header, names, no block yet. 0, or -1 (said). */
int make_file(void)
{
    int dirfd = open_dir();
    if (dirfd < 0)
        return -1;
    char name[96];
    int fd = create_file(dirfd, name);
    if (fd < 0) {
        int e = errno;
        close(dirfd);
        say_once("cannot create the trace file", e, IN_MEMORY);
        return -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), names = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++)
        names += strlen(shimgen_names[i]) + 1;
    size_t hlen = (sizeof(struct tf_header) + names + page - 1) & ~(page - 1);
    size_t hole_from, hole_to;
    header_hole(page, &hole_from, &hole_to);
    struct stat st;
    void *m = MAP_FAILED;
    int room = hole_to > hole_from
                   ? grow(fd, 0, (off_t)hole_from) == 0 &&
                         grow(fd, (off_t)hole_to, (off_t)(hlen - hole_to)) == 0
                   : grow(fd, 0, (off_t)hlen) == 0;
    if (room && fstat(fd, &st) == 0)
        m = mmap(NULL, hlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        /* (a full disk): the file is removed, so that no empty or partial file of ours is
         * left to read as damage; this process's trace is kept in memory. An empty note of
         * the same name takes its place (a name needs no data blocks): the run knows that
         * the process was there and that its calls are not in it. */
        int e = errno;
        close(fd);
        unlinkat(dirfd, name, 0);
        if (e == ENOSPC || e == EDQUOT)
            leave_note(dirfd, name);
        close(dirfd);
        say_once("cannot write the trace file", e, IN_MEMORY);
        return -1;
    }
    close(fd);
    close(dirfd);
    tf_stride = shimgen_tracefile_block_bytes(); /* (an anonymous block's layout too) */
    shimgen_tracefile_header_init(m, page, names, hlen, tf_stride);
    attach_parts(m);
    size_t dn = strlen(shimgen_cfg.trace_dir);
    memcpy(tf_path, shimgen_cfg.trace_dir, dn);
    tf_path[dn] = '/';
    shimgen_copy_str(tf_path + dn + 1, sizeof tf_path - dn - 1, name);
    tf_st = st;
    tf_hdr = m;
    tf_hdr_len = hlen;
    tf_owner = getpid();
    return 0;
}

/* The file again, by its name, checked to be the same file (the program may have closed
 * or reused any descriptor; none is kept). */
int reopen(void)
{
    int fd = open(tf_path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || (fstat(fd, &st) == 0 && st.st_dev == tf_st.st_dev && st.st_ino == tf_st.st_ino))
        return fd;
    close(fd);
    errno = ESTALE;
    return -1;
}

/* Waits for the file; 1 when it is there, 0 when blocks are to be anonymous (no
 * SHIMGEN_TRACE_DIR, or the file could not be made), -1 when this thread is making it (a
 * signal handler's call on that thread: counted with atomics). */
static int file_ready(void)
{
    if (!shimgen_cfg.trace_dir[0])
        return 0;
    for (;;) {
        int s = __atomic_load_n(&tf_state, __ATOMIC_ACQUIRE);
        if (s == TF_READY)
            return 1;
        if (s == TF_FAILED)
            return 0;
        if (s == TF_CREATING) {
            if (tf_creating_here)
                return -1;
            struct timespec pause = {0, 50 * 1000};
            nanosleep(&pause, NULL);
            continue;
        }
        if (!__atomic_compare_exchange_n(&tf_state, &s, TF_CREATING, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        tf_creating_here = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        int ok = make_file() == 0;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        tf_creating_here = 0;
        __atomic_store_n(&tf_state, ok ? TF_READY : TF_FAILED, __ATOMIC_RELEASE);
    }
}

int shimgen_tracefile_ready(void)
{
    return __atomic_load_n(&tf_state, __ATOMIC_ACQUIRE) == TF_READY && tf_owner == getpid();
}

/* A new, zeroed block for a thread's first traced call. NULL with *anon set: map an
 * anonymous block instead; NULL with *anon clear: count with atomics. */
void *shimgen_tracefile_block(int *anon)
{
    int r = file_ready();
    *anon = r == 0;
    if (r <= 0)
        return NULL;
    int fd = reopen();
    if (fd < 0)
        return say_once("the trace file is gone or replaced", errno, ADDED_AT_EXIT), NULL;
    uint64_t k = __atomic_fetch_add(&tf_hdr->blocks_reserved, 1, __ATOMIC_ACQ_REL);
    off_t off = (off_t)(tf_hdr->blocks_off + k * tf_stride);
    void *p = MAP_FAILED;
    if (grow_block(fd, off) == 0)
        p = mmap(NULL, tf_stride, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return say_once("cannot add a block to the trace file", e, ADDED_AT_EXIT), NULL;
    __atomic_fetch_add(&tf_hdr->blocks_mapped, 1, __ATOMIC_RELEASE);
    ((struct tstats *)p)->in_file = 1;
    placed_block(p, (uint64_t)off);
    shimgen_tracefile_calibrate(tf_hdr);
    __atomic_store_n(&tf_hdr->unmapped_proc_addresses,
                     __atomic_load_n(&shimgen_unmapped_proc_addresses, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    return p;
}

int shimgen_tracefile_grow(uint64_t off, uint64_t len)
{
    if (!shimgen_tracefile_ready())
        return -1;
    int fd = reopen();
    if (fd < 0)
        return -1;
    int r = grow(fd, (off_t)off, (off_t)len);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

/* n calls counted in memory, in no block of the file (a thread that got no block: a full
 * disk): said in the header at once, so that a process that dies before its exit puts
 * them in a block (SIGKILL, _exit) leaves a file that says its calls are not all in it. */
void shimgen_tracefile_missed(uint64_t n)
{
    if (shimgen_tracefile_ready())
        __atomic_fetch_add(&tf_hdr->calls_missing, n, __ATOMIC_RELAXED);
}

/* At exit (trace.c): the header finished. 1 when the file is the record of the trace. */
uint64_t shimgen_calls_missing;

int shimgen_tracefile_finish(uint64_t calls_missing)
{
    shimgen_calls_missing = calls_missing;
    if (!shimgen_tracefile_ready())
        return 0;
    shimgen_tracefile_header_finish(tf_hdr, calls_missing);
    return 1;
}
