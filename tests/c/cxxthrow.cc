// A C++ exception thrown in a host callback propagates through cuLaunchHostFunc, a
// driver call made through the shim, to the caller's catch. Under SHIMGEN_TRACE=time the
// unwinder crosses the timing stub with its call-frame information; without it, the
// program would end in std::terminate. Three throws, then ordinary calls must still work.
// Prints "caught <n> version rc <rc> value <v>". argv[1]: library to dlopen.
#include <dlfcn.h>

#include <cstdio>
#include <stdexcept>

typedef int (*host_launch_fn)(void *, void (*)(void *), void *);
typedef int (*version_fn)(int *);

static void thrower(void *)
{
    throw std::runtime_error("thrown in the host callback");
}

int main(int argc, char **argv)
{
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 1;
    auto host = reinterpret_cast<host_launch_fn>(dlsym(h, "cuLaunchHostFunc"));
    auto version = reinterpret_cast<version_fn>(dlsym(h, "cuDriverGetVersion"));
    if (!host || !version)
        return 1;
    int caught = 0;
    for (int i = 0; i < 3; i++) {
        try {
            host(nullptr, thrower, nullptr);
        } catch (const std::runtime_error &) {
            caught++;
        }
    }
    int v = 0, rc = 0;
    for (int i = 0; i < 1000; i++)
        rc |= version(&v);
    std::printf("caught %d version rc %d value %d\n", caught, rc, v);
    return 0;
}
