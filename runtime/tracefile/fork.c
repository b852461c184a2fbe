/*
 * fork.c: a forked child's trace file (tracefile.c makes a process's file). Every block
 * moves onto the child's own file at the same address (MAP_FIXED), so a timed call's frame
 * stays valid; the child never writes its parent's file.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "block.h"
#include "file.h"

/* A forked child's block b, block k of its new file `fd` (-1: none), moved there at the same
 * address, or else onto anonymous memory. */
static void move_block(struct tstats *b, uint64_t k, int fd)
{
    /* The bookkeeping (untimed to tid) is kept aside, since the new mapping replaces
     * the block's bytes; the counters after it start from zero, as the child's own. */
    static char keep[TS_ERR_OVERFLOW - TS_UNTIMED];
    memcpy(keep, (char *)b + TS_UNTIMED, sizeof keep);
    off_t off = fd >= 0 ? (off_t)(tf_hdr->blocks_off + k * tf_stride) : 0;
    int moved = fd >= 0 &&
                pwrite(fd, keep, sizeof keep, off + TS_UNTIMED) == (ssize_t)sizeof keep &&
                mmap(b, tf_stride, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                     off) != MAP_FAILED;
    if (!moved && mmap(b, tf_stride, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
        memcpy((char *)b + TS_UNTIMED, keep, sizeof keep);
    b->in_file = (uint64_t)moved;
    if (moved)
        placed_block(b, (uint64_t)off);
}

/* The child's own file made (its descriptor, -1 when it cannot be), the parent's header
 * unmapped. */
static int child_file(void)
{
    struct tf_header *parent = tf_hdr;
    size_t parent_len = tf_hdr_len;
    tf_hdr = NULL;
    int fd = -1;
    if (make_file() == 0) {
        /* Both clocks are the machine's: the parent's first pair lengthens the span. The
         * child's own pairs a and 1 are exact already against its own pair 0, and stay
         * so against the parent's earlier one. */
        tf_hdr->calib_ns0 = parent->calib_ns0;
        tf_hdr->calib_ticks0 = parent->calib_ticks0;
        tf_hdr->calib_width0 = parent->calib_width0;
        if ((fd = reopen()) < 0)
            say_once("cannot reopen the trace file", errno, IN_MEMORY);
    }
    munmap(parent, parent_len);
    return fd;
}

/* Every block moved onto the child's file `fd` (claimed, the file grown, moved), or onto
 * anonymous memory when there is none or it cannot grow; the file's state set. */
static void move_blocks(struct tstats *blocks, int fd)
{
    uint64_t n = 0;
    for (struct tstats *b = blocks; b; b = b->next)
        n++;
    /* Claimed before the file grows to cover them (and mapped once moved): a child killed
     * in between leaves a file whose blocks its header accounts for. */
    if (fd >= 0)
        tf_hdr->blocks_reserved = n;
    int grown = 0;
    for (uint64_t k = 0; fd >= 0 && k < n && grown == 0; k++)
        grown = grow_block(fd, (off_t)(tf_hdr->blocks_off + k * tf_stride));
    if (grown != 0) {
        /* (a full disk): the file, which would say nothing of the child's calls, goes; the
         * note of no room takes its place, as for a file that could not take its header */
        int e = errno;
        say_once("cannot write the trace file", e, IN_MEMORY);
        close(fd);
        fd = -1;
        unlinkat(AT_FDCWD, tf_path, 0);
        if (e == ENOSPC || e == EDQUOT)
            leave_note(AT_FDCWD, tf_path);
    }
    uint64_t k = 0;
    for (struct tstats *b = blocks; b; k++) {
        struct tstats *next = b->next;
        move_block(b, k, fd);
        b = next;
    }
    if (fd >= 0) {
        tf_hdr->blocks_mapped = n;
        close(fd);
    } else {
        if (tf_hdr) {
            detach_parts(tf_hdr); /* (the ledger's numbers were kept there) */
            munmap(tf_hdr, tf_hdr_len);
        }
        tf_hdr = NULL;
    }
    __atomic_store_n(&tf_state, fd >= 0 ? TF_READY : TF_FAILED, __ATOMIC_RELEASE);
}

/* A forked child: every block moves onto the child's own file at the same address, its
 * bookkeeping (frames, list link, ring) copied and its counters zero; or, when the child's
 * file cannot be made, onto anonymous memory. The parent's file is never written. */
void shimgen_tracefile_after_fork(struct tstats *blocks)
{
    int s = __atomic_load_n(&tf_state, __ATOMIC_ACQUIRE);
    if (s == TF_CREATING && !tf_creating_here) {
        tf_state = TF_NONE; /* the thread making it is the parent's */
        return;
    }
    if (s != TF_READY || tf_owner == getpid())
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    move_blocks(blocks, child_file());
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
