/* The FAKE driver's pools, graph memory, stream captures and context stack
 * (fake_ledger_libcuda.c includes it; not NVIDIA's driver). A pool allocation is an
 * allocation of the fake's table (its bytes held, as every route's) that also uses its pool;
 * what the pool reserves beyond it is the pool's. Graph allocations are not held by any
 * route: the graph reservation holds them once launched. */

static struct fpool *pool_of(u64 handle)
{
    for (int i = 0; i < MAXP; i++)
        if (fpools[i].live && fpools[i].handle == handle)
            return &fpools[i];
    return NULL;
}

/* A device's default pool, made at its first use. */
static struct fpool *default_pool(int col)
{
    u64 h = (u64)(col + 1) << 8;
    struct fpool *p = pool_of(h);
    for (int i = 0; !p && i < MAXP; i++)
        if (!fpools[i].live) {
            p = &fpools[i];
            *p = (struct fpool){.handle = h, .col = col, .live = 1};
        }
    return p;
}

static void pool_use(struct fpool *p, u64 n)
{
    p->used += n;
    if (p->used > p->used_high)
        p->used_high = p->used;
    if (p->used > p->reserved)
        p->reserved = UP(p->used);
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
}

static __thread int capturing; /* the stream this thread captures on, + 1; 0: none */
#define MAXG 64
static struct graph {
    int live, nodes, exec_of, launched; /* exec_of: an instance's graph, + 1 */
    u64 size[8];
    int col[8];
} graphs[MAXG];
static int capture_graph;

static int new_graph(void)
{
    for (int i = 1; i < MAXG; i++)
        if (!graphs[i].live) {
            graphs[i] = (struct graph){.live = 1};
            return i;
        }
    return 0;
}

static void graph_node(int g, int col, u64 n)
{
    struct graph *gr = &graphs[g];
    if (gr->nodes < 8) {
        gr->size[gr->nodes] = n;
        gr->col[gr->nodes++] = col;
    }
}

static CUresult pool_alloc(const char *fn, u64 *p, size_t n, struct fpool *pool, void *s)
{
    (void)s;
    if (!p || !n || !pool)
        return 1;
    if (capturing) { /* a graph allocation node, no memory now */
        pthread_mutex_lock(&lock);
        graph_node(capture_graph, pool->col, n);
        pthread_mutex_unlock(&lock);
        *p = 0x7e0000000000ull + n;
        return 0;
    }
    pthread_mutex_lock(&lock);
    *p = add_locked(fn, 1, pool->col, n, 0);
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].kind == 1 && allocs[i].key == *p)
            allocs[i].pool = pool;
    pool_use(pool, n);
    pool_held[pool->col] += n;
    note_footprint();
    pthread_mutex_unlock(&lock);
    return 0;
}

static struct fpool *current_of(int col)
{
    struct fpool *p = current_pool[col] ? pool_of(current_pool[col]) : NULL;
    return p ? p : default_pool(col);
}

#define ASYNC(name)                                                                        \
    EXPORT CUresult name(u64 *p, size_t n, void *s)                                         \
    {                                                                                       \
        NEEDS_CONTEXT;                                                                      \
        pthread_mutex_lock(&lock);                                                          \
        struct fpool *pool = current_of(current);                                           \
        pthread_mutex_unlock(&lock);                                                        \
        return pool_alloc(#name, p, n, pool, s);                                            \
    }
/* (a NULL pool: the current device's current pool, a convenience of the fake's tests) */
#define FROM_POOL(name)                                                                    \
    EXPORT CUresult name(u64 *p, size_t n, void *handle, void *s)                           \
    {                                                                                       \
        pthread_mutex_lock(&lock);                                                          \
        struct fpool *pool = handle ? pool_of((u64)(uintptr_t)handle)                       \
                                    : current < 0 ? NULL : current_of(current);             \
        pthread_mutex_unlock(&lock);                                                        \
        return pool_alloc(#name, p, n, pool, s);                                            \
    }
ASYNC(cuMemAllocAsync)
ASYNC(cuMemAllocAsync_ptsz)
FROM_POOL(cuMemAllocFromPoolAsync)
FROM_POOL(cuMemAllocFromPoolAsync_ptsz)

EXPORT CUresult cuMemPoolCreate(u64 *pool, const void *props)
{
    int loc[2];
    memcpy(loc, (const char *)props + 8, sizeof loc);
    int col = loc[0] == 1 ? loc[1] : HOSTCOL;
    if (col < 0 || col >= COLS)
        return 101;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXP; i++)
        if (!fpools[i].live) {
            fpools[i] = (struct fpool){.handle = next_pool += 0x100, .col = col, .live = 1};
            *pool = fpools[i].handle;
            pthread_mutex_unlock(&lock);
            return 0;
        }
    pthread_mutex_unlock(&lock);
    return 2;
}

EXPORT CUresult cuMemPoolDestroy(u64 pool)
{
    pthread_mutex_lock(&lock);
    struct fpool *p = pool_of(pool);
    if (p)
        p->live = 0;
    pthread_mutex_unlock(&lock);
    return p ? 0 : 1;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(u64 *pool, int dev)
{
    pthread_mutex_lock(&lock);
    *pool = default_pool(dev)->handle;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuDeviceGetMemPool(u64 *pool, int dev)
{
    pthread_mutex_lock(&lock);
    *pool = current_of(dev)->handle;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuDeviceSetMemPool(int dev, u64 pool)
{
    pthread_mutex_lock(&lock);
    struct fpool *p = pool_of(pool);
    if (p && p->col == dev)
        current_pool[dev] = pool;
    pthread_mutex_unlock(&lock);
    return p && p->col == dev ? 0 : 1;
}

/* Keeps at least `keep` (and what is used), in whole chunks. */
static void trim(struct fpool *p, u64 keep)
{
    u64 to = UP(p->used > keep ? p->used : keep);
    if (to < p->reserved)
        p->reserved = to;
}

EXPORT CUresult cuMemPoolTrimTo(u64 pool, size_t keep)
{
    pthread_mutex_lock(&lock);
    struct fpool *p = pool_of(pool);
    if (p)
        trim(p, keep);
    note_footprint();
    pthread_mutex_unlock(&lock);
    return p ? 0 : 1;
}

/* attributes 4 (the release threshold), 5 to 8 (reserved, its high, used, its high) */
EXPORT CUresult cuMemPoolGetAttribute(u64 pool, int attr, u64 *v)
{
    pthread_mutex_lock(&lock);
    struct fpool *p = pool_of(pool);
    u64 all[5] = {p ? p->threshold : 0, p ? p->reserved : 0, p ? p->reserved_high : 0,
                  p ? p->used : 0, p ? p->used_high : 0};
    pthread_mutex_unlock(&lock);
    if (!p || attr < 4 || attr > 8)
        return 1;
    *v = all[attr - 4];
    return 0;
}

EXPORT CUresult cuMemPoolSetAttribute(u64 pool, int attr, const u64 *v)
{
    pthread_mutex_lock(&lock);
    struct fpool *p = pool_of(pool);
    if (p && attr == 4)
        p->threshold = *v;
    pthread_mutex_unlock(&lock);
    return p && attr == 4 ? 0 : 1;
}

/* A synchronisation: every pool gives back what it reserves above its threshold. */
static CUresult sync_all(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXP; i++)
        if (fpools[i].live && fpools[i].reserved > fpools[i].threshold)
            trim(&fpools[i], fpools[i].threshold);
    note_footprint();
    pthread_mutex_unlock(&lock);
    return 0;
}
EXPORT CUresult cuStreamSynchronize(void *s) { return (void)s, sync_all(); }
EXPORT CUresult cuCtxSynchronize(void) { return sync_all(); }

EXPORT CUresult cuGraphCreate(int *graph, unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&lock);
    *graph = new_graph();
    pthread_mutex_unlock(&lock);
    return *graph ? 0 : 2;
}

/* params: CUDA_MEM_ALLOC_NODE_PARAMS (poolProps, its location at 8; bytesize at 104) */
EXPORT CUresult cuGraphAddMemAllocNode(void **node, int graph, const void *deps, size_t n,
                                       const void *params)
{
    (void)deps, (void)n;
    int loc[2];
    u64 size;
    memcpy(loc, (const char *)params + 8, sizeof loc);
    memcpy(&size, (const char *)params + 104, sizeof size);
    if (loc[0] != 1 || loc[1] < 0 || loc[1] >= HOSTCOL || graph <= 0 || graph >= MAXG)
        return 1;
    pthread_mutex_lock(&lock);
    graph_node(graph, loc[1], size);
    pthread_mutex_unlock(&lock);
    *node = (void *)1;
    return 0;
}

EXPORT CUresult cuGraphInstantiateWithFlags(int *exec, int graph, u64 flags)
{
    (void)flags;
    pthread_mutex_lock(&lock);
    int e = new_graph();
    if (e) {
        graphs[e] = graphs[graph];
        graphs[e].exec_of = graph + 1;
    }
    pthread_mutex_unlock(&lock);
    *exec = e;
    return e ? 0 : 2;
}

/* The first launch of an instance takes its allocations' memory (not freed in the graph:
 * held by the graph reservation until trimmed after the instance is gone). */
EXPORT CUresult cuGraphLaunch(int exec, void *s)
{
    (void)s;
    if (exec <= 0 || exec >= MAXG || !graphs[exec].exec_of)
        return 400;
    pthread_mutex_lock(&lock);
    struct graph *g = &graphs[exec];
    for (int i = 0; i < g->nodes && !g->launched; i++) {
        u64 *m = graph_mem[g->col[i]];
        m[2] += g->size[i];
        m[3] = m[2] > m[3] ? m[2] : m[3];
        m[0] = m[0] > UP(m[2]) ? m[0] : UP(m[2]);
        m[1] = m[0] > m[1] ? m[0] : m[1];
    }
    g->launched = 1;
    note_footprint();
    pthread_mutex_unlock(&lock);
    return 0;
}

/* An upload takes the instance's memory as its first launch would. */
EXPORT CUresult cuGraphUpload(int exec, void *s) { return cuGraphLaunch(exec, s); }

EXPORT CUresult cuGraphExecDestroy(int exec)
{
    if (exec <= 0 || exec >= MAXG || !graphs[exec].exec_of)
        return 400;
    pthread_mutex_lock(&lock);
    struct graph *g = &graphs[exec];
    for (int i = 0; i < g->nodes && g->launched; i++)
        graph_mem[g->col[i]][2] -= g->size[i];
    g->live = 0, g->exec_of = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuDeviceGraphMemTrim(int dev)
{
    pthread_mutex_lock(&lock);
    u64 *m = graph_mem[dev];
    m[0] = UP(m[2]);
    note_footprint();
    pthread_mutex_unlock(&lock);
    return 0;
}

/* attributes 0 to 3: used, its high, reserved, its high */
EXPORT CUresult cuDeviceGetGraphMemAttribute(int dev, int attr, u64 *v)
{
    static const int at[4] = {2, 3, 0, 1};
    if (dev < 0 || dev >= HOSTCOL || attr < 0 || attr > 3)
        return 1;
    pthread_mutex_lock(&lock);
    *v = graph_mem[dev][at[attr]];
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuStreamBeginCapture_v2(void *s, int mode)
{
    (void)mode;
    pthread_mutex_lock(&lock);
    capture_graph = new_graph();
    pthread_mutex_unlock(&lock);
    capturing = (int)(intptr_t)s + 1;
    return 0;
}

EXPORT CUresult cuStreamEndCapture(void *s, int *graph)
{
    (void)s;
    capturing = 0;
    *graph = capture_graph;
    return 0;
}

EXPORT CUresult cuStreamIsCapturing(void *s, int *status)
{
    *status = capturing && capturing == (int)(intptr_t)s + 1;
    return 0;
}

/* A context stack of one thread: push and pop around cuCtxSetCurrent's current. */
static __thread int stack[8], depth;
EXPORT CUresult cuCtxPushCurrent_v2(void *ctx)
{
    if (depth == 8)
        return 1;
    stack[depth++] = current;
    current = (int)(intptr_t)ctx - 1;
    return 0;
}

EXPORT CUresult cuCtxPopCurrent_v2(void **ctx)
{
    if (!depth)
        return 201;
    if (ctx)
        *ctx = (void *)(intptr_t)(current + 1);
    current = stack[--depth];
    return 0;
}
