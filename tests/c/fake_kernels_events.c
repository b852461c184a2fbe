/* The FAKE driver's timing events and contexts (part of tests/c/fake_kernels_libcuda.c's
 * library; not NVIDIA's driver). Each stream has a fake GPU clock that each launch counted
 * on it advances by its fake duration (fake_gpu_ran); cuEventRecord stamps an event with its
 * stream's clock, and cuEventElapsedTime gives the difference in ms, as the driver's float.
 * An event is done once recorded, unless FAKE_KERN_NOT_READY is set (cuEventQuery then
 * answers CUDA_ERROR_NOT_READY). FAKE_KERN_REFUSE=create or =record: that call fails
 * (CUDA_ERROR_OUT_OF_MEMORY), =record:N: the N-th record and every later one. One context,
 * current from the start; cuCtxDestroy_v2 destroys it (its events then answer
 * CUDA_ERROR_CONTEXT_IS_DESTROYED) and makes no context current. The report's part:
 *   "events": n, "records": n, "recorded_in_capture": n, "queried_not_ready": n,
 *   "asked_destroyed": n (queries of events whose context was destroyed) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define EXPORT __attribute__((visibility("default")))
typedef int CUresult;
enum { NOT_READY = 600, OOM = 2, DESTROYED = 709, INVALID = 400 };
#define EVENT_MAGIC 0x45564e54u

int fake_is_capturing(void *stream);
void fake_gpu_ran(void *stream, unsigned long ns);
void fake_events_report(void);

struct event {
    unsigned magic;
    int recorded;
    uintptr_t ctx;
    unsigned long at; /* its stream's clock when recorded */
};
#define MAX_STREAMS 32
static struct {
    uintptr_t key; /* stream + 1 */
    unsigned long clock;
} clocks[MAX_STREAMS];
static uintptr_t current = 0xC0, destroyed;
static unsigned long events, records, in_capture, not_ready, asked_destroyed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long *clock_of(void *stream)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (clocks[i].key == (uintptr_t)stream + 1 || !clocks[i].key) {
            clocks[i].key = (uintptr_t)stream + 1;
            return &clocks[i].clock;
        }
    return &clocks[MAX_STREAMS - 1].clock;
}

void fake_gpu_ran(void *stream, unsigned long ns)
{
    pthread_mutex_lock(&lock);
    *clock_of(stream) += ns;
    pthread_mutex_unlock(&lock);
}

static int refused(const char *what)
{
    const char *s = getenv("FAKE_KERN_REFUSE");
    size_t n = strlen(what);
    if (!s || strncmp(s, what, n) || (s[n] && s[n] != ':'))
        return 0;
    return !s[n] || records >= strtoul(s + n + 1, NULL, 10);
}

static struct event *live(void *e)
{
    struct event *ev = e;
    return ev && ev->magic == EVENT_MAGIC ? ev : NULL;
}

EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
    if (!ctx)
        return 1;
    *ctx = (void *)current;
    return 0;
}

EXPORT CUresult cuCtxDestroy_v2(void *ctx)
{
    if ((uintptr_t)ctx != 0xC0 || destroyed)
        return 201;
    destroyed = (uintptr_t)ctx;
    current = 0;
    return 0;
}

EXPORT CUresult cuEventCreate(void **e, unsigned flags)
{
    if (!e || flags || !current)
        return !current ? 201 : 1;
    if (refused("create"))
        return OOM;
    struct event *ev = calloc(1, sizeof *ev);
    ev->magic = EVENT_MAGIC;
    ev->ctx = current;
    pthread_mutex_lock(&lock);
    events++;
    pthread_mutex_unlock(&lock);
    *e = ev;
    return 0;
}

EXPORT CUresult cuEventDestroy_v2(void *e)
{
    struct event *ev = live(e);
    if (!ev)
        return INVALID;
    ev->magic = 0;
    free(ev);
    return 0;
}

EXPORT CUresult cuEventRecord(void *e, void *stream)
{
    struct event *ev = live(e);
    if (!ev)
        return INVALID;
    if (ev->ctx == destroyed)
        return DESTROYED;
    pthread_mutex_lock(&lock);
    CUresult r = refused("record") ? OOM : 0;
    if (!r) {
        records++;
        in_capture += fake_is_capturing(stream) != 0;
        ev->at = *clock_of(stream);
        ev->recorded = 1;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuEventQuery(void *e)
{
    struct event *ev = live(e);
    if (!ev)
        return INVALID;
    if (ev->ctx == destroyed) {
        asked_destroyed++;
        return DESTROYED;
    }
    if (getenv("FAKE_KERN_NOT_READY")) {
        pthread_mutex_lock(&lock);
        not_ready++;
        pthread_mutex_unlock(&lock);
        return NOT_READY;
    }
    return 0;
}

EXPORT CUresult cuEventSynchronize(void *e)
{
    return live(e) ? 0 : INVALID;
}

EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b)
{
    struct event *x = live(a), *y = live(b);
    if (!ms || !x || !y)
        return INVALID;
    if (x->ctx == destroyed || y->ctx == destroyed) {
        asked_destroyed++;
        return DESTROYED;
    }
    if (!x->recorded || !y->recorded || getenv("FAKE_KERN_NOT_READY"))
        return NOT_READY;
    *ms = (float)((double)(y->at - x->at) / 1e6);
    return 0;
}

EXPORT CUresult cuStreamQuery(void *stream)
{
    (void)stream;
    return getenv("FAKE_KERN_NOT_READY") ? NOT_READY : 0;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    return 0;
}

void fake_events_report(void)
{
    printf(", \"events\": %lu, \"records\": %lu, \"recorded_in_capture\": %lu, "
           "\"queried_not_ready\": %lu, \"asked_destroyed\": %lu", events, records, in_capture,
           not_ready, asked_destroyed);
}
