/*
 * space.c: the trace file's disk space (tracefile.c makes the file, fork.c a child's):
 * every byte a process may write is given space before it is written, so that a full disk
 * is an error of a call that can say it, never a SIGBUS in the stubs; the header's pages a
 * part never writes (a feature that is off) are left a hole.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "block.h"
#include "tracefile.h"
#include "header.h"
#include "file.h"

/* Disk space for [off, off + len), the file grown to cover it, never shrunk: a page the
 * stubs write later cannot fail for want of space (a SIGBUS). Without fallocate, zeros are
 * written over that range, which belongs to the caller alone. */
int grow(int fd, off_t off, off_t len)
{
    if (fallocate(fd, 0, off, len) == 0)
        return 0;
    if (errno != EOPNOTSUPP && errno != ENOSYS)
        return -1;
    static char zeros[65536];
    for (off_t done = 0; done < len;) {
        size_t n = len - done < (off_t)sizeof zeros ? (size_t)(len - done) : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, off + done);
        if (w <= 0 && errno != EINTR)
            return -1;
        done += w > 0 ? w : 0;
    }
    return 0;
}

/* A block's disk space at `off`: its struct and each part's first bytes. */
int grow_block(int fd, off_t off)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t at = (sizeof(struct tstats) + page - 1) & ~(page - 1);
    if (grow(fd, off, (off_t)at) != 0)
        return -1;
    for (unsigned i = 0; i < tf_nparts; i++) {
        const struct shimgen_tf_part *p = tf_parts[i];
        size_t all = p->block_bytes ? p->block_bytes() : 0;
        size_t first = p->first_bytes ? p->first_bytes() : all;
        if (first && grow(fd, off + (off_t)at, (off_t)(first < all ? first : all)) != 0)
            return -1;
        at += all;
    }
    return 0;
}

/* The whole pages of the header that a part leaves unwritten ([*from, *to): none when
 * from == to): the one part's range that has them, given no disk space. */
void header_hole(size_t page, size_t *from, size_t *to)
{
    *from = *to = 0;
    for (unsigned i = 0; i < tf_nparts; i++) {
        size_t a = 0, b = 0;
        if (tf_parts[i]->header_unused)
            tf_parts[i]->header_unused(&a, &b);
        a = (a + page - 1) & ~(page - 1);
        b &= ~(page - 1);
        if (b > a && b <= sizeof(struct tf_header) && b - a > *to - *from) {
            *from = a;
            *to = b;
        }
    }
}
