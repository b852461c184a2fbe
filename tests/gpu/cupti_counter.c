/*
 * An independent counter of CUDA driver API calls, used as the oracle for the shim's trace.
 *
 * The driver loads this library itself when CUDA_INJECTION64_PATH names it (during cuInit)
 * and calls InitializeInjection(). We subscribe to CUPTI's driver-API callback domain and
 * count every API *enter* per callback id. CUPTI's callbacks fire inside the real driver's
 * entry points, so a call counts here however it reached the driver: through the shim's
 * trampolines or around them. At exit, the counts go as JSON
 *     {"tool": "cupti_counter", "pid": N, "calls": {"cuInit": 1, ...}}
 * to CUPTI_COUNTER_FILE ("%p" in it becomes the pid; without "%p", ".<pid>" is appended, so
 * that several processes of one job never overwrite each other). Without CUPTI_COUNTER_FILE
 * the JSON goes to stderr.
 *
 * Function names are CUPTI's own (CUpti_CallbackData::functionName, a global constant
 * string), e.g. "cuMemAlloc_v2", "cuLaunchKernel_ptsz". tests/gpu/compare_counts.py maps
 * them onto the shim's export names.
 *
 * Build: gcc -shared -fPIC -O2 -o cupti_counter.so cupti_counter.c \
 *            -I<cupti include> -L<cupti lib> -lcupti -Wl,-rpath,<cupti lib>
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CUPTI_DRIVER_TRACE_CBID_SIZE
#define NCBID (CUPTI_DRIVER_TRACE_CBID_SIZE + 64)
#else
#define NCBID 4096
#endif

static uint64_t counts[NCBID];
static const char *names[NCBID];
static uint64_t out_of_range; /* callback ids beyond the table: reported, never dropped */
static CUpti_SubscriberHandle subscriber;
static int initialized;

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *cbdata)
{
    (void)userdata;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !cbdata)
        return;
    const CUpti_CallbackData *info = (const CUpti_CallbackData *)cbdata;
    if (info->callbackSite != CUPTI_API_ENTER)
        return;
    if (cbid >= NCBID) {
        __atomic_fetch_add(&out_of_range, 1, __ATOMIC_RELAXED);
        return;
    }
    if (!__atomic_load_n(&names[cbid], __ATOMIC_RELAXED) && info->functionName)
        __atomic_store_n(&names[cbid], info->functionName, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts[cbid], 1, __ATOMIC_RELAXED);
}

static void out_path(const char *tmpl, char *out, size_t cap)
{
    size_t o = 0;
    int had_pid = 0;
    for (const char *s = tmpl; *s && o + 24 < cap; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%ld", (long)getpid());
            s++;
            had_pid = 1;
        } else
            out[o++] = *s;
    }
    out[o] = '\0';
    if (!had_pid)
        snprintf(out + o, cap - o, ".%ld", (long)getpid());
}

static void write_counts(void)
{
    const char *tmpl = getenv("CUPTI_COUNTER_FILE");
    FILE *f = stderr;
    char path[4096];
    if (tmpl && *tmpl) {
        out_path(tmpl, path, sizeof path);
        f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "cupti_counter: cannot write %s\n", path);
            return;
        }
    }
    fprintf(f, "{\n  \"tool\": \"cupti_counter\",\n  \"pid\": %ld,\n"
               "  \"out_of_range_callbacks\": %llu,\n  \"calls\": {",
            (long)getpid(),
            (unsigned long long)__atomic_load_n(&out_of_range, __ATOMIC_RELAXED));
    int first = 1;
    for (unsigned i = 0; i < NCBID; i++) {
        uint64_t c = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
        if (!c)
            continue;
        const char *n = names[i];
        char unnamed[32];
        if (!n) {
            snprintf(unnamed, sizeof unnamed, "cbid_%u", i);
            n = unnamed;
        }
        fprintf(f, "%s\n    \"%s\": %llu", first ? "" : ",", n, (unsigned long long)c);
        first = 0;
    }
    fprintf(f, "%s}\n}\n", first ? "" : "\n  ");
    if (f != stderr)
        fclose(f);
}

static int check(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS)
        return 1;
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "cupti_counter: %s failed: %d %s\n", what, (int)r, msg ? msg : "");
    return 0;
}

int InitializeInjection(void)
{
    if (initialized)
        return 1;
    initialized = 1;
    if (!check(cuptiSubscribe(&subscriber, on_callback, NULL), "cuptiSubscribe"))
        return 0;
    if (!check(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API),
               "cuptiEnableDomain(DRIVER_API)"))
        return 0;
    atexit(write_counts);
    if (getenv("CUPTI_COUNTER_VERBOSE"))
        fprintf(stderr, "cupti_counter: subscribed to the driver API in pid %ld\n",
                (long)getpid());
    return 1;
}
