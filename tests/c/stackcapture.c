/* Calls mode's captures of names on the caller's own stack (tests/runtime/test_calls_stack.py),
 * through the loader's libcuda.so.1 (the shim), with a seccomp filter that answers both
 * process_vm_readv and mincore with EPERM, so that the only read left to the shim is the
 * direct one of saferead.c for an address in the calling thread's own stack. Each mode
 * calls cuModuleLoad(&m, NAME) with the names below, in order:
 *   main        "main.cubin" in main's frame
 *   below       "main.cubin" in main's frame, then "below.cubin" written 96 KiB under the
 *               stack pointer (in a frame that has returned)
 *   top         "main.cubin" in main's frame, then the last 8 bytes of the process's stack
 *               mapping (a read of the capture's 63 bytes there would run past its end)
 *   thread      "thread.cubin" in a thread's frame (a stack the C library made)
 *   coroutine   in a thread: "coro.cubin" in the frame of a coroutine whose stack is a
 *               mapping of its own under the thread's stack, with a guard page below, where
 *               the thread's first read is made
 *   maincoro    the same in the first thread (whose descriptor is the loader's memory, which
 *               the coroutine's mapping may have merged with)
 *   switched    "main.cubin" in main's frame, then "coro.cubin" on such a coroutine (under
 *               the first thread's stack)
 * The trace tells which names were read.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef int (*fn_t)(void **, const char *);

static fn_t load;
static ucontext_t main_ctx, coro_ctx;

static void refuse_reads(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mincore, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("stackcapture: seccomp");
        _exit(4);
    }
}

static void load_named(const char *text)
{
    char name[32];
    void *m = NULL;
    snprintf(name, sizeof name, "%s", text);
    load(&m, name);
    __asm__ volatile("" ::"r"(name) : "memory");
}

/* A name left in a frame that has returned, 96 KiB under the caller's stack pointer: deeper
 * than the shim's own frames will reach. */
static __attribute__((noinline)) char *below_name(void)
{
    static char *volatile at;
    char deep[96 << 10];
    strcpy(deep, "below.cubin");
    at = deep;
    __asm__ volatile("" ::"r"(deep) : "memory");
    return at;
}

static uintptr_t stack_top(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo, hi;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            fclose(f);
            return hi;
        }
    _exit(5);
}

static void coro_main(void)
{
    load_named("coro.cubin");
}

static void on_coroutine(int below);

static void *thread_main(void *arg)
{
    if (arg)
        on_coroutine(1);
    else
        load_named("thread.cubin");
    return NULL;
}

/* Runs coro_main on a stack of its own: 64 KiB mapped with its lowest page a guard, asked
 * for 16 MiB under this frame (`below`: under the stack and the descriptor of the thread);
 * else where the kernel puts it. */
static void on_coroutine(int below)
{
    size_t size = 64 << 10;
    uintptr_t hint = ((uintptr_t)__builtin_frame_address(0) - (16u << 20)) & ~(uintptr_t)0xffff;
    char *stack = MAP_FAILED;
    if (below)
        stack = mmap((void *)hint, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (stack == MAP_FAILED)
        stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED || mprotect(stack, 4096, PROT_NONE))
        _exit(6);
    getcontext(&coro_ctx);
    coro_ctx.uc_stack.ss_sp = stack + 4096;
    coro_ctx.uc_stack.ss_size = size - 4096;
    coro_ctx.uc_link = &main_ctx;
    makecontext(&coro_ctx, coro_main, 0);
    swapcontext(&main_ctx, &coro_ctx);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h || !(load = (fn_t)dlsym(h, "cuModuleLoad")))
        return 3;
    const char *mode = argv[1];
    uintptr_t top = !strcmp(mode, "top") ? stack_top() : 0;
    refuse_reads();
    if (!strcmp(mode, "thread") || !strcmp(mode, "coroutine")) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread_main, mode[0] == 'c' ? (void *)mode : NULL) ||
            pthread_join(t, NULL))
            return 7;
        return 0;
    }
    if (!strcmp(mode, "maincoro")) {
        on_coroutine(0);
        return 0;
    }
    /* the name under the stack pointer is written first, so that the stack's mapping
     * already reaches it when the thread's stack is found */
    char *below = !strcmp(mode, "below") ? below_name() : NULL;
    load_named("main.cubin");
    void *m = NULL;
    if (below)
        load(&m, below);
    else if (!strcmp(mode, "top"))
        load(&m, (const char *)(top - 8));
    else if (!strcmp(mode, "switched"))
        on_coroutine(1);
    else if (strcmp(mode, "main"))
        return 2;
    return 0;
}
