/* Driver calls from a signal handler that interrupts driver calls: the main thread calls
 * cuDriverGetVersion in a loop while an interval timer (every 50 us) runs a
 * handler that calls it too. Under SHIMGEN_TRACE=time the handler's timed call can land
 * anywhere in the timing stub of the interrupted call, so this is what shows that a
 * shadow frame is never shared between them. Prints the calls made by each and the wrong
 * results; the test compares them with the trace.
 * argv[1]: library to dlopen; argv[2]: calls in the main loop. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef int (*version_fn)(int *);

static version_fn version;
static volatile sig_atomic_t handler_calls, handler_bad;

static void on_alarm(int sig)
{
    (void)sig;
    int v = 0;
    if (version(&v) != 0 || v != 12345)
        handler_bad++;
    handler_calls++;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (!version)
        return 1;
    long n = atol(argv[2]), bad = 0;
    int v = 0;
    bad += version(&v) != 0; /* the first call (lazy) before any signal */

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (long i = 0; i < n; i++) {
        v = 0;
        if (version(&v) != 0 || v != 12345)
            bad++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("main %ld handler %d bad %ld handler_bad %d\n", n + 1, (int)handler_calls, bad,
           (int)handler_bad);
    return 0;
}
