/* A fake file system without fallocate, preloaded before the shim (tests/runtime/test_tracefile.py):
 * fallocate() fails with EOPNOTSUPP, as on a file system that cannot reserve space, so the
 * shim takes its other way to add a block to the trace file (zeros written over it). */
#undef _FILE_OFFSET_BITS /* both names defined here, neither redirected */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>

int fallocate(int fd, int mode, off_t offset, off_t len)
{
    (void)fd, (void)mode, (void)offset, (void)len;
    errno = EOPNOTSUPP;
    return -1;
}

int fallocate64(int fd, int mode, off64_t offset, off64_t len)
{
    (void)fd, (void)mode, (void)offset, (void)len;
    errno = EOPNOTSUPP;
    return -1;
}
