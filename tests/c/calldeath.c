/* A process that dies inside a driver call, or whose arguments cannot be read
 * (tests/runtime/test_calls_unread.py), through the loader's libcuda.so.1 (the shim):
 *   calldeath unreadable   cuModuleLoad(&m, 0x10), then cuModuleLoad(&m, "kept.cubin"); exit 0
 *   calldeath capture      a seccomp filter that kills the process at process_vm_readv (the
 *                          shim's safe read of a capture), then cuModuleLoad(&m, "dies.cubin")
 *   calldeath refused      a seccomp filter that answers process_vm_readv with EPERM, then
 *                          cuModuleLoad(&m, "refused.cubin"), cuModuleLoad(&m, 0x10); exit 0
 *   calldeath refusedall   the same with mincore refused too (the safe read's fallback)
 *   calldeath inside       cuDriverGetVersion((int *)0x10): the driver faults inside the call
 *   calldeath nullfirst    cuMemGetAddressRange_v2(NULL, &size, 0x1000) (an output NULL before
 *                          another; the FAKE tests/c/fake_mem_libcuda.c answers it); exit 0
 *   calldeath library      cuLibraryLoadFromFile(&l, "kept.cubin", NULL, NULL, 0, NULL, NULL, 0)
 *                          (the capture table's next capture, cuLinkAddData's name, reads the
 *                          argument word of numJitOptions into the same bytes); exit 0
 * Each prints nothing; the trace tells what happened.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*fn_t)();

static fn_t get(void *h, const char *name)
{
    fn_t f = (fn_t)dlsym(h, name);
    if (!f) {
        fprintf(stderr, "calldeath: no %s\n", name);
        _exit(3);
    }
    return f;
}

/* process_vm_readv (and `also`, unless -1) answered with `action`; every other system
 * call allowed. */
static void filter2(unsigned action, long also)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)also, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("calldeath: seccomp");
        _exit(4);
    }
}

static void filter(unsigned action)
{
    filter2(action, -1);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 3;
    if (!strcmp(argv[1], "nullfirst")) {
        unsigned long long size = 0;
        get(h, "cuMemGetAddressRange_v2")(NULL, &size, 0x1000ull);
        return size == 0x123000 ? 0 : 5;
    }
    void *m = NULL;
    fn_t load = get(h, "cuModuleLoad");
    if (!strcmp(argv[1], "unreadable")) {
        load(&m, (const char *)0x10);
        load(&m, "kept.cubin");
        return 0;
    }
    if (!strcmp(argv[1], "capture")) {
        filter(SECCOMP_RET_KILL_PROCESS);
        load(&m, "dies.cubin");
        return 0;
    }
    if (!strcmp(argv[1], "refused") || !strcmp(argv[1], "refusedall")) {
        filter2(SECCOMP_RET_ERRNO | EPERM, argv[1][7] ? SYS_mincore : -1);
        load(&m, "refused.cubin");
        load(&m, (const char *)0x10);
        return 0;
    }
    if (!strcmp(argv[1], "library")) {
        get(h, "cuLibraryLoadFromFile")(&m, "kept.cubin", NULL, NULL, 0u, NULL, NULL, 0u);
        return 0;
    }
    if (!strcmp(argv[1], "inside")) {
        get(h, "cuDriverGetVersion")((int *)0x10);
        return 0;
    }
    return 2;
}
