/* A process that ends while other threads are inside driver calls.
 *   faults_sigexit MODE N
 * Four threads call cuDriverGetVersion without end; the main thread makes N calls, prints
 * "ready <N>" and then, by MODE:
 *   alarm      SIGALRM fires 50 ms later; its handler calls exit(7)
 *   term       keeps calling until SIGTERM, whose handler calls exit(7)
 *   nohandler  keeps calling until SIGTERM, which kills it (default action)
 *   _exit      calls _exit(7) at once
 * The main thread keeps calling the driver until the end, so the handler interrupts a
 * driver call (or the code between two). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
static version_fn version;

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        int v = 0;
        version(&v);
    }
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    exit(7);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: faults_sigexit MODE N\n");
        return 2;
    }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : NULL;
    if (!version) {
        fprintf(stderr, "no cuDriverGetVersion\n");
        return 1;
    }
    /* Only the main thread takes the signals. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
    }
    if (strcmp(mode, "nohandler") != 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGALRM, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    int bad = 0;
    for (long i = 0; i < n; i++) {
        int v = 0;
        bad |= version(&v) != 0;
    }
    printf("ready %ld bad %d\n", n, bad);
    fflush(stdout);
    if (strcmp(mode, "_exit") == 0)
        _exit(7);
    if (strcmp(mode, "alarm") == 0)
        ualarm(50000, 0);
    for (;;) {
        int v = 0;
        version(&v);
    }
}
