/* Stack-switching coroutines suspended inside driver calls, as libco-style libraries make
 * them: each coroutine (a ucontext with its own stack) calls cuLaunchHostFunc, whose host
 * callback makes a nested cuDriverGetVersion and then yields to the scheduler, so the
 * driver call stays open while the other coroutines run theirs. The scheduler resumes them
 * first-in first-out (round robin), last-in first-out, or in a random order, so driver
 * calls return in any order on one thread. Every result must be right; the test compares
 * the calls made with the trace. Needs a driver whose cuLaunchHostFunc runs the callback
 * synchronously (the fake one of the tests).
 * Prints "host <n> version <n> bad <n>".
 * argv[1]: library to dlopen; argv[2]: fifo|lifo|random; argv[3]: coroutines;
 * argv[4]: driver calls per coroutine; argv[5]: random seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

#define MAX_CO 64
#define STACK_SIZE (256 * 1024)

static version_fn version;
static host_launch_fn host;
static ucontext_t sched_ctx, co_ctx[MAX_CO];
static int done[MAX_CO];
static long calls_each, host_calls, version_calls, bad;

static void check_version(void)
{
    int v = 0;
    if (version(&v) != 0 || v <= 0)
        bad++;
    version_calls++;
}

/* Runs inside the driver call: one nested call, then suspend the coroutine there. */
static void yield_inside(void *arg)
{
    int me = (int)(long)arg;
    check_version();
    if (swapcontext(&co_ctx[me], &sched_ctx) != 0)
        bad++;
    check_version(); /* resumed: still inside the same driver call */
}

static void coroutine(int me)
{
    for (long j = 0; j < calls_each; j++) {
        if (host(NULL, yield_inside, (void *)(long)me) != 0)
            bad++;
        host_calls++;
        if (j % 3 == 0)
            check_version(); /* a call that does not suspend, between the open ones */
    }
    done[me] = 1;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    host = (host_launch_fn)dlsym(h, "cuLaunchHostFunc");
    if (!version || !host)
        return 1;
    const char *order = argv[2];
    int n = atoi(argv[3]);
    calls_each = atol(argv[4]);
    srand((unsigned)atol(argv[5]));
    if (n < 1 || n > MAX_CO)
        return 2;
    for (int i = 0; i < n; i++) {
        getcontext(&co_ctx[i]);
        co_ctx[i].uc_stack.ss_sp = malloc(STACK_SIZE);
        co_ctx[i].uc_stack.ss_size = STACK_SIZE;
        co_ctx[i].uc_link = &sched_ctx;
        makecontext(&co_ctx[i], (void (*)(void))coroutine, 1, i);
    }
    for (int left = n; left > 0;) {
        int pick[MAX_CO], k = 0;
        for (int i = 0; i < n; i++)
            if (!done[i])
                pick[k++] = i;
        if (strcmp(order, "lifo") == 0) /* reverse: the newest suspended call returns first */
            for (int a = 0, b = k - 1; a < b; a++, b--) {
                int t = pick[a];
                pick[a] = pick[b];
                pick[b] = t;
            }
        else if (strcmp(order, "random") == 0) /* shuffle */
            for (int a = k - 1; a > 0; a--) {
                int b = rand() % (a + 1), t = pick[a];
                pick[a] = pick[b];
                pick[b] = t;
            }
        for (int a = 0; a < k; a++) {
            int i = pick[a];
            if (strcmp(order, "random") == 0 && rand() % 4 == 0)
                i = pick[rand() % k]; /* sometimes one coroutine twice in a round */
            if (done[i])
                continue;
            if (swapcontext(&sched_ctx, &co_ctx[i]) != 0)
                bad++;
            if (done[i])
                left--;
        }
    }
    printf("host %ld version %ld bad %ld\n", host_calls, version_calls, bad);
    return 0;
}
