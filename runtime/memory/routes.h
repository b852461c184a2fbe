/*
 * routes.h: the hook families of the memory routes as macros (MEM_KIND_<kind>, and the
 * watches' MEM_WATCH_<kind>), inner to memory/: hooks_memory.c expands them for each route
 * of the driver (memroutes.inc) in its own file, so that the columns' helpers it defines
 * stay static and inline in every hook.
 */
#ifndef SHIMGEN_MEMORY_ROUTES_H
#define SHIMGEN_MEMORY_ROUTES_H

/* An allocation's hook and, out of its way, the same under a limit: the ledger first there
 * (the column asked before the call, the bytes reserved: the most the driver may take), the
 * driver, then what it answered (the bytes it took: more than reserved, and past the limit,
 * `undo` gives them back and the allocation is refused). Without a limit, the column is
 * asked after a success (the calling thread's current context is the same) and the ledger
 * told in a tail call. `pre` runs first in both; `bytes` may use the column, `col`. */
/* (reserved by the ledger's limit, the shared budget or both, pools and graphs asked again
 * before a refusal: shimgen_reserve_or_refresh; the budget alone's reservation is the
 * budget's only, reserved[1] LEDGER_BUDGET_ONLY, settled apart) */
static inline void settle_first(int col, uint64_t meta, uint64_t size, uint64_t key,
                                uint64_t held_back[2])
{
    if (held_back[1] == LEDGER_BUDGET_ONLY)
        shimgen_ledger_settle_shared(col, meta, size, key, held_back[0]);
    else
        shimgen_ledger_settle(col, meta, size, key, held_back);
}

#define TAKE_HOOK(name, params, args, pre, route, column, bytes, tag, call, ok, key, resize,  \
                  undo)                                                                     \
    static __attribute__((noinline)) shimgen_CUresult limited_##name params                 \
    {                                                                                       \
        uint64_t held_back[2];                                                              \
        int col = (int)(column);                                                            \
        if (!shimgen_reserve_or_refresh(col, (bytes), held_back))                           \
            return OOM;                                                                     \
        shimgen_CUresult rc = call;                                                         \
        if (rc == SHIMGEN_CUDA_SUCCESS && (ok)) {                                           \
            uint64_t size = (bytes);                                                        \
            resize;                                                                         \
            if (!shimgen_ledger_grow(col, held_back, size)) {                               \
                undo;                                                                       \
                shimgen_ledger_settle(col, LEDGER_META(route, 0), 0, 0, held_back);         \
                return OOM;                                                                 \
            }                                                                               \
            settle_first(col, LEDGER_META(route, tag), size, (uint64_t)(key), held_back);   \
        } else if (held_back[0]) {                                                          \
            shimgen_ledger_settle(col, LEDGER_META(route, 0), 0, 0, held_back);             \
        }                                                                                   \
        return rc;                                                                          \
    }                                                                                       \
    HOOK(name, params)                                                                      \
    {                                                                                       \
        pre;                                                                                \
        if (__builtin_expect(shimgen_ledger_limit != 0, 0))                                 \
            return limited_##name args;                                                     \
        shimgen_CUresult rc = call;                                                         \
        if (__builtin_expect(rc != SHIMGEN_CUDA_SUCCESS || !(ok), 0))                       \
            return rc;                                                                      \
        int col = (int)(column); /* (the key read after: nothing kept over the call) */     \
        uint64_t size = (bytes);                                                            \
        resize;                                                                             \
        return shimgen_ledger_add(col, LEDGER_META(route, tag), size, (uint64_t)(key));     \
    }

/* A free: the entry out first, its bytes given back once the driver freed them, the entry
 * back when the driver refused the free. */
#define GIVE(tag, key, call)                                                                \
    uint64_t taken[3];                                                                      \
    int took = shimgen_ledger_take((tag), (uint64_t)(key), taken);                          \
    shimgen_CUresult rc = call;                                                             \
    if (rc != SHIMGEN_CUDA_SUCCESS)                                                         \
        shimgen_ledger_untake((tag), (uint64_t)(key), took, taken);                         \
    else if (took == 1)                                                                     \
        shimgen_ledger_given(took, taken);                                                  \
    return rc;

#define MEM_KIND_alloc(name, r)                                                            \
    TAKE_HOOK(name, (uint64_t * p, size_t n), (p, n), (void)0, r, device_column(), n,         \
              LEDGER_ADDR, REAL(name, uint64_t *, size_t)(p, n), p, *p, (void)0, (void)0)
#define MEM_KIND_managed(name, r)                                                          \
    TAKE_HOOK(name, (uint64_t * p, size_t n, unsigned f), (p, n, f), (void)0, r,              \
              device_column(), n, LEDGER_ADDR,                                              \
              REAL(name, uint64_t *, size_t, unsigned)(p, n, f), p, *p, (void)0, (void)0)
#define POOL_HOOK(name, params, col, call, pool, s, r)                                      \
    HOOK(name, params)                                                                      \
    {                                                                                       \
        uint64_t held_back[2] = {0, 0};                                                     \
        int c = (col);                                                                      \
        if (__builtin_expect(shimgen_ledger_limit != 0, 0) &&                               \
            !shimgen_reserve_or_refresh(c, n, held_back))                                   \
            return OOM;                                                                     \
        shimgen_CUresult rc = call;                                                         \
        return pool_taken(rc, p, n, (uint64_t)(pool), s, c, r, held_back);                  \
    }
#define MEM_KIND_async(name, r)                                                            \
    POOL_HOOK(name, (uint64_t * p, size_t n, void *s), device_column(),                      \
              REAL(name, uint64_t *, size_t, void *)(p, n, s), 0, s, r)
#define MEM_KIND_pool(name, r)                                                             \
    POOL_HOOK(name, (uint64_t * p, size_t n, void *pool, void *s),                           \
              pool_device((uint64_t)(uintptr_t)pool),                                       \
              REAL(name, uint64_t *, size_t, void *, void *)(p, n, pool, s), pool, s, r)
/* A pitched allocation: before the call, its rows padded as much as the device pads a row;
 * after, the pitch the driver chose times the height. */
#define MEM_KIND_pitch(name, r)                                                            \
    TAKE_HOOK(name, (uint64_t * p, size_t * pitch, size_t w, size_t h, unsigned e),           \
              (p, pitch, w, h, e), (void)0, r, device_column(),                             \
              times(padded_row(col, w), h), LEDGER_ADDR,                                    \
              REAL(name, uint64_t *, size_t *, size_t, size_t, unsigned)(p, pitch, w, h, e), \
              p && pitch, *p, size = times(*pitch, h), free_pitched(*p))
#define MEM_KIND_create(name, r)                                                           \
    TAKE_HOOK(name, (uint64_t * handle, size_t n, const void *prop, uint64_t f),              \
              (handle, n, prop, f), shimgen_gates_apply(), r, location_column(prop), n,     \
              LEDGER_HANDLE,                                                                \
              REAL(name, uint64_t *, size_t, const void *, uint64_t)(handle, n, prop, f),   \
              handle, *handle, (void)0, (void)0)
#define MEM_KIND_retain(name, r)                                                           \
    HOOK(name, (uint64_t * handle, void *addr))                                             \
    {                                                                                       \
        shimgen_CUresult rc = REAL(name, uint64_t *, void *)(handle, addr);                 \
        if (rc == SHIMGEN_CUDA_SUCCESS && handle)                                           \
            shimgen_ledger_retain(*handle);                                                 \
        return rc;                                                                          \
    }
#define MEM_KIND_import(name, r)                                                           \
    HOOK(name, (uint64_t * handle, void *os, int type))                                     \
    {                                                                                       \
        shimgen_CUresult rc = REAL(name, uint64_t *, void *, int)(handle, os, type);        \
        if (rc == SHIMGEN_CUDA_SUCCESS && handle)                                           \
            shimgen_ledger_add(import_column(*handle), LEDGER_META(r, LEDGER_HANDLE), 0,    \
                               *handle);                                                    \
        return rc;                                                                          \
    }
#define MEM_KIND_array(name, r)                                                            \
    TAKE_HOOK(name, (void **a, const void *desc), (a, desc), (void)0, r,                      \
              array_column(desc, 2), levels_bytes(col, desc, 2, 1), LEDGER_ARRAY,           \
              REAL(name, void **, const void *)(a, desc), a, (uintptr_t)*a, (void)0, (void)0)
#define MEM_KIND_array3d(name, r)                                                          \
    TAKE_HOOK(name, (void **a, const void *desc), (a, desc), (void)0, r,                      \
              array_column(desc, 3), levels_bytes(col, desc, 3, 1), LEDGER_ARRAY,           \
              REAL(name, void **, const void *)(a, desc), a, (uintptr_t)*a, (void)0, (void)0)
#define MEM_KIND_mipmap(name, r)                                                           \
    TAKE_HOOK(name, (void **a, const void *desc, unsigned levels), (a, desc, levels),         \
              (void)0, r, array_column(desc, 3), levels_bytes(col, desc, 3, levels),        \
              LEDGER_ARRAY, REAL(name, void **, const void *, unsigned)(a, desc, levels), a, \
              (uintptr_t)*a, (void)0, (void)0)
#define MEM_KIND_hostalloc(name, r)                                                        \
    TAKE_HOOK(name, (void **p, size_t n, unsigned f), (p, n, f), (void)0, r,                  \
              SHIMGEN_MEM_HOST_COLUMN, n, LEDGER_HOST,                                      \
              REAL(name, void **, size_t, unsigned)(p, n, f), p, (uintptr_t)*p, (void)0,    \
              (void)0)
#define MEM_KIND_allochost(name, r)                                                        \
    TAKE_HOOK(name, (void **p, size_t n), (p, n), (void)0, r, SHIMGEN_MEM_HOST_COLUMN, n,     \
              LEDGER_HOST, REAL(name, void **, size_t)(p, n), p, (uintptr_t)*p, (void)0,    \
              (void)0)
#define MEM_KIND_free(name, r)                                                             \
    HOOK(name, (uint64_t a)) { GIVE(LEDGER_ADDR, a, REAL(name, uint64_t)(a)) }
#define MEM_KIND_freeasync(name, r)                                                        \
    HOOK(name, (uint64_t a, void *s)) { GIVE(LEDGER_ADDR, a, REAL(name, uint64_t, void *)(a, s)) }
#define MEM_KIND_release(name, r)                                                          \
    HOOK(name, (uint64_t h)) { GIVE(LEDGER_HANDLE, h, REAL(name, uint64_t)(h)) }
#define MEM_KIND_arraydestroy(name, r)                                                     \
    HOOK(name, (void *a)) { GIVE(LEDGER_ARRAY, (uintptr_t)a, REAL(name, void *)(a)) }
#define MEM_KIND_freehost(name, r)                                                         \
    HOOK(name, (void *p)) { GIVE(LEDGER_HOST, (uintptr_t)p, REAL(name, void *)(p)) }
/* Under a limit: the limit as the total (the device's own when smaller), and what is left
 * of it as free (never more than the device really has free; pools' and graphs'
 * reservations beyond their allocations count as used). Under a shared budget
 * (budget/budget.h), the same of the budget: its size the total when smaller, what the
 * device has left of it the free when less. */
#define MEM_KIND_info(name, r)                                                             \
    HOOK(name, (size_t * free, size_t * total))                                             \
    {                                                                                       \
        shimgen_CUresult rc = REAL(name, size_t *, size_t *)(free, total);                  \
        int c = rc == SHIMGEN_CUDA_SUCCESS && free && total ? device_column() : -1;         \
        uint64_t limit = shimgen_ledger_limit, budget = shimgen_budget_size();              \
        if (c >= 0 && limit) {                                                              \
            uint64_t cap = limit < *total ? limit : *total;                                 \
            uint64_t used = shimgen_ledger_held(c) + shimgen_ledger_extra(c);               \
            uint64_t left = used < cap ? cap - used : 0, shared = shimgen_budget_left(c);   \
            cap = budget && budget < cap ? budget : cap;                                    \
            left = shared < left ? shared : left;                                           \
            *total = cap;                                                                   \
            *free = left < *free ? left : *free;                                            \
        }                                                                                   \
        return rc;                                                                          \
    }
#define MEM_KIND_total(name, r)                                                            \
    HOOK(name, (size_t * bytes, int dev))                                                   \
    {                                                                                       \
        shimgen_CUresult rc = REAL(name, size_t *, int)(bytes, dev);                        \
        uint64_t limit = shimgen_ledger_limit, budget = shimgen_budget_size();              \
        limit = budget && budget < limit ? budget : limit;                                  \
        if (rc == SHIMGEN_CUDA_SUCCESS && bytes && limit && limit < *bytes)                 \
            *bytes = limit;                                                                 \
        return rc;                                                                          \
    }

/* The watches: each forwards six registers (every watched function takes at most six
 * integer or pointer arguments), with what the ledger does before and after. */
#define ARGS6 (uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f)
#define WATCH(name, before, after)                                                          \
    HOOK(name, ARGS6)                                                                       \
    {                                                                                       \
        before;                                                                             \
        shimgen_CUresult rc = REAL(name, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,  \
                                   uint64_t)(a, b, c, d, e, f);                             \
        int ok UNUSED_OK = rc == SHIMGEN_CUDA_SUCCESS;                                      \
        after;                                                                              \
        return rc;                                                                          \
    }
#define OUT64(x) (*(const uint64_t *)(uintptr_t)(x))
/* A listener another folder set (memory.h), called when set. */
#define LISTENER(fn, ...)                                                                  \
    do {                                                                                   \
        __typeof__(fn) l_ = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);                        \
        if (l_)                                                                            \
            l_(__VA_ARGS__);                                                               \
    } while (0)
#define MEM_WATCH_context(name) WATCH(name, ctx_changed(), ctx_changed())
/* (a listener's, memory.h: GPU time's pending timing events of the context dropped) */
#define MEM_WATCH_ctxdestroy(name)                                                         \
    WATCH(name, ctx_changed(); LISTENER(shimgen_on_ctx_destroy, (void *)a), ctx_changed())
/* (CUmemPoolProps' location lies where a CUmemAllocationProp's does) */
#define MEM_WATCH_poolcreate(name)                                                         \
    WATCH(name, (void)0, if (ok && a) shimgen_pool_seen(OUT64(a), location_column((void *)b), 0))
/* (a device ordinal past the ledger's columns: not followed) */
#define DEV_COLUMN(x) ((unsigned)(x) < SHIMGEN_MEM_DEVICES ? (int)(x) : -1)
#define MEM_WATCH_poolget(name)                                                            \
    WATCH(name, (void)0, if (ok && a) shimgen_pool_seen(OUT64(a), DEV_COLUMN(b), 0))
#define MEM_WATCH_poolcurrent(name)                                                        \
    WATCH(name, (void)0, if (ok && a) shimgen_pool_seen(OUT64(a), DEV_COLUMN(b), 1))
#define MEM_WATCH_poolset(name)                                                            \
    WATCH(name, (void)0, if (ok) shimgen_pool_seen(b, DEV_COLUMN(a), 1))
#define MEM_WATCH_pooltrim(name) WATCH(name, (void)0, if (ok) shimgen_pool_refresh(a))
#define MEM_WATCH_pooldestroy(name) WATCH(name, (void)0, if (ok) shimgen_pool_gone(a))
/* cuGraphAddMemAllocNode(node, graph, deps, ndeps, params): the params' device (the
 * location of their poolProps, first in them) */
#define MEM_WATCH_graphnode(name)                                                          \
    WATCH(name, (void)0, if (ok && e) shimgen_graph_alloc(location_column((void *)e)))
#define ANY_RESERVED __atomic_load_n(&shimgen_reserve_any, __ATOMIC_RELAXED)
#define MEM_WATCH_graph(name)                                                              \
    WATCH(name, (void)0, if (ok && ANY_RESERVED) shimgen_graph_refresh(-1))
#define MEM_WATCH_graphtrim(name)                                                          \
    WATCH(name, (void)0, if (ok) shimgen_graph_refresh(DEV_COLUMN(a)))
#define MEM_WATCH_capture(name) WATCH(name, shimgen_capture(1), if (!ok) shimgen_capture(-1))
#define MEM_WATCH_captureend(name) WATCH(name, (void)0, shimgen_capture(-1))
#define MEM_WATCH_sync(name)                                                               \
    WATCH(name, (void)0, if (ok && ANY_RESERVED) shimgen_reserve_refresh();                \
          if (ok) LISTENER(shimgen_on_sync))

#endif
