/* countreads: an LD_PRELOAD library, loaded ahead of the shim, that counts the system calls
 * of the shim's safe read (process_vm_readv, and mincore where that is refused) and prints
 * the counts at exit on stderr: "countreads process_vm_readv N mincore M"
 * (benchmarks/calls.py --captures).
 *   cc -O2 -shared -fPIC -o countreads.so benchmarks/c/countreads.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/uio.h>

static unsigned long reads, mincores;

static ssize_t counted_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                             const struct iovec *remote, unsigned long nremote,
                             unsigned long flags)
{
    static ssize_t (*real)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                           unsigned long, unsigned long);
    if (!real)
        real = (ssize_t(*)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                           unsigned long, unsigned long))dlsym(RTLD_NEXT, "process_vm_readv");
    __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED);
    return real(pid, local, nlocal, remote, nremote, flags);
}

static int counted_mincore(void *addr, size_t length, unsigned char *vec)
{
    static int (*real)(void *, size_t, unsigned char *);
    if (!real)
        real = (int (*)(void *, size_t, unsigned char *))dlsym(RTLD_NEXT, "mincore");
    __atomic_add_fetch(&mincores, 1, __ATOMIC_RELAXED);
    return real(addr, length, vec);
}

/* The exported names are aliases of the counters: the library stands in for libc's two
 * functions, and defines nothing else that code of this project could be taken to call. */
ssize_t process_vm_readv(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                         unsigned long, unsigned long) __attribute__((alias("counted_readv")));
int mincore(void *, size_t, unsigned char *) __attribute__((alias("counted_mincore")));

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "countreads process_vm_readv %lu mincore %lu\n", reads, mincores);
}
