/*
 * say.c: the one way the runtime says something: one line on stderr (or appended to
 * SHIMGEN_NOTICE_FILE, "[pid N] " first), unless SHIMGEN_QUIET; and the files under the
 * run directory, reached through the directory the job started with (config.c reads
 * SHIMGEN_RUN_DIR).
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

/* Where to open `path` from: AT_FDCWD (and `path` itself) when it is not under the run
 * directory; a descriptor of the run directory (close it) and the name under it, once that
 * directory is checked to be the one the run made; -1 (errno ESTALE) when the run
 * directory's path now names another directory (or none). */
int shimgen_at_run_dir(const char *path, const char **rel)
{
    size_t n = strlen(shimgen_cfg.run_dir);
    *rel = path;
    if (!n || strncmp(path, shimgen_cfg.run_dir, n) != 0 || (path[n] && path[n] != '/'))
        return AT_FDCWD;
    int fd = open(shimgen_cfg.run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != shimgen_cfg.run_dev ||
                    st.st_ino != shimgen_cfg.run_ino)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        errno = ESTALE;
        return -1;
    }
    for (*rel = path + n; **rel == '/'; (*rel)++)
        ;
    if (!**rel)
        *rel = ".";
    return fd;
}

static int notice_dir_replaced;

/* SHIMGEN_NOTICE_FILE: opened for each notice (notices are few; a descriptor kept open
 * could be closed or reused by the program), -1 when it cannot be: stderr then. Only a
 * regular file of this user's is written: opened without blocking (a FIFO with no reader
 * fails at once, one with a reader is refused by the check), never through a link, and
 * under the run directory only through that directory (shimgen_at_run_dir). */
static int open_notice_file(void)
{
    if (!shimgen_cfg.notice_file[0])
        return -1;
    const char *rel;
    int at = shimgen_at_run_dir(shimgen_cfg.notice_file, &rel);
    if (at == -1) {
        if (!__atomic_exchange_n(&notice_dir_replaced, 1, __ATOMIC_RELAXED)) {
            char line[PATH_MAX + 160];
            int n = snprintf(line, sizeof line, "shimgen: SHIMGEN_NOTICE_FILE=%s: the run "
                             "directory %s is no longer the one this job started with; "
                             "notices go to stderr\n", shimgen_cfg.notice_file,
                             shimgen_cfg.run_dir);
            if (n > 0)
                (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n
                                                                           : sizeof line - 1);
        }
        return -1;
    }
    int fd = openat(at, rel,
                    O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                    0600);
    if (at >= 0)
        close(at);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
        close(fd);
        return -1;
    }
    return fd;
}

void shimgen_say(const char *fmt, ...)
{
    if (shimgen_cfg.quiet)
        return;
    char buf[1024];
    int fd = open_notice_file();
    int pre = 0;
    if (fd >= 0)
        pre = snprintf(buf, sizeof buf, "[pid %ld] ", (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + pre, sizeof buf - (size_t)pre, fmt, ap);
    va_end(ap);
    if (n >= 0) {
        n += pre;
        if ((size_t)n >= sizeof buf) { /* cut short: still one line */
            n = sizeof buf - 1;
            buf[n - 1] = '\n';
        }
        ssize_t w = write(fd >= 0 ? fd : STDERR_FILENO, buf, (size_t)n); /* one write a line */
        (void)w;
    }
    if (fd >= 0)
        close(fd);
}

void shimgen_copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A file name without %p or %r, which the processes of one job would share. */
int shimgen_shared_name(const char *name)
{
    return name[0] && !strstr(name, "%p") && !strstr(name, "%r");
}
