/*
 * hooks_graphs.c: a graph's launches (docs/design.md, "Kernels by name and each stream's
 * last launch"). cuGraphLaunch (and _ptsz) is counted as a launch on its stream, on a slot
 * per count of kernel nodes (its handle word SHIMGEN_KERN_GRAPH_KEY | count + 1, named
 * "graph:<count>"; SHIMGEN_KERN_GRAPH_KEY alone, "graph:?", when the count is not known).
 *
 * The count is taken where the program instantiates the graph (cuGraphInstantiate and its
 * variants, feature "kernels"): after the driver's success, the graph's nodes asked
 * (cuGraphGetNodes, cuGraphNodeGetType), a child graph's counted in (to CHILD_DEPTH deep),
 * and kept for the executable graph the driver wrote. There and only there, as the graph
 * is sure to exist then (a program may destroy it once instantiated), and asking it reads
 * the graph and puts no work on any stream (never a capture's). Not known: a graph with a
 * conditional node (its body runs as often as the GPU decides), one deeper than CHILD_DEPTH,
 * an executable graph instantiated by a route not hooked (cuGraphInstantiate of a device
 * graph, cuGraphExecUpdate does not change the count), or past the EXECS kept. Which
 * kernels the nodes launch is not asked.
 *
 * cuGraphLaunch is the memory ledger's watch too (a function has one hook): its hook is
 * installed with the ledger (feature "memory", on whenever "kernels" is), asks what the
 * graphs reserve after it as the ledger's watch did, and counts the launch when the kernels'
 * hooks are installed. A launch into a capture is not counted (it is a node of that graph).
 * With GPU time on (gputime.c), a launch is timed as a whole, under its graph's slot.
 */

#include <stddef.h>
#include <sys/mman.h>

#include "kernels.h"
#include "base/base.h"
#include "arch/cpu.h"
#include "memory/memory.h"

#define OK SHIMGEN_CUDA_SUCCESS
#define EXECS 4096u      /* executable graphs whose count is kept (a power of two) */
#define PROBES 64u       /* kept ones looked at from a handle's home */
#define CHILD_DEPTH 8    /* child graphs counted in, at most this deep */
#define UNKNOWN 0xFFFFFFFFu

/* Executable graph -> its count of kernel nodes + 1 (0: not known); a key claimed by a
 * compare-and-swap, its count stored after (release) and read after the key (acquire). */
static uint64_t exec_key[EXECS];
static uint32_t exec_count[EXECS];

static int exec_find(uint64_t exec, int claim)
{
    unsigned at = (unsigned)((exec * 0x9E3779B97F4A7C15ull) >> 40) & (EXECS - 1);
    for (unsigned p = 0; p < PROBES; p++) {
        unsigned i = (at + p) & (EXECS - 1);
        uint64_t v = __atomic_load_n(&exec_key[i], __ATOMIC_ACQUIRE);
        if (v == exec)
            return (int)i;
        if (!v) {
            if (!claim)
                return -1;
            if (__atomic_compare_exchange_n(&exec_key[i], &v, exec, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE) || v == exec)
                return (int)i;
        }
    }
    return -1;
}

/* The kernel nodes of `graph` and its child graphs, UNKNOWN when the driver cannot say. */
static __attribute__((unused)) uint32_t kernel_nodes(void *graph, int depth)
{
#if defined(SHIMGEN_IDX_cuGraphGetNodes) && defined(SHIMGEN_IDX_cuGraphNodeGetType)
    size_t n = 0;
    if (depth > CHILD_DEPTH || !HAS(cuGraphGetNodes) || !HAS(cuGraphNodeGetType) ||
        REAL(cuGraphGetNodes, void *, void **, size_t *)(graph, NULL, &n) != OK)
        return UNKNOWN;
    if (!n)
        return 0;
    if (n > (1u << 24))
        return UNKNOWN;
    size_t bytes = n * sizeof(void *);
    void **nodes = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nodes == MAP_FAILED)
        return UNKNOWN;
    uint64_t count = 0;
    size_t got = n;
    if (REAL(cuGraphGetNodes, void *, void **, size_t *)(graph, nodes, &got) != OK || got > n)
        count = UNKNOWN;
    for (size_t i = 0; i < got && count < UNKNOWN; i++) {
        int type = -1;
        if (REAL(cuGraphNodeGetType, void *, int *)(nodes[i], &type) != OK ||
            type == SHIMGEN_GRAPH_NODE_CONDITIONAL)
            count = UNKNOWN;
        else if (type == SHIMGEN_GRAPH_NODE_KERNEL)
            count++;
        else if (type == SHIMGEN_GRAPH_NODE_GRAPH) {
#ifdef SHIMGEN_IDX_cuGraphChildGraphNodeGetGraph
            void *child = NULL;
            uint32_t c = HAS(cuGraphChildGraphNodeGetGraph) &&
                                 REAL(cuGraphChildGraphNodeGetGraph, void *, void **)(
                                     nodes[i], &child) == OK
                             ? kernel_nodes(child, depth + 1)
                             : UNKNOWN;
#else
            uint32_t c = UNKNOWN;
#endif
            count = c == UNKNOWN ? UNKNOWN : count + c;
        }
    }
    munmap(nodes, bytes);
    return count < UNKNOWN ? (uint32_t)count : UNKNOWN;
#else
    (void)graph, (void)depth;
    return UNKNOWN;
#endif
}

/* After an instantiation: the executable graph the driver wrote at `where` gets `graph`'s
 * count (kept again when the driver gives a handle it had given before). */
static __attribute__((noinline, unused)) void instantiated(const void *where, void *graph)
{
    uint64_t exec = 0;
    if (shimgen_safe_read(&exec, where, sizeof exec) != (long)sizeof exec || !exec)
        return;
    int i = exec_find(exec, 1);
    if (i < 0)
        return;
    uint32_t n = kernel_nodes(graph, 0);
    __atomic_store_n(&exec_count[i], n == UNKNOWN ? 0 : n + 1, __ATOMIC_RELEASE);
}

/* Each variant's first two arguments are the executable graph's place and the graph. */
#define INSTANTIATE(name)                                                                  \
    HOOK(name, (void *exec, void *graph, uint64_t c, uint64_t d, uint64_t e, uint64_t f))   \
    {                                                                                       \
        shimgen_CUresult r = REAL(name, void *, void *, uint64_t, uint64_t, uint64_t,      \
                                  uint64_t)(exec, graph, c, d, e, f);                       \
        if (r == OK)                                                                        \
            instantiated(exec, graph);                                                      \
        return r;                                                                           \
    }
#ifdef SHIMGEN_IDX_cuGraphInstantiate
INSTANTIATE(cuGraphInstantiate)
#endif
#ifdef SHIMGEN_IDX_cuGraphInstantiate_v2
INSTANTIATE(cuGraphInstantiate_v2)
#endif
#ifdef SHIMGEN_IDX_cuGraphInstantiateWithFlags
INSTANTIATE(cuGraphInstantiateWithFlags)
#endif
#ifdef SHIMGEN_IDX_cuGraphInstantiateWithParams
INSTANTIATE(cuGraphInstantiateWithParams)
#endif
#ifdef SHIMGEN_IDX_cuGraphInstantiateWithParams_ptsz
INSTANTIATE(cuGraphInstantiateWithParams_ptsz)
#endif

/* A slot's name: the prefix, then the count in decimal or "?". */
static __attribute__((noinline, unused)) void graph_name(int slot, uint32_t known)
{
    char text[sizeof SHIMGEN_KERN_GRAPH_PREFIX + 12] = SHIMGEN_KERN_GRAPH_PREFIX;
    char digits[12], *at = text + sizeof SHIMGEN_KERN_GRAPH_PREFIX - 1;
    int n = 0;
    if (!known)
        *at++ = '?';
    for (uint32_t v = known - 1; known && (n == 0 || v); v /= 10)
        digits[n++] = (char)('0' + v % 10);
    while (n)
        *at++ = digits[--n];
    *at = 0;
    shimgen_kern_name(slot, text, SHIMGEN_KERN_FROM_CUGRAPHLAUNCH);
}

/* A launch counted on its graph's slot: the slot, -1 none (into a capture, or no slot). */
static __attribute__((noinline, unused)) int graph_launched(void *exec, void *stream,
                                                            uint64_t t0, uint64_t t1)
{
    static const uint32_t shape[6] = {0};
    if (shimgen_in_capture(stream))
        return -1;
    int i = exec_find((uint64_t)(uintptr_t)exec, 0);
    uint32_t known = i < 0 ? 0 : __atomic_load_n(&exec_count[i], __ATOMIC_ACQUIRE);
    int slot = shimgen_kern_slot(SHIMGEN_KERN_GRAPH_KEY | known);
    shimgen_kern_launch(slot, (uint64_t)(uintptr_t)stream, shape, t0, t1);
    if (__builtin_expect(shimgen_kern_unnamed(slot), 0))
        graph_name(slot, known);
    return slot;
}

/* The memory ledger's part (its "graph" watch) first, then the kernels'. With GPU time
 * (gputime.c), the graph is timed as a whole under its slot, its events on `on`: its
 * stream, which for cuGraphLaunch_ptsz (`pt` 1) a 0 is the per-thread one. */
#define GRAPH_LAUNCH(name, pt)                                                             \
    HOOK(name, (void *exec, void *stream))                                                  \
    {                                                                                       \
        void *on = (pt) && !stream ? (void *)(uintptr_t)SHIMGEN_KERN_STREAM_PER_THREAD      \
                                   : stream;                                                \
        int pair = shimgen_gpu_every ? shimgen_gpu_begin(on) : -1;                          \
        uint64_t t0 = shimgen_ticks();                                                      \
        shimgen_CUresult r = REAL(name, void *, void *)(exec, stream);                      \
        uint64_t t1 = shimgen_ticks();                                                      \
        int slot = -1;                                                                      \
        if (r == OK && __atomic_load_n(&shimgen_reserve_any, __ATOMIC_RELAXED))             \
            shimgen_graph_refresh(-1);                                                      \
        if (r == OK && (shimgen_cfg.features & SHIMGEN_FEATURE_KERNELS))                    \
            slot = graph_launched(exec, stream, t0, t1);                                    \
        if (pair >= 0)                                                                      \
            shimgen_gpu_end(pair, r == OK, slot);                                           \
        return r;                                                                           \
    }
#ifdef SHIMGEN_IDX_cuGraphLaunch
GRAPH_LAUNCH(cuGraphLaunch, 0)
#endif
#ifdef SHIMGEN_IDX_cuGraphLaunch_ptsz
GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)
#endif
