/*
 * budget.c: one memory budget for many processes (docs/memory.md, "One budget for many
 * processes"). The books (view.h) are a file every process of the budget maps shared; each
 * process has a slot, the bytes it holds per device (its allocations, and what its pools
 * and graphs reserve beyond them), and each device the bytes its slots hold together
 * (`used`): the ledger's reservations (memory/) take from here before the driver is
 * called, never past the limit, and what it gives back comes back here.
 *
 * Every update is made under the books' lock, a word naming its holder (its slot and
 * thread): a robust lock of our own, as a process-shared robust pthread mutex costs some
 * 250 instructions a lock and unlock where this costs a few (docs/performance.md). A
 * process waiting for it checks, now and then, whether the holder's process is gone
 * (view.h, books_slot_dead), and takes the lock over when it is. A slot's bytes are the
 * truth; a device's `used` is their sum, kept as they change and made again from the live
 * slots (repair) when the lock was taken over (the sum of the slots is whole, whatever the
 * dead holder left half-done) and when a reservation finds the budget short: then the
 * slots of processes gone are given back first. No time-outs: a process is gone or not.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch/cpu.h"
#include "base/base.h"
#include "budget.h"
#include "view.h"

#define COLS SHIMGEN_MEM_DEVICES

int shimgen_budget_on;
static struct books *books;
static int books_fd = -1;
static int mine = -1;          /* this process's slot */
static uint64_t my_ns;         /* its pid namespace */
static int dev_of[COLS];       /* each column's device entry, + 1; 0: not found yet */
static uint64_t charged[COLS]; /* what pools and graphs reserve, as the slot holds it */
static char books_path[4096];

static void make_odd(void)
{
    if (!(books->seq & 1))
        __atomic_store_n(&books->seq, books->seq + 1, __ATOMIC_RELEASE);
}

/* Each device's `used` made again from the live slots, the slots of processes gone freed
 * (the lock held). */
static void repair(void)
{
    uint64_t used[BOOKS_DEVICES] = {0};
    for (unsigned i = 0; i < BOOKS_SLOTS; i++) {
        struct books_slot *s = &books->slot[i];
        if ((int)i != mine && s->pid > 0 && books_slot_dead(books_fd, books, i, my_ns)) {
            int32_t pid = s->pid;
            memset(&s->refused, 0, sizeof *s - offsetof(struct books_slot, refused));
            __atomic_compare_exchange_n(&s->pid, &pid, 0, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        }
        for (unsigned d = 0; s->pid > 0 && d < BOOKS_DEVICES; d++)
            used[d] += s->bytes[d];
    }
    for (unsigned d = 0; d < BOOKS_DEVICES; d++)
        books->device[d].used = used[d];
}

/* The lock held by another: waited for, and taken over when its holder is found dead (a
 * thread of this process never is) or the word names no slot (damaged: no holder ever
 * lets it go); then whatever it left half-done is repaired. 0: the holder is this very
 * thread (a signal handler inside its own update). */
static __attribute__((noinline)) int wait_books(uint64_t me, uint64_t was)
{
    for (unsigned spins = 1;; spins++) {
        if (was == me)
            return 0;
        int holder = BOOKS_HOLDER_SLOT(was);
        if (was && !(spins & 255) && holder != mine &&
            ((unsigned)holder >= BOOKS_SLOTS ||
             books_slot_dead(books_fd, books, (unsigned)holder, my_ns)) &&
            __atomic_compare_exchange_n(&books->lock, &was, me, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            make_odd();
            repair();
            return 1;
        }
        if (spins > 64)
            sched_yield();
        else
            shimgen_pause();
        was = 0;
        if (__atomic_compare_exchange_n(&books->lock, &was, me, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            break;
    }
    make_odd();
    return 1;
}

/* 0: not taken (a signal handler of the thread holding it: not waited for). */
static inline int lock_books(void)
{
    uint64_t me = BOOKS_HOLDER(mine, __builtin_thread_pointer()), was = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(&books->lock, &was, me, 0,
                                                      __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 0))
        return wait_books(me, was);
    __atomic_store_n(&books->seq, books->seq + 1, __ATOMIC_RELAXED); /* (odd) */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return 1;
}

static inline void unlock_books(void)
{
    __atomic_store_n(&books->seq, books->seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&books->lock, 0, __ATOMIC_RELEASE);
}

/* New books in a file of their own, put in place under the name only once whole; an
 * existing file wins (another process made it first). */
static int make_books(const char *path, uint64_t limit)
{
    char tmp[sizeof books_path + 32];
    snprintf(tmp, sizeof tmp, "%s.new.%d", path, (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    struct books *b = MAP_FAILED;
    if (ftruncate(fd, sizeof *b) == 0)
        b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b != MAP_FAILED) {
        b->limit = limit, b->version = BOOKS_VERSION, b->bytes = sizeof *b;
        __atomic_store_n(&b->magic, BOOKS_MAGIC, __ATOMIC_RELEASE);
        munmap(b, sizeof *b);
        if (link(tmp, path) != 0 && errno != EEXIST)
            b = MAP_FAILED;
    }
    unlink(tmp);
    close(fd);
    return b == MAP_FAILED ? -1 : 0;
}

/* The books mapped: ours alone (owner-only, a regular file, not a link), whole. */
static const char *open_books(const char *path, uint64_t limit)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && limit && make_books(path, limit) == 0)
        fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT && !limit ? "no such books, and no size to make them with"
                                         : "cannot be opened";
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) || (uint64_t)st.st_size != sizeof *books) {
        close(fd);
        return "is not books of this user alone (owner-only) of this version";
    }
    struct books *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED || b->magic != BOOKS_MAGIC || b->version != BOOKS_VERSION ||
        b->bytes != sizeof *b) {
        if (b != MAP_FAILED)
            munmap(b, sizeof *b);
        close(fd);
        return "is not books of this version";
    }
    books = b, books_fd = fd;
    return NULL;
}

/* A slot for this process: a free one claimed (its pid -1 until it is filled in: never
 * dead, never counted), else one of a process gone; held while the process lives by its
 * liveness lock. (A slot of a process gone still counts in `used` until the next repair,
 * made once the slot is this process's.) */
static int claim_slot(void)
{
    int zombie = 0;
    uint64_t start = books_start_time((int)getpid(), &zombie);
    int at = -1;
    for (int pass = 0; pass < 2 && at < 0; pass++)
        for (unsigned i = 0; i < BOOKS_SLOTS && at < 0; i++) {
            int32_t was = __atomic_load_n(&books->slot[i].pid, __ATOMIC_ACQUIRE);
            if ((pass ? was > 0 && books_slot_dead(books_fd, books, i, my_ns) : !was) &&
                __atomic_compare_exchange_n(&books->slot[i].pid, &was, -1, 0,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                at = (int)i;
        }
    if (at < 0)
        return -1;
    struct books_slot *s = &books->slot[at];
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1};
    fl.l_start = BOOKS_LIVE_AT + at;
    memset(&s->refused, 0, sizeof *s - offsetof(struct books_slot, refused));
    if (fcntl(books_fd, F_OFD_SETLK, &fl) != 0) {
        __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
        return -1;
    }
    s->pidns = my_ns, s->start = start;
    __atomic_store_n(&s->pid, (int32_t)getpid(), __ATOMIC_RELEASE);
    return at;
}

static void join(const char *path, uint64_t limit)
{
    my_ns = books_pidns();
    const char *why = open_books(path, limit);
    if (!why && limit && books->limit != limit)
        shimgen_say("shimgen: %s: the budget's size is %llu bytes, fixed by its first "
                    "process, not %llu\n", path, (unsigned long long)books->limit,
                    (unsigned long long)limit);
    mine = why ? -1 : claim_slot();
    if (!why && mine < 0)
        why = "has no slot left for this process";
    if (!why && lock_books()) /* (a slot of a process gone taken: its bytes out of `used`) */
        repair(), unlock_books();
    if (why)
        shimgen_say("shimgen: %s=%s %s; no shared memory budget\n", SHIMGEN_ENV_BUDGET_FILE,
                    path, why);
    __atomic_store_n(&shimgen_budget_on, !why, __ATOMIC_RELEASE);
}

void shimgen_budget_config(uint64_t limit)
{
    const char *path = secure_getenv(SHIMGEN_ENV_BUDGET_FILE);
    if (!path || !*path)
        return;
    if (strlen(path) >= sizeof books_path) {
        shimgen_say("shimgen: %s is too long; no shared memory budget\n",
                    SHIMGEN_ENV_BUDGET_FILE);
        return;
    }
    strcpy(books_path, path);
    join(books_path, limit);
}

/* A forked child: the books opened again (the parent's descriptor holds the parent's
 * liveness lock: closed here, so that the parent's death still shows), a slot of its own. */
void shimgen_budget_after_fork(void)
{
    if (!shimgen_budget_on)
        return;
    shimgen_budget_on = 0;
    munmap(books, sizeof *books);
    close(books_fd);
    books = NULL, books_fd = -1, mine = -1;
    memset(charged, 0, sizeof charged); /* (no pools of its own yet) */
    join(books_path, 0);
}

/* A column's device entry (its UUID's, found or added), or -1. */
static __attribute__((noinline)) int find_device(int column)
{
    uint8_t key[16] = "ordinal"; /* (and the ordinal after it, when there is no UUID) */
#if defined(SHIMGEN_IDX_cuDeviceGet) && defined(SHIMGEN_IDX_cuDeviceGetUuid)
    int dev = column;
    if (REAL(cuDeviceGet, int *, int)(&dev, column) != SHIMGEN_CUDA_SUCCESS ||
        REAL(cuDeviceGetUuid, uint8_t *, int)(key, dev) != SHIMGEN_CUDA_SUCCESS)
        memcpy(key, "ordinal", 8), memcpy(key + 8, &column, sizeof column);
#else
    memcpy(key + 8, &column, sizeof column);
#endif
    if (!lock_books())
        return -1;
    int at = -1;
    for (unsigned d = 0; d < BOOKS_DEVICES && at < 0; d++)
        if (books->device[d].in_use && !memcmp(books->device[d].key, key, 16))
            at = (int)d;
    for (unsigned d = 0; d < BOOKS_DEVICES && at < 0; d++)
        if (!books->device[d].in_use) {
            memcpy(books->device[d].key, key, 16);
            books->device[d].in_use = 1;
            at = (int)d;
        }
    unlock_books();
    if (at >= 0)
        __atomic_store_n(&dev_of[column], at + 1, __ATOMIC_RELAXED);
    return at;
}

static inline int device_of(int column)
{
    if ((unsigned)column >= COLS)
        return -1;
    int d = __atomic_load_n(&dev_of[column], __ATOMIC_RELAXED) - 1;
    return d >= 0 ? d : find_device(column);
}

static inline int fits(const struct books_device *dv, uint64_t limit, uint64_t size)
{
    return dv->used <= limit && size <= limit - dv->used;
}

static __attribute__((noinline)) void refused(int d, uint64_t size)
{
    struct books_refusal *r = &books->refusals[books->refused++ % BOOKS_REFUSALS];
    r->pid = (int32_t)getpid(), r->device = (uint32_t)d, r->size = size;
    r->used = books->device[d].used;
    books->slot[mine].refused++;
}

/* `size` bytes of device `d` to this process's slot (the lock held, the budget checked). */
static inline __attribute__((always_inline)) void account(struct books *b, int d,
                                                         uint64_t size)
{
    struct books_slot *s = &b->slot[mine];
    struct books_device *dv = &b->device[d];
    uint64_t had = s->bytes[d] += size, used = dv->used += size;
    s->peak[d] = had > s->peak[d] ? had : s->peak[d];
    dv->peak = used > dv->peak ? used : dv->peak;
}

/* The budget short (the lock held): the processes gone give back first; then taken, or
 * refused. */
static __attribute__((noinline)) int take_short(int d, uint64_t size, int last)
{
    repair();
    int ok = fits(&books->device[d], books->limit, size);
    if (ok)
        account(books, d, size);
    else if (last)
        refused(d, size);
    unlock_books();
    return ok;
}

/* The device not looked up yet, or the lock held by another. */
static __attribute__((noinline)) int take_slow(int column, uint64_t size, int last)
{
    int d = device_of(column);
    if (d < 0 || !lock_books())
        return 1; /* (a device past the books', or a signal handler's: not followed) */
    if (!fits(&books->device[d], books->limit, size))
        return take_short(d, size, last);
    account(books, d, size);
    unlock_books();
    return 1;
}

/* (the common path: no calls but tail calls, so no registers to save) */
int shimgen_budget_take(int column, uint64_t size, int last)
{
    int d = (unsigned)column < COLS ? __atomic_load_n(&dev_of[column], __ATOMIC_RELAXED) - 1
                                    : -1;
    struct books *b = books;
    uint64_t me = BOOKS_HOLDER(mine, __builtin_thread_pointer()), was = 0;
    if (__builtin_expect(d < 0 || !__atomic_compare_exchange_n(&b->lock, &was, me, 0,
                                                               __ATOMIC_ACQUIRE,
                                                               __ATOMIC_RELAXED), 0))
        return take_slow(column, size, last);
    __atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELAXED); /* (odd) */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (__builtin_expect(!fits(&b->device[d], b->limit, size), 0))
        return take_short(d, size, last);
    account(b, d, size);
    __atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
    return 1;
}

/* (the reserve read under the lock: the last of concurrent updates stands; in the slot's
 * bytes, so a process gone gives it back with the rest; unchanged: no lock taken) */
void shimgen_budget_settle(int column, uint64_t size, const uint64_t *reserve)
{
    int d = __atomic_load_n(&shimgen_budget_on, __ATOMIC_ACQUIRE) ? device_of(column) : -1;
    int same = d >= 0 && reserve && __atomic_load_n(reserve, __ATOMIC_RELAXED) ==
                                        __atomic_load_n(&charged[column], __ATOMIC_RELAXED);
    if (d < 0 || (!size && (!reserve || same)) || !lock_books())
        return; /* (a signal handler's: a reserve is charged at the next update) */
    uint64_t more = 0;
    if (reserve) {
        uint64_t to = __atomic_load_n(reserve, __ATOMIC_RELAXED), was = charged[column];
        more = to > was ? to - was : 0;
        size += to < was ? was - to : 0;
        __atomic_store_n(&charged[column], to, __ATOMIC_RELAXED);
    }
    struct books_slot *s = &books->slot[mine];
    uint64_t n = size > more ? size - more : 0;
    n = n < s->bytes[d] ? n : s->bytes[d];
    s->bytes[d] -= n;
    books->device[d].used -= n <= books->device[d].used ? n : books->device[d].used;
    if (more > size)
        account(books, d, more - size);
    unlock_books();
}

uint64_t shimgen_budget_size(void)
{
    return __atomic_load_n(&shimgen_budget_on, __ATOMIC_ACQUIRE) ? books->limit : 0;
}

uint64_t shimgen_budget_left(int column)
{
    int d = shimgen_budget_size() ? device_of(column) : -1;
    if (d < 0)
        return UINT64_MAX;
    uint64_t used = __atomic_load_n(&books->device[d].used, __ATOMIC_RELAXED);
    return used < books->limit ? books->limit - used : 0;
}
