/* A FAKE libcuda for tests: not NVIDIA's driver. It exports a handful of driver names with
 * behaviour the tests can check exactly (argument checksums, callbacks that call back into
 * the driver, recursion, float and stack-passed arguments), so the shim's forwarding and
 * timing paths can be tested without a GPU. Built with SONAME libcuda.so.1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;

/* ---- a fake device table with capability gates, laid out like the real driver's:
 * slot = *(fake_device_table + 0x10 + ordinal*8) -> per-device struct; the "gdr" bit is
 * 0x20 at offset 0x40 plus a global byte, "dmabuf" is 0x08 at offset 0x44. ---- */
#include <stdlib.h>

#define FAKE_DEVICES 2
EXPORT void *fake_device_table[2 + FAKE_DEVICES];
EXPORT int fake_device_count;
EXPORT unsigned char fake_gdr_global;
static unsigned char device_structs[FAKE_DEVICES][0x80];

/* The gdr byte is built by code shaped like the published init site (movzbl; mov; or $0x40;
 * cmpl; mov %dl), and a data-centre part's check then sets the bit with orb $0x20, so the
 * init-site method (SHIMGEN_GATE_METHOD=init) has real instructions to change. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl fake_init_gate_byte\n"
        ".type fake_init_gate_byte,@function\n"
        "fake_init_gate_byte:\n"
        "    movzbl 0x40(%rdi),%eax\n"
        "    mov %eax,%edx\n"
        "    or $0x40,%edx\n"
        "    cmpl $0x8,0x60(%rdi)\n"
        "    mov %dl,0x40(%rdi)\n"
        "    ret\n"
        ".size fake_init_gate_byte,.-fake_init_gate_byte\n"
        ".globl fake_gdr_check_ok\n"
        ".type fake_gdr_check_ok,@function\n"
        "fake_gdr_check_ok:\n"
        "    orb $0x20,0x40(%rdi)\n"
        "    ret\n"
        ".size fake_gdr_check_ok,.-fake_gdr_check_ok\n");
EXPORT void fake_init_gate_byte(unsigned char *dev);
EXPORT void fake_gdr_check_ok(unsigned char *dev);
#else /* aarch64 (the timing tests under qemu-user): the same bytes, with no code to find */
EXPORT void fake_init_gate_byte(unsigned char *dev)
{
    dev[0x40] = (unsigned char)(dev[0x40] | 0x40);
}
EXPORT void fake_gdr_check_ok(unsigned char *dev)
{
    dev[0x40] |= 0x20;
}
#endif

EXPORT CUresult cuInit(unsigned flags)
{
    if (flags != 0)
        return 1;
    const char *dc = getenv("FAKE_LIBCUDA_DATACENTER");
    int datacenter = dc && *dc == '1';
    for (int d = 0; d < FAKE_DEVICES; d++) {
        if (!fake_device_table[2 + d]) {
            /* like the published init site: a consumer part gets 0x58, no GDR bit */
            device_structs[d][0x40] = 0x18;
            fake_init_gate_byte(device_structs[d]);
            if (datacenter)
                fake_gdr_check_ok(device_structs[d]);
            device_structs[d][0x44] = datacenter ? 0x0c : 0x04;
            fake_device_table[2 + d] = device_structs[d];
        }
    }
    if (!fake_device_count)
        fake_gdr_global = (unsigned char)datacenter;
    fake_device_count = FAKE_DEVICES;
    return 0;
}

static unsigned char *device(int d)
{
    return d >= 0 && d < fake_device_count ? (unsigned char *)fake_device_table[2 + d] : NULL;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
    if (!dev || !device(ordinal))
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = ordinal;
    return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev)
{
    unsigned char *s = device(dev);
    if (!value || !s)
        return 101;
    int gdr = (s[0x40] & 0x20) && fake_gdr_global;
    switch (attribute) {
    case 110:
    case 116:
        *value = gdr;
        break;
    case 124:
        *value = gdr && (s[0x44] & 0x08);
        break;
    case 1:
        *value = 1024;
        break;
    default:
        *value = 0;
    }
    return 0;
}

EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop,
                            unsigned long long flags)
{
    (void)prop;
    (void)flags;
    int v = 0;
    cuDeviceGetAttribute(&v, 116, 0);
    if (!v)
        return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    *handle = size;
    return 0;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, unsigned long long dptr,
                                              size_t size, int type, unsigned long long flags)
{
    (void)dptr;
    (void)size;
    (void)type;
    (void)flags;
    int v = 0;
    cuDeviceGetAttribute(&v, 124, 0);
    if (!v)
        return 801;
    *(int *)handle = 42;
    return 0;
}

/* Raw state, for tests that must see whether the shim wrote anything. */
EXPORT int cuFakeDeviceByte(int dev, int offset)
{
    unsigned char *s = device(dev);
    return s ? s[offset] : -1;
}

EXPORT int cuFakeGdrGlobal(void)
{
    return fake_gdr_global;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return 1;
    *v = 12345;
    return 0;
}

/* 11 arguments: the last five are passed on the stack. Returns a checksum of all of them
 * but params (a caller's stack address) and writes it into *params[0]. */
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, void *stream,
                               void **params, void **extra)
{
    uint64_t h = (uint64_t)(uintptr_t)f;
    uint64_t parts[] = {gx, gy, gz, bx, by, bz, shmem, (uint64_t)(uintptr_t)stream,
                        (uint64_t)(uintptr_t)extra};
    for (unsigned i = 0; i < sizeof parts / sizeof parts[0]; i++)
        h = h * 1000003u ^ parts[i];
    if (params && params[0])
        *(uint64_t *)params[0] = h;
    return (CUresult)(h % 100000u);
}

/* Floating-point arguments in xmm0-7 and on the stack; a double result in xmm0. */
EXPORT double cuFakeMixedArgs(double a, int b, double c, double d, double e, double f2,
                              double g, double h, double i, double j, int k)
{
    return a * 1.5 + b - c * d + e / 3.0 + f2 - g * h + i - j * 0.25 + k;
}

/* A 16-byte struct returned in rax:rdx. */
struct pair {
    uint64_t lo, hi;
};
EXPORT struct pair cuFakeReturnPair(uint64_t x)
{
    struct pair p = {x * 3u, ~x};
    return p;
}

/* Calls the host function synchronously, as a stream callback would run. */
typedef void (*host_fn)(void *);
EXPORT CUresult cuLaunchHostFunc(void *stream, host_fn fn, void *user)
{
    (void)stream;
    if (!fn)
        return 1;
    fn(user);
    return 0;
}

/* Recursion inside the driver through a user callback, `depth` levels deep. */
typedef int (*recurse_fn)(int depth, void *user);
EXPORT CUresult cuFakeRecurse(int depth, recurse_fn fn, void *user)
{
    return depth <= 0 ? 0 : fn(depth - 1, user);
}

/* cuFakeEntryRsp: returns the stack pointer its caller had at the call (its own entry
 * rsp + 8) and touches no other register. Written in assembly so that no compiler frame
 * is in the way; tests/c/regcheck.S compares it with its own rsp. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl cuFakeEntryRsp\n"
        ".type cuFakeEntryRsp, @function\n"
        "cuFakeEntryRsp:\n"
        "    lea 8(%rsp), %rax\n"
        "    ret\n"
        ".size cuFakeEntryRsp, .-cuFakeEntryRsp\n");
#else /* aarch64: the caller's sp is the entry sp */
__asm__(".text\n"
        ".globl cuFakeEntryRsp\n"
        ".type cuFakeEntryRsp, %function\n"
        "cuFakeEntryRsp:\n"
        "    mov x0, sp\n"
        "    ret\n"
        ".size cuFakeEntryRsp, .-cuFakeEntryRsp\n");
#endif

EXPORT CUresult cuGetExportTable(const void **table, const void *id)
{
    (void)id;
    static const int dummy;
    *table = &dummy;
    return 0;
}

struct entry {
    const char *name;
    void *fn;
};

static const struct entry entries[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuLaunchHostFunc", (void *)cuLaunchHostFunc},
    {"cuGetExportTable", (void *)cuGetExportTable},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
    {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemGetHandleForAddressRange", (void *)cuMemGetHandleForAddressRange},
};

/* A private entry point that is no export: the shim must pass it through and count it. */
static CUresult private_entry(int *v)
{
    *v = 777;
    return 0;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    uint64_t flags, int *status);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    uint64_t flags, int *status)
{
    (void)flags;
    if (!symbol || !pfn)
        return 1;
    if (version > 12345)
        return 1;
    *pfn = NULL;
    if (status)
        *status = 1;
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        *pfn = (void *)cuGetProcAddress_v2;
    } else if (strcmp(symbol, "cuFakePrivate") == 0) {
        *pfn = (void *)private_entry;
    } else {
        for (unsigned i = 0; i < sizeof entries / sizeof entries[0]; i++)
            if (strcmp(symbol, entries[i].name) == 0)
                *pfn = entries[i].fn;
    }
    if (*pfn && status)
        *status = 0;
    return 0;
}
