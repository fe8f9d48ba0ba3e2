/* device.h — the device seam: where the engine's bytes live and in what order the work on them runs.
 *
 * A device is a table of functions. Work is queued on a stream and runs in queue order on that stream;
 * an event recorded on a stream completes when the stream reaches it, and a stream told to wait for an
 * event runs nothing queued after the wait before the event completes. The host reads or writes device
 * memory only after an event it synchronised on (or fsdp_device_sync) says the work before it ran.
 *
 * Rows:
 *  - the CPU (fsdp_device_cpu): today's behaviour. Every call runs at once on the calling thread, a
 *    stream is NULL, every event is complete; memory is the tracked allocator's (categories, peaks).
 *  - the simulated device (fsdp_device_sim_create, device_sim.c): host memory, but streams are FIFO
 *    queues and a seeded scheduler runs queued work in any order the queues and the recorded waits
 *    allow, at any later device call. Memory freed on a stream is poisoned (NaN) when the free runs, a
 *    fresh block is poisoned when allocated, a copy or an element op happens when it runs. A missing
 *    dependency therefore shows as NaN or a wrong value, the same one for one seed.
 *
 * The element ops are what the engine does to shard bytes (shard/unit.c, main_grad.c, optim.c); the
 * CPU row's bodies are the SIMD loops that were there (device_cpu.c), so CPU results keep their bits. */
#ifndef FSDP_DEVICE_H
#define FSDP_DEVICE_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fsdp_stream fsdp_stream_t; /* opaque per device; NULL on the CPU */
typedef struct fsdp_event fsdp_event_t;   /* opaque per device; NULL on the CPU */

/* AdamW's per-step scalars, formed on the host in double and rounded once (optim.c). */
typedef struct {
    float decay, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
} fsdp_adamw_scalars;

enum {
    FSDP_ALLOC_SHARED = 1u << 0, /* the host-shared heap: the shared-memory transport moves it in place */
    FSDP_ALLOC_ZERO = 1u << 1,   /* zero-filled (the CPU: calloc) */
};

enum {
    FSDP_DEV_HOST_MEMORY = 1u << 0, /* the host may address device memory (after synchronising) */
    FSDP_DEV_ASYNC = 1u << 1,       /* queued work may run later than the call (events matter) */
};

struct fsdp_device {
    const char *name; /* "cpu", "sim" */
    unsigned caps;    /* FSDP_DEV_* */
    void *impl;

    /* streams and events */
    fsdp_status (*stream_create)(fsdp_device_t *d, fsdp_stream_t **out);
    void (*stream_destroy)(fsdp_device_t *d, fsdp_stream_t *s); /* runs what is queued first */
    fsdp_status (*event_create)(fsdp_device_t *d, fsdp_event_t **out);
    void (*event_destroy)(fsdp_device_t *d, fsdp_event_t *ev);
    void (*record)(fsdp_device_t *d, fsdp_event_t *ev, fsdp_stream_t *s); /* completes when s gets here */
    void (*wait)(fsdp_device_t *d, fsdp_stream_t *s, fsdp_event_t *ev);   /* later work on s waits */
    int (*query)(fsdp_device_t *d, fsdp_event_t *ev);                     /* 1: complete (never blocks) */
    fsdp_status (*event_sync)(fsdp_device_t *d, fsdp_event_t *ev);        /* the host waits for ev */
    fsdp_status (*sync)(fsdp_device_t *d);                                /* the host waits for everything */

    /* memory: alloc returns at once (usable by work queued after the call), flags FSDP_ALLOC_*; free
     * releases the block when s reaches the free (p NULL: nothing). */
    fsdp_status (*alloc)(fsdp_device_t *d, void **out, size_t bytes, fsdp_mem_cat cat, unsigned flags,
                         fsdp_stream_t *s);
    void (*free)(fsdp_device_t *d, void *p, fsdp_stream_t *s);
    void (*memset0)(fsdp_device_t *d, void *p, size_t bytes, fsdp_stream_t *s);
    void (*copy)(fsdp_device_t *d, void *dst, const void *src, size_t bytes, fsdp_stream_t *s);
    /* fn(arg) runs on the host when s reaches it; arg_bytes of arg are copied at the call (what
     * cudaLaunchHostFunc does, with the argument captured). Tests' stand-in kernels use it. */
    void (*host_fn)(fsdp_device_t *d, fsdp_stream_t *s, void (*fn)(void *arg), const void *arg,
                    size_t arg_bytes);

    /* element ops (n elements) */
    void (*f32_to_bf16)(fsdp_device_t *d, fsdp_stream_t *s, fsdp_bf16 *dst, const float *src, size_t n);
    /* dst = src (accumulate 0) or dst += src (1), src widened exactly */
    void (*bf16_to_f32)(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const fsdp_bf16 *src, size_t n,
                        int accumulate);
    void (*f32_add)(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const float *src, size_t n);
    /* y += x * a, the product rounded to fp32 first (never an fma) */
    void (*axpy)(fsdp_device_t *d, fsdp_stream_t *s, float *y, const float *x, size_t n, float a);
    /* *out (host memory) = sum of x^2 in double, written when the op runs */
    void (*sumsq)(fsdp_device_t *d, fsdp_stream_t *s, const float *x, size_t n, double *out);
    void (*scale)(fsdp_device_t *d, fsdp_stream_t *s, float *x, size_t n, float c); /* x *= c */
    /* one AdamW update of p, m, v from g (torch.optim.AdamW's order; optim.c) */
    void (*adamw)(fsdp_device_t *d, fsdp_stream_t *s, float *p, float *m, float *v, const float *g, size_t n,
                  int decay, const fsdp_adamw_scalars *sc);
};

/* The CPU device (a process-wide table; never freed). */
fsdp_device_t *fsdp_device_cpu(void);

/* A simulated device. seed picks the interleaving; the same seed gives the same run. flags:
 * FSDP_SIM_NO_HOST_ACCESS: it claims memory the host cannot address (no FSDP_DEV_HOST_MEMORY), so the
 * engine moves shard bytes to and from files through copies, as it must on a GPU. */
enum { FSDP_SIM_NO_HOST_ACCESS = 1u << 0 };
fsdp_status fsdp_device_sim_create(uint64_t seed, unsigned flags, fsdp_device_t **out);
/* Runs what is still queued, then frees it and every stream it still owns (events are the caller's:
 * event_destroy them first). */
void fsdp_device_sim_destroy(fsdp_device_t *d);
/* Work items the simulated device ran, and how many ran out of the order in which they were queued
 * (another stream's item first): a run that reordered nothing tests nothing. */
void fsdp_device_sim_counts(const fsdp_device_t *d, long *ran, long *reordered);

/* The CPU row's element ops, also what the simulated device runs when an item's turn comes. */
void fsdp_cpu_f32_to_bf16(fsdp_bf16 *dst, const float *src, size_t n);
void fsdp_cpu_bf16_to_f32(float *dst, const fsdp_bf16 *src, size_t n, int accumulate);
void fsdp_cpu_f32_add(float *dst, const float *src, size_t n);
void fsdp_cpu_axpy(float *y, const float *x, size_t n, float a);
double fsdp_cpu_sumsq(const float *x, size_t n);
void fsdp_cpu_scale(float *x, size_t n, float c);
void fsdp_cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, int decay,
                    const fsdp_adamw_scalars *sc);
void fsdp_cpu_memset0(void *p, size_t bytes);

#endif
