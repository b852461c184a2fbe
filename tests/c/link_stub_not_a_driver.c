/* Link-time stand-in named libcuda.so.1, used only so route_linked gets DT_NEEDED
 * libcuda.so.1. It is never loaded in the tests: the shim (or the real driver) is. */
int cuDriverGetVersion(int *version);
int cuDriverGetVersion(int *version)
{
    *version = -1;
    return 999;
}
