/* fork() while another thread is inside a driver call: a thread waits in a host callback
 * (inside cuLaunchHostFunc) while the main thread forks. The child makes one call and
 * exits; its trace must hold only that call, not the other thread's call in progress,
 * which belongs to the parent. Prints "child <pid>" and "parent <pid>".
 * argv[1]: library to dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int inside, release;

static void wait_in_callback(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    inside = 1;
    pthread_cond_broadcast(&cond);
    while (!release)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static host_launch_fn host;

static void *thread_main(void *arg)
{
    (void)arg;
    host(NULL, wait_in_callback, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version_fn version = (version_fn)dlsym(h, "cuDriverGetVersion");
    host = (host_launch_fn)dlsym(h, "cuLaunchHostFunc");
    if (!version || !host)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_mutex_lock(&lock);
    while (!inside)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int v = 0;
        version(&v);
        printf("child %ld\n", (long)getpid());
        fflush(stdout);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);
    printf("parent %ld\n", (long)getpid());
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
