// Threads that leave a driver call by longjmp or by a C++ exception, then exit: each of
// many short-lived threads makes one ordinary call, then calls cuLaunchHostFunc, whose
// host callback calls the driver once more and leaves by longjmp (or throws, caught in the
// thread) so that the driver call never returns through the shim, and the thread exits.
// The shim must reclaim each thread's per-thread memory however its calls ended: the
// probe prints its resident set after a warm-up and at the end, and the calls it made.
// Needs a driver whose cuLaunchHostFunc runs the callback synchronously (the fake one).
// Prints "threads <n> host <n> version <n> bad <n> rss_warm_kb <kb> rss_end_kb <kb>".
// argv[1]: library to dlopen; argv[2]: longjmp|throw; argv[3]: threads; argv[4]: threads
// alive at once.
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

typedef int (*version_fn)(int *);
typedef int (*host_launch_fn)(void *, void (*)(void *), void *);

static version_fn version;
static host_launch_fn host;
static bool use_throw;
static std::atomic<long> host_calls, version_calls, bad;

static void check_version()
{
    int v = 0;
    if (version(&v) != 0 || v <= 0)
        bad++;
    version_calls++;
}

static void leave_by_longjmp(void *arg)
{
    check_version();
    longjmp(*static_cast<jmp_buf *>(arg), 1);
}

static void leave_by_throw(void *)
{
    check_version();
    throw std::runtime_error("out of the driver call");
}

static void *worker(void *)
{
    check_version();
    host_calls++;
    if (use_throw) {
        try {
            host(nullptr, leave_by_throw, nullptr);
            bad++; // not reached
        } catch (const std::runtime_error &) {
        }
    } else {
        static thread_local jmp_buf env;
        if (setjmp(env) == 0) {
            host(nullptr, leave_by_longjmp, &env);
            bad++; // not reached
        }
    }
    return nullptr;
}

static long rss_kb()
{
    FILE *f = std::fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "VmRSS:", 6) == 0)
            kb = std::atol(line + 6);
    if (f)
        std::fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    version = reinterpret_cast<version_fn>(dlsym(h, "cuDriverGetVersion"));
    host = reinterpret_cast<host_launch_fn>(dlsym(h, "cuLaunchHostFunc"));
    if (!version || !host)
        return 1;
    use_throw = std::strcmp(argv[2], "throw") == 0;
    long n = std::atol(argv[3]), warm = n / 10, rss_warm = 0;
    int wave = std::atoi(argv[4]);
    if (wave < 1 || wave > 64)
        return 2;
    pthread_t t[64];
    for (long done = 0; done < n;) {
        int k = 0;
        for (; k < wave && done + k < n; k++)
            if (pthread_create(&t[k], nullptr, worker, nullptr) != 0)
                return 3;
        for (int j = 0; j < k; j++)
            pthread_join(t[j], nullptr);
        if (done < warm && done + k >= warm)
            rss_warm = rss_kb();
        done += k;
    }
    std::printf("threads %ld host %ld version %ld bad %ld rss_warm_kb %ld rss_end_kb %ld\n", n,
                host_calls.load(), version_calls.load(), bad.load(), rss_warm, rss_kb());
    return 0;
}
