/*
 * claim.c: which process of a job writes the plain SHIMGEN_TRACE_FILE (or
 * SHIMGEN_TIMELINE_FILE) name, one without %p or %r. The first process of the job to write
 * its file takes the plain name; every other one writes "<name>.<pid>". (A fork without exec
 * is a copy of a program of the job: it always writes "<name>.<pid>", output_name.c.)
 *
 * A job is every process started under the first one that loaded the shim: that process
 * sets SHIMGEN_TRACE_JOB=<sec>.<nsec> (its start, CLOCK_REALTIME) and the others inherit it
 * (config.c). Each complete temporary file is given that stamp as its modification time
 * (futimens on the shim's own file), so a file at the plain name with the same time (as
 * the file system stores it: the temporary file's own, read back) is this job's, and one
 * with another is from an earlier job: the user's name, replaced as before. The check and
 * the rename happen under an flock of the directory, so two processes of a job that write
 * at the same moment never both take the plain name; a process that cannot have the lock
 * within LOCK_WAIT_MS writes its own "<name>.<pid>" rather than risk another's file. Where
 * the directory cannot be locked at all (no read permission, a file system without flock),
 * an absent name is still taken by one process only (RENAME_NOREPLACE). A file whose time
 * cannot be set is written as "<name>.<pid>": it could not be told from an earlier job's.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "claim.h"
#include "base/base.h"

#define LOCK_WAIT_MS 2000

/* Stamp the complete temporary file `fd` with the job's time; `stored` gets the time as the
 * file system keeps it (it may round). 0, or an errno. */
int shimgen_claim_stamp(int fd, struct timespec *stored)
{
    struct timespec t[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                            {.tv_sec = shimgen_cfg.job_sec, .tv_nsec = shimgen_cfg.job_nsec}};
    struct stat st;
    if (futimens(fd, t) != 0 || fstat(fd, &st) != 0)
        return errno;
    *stored = st.st_mtim;
    return 0;
}

/* The directory `dirfd` locked against the other writers of the job: the lock's file
 * descriptor (close it to unlock); -1 when it cannot be locked at all; -2 when another
 * process held it for LOCK_WAIT_MS. */
int shimgen_claim_lock(int dirfd)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct timespec pause = {0, 1000000};
    for (int waited = 0; waited < LOCK_WAIT_MS; waited++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(fd);
            return -1;
        }
        nanosleep(&pause, NULL);
    }
    close(fd);
    return -2;
}

/* Whether `base` in `dirfd` is a file another process of this job wrote: a regular file
 * whose modification time is the job's stamp as this file system stores it. */
int shimgen_claim_taken(int dirfd, const char *base, const struct timespec *stored)
{
    struct stat st;
    if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    return S_ISREG(st.st_mode) && st.st_mtim.tv_sec == stored->tv_sec &&
           st.st_mtim.tv_nsec == stored->tv_nsec;
}
