/* Memory pools made, allocated from and destroyed by racing threads (tests/run/
 * test_pool_race.py), through whatever libcuda the loader gives (the shim, over the FAKE
 * driver tests/c/fake_ledger_libcuda.c). Each of T threads has device 3 current and makes
 * ROUNDS random steps: a pool made on device 0, 1 or 2 (cuMemPoolCreate, at most HOLD of its
 * own at once), an allocation from one of its pools freed at once (cuMemAllocFromPoolAsync,
 * cuMemFreeAsync), or one of its pools destroyed, with yields at random; at the end each
 * destroys the pools it holds. T * HOLD stays within the 64 pools the shim follows, so every
 * allocation is its pool's device's, never device 3's. Prints the bytes allocated on each
 * device ("taken D N"), then "poolrace rc 0".
 *   poolrace ROUNDS T SEED */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_t)();
typedef unsigned long long u64;

#define HOLD 8
#define DEVICES 3

static fn_t get(const char *name)
{
    fn_t f = (fn_t)dlsym(RTLD_DEFAULT, name);
    if (!f) {
        fprintf(stderr, "poolrace: no %s\n", name);
        exit(3);
    }
    return f;
}

static fn_t create, destroy_pool, alloc, free_async;
static int rounds;
static u64 taken[DEVICES];
static int failed;

struct pool {
    u64 handle;
    int device;
};

static void maybe_yield(unsigned *seed)
{
    if (rand_r(seed) % 4 == 0)
        sched_yield();
}

static void destroy(struct pool *held, int *n, int k)
{
    if (destroy_pool(held[k].handle))
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    held[k] = held[--*n];
}

static void *thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    struct pool held[HOLD];
    int n = 0;
    get("cuCtxSetCurrent")((void *)(intptr_t)4); /* device 3 */
    for (int r = 0; r < rounds; r++) {
        int step = rand_r(&seed) % 4;
        if (n == 0 || (step == 0 && n < HOLD)) {
            unsigned char props[88] = {0};
            int loc[2] = {1, (int)(rand_r(&seed) % DEVICES)}; /* CUmemLocation: a device */
            memcpy(props + 8, loc, sizeof loc);
            u64 h = 0;
            if (create(&h, props) || !h) {
                __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
                break;
            }
            held[n++] = (struct pool){h, loc[1]};
        } else if (step == 3) {
            destroy(held, &n, (int)(rand_r(&seed) % (unsigned)n));
        } else {
            struct pool *p = &held[rand_r(&seed) % (unsigned)n];
            size_t bytes = 1 + (size_t)(rand_r(&seed) % 100000);
            u64 ptr = 0;
            if (alloc(&ptr, bytes, (void *)(uintptr_t)p->handle, NULL)) {
                __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
                break;
            }
            __atomic_fetch_add(&taken[p->device], bytes, __ATOMIC_RELAXED);
            maybe_yield(&seed);
            if (free_async(ptr, NULL))
                __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        }
        maybe_yield(&seed);
    }
    while (n)
        destroy(held, &n, n - 1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    rounds = atoi(argv[1]);
    create = get("cuMemPoolCreate"), destroy_pool = get("cuMemPoolDestroy");
    alloc = get("cuMemAllocFromPoolAsync"), free_async = get("cuMemFreeAsync");
    int t = atoi(argv[2]);
    unsigned seed = (unsigned)atol(argv[3]);
    if (t < 1 || t * HOLD > 64)
        return 2;
    pthread_t ids[64 / HOLD];
    for (int i = 0; i < t; i++)
        pthread_create(&ids[i], NULL, thread, (void *)(uintptr_t)(seed * 64 + (unsigned)i));
    for (int i = 0; i < t; i++)
        pthread_join(ids[i], NULL);
    for (int d = 0; d < DEVICES; d++)
        printf("taken %d %llu\n", d, taken[d]);
    printf("poolrace rc %d\n", failed);
    return 0;
}
