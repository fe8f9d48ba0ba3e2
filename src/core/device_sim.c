/* device_sim.c — the simulated device (device.h): host memory, asynchronous in every way a GPU is.
 *
 * A stream is a FIFO queue of items; an event is a pair of counters (times recorded, highest record
 * that ran). Nothing runs at the call that queues it: at every later call into the device a seeded
 * scheduler runs none, one or a few items, each the head of a stream chosen at random among the heads
 * that may run (a wait item may run once its event's record has run). The host's synchronising calls
 * (event_sync, sync, stream_destroy) run items in the same random way until what they wait for is
 * done. So work on different streams interleaves in any order the recorded dependencies allow, and
 * work the host forgot to wait for has not happened yet when the host looks.
 *
 * Memory is counted by the tracked allocator's side table (the same categories; fsdp_mem_track), from
 * the allocation to when its free runs. A block is filled with NaN when it is allocated and again when
 * its free runs: a kernel that reads a buffer whose free was not ordered after it, or a reduction that
 * reads main_grad before the GEMM wrote it, reads NaN. 0x7FC07FC0 is a quiet NaN read as fp32 and two
 * quiet NaNs read as bf16. A freed block is given back to the C library at the next device
 * synchronisation (run_free).
 *
 * Single-threaded: the engine calls a device from one thread (the tests' ranks are processes). */
#include "core/device.h"

#include <stdlib.h>
#include <string.h>

#define SIM_POISON     0x7FC07FC0u
#define QUARANTINE_MAX 1024

typedef enum { ITEM_RUN = 0, ITEM_RECORD, ITEM_WAIT } item_kind;

typedef struct sim_item {
    struct sim_item *next;
    item_kind kind;
    uint64_t seq; /* the device-wide order in which items were queued */
    void (*run)(void *ctx, void *arg);
    fsdp_event_t *ev;
    uint64_t gen; /* RECORD: this record's number; WAIT: the record it waits for */
    size_t arg_bytes;
    _Alignas(16) unsigned char arg[];
} sim_item;

struct fsdp_stream {
    sim_item *head, *tail;
};

struct fsdp_event {
    uint64_t recorded;  /* records queued */
    uint64_t completed; /* the highest record that ran */
};

typedef struct {
    void *p;
    size_t bytes;
} sim_freed;

/* Back to where sim_alloc took it from. */
static void give_back(void *p, size_t bytes) {
    size_t total = (bytes + 63) / 64 * 64;
    if (core_heap_offset(p, total))
        (void)core_heap_free(p, total);
    else
        free(p);
}

typedef struct {
    uint64_t rng;
    uint64_t seq;
    fsdp_stream_t **streams; /* every live stream; [0] is the default (NULL) stream */
    int n_streams, cap_streams;
    sim_freed quarantine[QUARANTINE_MAX]; /* freed blocks not yet given back (run_free) */
    int n_quarantine;
    int eager;   /* of 8 calls, how many run queued items (1..4, from the seed) */
    int running; /* an item is running: no scheduling from inside it */
    int failed;  /* an item could not be queued (out of host memory): the next sync says so */
    long ran, reordered;
} sim_dev;

static uint64_t next_rand(sim_dev *S) { /* splitmix64 */
    uint64_t x = (S->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void poison(void *p, size_t bytes) {
    uint32_t w = SIM_POISON;
    size_t n = bytes / sizeof w;
    for (size_t i = 0; i < n; i++)
        memcpy((char *)p + i * sizeof w, &w, sizeof w);
    memset((char *)p + n * sizeof w, 0xFF, bytes - n * sizeof w);
}

static fsdp_stream_t *stream_of(sim_dev *S, fsdp_stream_t *s) { return s ? s : S->streams[0]; }

static int item_ready(const sim_item *it) { return it->kind != ITEM_WAIT || it->ev->completed >= it->gen; }

/* Runs the head of stream k. */
static void run_head(sim_dev *S, int k) {
    fsdp_stream_t *st = S->streams[k];
    sim_item *it = st->head;
    st->head = it->next;
    if (st->head == NULL) st->tail = NULL;
    for (int j = 0; j < S->n_streams; j++) /* an item queued earlier elsewhere is still waiting */
        if (j != k && S->streams[j]->head != NULL && S->streams[j]->head->seq < it->seq) {
            S->reordered++;
            break;
        }
    S->running = 1;
    if (it->kind == ITEM_RUN)
        it->run(S, it->arg);
    else if (it->kind == ITEM_RECORD && it->gen > it->ev->completed)
        it->ev->completed = it->gen;
    S->running = 0;
    S->ran++;
    free(it);
}

/* Runs one ready head chosen at random; 0 when none can run. */
static int run_one(sim_dev *S) {
    int ready[64], n = 0;
    for (int k = 0; k < S->n_streams && n < 64; k++)
        if (S->streams[k]->head != NULL && item_ready(S->streams[k]->head)) ready[n++] = k;
    if (n == 0) return 0;
    run_head(S, ready[next_rand(S) % (uint64_t)n]);
    return 1;
}

/* At every call: with probability eager/8 one to four ready items, else nothing. How eager a device
 * is comes from its seed (1..4 of 8), so some seeds leave long queues and others short. */
static void tick(sim_dev *S) {
    if (S->running) return;
    uint64_t r = next_rand(S);
    if ((int)(r % 8) >= S->eager) return;
    int k = 1 + (int)((r >> 3) % 4);
    for (int i = 0; i < k && run_one(S); i++) {
    }
}

static int stream_busy(fsdp_stream_t *s) { return s->head != NULL; }
static int any_busy(sim_dev *S) {
    for (int k = 0; k < S->n_streams; k++)
        if (stream_busy(S->streams[k])) return 1;
    return 0;
}

static fsdp_status stuck(sim_dev *S, const char *what) {
    return FSDP_ERR(FSDP_EINTERNAL,
                    "simulated device: %s can never happen: every queued item waits for an event whose "
                    "record is queued after it (a wait on a stream for work queued later on itself)",
                    what);
}

static void release(sim_dev *S, int keep);

static fsdp_status check_failed(sim_dev *S) {
    if (!S->failed) return FSDP_OK;
    S->failed = 0;
    return FSDP_ERR(FSDP_ENOMEM, "simulated device: out of host memory queueing work (some work was lost)");
}

static sim_item *push(sim_dev *S, fsdp_stream_t *s, item_kind kind, size_t arg_bytes) {
    sim_item *it = calloc(1, sizeof *it + arg_bytes);
    if (it == NULL) {
        S->failed = 1;
        return NULL;
    }
    it->kind = kind;
    it->seq = S->seq++;
    it->arg_bytes = arg_bytes;
    s = stream_of(S, s);
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    return it;
}

static void enqueue(fsdp_device_t *d, fsdp_stream_t *s, void (*run)(void *, void *), const void *arg,
                    size_t arg_bytes) {
    sim_dev *S = d->impl;
    tick(S);
    sim_item *it = push(S, s, ITEM_RUN, arg_bytes);
    if (it == NULL) return;
    it->run = run;
    memcpy(it->arg, arg, arg_bytes);
}

/* ---------------------------------------------------------------- streams and events */

static fsdp_status sim_stream_create(fsdp_device_t *d, fsdp_stream_t **out) {
    sim_dev *S = d->impl;
    *out = NULL;
    if (S->n_streams == 64) return FSDP_ERR(FSDP_EINVAL, "simulated device: 64 streams at most");
    if (S->n_streams == S->cap_streams) {
        int cap = S->cap_streams ? 2 * S->cap_streams : 4;
        fsdp_stream_t **ns = realloc(S->streams, (size_t)cap * sizeof *ns);
        if (ns == NULL) return FSDP_ERR(FSDP_ENOMEM, "simulated device: stream table");
        S->streams = ns;
        S->cap_streams = cap;
    }
    fsdp_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL) return FSDP_ERR(FSDP_ENOMEM, "simulated device: stream");
    S->streams[S->n_streams++] = s;
    *out = s;
    return FSDP_OK;
}

static void sim_stream_destroy(fsdp_device_t *d, fsdp_stream_t *s) {
    sim_dev *S = d->impl;
    if (s == NULL) return;
    while (stream_busy(s))
        if (!run_one(S)) break; /* stuck: its items are dropped with it */
    while (s->head) {
        sim_item *it = s->head;
        s->head = it->next;
        free(it);
    }
    for (int k = 1; k < S->n_streams; k++)
        if (S->streams[k] == s) {
            S->streams[k] = S->streams[--S->n_streams];
            break;
        }
    free(s);
}

static fsdp_status sim_event_create(fsdp_device_t *d, fsdp_event_t **out) {
    *out = calloc(1, sizeof **out);
    return *out ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "simulated device: event");
}

static void sim_event_destroy(fsdp_device_t *d, fsdp_event_t *ev) {
    /* A record still queued would write it: run the device empty first (rare: teardown). */
    sim_dev *S = d->impl;
    if (ev == NULL) return;
    if (ev->completed < ev->recorded)
        while (any_busy(S) && run_one(S)) {
        }
    free(ev);
}

static void sim_record(fsdp_device_t *d, fsdp_event_t *ev, fsdp_stream_t *s) {
    sim_dev *S = d->impl;
    tick(S);
    sim_item *it = push(S, s, ITEM_RECORD, 0);
    if (it == NULL) return;
    it->ev = ev;
    it->gen = ++ev->recorded;
}

static void sim_wait(fsdp_device_t *d, fsdp_stream_t *s, fsdp_event_t *ev) {
    sim_dev *S = d->impl;
    tick(S);
    if (ev->recorded == 0) return; /* never recorded: nothing to wait for (as CUDA) */
    sim_item *it = push(S, s, ITEM_WAIT, 0);
    if (it == NULL) return;
    it->ev = ev;
    it->gen = ev->recorded;
}

static int sim_query(fsdp_device_t *d, fsdp_event_t *ev) {
    tick(d->impl);
    return ev->completed >= ev->recorded;
}

static fsdp_status sim_event_sync(fsdp_device_t *d, fsdp_event_t *ev) {
    sim_dev *S = d->impl;
    tick(S);
    uint64_t want = ev->recorded;
    while (ev->completed < want)
        if (!run_one(S)) return stuck(S, "an event the host waits for");
    return check_failed(S);
}

static fsdp_status sim_sync(fsdp_device_t *d) {
    sim_dev *S = d->impl;
    while (any_busy(S))
        if (!run_one(S)) return stuck(S, "the device's synchronisation");
    release(S, 0);
    return check_failed(S);
}

/* ---------------------------------------------------------------- memory */

/* Blocks come from the C library (or the host-shared heap), page-aligned like a device allocator's,
 * and are counted in the tracked accounting's side table (fsdp_mem_track), as a GPU row's must be: a
 * device pointer carries no header. */
static size_t round_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

static fsdp_status sim_alloc(fsdp_device_t *d, void **out, size_t bytes, fsdp_mem_cat cat, unsigned flags,
                             fsdp_stream_t *s) {
    sim_dev *S = d->impl;
    tick(S);
    *out = NULL;
    if (bytes == 0) return FSDP_OK;
    void *p = (flags & FSDP_ALLOC_SHARED) ? core_heap_alloc(round_up(bytes)) : NULL;
    if (p == NULL) p = aligned_alloc(64, round_up(bytes));
    if (p == NULL)
        return FSDP_ERR(FSDP_ENOMEM, "simulated device: cannot allocate %zu bytes for category %s", bytes,
                        fsdp_mem_cat_name(cat));
    fsdp_status st = fsdp_mem_track(p, bytes, cat);
    if (st != FSDP_OK) {
        give_back(p, bytes);
        return st;
    }
    if (flags & FSDP_ALLOC_ZERO)
        memset(p, 0, bytes);
    else
        poison(p, bytes);
    *out = p;
    return FSDP_OK;
}

/* Gives the quarantined blocks back (oldest first; all when keep is 0). */
static void release(sim_dev *S, int keep) {
    int n = S->n_quarantine - keep;
    for (int i = 0; i < n; i++)
        give_back(S->quarantine[i].p, S->quarantine[i].bytes);
    memmove(S->quarantine, S->quarantine + n, (size_t)keep * sizeof *S->quarantine);
    S->n_quarantine = keep;
}

/* The free runs: the block leaves the accounting (as a stream-ordered free does on a GPU) and is
 * poisoned and quarantined, not given back yet, so that a kernel the program failed to order before the
 * free reads NaN (what the test is for) rather than memory the C library reused (undefined behaviour;
 * AddressSanitizer stops the run). The quarantine is given back at every device synchronisation (nothing
 * queued can still read it) and, oldest half first, when it holds QUARANTINE_MAX blocks. */
static void run_free(void *ctx, void *arg) {
    sim_dev *S = ctx;
    void *p;
    memcpy(&p, arg, sizeof p);
    size_t bytes = 0;
    if (!fsdp_mem_untrack(p, &bytes)) {
        fprintf(stderr, "simulated device: %p freed but not allocated here (or freed twice)\n", p);
        FSDP_INVARIANT(0);
    }
    poison(p, bytes);
    if (S->n_quarantine == QUARANTINE_MAX) release(S, QUARANTINE_MAX / 2);
    S->quarantine[S->n_quarantine++] = (sim_freed){p, bytes};
}

static void sim_free(fsdp_device_t *d, void *p, fsdp_stream_t *s) {
    if (p != NULL) enqueue(d, s, run_free, &p, sizeof p);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_args;

static void run_memset0(void *ctx, void *arg) {
    copy_args *a = arg;
    fsdp_cpu_memset0(a->dst, a->bytes);
}
static void sim_memset0(fsdp_device_t *d, void *p, size_t bytes, fsdp_stream_t *s) {
    copy_args a = {p, NULL, bytes};
    enqueue(d, s, run_memset0, &a, sizeof a);
}

static void run_copy(void *ctx, void *arg) {
    copy_args *a = arg;
    memcpy(a->dst, a->src, a->bytes);
}
static void sim_copy(fsdp_device_t *d, void *dst, const void *src, size_t bytes, fsdp_stream_t *s) {
    copy_args a = {dst, src, bytes};
    enqueue(d, s, run_copy, &a, sizeof a);
}

typedef struct {
    void (*fn)(void *);
    size_t bytes;
} host_fn_head;

static void run_host_fn(void *ctx, void *arg) {
    host_fn_head h;
    memcpy(&h, arg, sizeof h);
    h.fn(h.bytes ? (char *)arg + sizeof(host_fn_head) : NULL);
}
static void sim_host_fn(fsdp_device_t *d, fsdp_stream_t *s, void (*fn)(void *), const void *arg,
                        size_t arg_bytes) {
    unsigned char buf[sizeof(host_fn_head) + 256];
    if (arg_bytes > 256) { /* a programming error in the caller: run nothing rather than half */
        ((sim_dev *)d->impl)->failed = 1;
        return;
    }
    host_fn_head h = {fn, arg_bytes};
    memcpy(buf, &h, sizeof h);
    if (arg_bytes) memcpy(buf + sizeof h, arg, arg_bytes);
    enqueue(d, s, run_host_fn, buf, sizeof h + arg_bytes);
}

/* ---------------------------------------------------------------- element ops: the CPU's, later */

typedef struct {
    void *y;
    const void *x;
    size_t n;
    float a;
    int flag;
} elem_args;

static void run_to_bf16(void *ctx, void *arg) {
    elem_args *a = arg;
    fsdp_cpu_f32_to_bf16(a->y, a->x, a->n);
}
static void sim_f32_to_bf16(fsdp_device_t *d, fsdp_stream_t *s, fsdp_bf16 *dst, const float *src, size_t n) {
    elem_args a = {dst, src, n, 0, 0};
    enqueue(d, s, run_to_bf16, &a, sizeof a);
}
static void run_to_f32(void *ctx, void *arg) {
    elem_args *a = arg;
    fsdp_cpu_bf16_to_f32(a->y, a->x, a->n, a->flag);
}
static void sim_bf16_to_f32(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const fsdp_bf16 *src, size_t n,
                            int accumulate) {
    elem_args a = {dst, src, n, 0, accumulate};
    enqueue(d, s, run_to_f32, &a, sizeof a);
}
static void run_add(void *ctx, void *arg) {
    elem_args *a = arg;
    fsdp_cpu_f32_add(a->y, a->x, a->n);
}
static void sim_f32_add(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const float *src, size_t n) {
    elem_args a = {dst, src, n, 0, 0};
    enqueue(d, s, run_add, &a, sizeof a);
}
static void run_axpy(void *ctx, void *arg) {
    elem_args *a = arg;
    fsdp_cpu_axpy(a->y, a->x, a->n, a->a);
}
static void sim_axpy(fsdp_device_t *d, fsdp_stream_t *s, float *y, const float *x, size_t n, float c) {
    elem_args a = {y, x, n, c, 0};
    enqueue(d, s, run_axpy, &a, sizeof a);
}
static void run_sumsq(void *ctx, void *arg) {
    elem_args *a = arg;
    *(double *)a->y = fsdp_cpu_sumsq(a->x, a->n);
}
static void sim_sumsq(fsdp_device_t *d, fsdp_stream_t *s, const float *x, size_t n, double *out) {
    elem_args a = {out, x, n, 0, 0};
    enqueue(d, s, run_sumsq, &a, sizeof a);
}
static void run_scale(void *ctx, void *arg) {
    elem_args *a = arg;
    fsdp_cpu_scale(a->y, a->n, a->a);
}
static void sim_scale(fsdp_device_t *d, fsdp_stream_t *s, float *x, size_t n, float c) {
    elem_args a = {x, NULL, n, c, 0};
    enqueue(d, s, run_scale, &a, sizeof a);
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t n;
    int decay;
    fsdp_adamw_scalars sc;
} adamw_args;

static void run_adamw(void *ctx, void *arg) {
    adamw_args *a = arg;
    fsdp_cpu_adamw(a->p, a->m, a->v, a->g, a->n, a->decay, &a->sc);
}
static void sim_adamw(fsdp_device_t *d, fsdp_stream_t *s, float *p, float *m, float *v, const float *g,
                      size_t n, int decay, const fsdp_adamw_scalars *sc) {
    adamw_args a = {p, m, v, g, n, decay, *sc};
    enqueue(d, s, run_adamw, &a, sizeof a);
}

/* ---------------------------------------------------------------- the row */

fsdp_status fsdp_device_sim_create(uint64_t seed, unsigned flags, fsdp_device_t **out) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    *out = NULL;
    fsdp_device_t *d = calloc(1, sizeof *d);
    sim_dev *S = calloc(1, sizeof *S);
    if (d == NULL || S == NULL) {
        free(d);
        free(S);
        return FSDP_ERR(FSDP_ENOMEM, "simulated device");
    }
    S->rng = seed ^ 0x5DEECE66Dull;
    S->eager = 1 + (int)(next_rand(S) % 4);
    *d = (fsdp_device_t){
        .name = "sim",
        .caps = (flags & FSDP_SIM_NO_HOST_ACCESS ? 0u : FSDP_DEV_HOST_MEMORY) | FSDP_DEV_ASYNC,
        .impl = S,
        .stream_create = sim_stream_create,
        .stream_destroy = sim_stream_destroy,
        .event_create = sim_event_create,
        .event_destroy = sim_event_destroy,
        .record = sim_record,
        .wait = sim_wait,
        .query = sim_query,
        .event_sync = sim_event_sync,
        .sync = sim_sync,
        .alloc = sim_alloc,
        .free = sim_free,
        .memset0 = sim_memset0,
        .copy = sim_copy,
        .host_fn = sim_host_fn,
        .f32_to_bf16 = sim_f32_to_bf16,
        .bf16_to_f32 = sim_bf16_to_f32,
        .f32_add = sim_f32_add,
        .axpy = sim_axpy,
        .sumsq = sim_sumsq,
        .scale = sim_scale,
        .adamw = sim_adamw,
    };
    fsdp_stream_t *dflt;
    fsdp_status st = sim_stream_create(d, &dflt);
    if (st != FSDP_OK) {
        free(S);
        free(d);
        return st;
    }
    *out = d;
    return FSDP_OK;
}

void fsdp_device_sim_destroy(fsdp_device_t *d) {
    if (d == NULL) return;
    sim_dev *S = d->impl;
    (void)sim_sync(d);
    while (S->n_streams > 1)
        sim_stream_destroy(d, S->streams[S->n_streams - 1]);
    sim_item *it = S->streams[0]->head;
    while (it) {
        sim_item *nx = it->next;
        free(it);
        it = nx;
    }
    release(S, 0);
    free(S->streams[0]);
    free(S->streams);
    free(S);
    free(d);
}

void fsdp_device_sim_counts(const fsdp_device_t *d, long *ran, long *reordered) {
    const sim_dev *S = d ? d->impl : NULL;
    if (ran) *ran = S ? S->ran : 0;
    if (reordered) *reordered = S ? S->reordered : 0;
}
