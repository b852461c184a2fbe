/*
 * output.c: the files the shim writes at exit (the trace JSON and the timeline), written
 * whole or not at all.
 *
 * A new or regular target is written to a temporary file beside it: an unnamed one
 * (O_TMPFILE), given a name only when it is complete, or, where the file system cannot
 * make one, ".<name>.shimgen-<pid>-<n>.tmp" created O_EXCL|O_NOFOLLOW. Mode 0600 less the
 * umask. The temporary file is renamed over the target only when every write and the close
 * succeeded, so a reader (or a process killed mid-write) never leaves half a file at the
 * target. A name the user did not give (another process's "<name>.<pid>") never replaces a
 * file: RENAME_NOREPLACE, or a hard link where that is missing. A name the processes of a
 * job share is taken by the first of them to write (claim.c); the others write
 * "<name>.<pid>" (the names: output_name.c). A symbolic link at the target is refused
 * (ELOOP), never followed or replaced. An existing device or FIFO (/dev/full, a pipe to a
 * reader) is written in place. Every write and the close are checked: a failure is one
 * line on stderr, the temporary file is removed, and the target is left as it was. One
 * output is open at a time (the trace and the timeline are written one after the other, at
 * exit).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "claim.h"
#include "output.h"
#include "base/base.h"

#define OUT_BUF 65536u
#define TEMP_TRIES 100u

struct shimgen_out {
    int fd, dirfd;
    int in_place; /* an existing device or FIFO, written as it is */
    int unnamed;  /* O_TMPFILE: named only when complete */
    int derived;  /* a name the user did not give: replaces nothing */
    int shared;   /* OUT_SHARED: the plain name if no other process of the job has it */
    int unstamped; /* OUT_SHARED: the job's stamp could not be set: "<name>.<pid>" */
    struct timespec stamp; /* OUT_SHARED: the job's stamp, as the temporary file has it */
    char suffix[24];       /* OUT_SHARED: ".<pid>", the name when the plain one is taken */
    int err;      /* the first error, 0 if none */
    size_t len;
    const char *what;
    char path[PATH_MAX];
    char base[NAME_MAX + 1];
    char tmp[NAME_MAX + 1]; /* the temporary file's name in dirfd, "" if it has none */
    char buf[OUT_BUF];
};

/* Static: exit may run on a small signal stack. */
static struct shimgen_out out_state;
static int out_busy;

static void out_flush(struct shimgen_out *o)
{
    size_t done = 0;
    while (done < o->len && !o->err) {
        ssize_t w = write(o->fd, o->buf + done, o->len - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            o->err = w < 0 ? errno : EIO;
    }
    o->len = 0;
}

void shimgen_out_printf(struct shimgen_out *o, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t room = OUT_BUF - o->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, room, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            o->len += (size_t)n;
            return;
        }
        if (n < 0)
            break;
        out_flush(o);
    }
    if (!o->err)
        o->err = EOVERFLOW;
}

static void out_putc(struct shimgen_out *o, char c)
{
    if (o->len == OUT_BUF)
        out_flush(o);
    o->buf[o->len++] = c;
}

/* The length of the valid UTF-8 sequence of two to four bytes at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
             : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!n)
        return 0;
    uint32_t cp = s[0] & (0x3Fu >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void shimgen_out_json_str(struct shimgen_out *o, const char *s)
{
    static const char short_escape[] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n',
                                        ['\r'] = 'r', ['\t'] = 't'};
    out_putc(o, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n;
        if (*p == '"' || *p == '\\') {
            out_putc(o, '\\');
            out_putc(o, (char)*p++);
        } else if (*p < 0x20) {
            if (*p < sizeof short_escape && short_escape[*p]) {
                out_putc(o, '\\');
                out_putc(o, short_escape[*p]);
            } else
                shimgen_out_printf(o, "\\u%04x", *p);
            p++;
        } else if (*p < 0x80)
            out_putc(o, (char)*p++);
        else if ((n = utf8_len(p)) != 0)
            for (size_t i = 0; i < n; i++)
                out_putc(o, (char)*p++);
        else
            shimgen_out_printf(o, "\\udc%02x", *p++);
    }
    out_putc(o, '"');
}

static void temp_name(struct shimgen_out *o, unsigned n)
{
    long pid = (long)getpid();
    if (strlen(o->base) + 48 <= NAME_MAX)
        snprintf(o->tmp, sizeof o->tmp, ".%s.shimgen-%ld-%u.tmp", o->base, pid, n);
    else
        snprintf(o->tmp, sizeof o->tmp, ".shimgen-%ld-%u.tmp", pid, n);
}

static void out_release(struct shimgen_out *o)
{
    if (o->fd >= 0)
        close(o->fd);
    if (o->dirfd >= 0)
        close(o->dirfd);
    o->fd = o->dirfd = -1;
    __atomic_store_n(&out_busy, 0, __ATOMIC_RELEASE);
}

static struct shimgen_out *out_fail(struct shimgen_out *o, int e)
{
    shimgen_say("shimgen: cannot write %s %s: %s\n", o->what, o->path, strerror(e));
    out_release(o);
    return NULL;
}

/* The target as it is: absent, or what the output may replace; a device or FIFO is kept
 * open, written in place (o->in_place). 0, or the error that refuses it. */
static int check_target(struct shimgen_out *o)
{
    struct stat st;
    if (fstatat(o->dirfd, o->base, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno != ENOENT ? errno : 0;
    if (S_ISLNK(st.st_mode))
        return ELOOP;
    if (o->derived)
        return EEXIST;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
    /* The user must be able to write the file that is replaced (no truncation here);
     * a device or FIFO is written in place, and a FIFO without a reader fails now. */
    int fd = openat(o->dirfd, o->base,
                    O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return errno;
    if (!S_ISREG(st.st_mode)) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        o->fd = fd;
        o->in_place = 1;
        return 0;
    }
    close(fd);
    return 0;
}

/* The temporary file beside the target, unnamed or else named. 0, or the error. */
static int open_temp(struct shimgen_out *o)
{
    o->fd = openat(o->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (o->fd >= 0) {
        o->unnamed = 1;
        return 0;
    }
    for (unsigned n = 0; n < TEMP_TRIES; n++) {
        temp_name(o, n);
        o->fd = openat(o->dirfd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0600);
        if (o->fd >= 0 || errno != EEXIST)
            break;
    }
    if (o->fd < 0) {
        o->tmp[0] = '\0';
        return errno;
    }
    return 0;
}

struct shimgen_out *shimgen_out_open(const char *path, enum shimgen_out_name name,
                                     const char *what)
{
    if (__atomic_exchange_n(&out_busy, 1, __ATOMIC_ACQUIRE))
        return NULL; /* exit() from two threads at once: the first one writes */
    struct shimgen_out *o = &out_state;
    o->fd = o->dirfd = -1;
    o->in_place = o->unnamed = o->err = 0;
    o->derived = name == OUT_DERIVED;
    o->shared = name == OUT_SHARED;
    o->unstamped = 0;
    snprintf(o->suffix, sizeof o->suffix, ".%ld", (long)getpid());
    o->len = 0;
    o->what = what;
    o->tmp[0] = '\0';
    shimgen_copy_str(o->path, sizeof o->path, path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base)
        return out_fail(o, EISDIR);
    if (strlen(base) + (o->shared ? strlen(o->suffix) : 0) > NAME_MAX)
        return out_fail(o, ENAMETOOLONG);
    shimgen_copy_str(o->base, sizeof o->base, base);
    char dir[PATH_MAX] = ".";
    if (slash)
        shimgen_copy_str(dir, slash == path ? 2 : (size_t)(slash - path) + 1, path);
    const char *rel; /* under the run directory: only through the one the job started with */
    int at = shimgen_at_run_dir(dir, &rel);
    o->dirfd = at == -1 ? -1 : openat(at, rel, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    if (at >= 0)
        close(at);
    if (o->dirfd < 0)
        return out_fail(o, e);
    e = check_target(o);
    if (!e && !o->in_place)
        e = open_temp(o);
    return e ? out_fail(o, e) : o;
}

/* Give the complete unnamed file a temporary name (the link through /proc needs no
 * privilege; AT_EMPTY_PATH is the way without /proc). */
static int name_unnamed(struct shimgen_out *o)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
    for (unsigned n = 0; n < TEMP_TRIES; n++) {
        temp_name(o, n);
        if (linkat(AT_FDCWD, proc, o->dirfd, o->tmp, AT_SYMLINK_FOLLOW) == 0 ||
            (errno != EEXIST && linkat(o->fd, "", o->dirfd, o->tmp, AT_EMPTY_PATH) == 0))
            return 0;
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    o->tmp[0] = '\0';
    return e;
}

/* The complete temporary file onto the target. */
static int rename_into(struct shimgen_out *o)
{
    if (!o->derived) {
        if (renameat(o->dirfd, o->tmp, o->dirfd, o->base) != 0)
            return errno;
    } else if (renameat2(o->dirfd, o->tmp, o->dirfd, o->base, RENAME_NOREPLACE) != 0) {
        if (errno != EINVAL && errno != ENOSYS)
            return errno;
        if (linkat(o->dirfd, o->tmp, o->dirfd, o->base, 0) != 0) /* replaces nothing either */
            return errno;
        unlinkat(o->dirfd, o->tmp, 0);
    }
    o->tmp[0] = '\0';
    return 0;
}

/* OUT_SHARED: from now on this output is "<name>.<pid>", which replaces no file (the
 * lengths were checked when it was opened). */
static void to_derived(struct shimgen_out *o)
{
    size_t n = strlen(o->suffix), p = strlen(o->path), b = strlen(o->base);
    memcpy(o->path + p, o->suffix, n + 1);
    memcpy(o->base + b, o->suffix, n + 1);
    o->derived = 1;
}

/* The plain name if no other process of the job has written it, "<name>.<pid>" if one has
 * (claim.c). Under the directory's lock when it can be had. */
static int put_in_place(struct shimgen_out *o)
{
    if (!o->shared)
        return rename_into(o);
    int lock = shimgen_claim_lock(o->dirfd), e;
    if (lock == -2 || o->unstamped || shimgen_claim_taken(o->dirfd, o->base, &o->stamp)) {
        to_derived(o);
        e = rename_into(o);
    } else if (lock >= 0)
        e = rename_into(o); /* the plain name: absent, or a file of an earlier job */
    else { /* no lock: an absent name still goes to one process only */
        struct stat st;
        o->derived = fstatat(o->dirfd, o->base, &st, AT_SYMLINK_NOFOLLOW) != 0;
        e = rename_into(o);
        if (e == EEXIST) {
            to_derived(o);
            e = rename_into(o);
        }
    }
    if (lock >= 0)
        close(lock);
    return e;
}

int shimgen_out_close(struct shimgen_out *o, char *path, size_t cap)
{
    out_flush(o);
    int e = o->err;
    if (!e && o->shared && !o->in_place && shimgen_claim_stamp(o->fd, &o->stamp) != 0)
        o->unstamped = 1; /* it cannot be told from an earlier job's: never the plain name */
    if (!e && o->unnamed)
        e = name_unnamed(o);
    if (close(o->fd) != 0 && !e && errno != EINTR)
        e = errno;
    o->fd = -1;
    if (!e && !o->in_place)
        e = put_in_place(o);
    if (e && o->tmp[0])
        unlinkat(o->dirfd, o->tmp, 0);
    if (e)
        shimgen_say("shimgen: cannot write %s %s: %s\n", o->what, o->path, strerror(e));
    else if (path)
        shimgen_copy_str(path, cap, o->path);
    out_release(o);
    return e ? -1 : 0;
}
