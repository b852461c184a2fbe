/*
 * An independent recorder of CUDA driver API calls in order, per thread, the oracle for
 * SHIMGEN_TRACE=calls (tests/gpu/calls_validation.sh). Injected by the driver
 * (CUDA_INJECTION64_PATH; it calls InitializeInjection during the first cuInit), it
 * subscribes to CUPTI's driver-API callback domain and, at each API enter, appends the
 * thread, CUPTI's function name and, for cuMemAlloc_v2 its bytesize and for cuLaunchKernel
 * its grid, to a buffer written at exit as JSON lines to CUPTI_CALLS_FILE ("%p": the pid).
 * The parameters are read through the layouts of cuda.h's prototypes (CUPTI passes a struct
 * of the arguments in order).
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXREC (1 << 22)

struct rec {
    int tid;
    const char *name;
    unsigned long long a, b, c, d; /* bytesize; or the grid (x, y, z) */
};
static struct rec *recs;
static unsigned long long nrec, lost;
static CUpti_SubscriberHandle subscriber;

struct alloc_params {
    void *dptr;
    size_t bytesize;
};
struct launch_params {
    void *f;
    unsigned gx, gy, gz, bx, by, bz, shared;
};

static void CUPTIAPI on_callback(void *u, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
    (void)u, (void)cbid;
    const CUpti_CallbackData *info = data;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !info || info->callbackSite != CUPTI_API_ENTER)
        return;
    unsigned long long k = __atomic_fetch_add(&nrec, 1, __ATOMIC_RELAXED);
    if (k >= MAXREC) {
        __atomic_fetch_add(&lost, 1, __ATOMIC_RELAXED);
        return;
    }
    struct rec *r = &recs[k];
    r->tid = gettid();
    r->name = info->functionName;
    const char *n = info->functionName ? info->functionName : "";
    if (strcmp(n, "cuMemAlloc_v2") == 0 && info->functionParams) {
        r->a = ((const struct alloc_params *)info->functionParams)->bytesize;
    } else if (strncmp(n, "cuLaunchKernel", 14) == 0 && n[14] != 'E' && info->functionParams) {
        const struct launch_params *p = info->functionParams;
        r->a = p->gx, r->b = p->gy, r->c = p->gz, r->d = 1;
    }
}

static void write_out(void)
{
    const char *t = getenv("CUPTI_CALLS_FILE");
    char path[4096];
    snprintf(path, sizeof path, "%s.%ld", t && *t ? t : "cupti_calls", (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    unsigned long long n = nrec < MAXREC ? nrec : MAXREC;
    fprintf(f, "{\"pid\": %ld, \"lost\": %llu}\n", (long)getpid(), lost);
    for (unsigned long long i = 0; i < n; i++)
        fprintf(f, "[%d, \"%s\", %llu, %llu, %llu, %llu]\n", recs[i].tid,
                recs[i].name ? recs[i].name : "?", recs[i].a, recs[i].b, recs[i].c, recs[i].d);
    fclose(f);
}

int InitializeInjection(void)
{
    static int done;
    if (done++)
        return 1;
    recs = calloc(MAXREC, sizeof *recs);
    if (!recs || cuptiSubscribe(&subscriber, on_callback, NULL) != CUPTI_SUCCESS ||
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_calls: cannot subscribe\n");
        return 0;
    }
    atexit(write_out);
    return 1;
}
