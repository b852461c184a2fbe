/*
 * view.h: the shared memory budget's books (docs/memory.md, "One budget for many
 * processes"): their layout, the liveness of a process's slot, and a read-only view of them
 * for another library of the same machine (an NVML shim answering with the budget). The
 * budget (budget.c) writes them; this header needs nothing of the shim but libc, so that
 * another library includes it alone.
 *
 * The books are one file, mapped shared by every process of the budget: a header, one
 * entry per device (keyed by its UUID, cuDeviceGetUuid's; "ordinal" and the ordinal when the
 * driver has no UUID to give), and one slot per process (its pid, its pid namespace, its
 * start time, the bytes it holds per device and their peak). Updates are made under
 * `lock`, a word naming the slot and the thread that hold it; a process that dies holding
 * it is found dead by the others (books_slot_dead), who take the lock over; `seq` is odd
 * while an update is under way, so a reader without the lock (this view) reads again until
 * it is even. A slot's process holds an OFD lock on the byte BOOKS_LIVE_AT + its index of
 * the file while it lives (the kernel drops it when the process's files close, however it
 * dies). A slot's pid is -1 while a process claims it (never dead then).
 */
#ifndef SHIMGEN_BUDGET_VIEW_H
#define SHIMGEN_BUDGET_VIEW_H

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_OFD_GETLK /* (Linux's, where _GNU_SOURCE was not defined before fcntl.h) */
#define F_OFD_GETLK 36
#endif

#define BOOKS_MAGIC 0x3153444745554253ull /* "SBUEGDS1" */
#define BOOKS_VERSION 1u
#define BOOKS_DEVICES 16
#define BOOKS_SLOTS 256
#define BOOKS_REFUSALS 64          /* the last refusals kept, a ring */
#define BOOKS_LIVE_AT (1ll << 40) /* where the slots' liveness locks are, past the data */

/* The lock's word while the thread of thread pointer `tp` of slot `i`'s process holds it. */
#define BOOKS_HOLDER(i, tp) ((uint64_t)((i) + 1) << 48 | ((uint64_t)(tp) & ((1ull << 48) - 1)))
#define BOOKS_HOLDER_SLOT(word) ((int)((word) >> 48) - 1)

struct books_device {
    uint8_t key[16]; /* the UUID */
    uint32_t in_use, unused; /* 0: a free entry */
    uint64_t used, peak;
};
struct books_slot {
    int32_t pid; /* 0: a free slot */
    uint32_t refused;
    uint64_t pidns, start; /* the pid namespace's inode, the start time (/proc stat, 22) */
    uint64_t bytes[BOOKS_DEVICES], peak[BOOKS_DEVICES];
};
struct books_refusal {
    int32_t pid;
    uint32_t device;
    uint64_t size, used; /* what was asked, and what the device's budget held then */
};
struct books {
    uint64_t magic;
    uint32_t version, bytes; /* sizeof(struct books) */
    uint64_t limit;          /* per device */
    uint64_t seq;            /* odd while an update is under way */
    uint64_t refused;        /* refusals in all; the last BOOKS_REFUSALS in `refusals` */
    union {
        uint64_t lock; /* 0, or its holder: BOOKS_HOLDER (budget.c) */
        char pad[64];
    };
    struct books_device device[BOOKS_DEVICES];
    struct books_slot slot[BOOKS_SLOTS];
    struct books_refusal refusals[BOOKS_REFUSALS];
};

/* A process's start time (/proc/PID/stat, field 22) and whether it is a zombie; 0: no
 * such process (or /proc unreadable). */
static inline uint64_t books_start_time(int pid, int *zombie)
{
    char path[40], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* (the command's name may hold anything) */
    if (!p || p[1] != ' ')
        return 0;
    *zombie = p[2] == 'Z' || p[2] == 'X';
    p += 2; /* field 3 */
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p, ' '), p = p ? p + 1 : NULL;
    return p ? strtoull(p, NULL, 10) : 0;
}

/* This process's pid namespace (its inode), to tell whether a slot's pid is one of ours. */
static inline uint64_t books_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether slot `i`'s process is gone: its liveness lock free (its files closed), and, when
 * it is of this pid namespace, the process gone, a zombie, or another of the same pid (its
 * start time): so its memory is back at the driver, never a moment before. A process of
 * another namespace: the lock alone. `fd`: the books, open. */
static inline int books_slot_dead(int fd, const struct books *b, unsigned i, uint64_t my_ns)
{
    const struct books_slot *s = &b->slot[i];
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = BOOKS_LIVE_AT + i, .l_len = 1};
    if (s->pid <= 0 || fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK)
        return 0;
    if (!my_ns || s->pidns != my_ns)
        return 1;
    int zombie = 0;
    uint64_t start = books_start_time(s->pid, &zombie);
    return !start || zombie || start != s->start;
}

/* What another library reads: the limit and what is used per device, and each live
 * process's bytes. */
struct shimgen_budget_view {
    uint64_t limit;
    unsigned ndevices, nprocs;
    struct {
        uint8_t uuid[16];
        uint64_t used, peak; /* used: the live processes' bytes summed */
    } device[BOOKS_DEVICES];
    struct {
        int pid; /* as the process's own pid namespace numbers it */
        uint64_t bytes[BOOKS_DEVICES];
    } proc[BOOKS_SLOTS];
};

/* The books of `path` (a shim's SHIMGEN_BUDGET_FILE: facts.h, SHIMGEN_ENV_BUDGET_FILE), read-only, taken whole while
 * no update was under way (tried 1000 times; a writer that died mid-update is repaired by
 * the next writer): 0, or -1 (no books there, not ours, or not these books). Slots of
 * processes gone are left out, and their bytes out of `used`. */
static inline int shimgen_budget_read(const char *path, struct shimgen_budget_view *v)
{
    int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) || (uint64_t)st.st_size != sizeof(struct books)) {
        close(fd);
        return -1;
    }
    const struct books *b = mmap(NULL, sizeof *b, PROT_READ, MAP_SHARED, fd, 0);
    int rc = -1;
    uint64_t ns = books_pidns();
    for (int tries = 0; b != MAP_FAILED && tries < 1000; tries++) {
        uint64_t seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
        if (b->magic != BOOKS_MAGIC || b->version != BOOKS_VERSION)
            break;
        if (seq & 1)
            continue;
        memset(v, 0, sizeof *v);
        v->limit = b->limit;
        for (unsigned d = 0; d < BOOKS_DEVICES; d++) {
            memcpy(v->device[d].uuid, b->device[d].key, 16);
            v->device[d].peak = b->device[d].peak;
            v->ndevices += b->device[d].in_use != 0;
        }
        for (unsigned i = 0; i < BOOKS_SLOTS; i++) {
            if (b->slot[i].pid <= 0 || books_slot_dead(fd, b, i, ns))
                continue;
            v->proc[v->nprocs].pid = b->slot[i].pid;
            for (unsigned d = 0; d < BOOKS_DEVICES; d++) {
                v->proc[v->nprocs].bytes[d] = b->slot[i].bytes[d];
                v->device[d].used += b->slot[i].bytes[d];
            }
            v->nprocs++;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) == seq) {
            rc = 0;
            break;
        }
    }
    if (b != MAP_FAILED)
        munmap((void *)b, sizeof *b);
    close(fd);
    return rc;
}

#endif
