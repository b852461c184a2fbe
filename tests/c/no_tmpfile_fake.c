/* A fake file system limit, preloaded before the shim (tests/runtime/test_faults_output.py):
 * openat() with O_TMPFILE fails with EOPNOTSUPP, as on a file system that cannot make an
 * unnamed file, so the shim takes its other way to write an output whole (a named
 * temporary file). Every other openat() is passed on unchanged. */
#undef _FILE_OFFSET_BITS /* both names defined here, neither redirected */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>

typedef int (*openat_fn)(int, const char *, int, ...);

static int fake_openat(const char *which, int dirfd, const char *path, int flags, va_list ap)
{
    mode_t mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t)
                                                                         : 0;
    if ((flags & O_TMPFILE) == O_TMPFILE) {
        errno = EOPNOTSUPP;
        return -1;
    }
    openat_fn real = (openat_fn)dlsym(RTLD_NEXT, which);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(dirfd, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int r = fake_openat("openat", dirfd, path, flags, ap);
    va_end(ap);
    return r;
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int r = fake_openat("openat64", dirfd, path, flags, ap);
    va_end(ap);
    return r;
}
