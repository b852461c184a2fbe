/*
 * hooks_attributes.c: the cuDeviceGetAttribute hook, installed only when SHIMGEN_TRACE=attrs,
 * SHIMGEN_ATTR_OVERRIDE or SHIMGEN_GATES is in effect. Applies gates first, then asks the
 * driver; an override replaces the value reported to the caller (the driver's state is
 * untouched); the attrs trace logs the query, the answer and the module that asked. The
 * answer is read only after a successful call (the driver wrote it).
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "gates/gates.h"
#include "stats/stats.h"

/* CUdevice_attribute names (facts.h, from shimgen/cuda.py), by number. */
#define ATTRIBUTE_NAME(number, name) [number] = name,
static const char *const attribute_names[] = {SHIMGEN_FOR_EACH_ATTRIBUTE(ATTRIBUTE_NAME)};
#undef ATTRIBUTE_NAME
#define ATTRIBUTE_NAMES (sizeof attribute_names / sizeof attribute_names[0])

static const char *attribute_name(int a)
{
    return a >= 0 && (size_t)a < ATTRIBUTE_NAMES && attribute_names[a] ? attribute_names[a]
                                                                        : "?";
}

static const char *module_of(void *ra)
{
    Dl_info info;
    if (!ra || !dladdr(ra, &info) || !info.dli_fname)
        return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

typedef shimgen_CUresult (*get_attribute_fn)(int *, int, int);

shimgen_CUresult shimgen_hook_cuDeviceGetAttribute(int *value, int attribute, int device);
shimgen_CUresult shimgen_hook_cuDeviceGetAttribute(int *value, int attribute, int device)
{
    void *ra = __builtin_return_address(0);
    shimgen_gates_apply();
    shimgen_CUresult rc =
        ((get_attribute_fn)shimgen_real[SHIMGEN_IDX_cuDeviceGetAttribute])(value, attribute,
                                                                           device);
    /* The driver's answer, read only once it says it wrote one: a failed call may have
     * left value a pointer nobody can read (NULL, 0x10). */
    int answered = rc == SHIMGEN_CUDA_SUCCESS && value;
    int driver_value = answered ? *value : 0;
    int overridden = 0, forced;
    if (answered && shimgen_attr_override(attribute, &forced)) {
        *value = forced;
        overridden = 1;
    }
    if (shimgen_attr_trace) {
        char line[256];
        int n;
        if (overridden)
            n = snprintf(line, sizeof line,
                         "shimgen attr: dev %d %d %s = %d (driver said %d; overridden) rc %d "
                         "from %s\n",
                         device, attribute, attribute_name(attribute), forced, driver_value, rc,
                         module_of(shimgen_real_caller(ra)));
        else
            n = snprintf(line, sizeof line, "shimgen attr: dev %d %d %s = %d rc %d from %s\n",
                         device, attribute, attribute_name(attribute), driver_value, rc,
                         module_of(shimgen_real_caller(ra)));
        if (n > 0) {
            ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n
                                                                          : sizeof line - 1);
            (void)w;
        }
    }
    return rc;
}
