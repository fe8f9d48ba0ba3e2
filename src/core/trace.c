/* trace.c — Chrome-trace JSON (Perfetto, chrome://tracing): duration events recorded cheaply while
 * enabled (one flag test when not), the allocator's timeline turned into per-category memory counters,
 * and one file written by rank 0 with every rank's events (pid = rank). docs/DESIGN.md section 5. */
#include "core/trace_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double t_s; /* seconds since fsdp_trace_enable */
    int tid;
    char ph; /* 'B' or 'E' */
    char name[64];
    char cat[32];
} trace_event;

/* Events sit behind one mutex (hooks are per unit and phase: rare next to the work they time). The
 * enabled flag is atomic so the disabled path is one load. */
static atomic_int tr_on;
static pthread_mutex_t tr_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_event *tr_ev; /* (tr_n) growable */
static size_t tr_n, tr_cap;
static double tr_t0;
static int tr_rank;
static size_t tr_base[FSDP_MEM_NCAT]; /* bytes held per category when recording started */
static atomic_int tr_next_tid;
static _Thread_local int tr_tid = -1; /* small per-thread id, first come first numbered */

fsdp_status fsdp_trace_enable(int rank) {
    pthread_mutex_lock(&tr_lock);
    tr_n = 0;
    tr_rank = rank;
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        tr_base[c] = fsdp_mem_current((fsdp_mem_cat)c);
    tr_t0 = fsdp_time_s(); /* the timeline's own start follows within microseconds */
    fsdp_mem_timeline_enable(1);
    atomic_store(&tr_on, 1);
    pthread_mutex_unlock(&tr_lock);
    return FSDP_OK;
}

void fsdp_trace_disable(void) {
    atomic_store(&tr_on, 0);
    fsdp_mem_timeline_enable(0);
}

int fsdp_trace_enabled(void) { return atomic_load(&tr_on); }

size_t fsdp_trace_num_events(void) {
    pthread_mutex_lock(&tr_lock);
    size_t n = tr_n;
    pthread_mutex_unlock(&tr_lock);
    return n;
}

void fsdp_trace_free(void) {
    fsdp_trace_disable();
    pthread_mutex_lock(&tr_lock);
    free(tr_ev);
    tr_ev = NULL;
    tr_n = tr_cap = 0;
    pthread_mutex_unlock(&tr_lock);
}

/* Records one event; a full table that cannot grow drops the event (tracing never fails the run). */
static void record(char ph, const char *name1, const char *name2, const char *cat) {
    double t = fsdp_time_s();
    if (tr_tid < 0) tr_tid = atomic_fetch_add(&tr_next_tid, 1);
    pthread_mutex_lock(&tr_lock);
    if (tr_n == tr_cap) {
        size_t cap = tr_cap ? 2 * tr_cap : 4096;
        trace_event *ev = realloc(tr_ev, cap * sizeof *ev);
        if (ev == NULL) {
            pthread_mutex_unlock(&tr_lock);
            return;
        }
        tr_ev = ev;
        tr_cap = cap;
    }
    trace_event *e = &tr_ev[tr_n++];
    e->t_s = t - tr_t0;
    e->tid = tr_tid;
    e->ph = ph;
    if (name2)
        snprintf(e->name, sizeof e->name, "%s %s", name1 ? name1 : "", name2);
    else
        snprintf(e->name, sizeof e->name, "%s", name1 ? name1 : "");
    snprintf(e->cat, sizeof e->cat, "%s", cat ? cat : "");
    pthread_mutex_unlock(&tr_lock);
}

void fsdp_trace_begin(const char *name, const char *cat) {
    if (atomic_load_explicit(&tr_on, memory_order_relaxed)) record('B', name, NULL, cat);
}
void fsdp_trace_end(const char *name, const char *cat) {
    if (atomic_load_explicit(&tr_on, memory_order_relaxed)) record('E', name, NULL, cat);
}
void fsdp_trace_unit_begin(const char *unit, const char *phase) {
    if (atomic_load_explicit(&tr_on, memory_order_relaxed)) record('B', phase, unit, phase);
}
void fsdp_trace_unit_end(const char *unit, const char *phase) {
    if (atomic_load_explicit(&tr_on, memory_order_relaxed)) record('E', phase, unit, phase);
}

/* ---------------------------------------------------------------- serialisation */

/* A growable string. Trace serialisation buffers are deliberately not tracked by the allocator:
 * writing a trace must not change the memory figures the trace (and the run report) show. */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 65536;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void sb_json_str(sbuf *b, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sb_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_printf(b, "%c", *p);
    }
}

/* This rank's events, each followed by ",\n" (the writer closes the array with the last one). */
static void serialise_local(sbuf *b) {
    pthread_mutex_lock(&tr_lock);
    int rank = tr_rank;
    /* clock_origin_s: CLOCK_MONOTONIC at this rank's ts 0, to line the trace up with samples taken
     * outside the process on the same machine (bench/link_timeline.py: link byte counters). */
    sb_printf(b,
              "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\", "
              "\"clock_origin_s\": %.6f}},\n",
              rank, rank, tr_t0);
    for (size_t i = 0; i < tr_n; i++) {
        const trace_event *e = &tr_ev[i];
        sb_printf(b, "{\"name\": \"");
        sb_json_str(b, e->name);
        sb_printf(b, "\", \"cat\": \"");
        sb_json_str(b, e->cat);
        sb_printf(b, "\", \"ph\": \"%c\", \"ts\": %.3f, \"pid\": %d, \"tid\": %d},\n", e->ph, e->t_s * 1e6,
                  rank, e->tid);
    }
    size_t base[FSDP_MEM_NCAT];
    memcpy(base, tr_base, sizeof base);
    pthread_mutex_unlock(&tr_lock);

    /* Memory counters: one "memory" track, one series per category, bytes held after every event. */
    size_t n = fsdp_mem_timeline(NULL, 0);
    fsdp_mem_event *ev = n ? malloc(n * sizeof *ev) : NULL;
    if (n && ev == NULL) {
        b->oom = 1;
        return;
    }
    if (n) {
        size_t got = fsdp_mem_timeline(ev, n); /* events recorded so far: never fewer than before */
        if (got < n) n = got;
    }
    int64_t cur[FSDP_MEM_NCAT];
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        cur[c] = (int64_t)base[c];
    for (size_t i = 0; i <= n; i++) {
        double ts = 0.0;
        if (i > 0) {
            const fsdp_mem_event *m = &ev[i - 1];
            if ((unsigned)m->cat < FSDP_MEM_NCAT) cur[m->cat] += m->delta;
            ts = m->t_s * 1e6;
            /* several events at one instant: emit only the last state of that instant */
            if (i < n && ev[i].t_s == m->t_s) continue;
        }
        sb_printf(b, "{\"name\": \"memory\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": %d, \"args\": {", ts,
                  rank);
        for (int c = 0; c < FSDP_MEM_NCAT; c++)
            sb_printf(b, "%s\"%s\": %lld", c ? ", " : "", fsdp_mem_cat_name((fsdp_mem_cat)c),
                      (long long)(cur[c] > 0 ? cur[c] : 0));
        sb_printf(b, "}},\n");
    }
    free(ev);
}

fsdp_status core_trace_write_file(const char *path, const char *body, size_t len) {
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return FSDP_ERR(FSDP_EIO, "cannot open trace file '%s' for writing: %s; check the directory", path,
                        strerror(errno));
    /* Records end in ",\n": the last one's separator is dropped. */
    while (len > 0 && (body[len - 1] == '\n' || body[len - 1] == ',' || body[len - 1] == ' '))
        len--;
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
    if (len) fwrite(body, 1, len, f);
    fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return FSDP_ERR(FSDP_EIO, "writing trace file '%s' failed: %s; check free space", path,
                        strerror(errno));
    return FSDP_OK;
}

fsdp_status core_trace_serialise(char **text, size_t *len) {
    sbuf b = {0};
    serialise_local(&b);
    if (b.oom) {
        free(b.s);
        *text = NULL;
        *len = 0;
        return FSDP_ERR(FSDP_ENOMEM, "out of memory serialising the trace (%zu events)",
                        fsdp_trace_num_events());
    }
    *text = b.s;
    *len = b.n;
    return FSDP_OK;
}
