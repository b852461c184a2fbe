/* Drives the fake libcuda's gates through whatever libcuda.so.1 is (the shim under
 * LD_PRELOAD): cuInit, then per device the gated attributes, the raw gate bytes, and
 * whether a DMA-BUF export and a GPUDirect RDMA allocation succeed; then, with
 * GATEPROBE_MAPS=FILE, the mappings of exactly that file from /proc/self/maps ("map ..."
 * lines): the line's path must equal FILE's real path. Nothing is matched by a part of a
 * path, so where the files lie (a directory named like the shim or the driver) cannot
 * hide a mapping or add one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*init_fn)(unsigned);
typedef int (*get_fn)(int *, int);
typedef int (*attr_fn)(int *, int, int);
typedef int (*byte_fn)(int, int);
typedef int (*global_fn)(void);
typedef int (*range_fn)(void *, unsigned long long, size_t, int, unsigned long long);
typedef int (*create_fn)(unsigned long long *, size_t, const void *, unsigned long long);

/* GATEPROBE_THREADS=N: N threads meet at a spin barrier and make cuInit their first driver
 * call, each after its own random delay up to GATEPROBE_JITTER_US. */
static init_fn racing_init;
static int waiting, go, init_ok;
static unsigned jitter_us;

static void *race_init(void *arg)
{
    unsigned seed = (unsigned)(size_t)arg * 2654435761u ^ (unsigned)time(NULL);
    __atomic_sub_fetch(&waiting, 1, __ATOMIC_ACQ_REL);
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        ;
    if (jitter_us) {
        struct timespec ts = {0, (long)(rand_r(&seed) % jitter_us) * 1000};
        nanosleep(&ts, NULL);
    }
    if (racing_init(0) == 0)
        __atomic_add_fetch(&init_ok, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* Prints each line of /proc/self/maps whose path (the sixth field, to the end of the line)
 * is exactly `path`. */
static void print_maps_of(const char *path)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 256];
    while (maps && fgets(line, sizeof line, maps)) {
        int at = -1;
        line[strcspn(line, "\n")] = '\0';
        sscanf(line, "%*s %*s %*s %*s %*s %n", &at);
        if (at >= 0 && strcmp(line + at, path) == 0)
            printf("map %s\n", line);
    }
    if (maps)
        fclose(maps);
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    init_fn init = (init_fn)dlsym(h, "cuInit");
    get_fn get = (get_fn)dlsym(h, "cuDeviceGet");
    attr_fn attr = (attr_fn)dlsym(h, "cuDeviceGetAttribute");
    byte_fn byte = (byte_fn)dlsym(h, "cuFakeDeviceByte");
    global_fn global = (global_fn)dlsym(h, "cuFakeGdrGlobal");
    range_fn range = (range_fn)dlsym(h, "cuMemGetHandleForAddressRange");
    create_fn create = (create_fn)dlsym(h, "cuMemCreate");
    const char *nt = getenv("GATEPROBE_THREADS"), *jt = getenv("GATEPROBE_JITTER_US");
    if (nt && *nt) {
        pthread_t th[64];
        int n = atoi(nt) > 64 ? 64 : atoi(nt);
        jitter_us = jt ? (unsigned)atoi(jt) : 0;
        racing_init = init;
        waiting = n;
        for (int i = 0; i < n; i++)
            pthread_create(&th[i], NULL, race_init, (void *)(size_t)i);
        while (__atomic_load_n(&waiting, __ATOMIC_ACQUIRE) > 0)
            ;
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        printf("threads %d init-ok %d\n", n, init_ok);
    }
    printf("init %d\n", init(0));
    for (int d = 0; d < 2; d++) {
        int dev = -1, a110 = -1, a116 = -1, a124 = -1, a1 = -1;
        get(&dev, d);
        attr(&a110, 110, dev);
        attr(&a116, 116, dev);
        attr(&a124, 124, dev);
        attr(&a1, 1, dev);
        printf("dev %d attr110 %d attr116 %d attr124 %d attr1 %d byte40 0x%02x byte44 0x%02x\n",
               d, a110, a116, a124, a1, byte(dev, 0x40), byte(dev, 0x44));
    }
    int fd = -1;
    unsigned long long handle = 0;
    printf("global %d dmabuf_export %d gdr_alloc %d\n", global(),
           range(&fd, 0x1000, 4096, 1, 0), create(&handle, 4096, NULL, 0));
    /* the named file's mappings, with their protection (the init-site method must restore
     * it); a file that cannot be resolved has none */
    const char *want = getenv("GATEPROBE_MAPS");
    char real[PATH_MAX];
    if (want && *want && realpath(want, real))
        print_maps_of(real);
    return 0;
}
