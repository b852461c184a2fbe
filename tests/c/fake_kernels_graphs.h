/* The graphs of the FAKE libcuda of the kernels' tests (fake_kernels_libcuda.c includes it):
 * not NVIDIA's driver. A graph is a number that says its nodes: FAKE_GRAPH | K << 24 |
 * O << 16 | C << 8 | Q, K kernel nodes, O others (memset), a child graph node whose graph
 * has C kernel nodes when C, and Q conditional nodes. cuGraphGetNodes gives them, each
 * node a number that says its type (and a child's graph); an executable graph is one of
 * MAX_EXECS places, the lowest free one (a destroyed one's place given again), which knows
 * its graph's kernel nodes (-1 with a conditional node). A launch counts "graph" and, when
 * the executable graph is the fake's and has no conditional node, "graph_kernels" once per
 * kernel node; as the driver, a launch into a capture is counted apart. */
#define FAKE_GRAPH 0xA000000000ull
#define FAKE_NODE 0xB000000000ull
#define FAKE_EXEC 0xE000u
#define MAX_EXECS 16
#define NODE_KERNEL 0
#define NODE_MEMSET 2
#define NODE_GRAPH 4
#define NODE_CONDITIONAL 13
static long exec_kernels[MAX_EXECS];
static int exec_used[MAX_EXECS];

static unsigned field(uint64_t g, int shift)
{
    return (unsigned)(g >> shift) & 0xff;
}

static uint64_t node_at(uint64_t g, size_t i)
{
    size_t k = field(g, 24), o = field(g, 16), c = field(g, 8) ? 1 : 0;
    if (i < k)
        return FAKE_NODE | NODE_KERNEL;
    if (i < k + o)
        return FAKE_NODE | NODE_MEMSET;
    if (i < k + o + c)
        return FAKE_NODE | NODE_GRAPH | (uint64_t)field(g, 8) << 8;
    return FAKE_NODE | NODE_CONDITIONAL;
}

EXPORT CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n)
{
    uint64_t g = (uintptr_t)graph;
    if ((g & ~0xffffffffull) != FAKE_GRAPH || !n)
        return 400;
    size_t all = field(g, 24) + field(g, 16) + (field(g, 8) ? 1 : 0) + field(g, 0);
    if (nodes) {
        for (size_t i = 0; i < *n; i++)
            nodes[i] = i < all ? (void *)(uintptr_t)node_at(g, i) : NULL;
        if (*n > all)
            *n = all;
    } else {
        *n = all;
    }
    return 0;
}

EXPORT CUresult cuGraphNodeGetType(void *node, int *type)
{
    if (((uintptr_t)node & ~0xffffull) != FAKE_NODE || !type)
        return 400;
    *type = (int)((uintptr_t)node & 0xff);
    return 0;
}

EXPORT CUresult cuGraphChildGraphNodeGetGraph(void *node, void **graph)
{
    if (((uintptr_t)node & ~0xffffull) != FAKE_NODE || ((uintptr_t)node & 0xff) != NODE_GRAPH)
        return 400;
    *graph = (void *)(uintptr_t)(FAKE_GRAPH | (uint64_t)field((uintptr_t)node, 8) << 24);
    return 0;
}

static CUresult instantiate(void **exec, void *graph)
{
    uint64_t g = (uintptr_t)graph;
    if ((g & ~0xffffffffull) != FAKE_GRAPH || !exec)
        return 400;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < MAX_EXECS && exec_used[i])
        i++;
    if (i < MAX_EXECS) {
        exec_used[i] = 1;
        exec_kernels[i] = field(g, 0) ? -1 : (long)(field(g, 24) + field(g, 8));
    }
    pthread_mutex_unlock(&lock);
    if (i == MAX_EXECS)
        return 2;
    *exec = (void *)(uintptr_t)(FAKE_EXEC + 16u * (unsigned)i);
    return 0;
}

EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
    (void)flags;
    return instantiate(exec, graph);
}

EXPORT CUresult cuGraphInstantiateWithParams(void **exec, void *graph, void *params)
{
    (void)params;
    return instantiate(exec, graph);
}

EXPORT CUresult cuGraphInstantiate_v2(void **exec, void *graph, void **err, char *log,
                                      size_t size)
{
    (void)err, (void)log, (void)size;
    return instantiate(exec, graph);
}

EXPORT CUresult cuGraphExecDestroy(void *exec)
{
    uintptr_t i = ((uintptr_t)exec - FAKE_EXEC) / 16;
    if ((uintptr_t)exec < FAKE_EXEC || i >= MAX_EXECS || !exec_used[i])
        return 400;
    exec_used[i] = 0;
    return 0;
}

EXPORT CUresult cuGraphLaunch(void *exec, void *stream)
{
    if (!exec)
        return 1;
    uintptr_t i = ((uintptr_t)exec - FAKE_EXEC) / 16;
    int ours = (uintptr_t)exec >= FAKE_EXEC && i < MAX_EXECS && exec_used[i];
    if (ours && exec_kernels[i] > 0 && !fake_is_capturing(stream))
        for (long k = 0; k < exec_kernels[i]; k++)
            count("graph_kernels", stream, 1);
    count("graph", stream, 1);
    return 0;
}
