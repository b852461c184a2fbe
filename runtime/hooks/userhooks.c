/*
 * userhooks.c: the user's hooks (`shimgen build --hook FILE.c`, shimgen/hook.h, docs/hooks.md)
 * put in front of their exports when the slots are filled: what an export's slot would reach
 * (shimgen's own hook or the driver's function) becomes SHIMGEN_REAL(name), and the user's
 * hook takes its place, so every route to the export (direct calls, dlsym, every address
 * cuGetProcAddress hands out) reaches it, counted and timed as any other. Also
 * shimgen_hook_say, the hooks' way to write a notice line. (SHIMGEN_REAL before the driver
 * is loaded is resolved by driver.c, shimgen_user_real_resolve.)
 */

#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"

extern void *const shimgen_user_hook_fns[]; /* table.c: the user's hook per slot, or NULL */

void shimgen_user_hooks_install(int loaded)
{
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        void *next = __atomic_load_n(&shimgen_targets[i], __ATOMIC_ACQUIRE);
        __atomic_store_n(&shimgen_user_next[i], next, __ATOMIC_RELEASE);
        /* Not in front of a function the driver lacks, nor of a driver that failed to
         * load: those calls fail as they would without the hook. */
        if (loaded && shimgen_user_hook_fns[i] && shimgen_real[i] != (void *)shimgen_fail_missing)
            __atomic_store_n(&shimgen_targets[i], shimgen_user_hook_fns[i], __ATOMIC_RELEASE);
    }
}

__attribute__((format(printf, 1, 2))) void shimgen_hook_say(const char *fmt, ...);
void shimgen_hook_say(const char *fmt, ...)
{
    /* A hook's constructor (priority 101) runs before the shim's: the notice file and
     * SHIMGEN_QUIET are read first, once, as for every notice. */
    shimgen_config();
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    while (len > 0 && line[len - 1] == '\n')
        line[--len] = '\0';
    for (size_t k = 0; k < len; k++) /* one line, whatever the hook formatted */
        if (line[k] == '\n' || line[k] == '\r')
            line[k] = ' ';
    shimgen_say("shimgen: hook: %s\n", line);
}
