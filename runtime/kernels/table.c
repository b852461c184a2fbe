/*
 * table.c: the kernels' tables (kernels.h): a table of handles, open-addressed by the
 * handle's hash, and one of streams, in the trace file's header once the file is made (a
 * part of the file, as the memory ledger is), the process's own memory before. A slot is
 * claimed by a compare-and-swap of its handle (or stream key) word, so two threads never
 * share one; every count is an aligned 8-byte word added atomically, so a reader of a live
 * or killed process's file sees a value it had. A slot's name is named once, by the thread
 * that claims its `from` word: its bytes are taken from the names' arena by an atomic add
 * to the arena's used count (a name's bytes are never shared by two, and more than the
 * arena has is cut), copied there, and only then published by one store of the slot's
 * kern_name_at word (release): a reader, of a live or a killed process, sees the whole name
 * or none. The count only grows, at most by SLOTS * NAME_MAX_ in a process and those it
 * forks (a slot is named once, a forked child keeps its names): it never wraps.
 */

#include <stddef.h>
#include <string.h>

#include "kernels.h"
#include "tracefile/tracefile.h"

#define SLOTS SHIMGEN_KERN_SLOTS
#define STREAMS SHIMGEN_KERN_STREAMS
#define NAME_MAX_ SHIMGEN_KERN_NAME_MAX
#define NAME_BYTES SHIMGEN_KERN_NAME_BYTES
#define NAME_CUT ((uint64_t)SHIMGEN_KERN_NAME_CUT)
#define PROBES 32u /* slots looked at from a handle's home before it is counted lost */
#define FIRST offsetof(struct tf_header, kern_slots)
/* the kernels' fields end where the header's last field, the calls' table digest, begins */
#define END offsetof(struct tf_header, calls_table_digest)
#define SPAN (END - FIRST)
#define GPU_FIRST offsetof(struct tf_header, kgpu_ns) /* GPU time's arrays, to END */
/* The bytes copied between a header and the process's own tables: without GPU time, never
 * its arrays (header_unused: a hole of the file, which even a read of a tmpfs's mapping
 * would have to give a page, a SIGBUS on a full disk). */
#define COPIED (gpu_arrays ? SPAN : GPU_FIRST - FIRST)
static int gpu_arrays; /* GPU time is on: its arrays are written (shimgen_kern_gpu_arrays) */
_Static_assert(offsetof(struct tf_header, kgpu_track) + sizeof(((struct tf_header *)0)->kgpu_track) ==
                   END && END + sizeof(uint64_t) == sizeof(struct tf_header),
               "the kernels' fields (their GPU times last) end where the header's last begins");
_Static_assert(NAME_MAX_ < NAME_CUT && (uint64_t)SLOTS * NAME_MAX_ + NAME_BYTES < (1ull << 32),
               "a name's length and the arena's used count fit their words");
_Static_assert((SLOTS & (SLOTS - 1)) == 0 && (STREAMS & (STREAMS - 1)) == 0, "powers of two");

/* The tables before the file is made (and without one): only the kern_* and kstream_*
 * fields of this header are used. */
static struct tf_header own;
static struct tf_header *kh = &own;

static inline struct tf_header *tables(void)
{
    return __atomic_load_n(&kh, __ATOMIC_ACQUIRE);
}

static inline unsigned home(uint64_t key, unsigned size)
{
    return (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 40) & (size - 1);
}

/* The slot of `key` (never 0) in `keys`, claimed when new; -1 when none is free near it. */
static int find(uint64_t *keys, unsigned size, uint64_t key)
{
    unsigned at = home(key, size);
    for (unsigned p = 0; p < PROBES && p < size; p++) {
        unsigned i = (at + p) & (size - 1);
        uint64_t v = __atomic_load_n(&keys[i], __ATOMIC_ACQUIRE);
        if (v == key)
            return (int)i;
        if (!v) {
            if (__atomic_compare_exchange_n(&keys[i], &v, key, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE) || v == key)
                return (int)i;
        }
    }
    return -1;
}

int shimgen_kern_slot(uint64_t handle)
{
    struct tf_header *h = tables();
    int s = handle ? find(h->kern_handle, SLOTS, handle) : -1;
    if (s < 0 && handle)
        __atomic_fetch_add(&h->kern_lost, 1, __ATOMIC_RELAXED);
    return s;
}

/* 1 when this thread claimed the slot's naming (its `from` word was 0). */
static int claim(struct tf_header *h, int slot, unsigned from)
{
    uint32_t was = 0;
    return slot >= 0 && __atomic_compare_exchange_n(&h->kern_from[slot], &was, from, 0,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void shimgen_kern_name(int slot, const char *name, unsigned from)
{
    struct tf_header *h = tables();
    if (!claim(h, slot, from))
        return;
    size_t n = name ? strnlen(name, NAME_MAX_ + 1) : 0;
    uint64_t cut = n > NAME_MAX_ ? NAME_CUT : 0;
    if (cut)
        n = NAME_MAX_;
    if (!n)
        return;
    uint32_t at = __atomic_fetch_add(&h->kern_name_used, (uint32_t)n, __ATOMIC_RELAXED);
    if (at >= NAME_BYTES || n > NAME_BYTES - at) { /* the arena's end: what fits kept */
        n = at >= NAME_BYTES ? 0 : NAME_BYTES - at;
        at = n ? at : 0;
        cut = NAME_CUT;
    }
    memcpy(&h->kern_names[at], name, n);
    __atomic_store_n(&h->kern_name_at[slot], (uint64_t)at << 32 | cut | n, __ATOMIC_RELEASE);
}

void shimgen_kern_name_as(int slot, int of, unsigned from)
{
    struct tf_header *h = tables();
    uint64_t at = of >= 0 ? __atomic_load_n(&h->kern_name_at[of], __ATOMIC_ACQUIRE) : 0;
    if (at && claim(h, slot, from))
        __atomic_store_n(&h->kern_name_at[slot], at, __ATOMIC_RELEASE);
}

int shimgen_kern_unnamed(int slot)
{
    return slot >= 0 && !__atomic_load_n(&tables()->kern_from[slot], __ATOMIC_ACQUIRE);
}

void shimgen_kern_launch(int slot, uint64_t stream, const uint32_t shape[6], uint64_t t0,
                         uint64_t t1)
{
    struct tf_header *h = tables();
    if (slot >= 0) {
        uint64_t before = __atomic_fetch_add(&h->kern_launches[slot], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&h->kern_ticks[slot], t1 - t0, __ATOMIC_RELAXED);
        uint32_t *g = &h->kern_grid[slot * 3], *b = &h->kern_block[slot * 3];
        if (g[0] != shape[0] || g[1] != shape[1] || g[2] != shape[2] || b[0] != shape[3] ||
            b[1] != shape[4] || b[2] != shape[5]) {
            if (before)
                __atomic_fetch_add(&h->kern_shapes[slot], 1, __ATOMIC_RELAXED);
            for (int i = 0; i < 3; i++) {
                __atomic_store_n(&g[i], shape[i], __ATOMIC_RELAXED);
                __atomic_store_n(&b[i], shape[3 + i], __ATOMIC_RELAXED);
            }
        }
    } else {
        __atomic_fetch_add(&h->kern_lost_launches, 1, __ATOMIC_RELAXED);
    }
    int s = find(h->kstream_key, STREAMS, stream + 1);
    if (s < 0) {
        __atomic_fetch_add(&h->kstream_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&h->kstream_launches[s], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&h->kstream_slot[s], (uint64_t)(slot + 1), __ATOMIC_RELAXED);
    __atomic_store_n(&h->kstream_start[s], t0, __ATOMIC_RELAXED);
}

struct tf_header *shimgen_kern_header(void)
{
    return tables();
}

void shimgen_kern_asks(unsigned yes)
{
    __atomic_store_n(&tables()->kern_asks, yes, __ATOMIC_RELAXED);
}

/* The tables are a part of the trace file: moved into a new header, back when it goes. */
static void attach(struct tf_header *h, size_t stride)
{
    (void)stride;
    struct tf_header *from = tables();
    if (from == h)
        return;
    memcpy((char *)h + FIRST, (char *)from + FIRST, COPIED);
    h->kern_slots = SLOTS;
    h->kern_name_max = NAME_MAX_;
    h->kern_name_bytes = NAME_BYTES;
    h->kern_streams = STREAMS;
    h->kgpu_buckets = SHIMGEN_KGPU_BUCKETS;
    __atomic_store_n(&kh, h, __ATOMIC_RELEASE);
}

static void detach(struct tf_header *h)
{
    if (tables() != h)
        return;
    memcpy((char *)&own + FIRST, (char *)h + FIRST, COPIED);
    __atomic_store_n(&kh, &own, __ATOMIC_RELEASE);
}

/* GPU time's arrays, when it is off: never written, so given no disk space (not the
 * header's last field after them: calls mode writes it). */
static void header_unused(size_t *from, size_t *to)
{
    if (!gpu_arrays) {
        *from = GPU_FIRST;
        *to = END;
    }
}

static const struct shimgen_tf_part kernels_part = {
    .attach = attach, .detach = detach, .header_unused = header_unused};

int shimgen_kernels_config(void)
{
    if (shimgen_cfg.trace == TRACE_OFF || !shimgen_cfg.trace_dir[0])
        return 0;
    shimgen_tracefile_join(&kernels_part);
    return 1;
}

void shimgen_kernels_after_fork(void)
{
    struct tf_header *h = tables();
    if (h != &own)
        memcpy((char *)&own + FIRST, (char *)h + FIRST, COPIED);
    __atomic_store_n(&kh, &own, __ATOMIC_RELEASE);
    own.kern_lost = own.kern_lost_launches = own.kstream_lost = 0;
    memset(own.kern_launches, 0, sizeof own.kern_launches);
    memset(own.kern_ticks, 0, sizeof own.kern_ticks);
    memset(own.kern_shapes, 0, sizeof own.kern_shapes);
    memset(own.kstream_key, 0, sizeof own.kstream_key);
    memset(own.kstream_launches, 0, sizeof own.kstream_launches);
    memset(own.kstream_slot, 0, sizeof own.kstream_slot);
    memset(own.kstream_start, 0, sizeof own.kstream_start);
    own.kgpu_pending = 0;
    memset(own.kgpu_not, 0, sizeof own.kgpu_not);
    memset(own.kgpu_ns, 0, sizeof own.kgpu_ns);
    memset(own.kgpu_timed, 0, sizeof own.kgpu_timed);
    memset(own.kgpu_max, 0, sizeof own.kgpu_max);
    memset(own.kgpu_hist, 0, sizeof own.kgpu_hist);
    own.kgpu_track_used = 0;
    memset(own.kgpu_track, 0, sizeof own.kgpu_track);
}

void shimgen_kern_gpu_arrays(void)
{
    gpu_arrays = 1;
}
