/* Driver calls made during the exit sequence (tests/test_faults_output.py). Each place
 * calls cuDriverGetVersion a different power of two times, so the trace's count says
 * exactly which places were counted:
 *
 *     1  a C++ static object's destructor, constructed before main (before the first call)
 *     2  an atexit handler registered in main before the first driver call
 *     4  main itself: the first driver calls
 *     8  an atexit handler registered after the first driver call
 *    16  a function-local static object's destructor, constructed after the first call
 *    32  an atexit handler that the handler of 2 registers while the process exits
 *    64  an ELF destructor of the program
 *   127  in all
 *
 *   atexitcalls return|exit|thread    how the process ends: return from main, exit() in
 *                                     main, or exit() from a second thread
 *   atexitcalls bulk N                N calls, print "exiting", return (no calls at exit)
 *
 * Output: "place <n> ran" as each place runs, "expected 127" before the end. Exits
 * non-zero on a failed call. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*version_fn)(int *);

static version_fn version;
static bool bulk; /* "bulk": no calls at exit */

static void calls(long n)
{
    if (!version) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        version = h ? (version_fn)dlsym(h, "cuDriverGetVersion") : nullptr;
        if (!version)
            _exit(3);
    }
    int v = 0;
    for (long i = 0; i < n; i++)
        if (version(&v) != 0)
            _exit(4);
}

static void place(long n)
{
    if (bulk)
        return;
    calls(n);
    printf("place %ld ran\n", n);
    fflush(stdout);
}

struct AtExit {
    long n;
    ~AtExit() { place(n); }
};

static AtExit before_main{1};

static void nested_handler() { place(32); }
static void before_handler()
{
    place(2);
    atexit(nested_handler);
}
static void after_handler() { place(8); }

__attribute__((destructor)) static void program_destructor() { place(64); }

static void *exit_from_thread(void *)
{
    exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "return";
    if (strcmp(mode, "bulk") == 0) {
        bulk = true;
        calls(argc > 2 ? atol(argv[2]) : 1);
        printf("exiting\n");
        fflush(stdout);
        return 0;
    }
    (void)before_main;
    atexit(before_handler);
    place(4);
    atexit(after_handler);
    static AtExit after_first_call{16};
    (void)after_first_call;
    printf("expected 127\n");
    fflush(stdout);
    if (strcmp(mode, "exit") == 0)
        exit(0);
    if (strcmp(mode, "thread") == 0) {
        pthread_t t;
        pthread_create(&t, nullptr, exit_from_thread, nullptr);
        pause();
    }
    return 0;
}
