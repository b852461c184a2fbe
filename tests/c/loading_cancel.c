/* A thread cancelled while its first driver call is loading the driver: the thread makes
 * the first call (cuDriverGetVersion), the main thread cancels it after a random pause of
 * 0 to 29 ms, joins it, then calls the driver itself. Prints "cancelled C rc R version V";
 * the main thread's call must return, with the driver's answer. argv[1]: random seed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*version_fn)(int *);

static version_fn version;

static void *first_call(void *arg)
{
    (void)arg;
    int v = 0;
    version(&v);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    srand((unsigned)atoi(argv[1]));
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h || !(version = (version_fn)dlsym(h, "cuDriverGetVersion")))
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, first_call, NULL);
    long us = rand() % 30000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
    pthread_cancel(t);
    void *ret = NULL;
    pthread_join(t, &ret);
    int v = 0, rc = version(&v);
    printf("cancelled %d rc %d version %d\n", ret == PTHREAD_CANCELED, rc, v);
    return 0;
}
