/* Walks the stack with _Unwind_Backtrace from a host callback that runs inside
 * cuLaunchHostFunc, that is, inside a driver call made through the shim, the way a
 * debugger, a profiler or a C++ exception walks it. The walk must reach the function
 * that made the driver call: under SHIMGEN_TRACE=time that means crossing the timing
 * stub, whose return address is not on the machine stack but in its shadow frame, so it
 * needs the stub's call-frame information. Prints one line per call:
 * "<where> reached <0|1>". argv[1]: library to dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unwind.h>

typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static host_launch_fn host;

struct walk {
    void *target; /* the function whose frame the walk must reach */
    int reached;
};

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    if (_Unwind_FindEnclosingFunction((void *)_Unwind_GetIP(ctx)) == w->target)
        w->reached = 1;
    return _URC_NO_REASON;
}

static void callback(void *arg)
{
    _Unwind_Backtrace(step, arg);
}

__attribute__((noinline)) static int call_driver(void)
{
    struct walk w = {(void *)call_driver, 0};
    int rc = host(NULL, callback, &w);
    __asm__ volatile("" ::: "memory"); /* keep the call a call, not a tail jump */
    return rc == 0 ? w.reached : -1;
}

static void *thread_main(void *arg)
{
    (void)arg;
    printf("thread reached %d\n", call_driver()); /* a thread's first timed call */
    return NULL;
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    host = (host_launch_fn)dlsym(h, "cuLaunchHostFunc");
    if (!host)
        return 1;
    printf("first reached %d\n", call_driver());  /* the process's first driver call */
    printf("second reached %d\n", call_driver()); /* the fast path */
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_join(t, NULL);
    return 0;
}
