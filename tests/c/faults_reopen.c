/* dlopen and dlclose of the driver, many times over.
 *   faults_reopen CYCLES [thread] NAME...
 * Each cycle opens every NAME with dlopen, calls cuDriverGetVersion through dlsym, and closes
 * it again. With "thread", each cycle also starts a thread that calls through the handle,
 * waits until the handle is closed, and only then exits (its thread-exit work runs after the
 * dlclose).
 * Prints "cycles <c> opens <o> calls <k> failures <f>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*version_fn)(int *);

static pthread_barrier_t called, closed;
static version_fn thread_fn;
static int thread_rc;

static void *worker(void *arg)
{
    (void)arg;
    int v = 0;
    thread_rc = thread_fn(&v) != 0 || v == 0;
    pthread_barrier_wait(&called);
    pthread_barrier_wait(&closed);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: faults_reopen CYCLES [thread] NAME...\n");
        return 2;
    }
    long cycles = atol(argv[1]);
    int first = 2, with_thread = 0;
    if (strcmp(argv[2], "thread") == 0) {
        with_thread = 1;
        first = 3;
    }
    long opens = 0, calls = 0, failures = 0;
    pthread_barrier_init(&called, NULL, 2);
    pthread_barrier_init(&closed, NULL, 2);
    for (long c = 0; c < cycles; c++) {
        for (int a = first; a < argc; a++) {
            void *h = dlopen(argv[a], RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                fprintf(stderr, "dlopen %s: %s\n", argv[a], dlerror());
                return 1;
            }
            opens++;
            version_fn fn = (version_fn)dlsym(h, "cuDriverGetVersion");
            int v = 0;
            calls++;
            if (!fn || fn(&v) != 0 || v == 0)
                failures++;
            pthread_t t;
            if (with_thread && fn) {
                thread_fn = fn;
                pthread_create(&t, NULL, worker, NULL);
                pthread_barrier_wait(&called);
                calls++;
            }
            if (dlclose(h) != 0)
                failures++;
            if (with_thread && fn) {
                pthread_barrier_wait(&closed);
                pthread_join(t, NULL);
                failures += thread_rc;
            }
        }
    }
    printf("cycles %ld opens %ld calls %ld failures %ld\n", cycles, opens, calls, failures);
    return failures != 0;
}
