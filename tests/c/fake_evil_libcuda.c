/* A FAKE libcuda for the tests of `shimgen diff` against a hostile driver: not NVIDIA's
 * driver. It passes shimgen's driver checks (243 exported functions among them the real
 * driver's usual ones, a cuInit that does more than return), answers cuGetProcAddress with
 * its own exports, and does what FAKE_EVIL_* asks of it, as code that diff loads could:
 *   FAKE_EVIL_FDS=FILE    the constructor appends "fd N -> TARGET" for each open descriptor
 *   FAKE_EVIL_FORK=FILE   the constructor forks a child that appends its pid and waits forever,
 *                         holding every descriptor the querier had
 *   FAKE_EVIL_HANG=1      the constructor never returns
 *   FAKE_EVIL_STDERR=N    cuGetProcAddress calls write 1 KiB each on stdout and stderr, N
 *                         bytes in all
 *   FAKE_EVIL_FLOOD=N     cuGetProcAddress calls write 1 KiB each on every pipe among
 *                         descriptors 1 to 9, N bytes in all
 *   FAKE_EVIL_STEPS=1     cuGetProcAddress answers another export every 10 versions
 *   FAKE_EVIL_VERSION=N   cuDriverGetVersion says N (default 12040) */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;

static volatile int initialised;
static int steps;
static long long flood, noisy;

EXPORT CUresult cuInit(unsigned flags)
{
    if (flags != 0)
        return 1;
    initialised++;
    return initialised > 1000000 ? 3 : 0;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return 1;
    const char *v = getenv("FAKE_EVIL_VERSION");
    *version = v && *v ? atoi(v) : 12040;
    return 0;
}

#define F(name) \
    EXPORT CUresult name(void) { return initialised ? 0 : 3; }
F(cuGetExportTable) F(cuDeviceGet) F(cuCtxCreate_v2) F(cuMemAlloc_v2) F(cuModuleLoadData)
F(cuLaunchKernel) F(cuDeviceGetAttribute) F(cuMemCreate) F(cuMemGetHandleForAddressRange)
#define TEN(p) F(p##0) F(p##1) F(p##2) F(p##3) F(p##4) F(p##5) F(p##6) F(p##7) F(p##8) F(p##9)
#define HUNDRED(p) TEN(p##0) TEN(p##1) TEN(p##2) TEN(p##3) TEN(p##4) TEN(p##5) TEN(p##6) \
    TEN(p##7) TEN(p##8) TEN(p##9)
HUNDRED(cuFakeEvil1) HUNDRED(cuFakeEvil2) TEN(cuFakeEvil30) TEN(cuFakeEvil31)
TEN(cuFakeEvil32)

static void *self(const char *name)
{
    static void *handle;
    if (!handle) {
        Dl_info info;
        if (!dladdr((void *)cuInit, &info) || !(handle = dlopen(info.dli_fname, RTLD_NOW |
                                                                RTLD_NOLOAD)))
            return NULL;
    }
    return dlsym(handle, name);
}

static void noise(void)
{
    static char kib[1024];
    if (!kib[0])
        memset(kib, 'e', sizeof kib);
    if (noisy > 0) {
        (void)!write(1, kib, sizeof kib);
        (void)!write(2, kib, sizeof kib);
        noisy -= (long long)sizeof kib;
    }
    for (int fd = 1; fd < 10 && flood > 0; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && write(fd, kib, sizeof kib) > 0)
            flood -= (long long)sizeof kib;
    }
}

static CUresult answer(const char *name, void **pfn, int version)
{
    noise();
    if (!name || !pfn)
        return 1;
    if (steps && strncmp(name, "cuFakeEvil", 10) == 0)
        name = (version / 10) % 2 ? "cuFakeEvil100" : "cuFakeEvil101";
    *pfn = self(name);
    return *pfn ? 0 : 500;
}

EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version,
                                 unsigned long long flags)
{
    (void)flags;
    return answer(name, pfn, version);
}

EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version,
                                    unsigned long long flags, int *status)
{
    (void)flags;
    CUresult rc = answer(name, pfn, version);
    if (status)
        *status = rc == 0 ? 0 : 1;
    return rc == 500 ? 0 : rc;
}

static void append(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        (void)!write(fd, text, strlen(text));
        close(fd);
    }
}

__attribute__((constructor)) static void evil(void)
{
    const char *v = getenv("FAKE_EVIL_FDS");
    if (v && *v) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char link[64], target[512], line[640];
            int fd = atoi(e->d_name);
            if (e->d_name[0] == '.' || fd == dirfd(d))
                continue;
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            target[n > 0 ? n : 0] = '\0';
            snprintf(line, sizeof line, "fd %d -> %.500s\n", fd, target);
            append(v, line);
        }
        if (d)
            closedir(d);
    }
    v = getenv("FAKE_EVIL_FORK");
    if (v && *v && fork() == 0) {
        char line[32];
        snprintf(line, sizeof line, "%ld\n", (long)getpid());
        append(v, line);
        for (;;)
            pause();
    }
    v = getenv("FAKE_EVIL_HANG");
    while (v && *v == '1')
        pause();
    steps = (v = getenv("FAKE_EVIL_STEPS")) && *v == '1';
    noisy = (v = getenv("FAKE_EVIL_STDERR")) ? atoll(v) : 0;
    flood = (v = getenv("FAKE_EVIL_FLOOD")) ? atoll(v) : 0;
}
