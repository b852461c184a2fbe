/* A signal handler that calls the driver while the first driver call of the process is
 * loading the real driver, on the same thread: an interval timer (random period from
 * 20 to 219 us, random first shot) runs a SIGALRM handler that calls cuDriverGetVersion,
 * from just before the main thread's first call until that call returns. Every call the
 * handler makes must return at once: forwarded (rc 0, the driver's version) or
 * CUDA_ERROR_NOT_INITIALIZED (3) while the load is in progress. Prints
 * "handler forwarded F notinit N bad B during_load L main rc R version V after rc R2".
 * argv[1]: random seed; argv[2]: the driver's version (what cuDriverGetVersion reports). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef int (*version_fn)(int *);

static version_fn version;
static int expected;
static volatile sig_atomic_t forwarded, notinit, bad, during_load, main_done;

static void on_alarm(int sig)
{
    (void)sig;
    int v = 0, rc = version(&v);
    if (!main_done)
        during_load++;
    if (rc == 0 && v == expected)
        forwarded++;
    else if (rc == 3)
        notinit++;
    else
        bad++;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    srand((unsigned)atoi(argv[1]));
    expected = atoi(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (!version)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    long period = 20 + rand() % 200, first = 1 + rand() % 400;
    struct itimerval it = {{0, period}, {0, first}};
    setitimer(ITIMER_REAL, &it, NULL);
    int v = 0;
    int rc = version(&v); /* the first call: loads the real driver */
    main_done = 1;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    int v2 = 0, rc2 = version(&v2);
    printf("handler forwarded %d notinit %d bad %d during_load %d main rc %d version %d "
           "after rc %d\n", (int)forwarded, (int)notinit, (int)bad, (int)during_load, rc, v,
           rc2 == 0 && v2 == expected ? 0 : (rc2 ? rc2 : -1));
    return 0;
}
