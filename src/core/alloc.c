/* alloc.c — the tracked allocator: every big buffer in fsdp.c comes from here with a category, so the
 * current and peak bytes of master weights, optimizer state, main_grad, ... are always known exactly
 * (docs/DESIGN.md section 5), and an optional timeline of (time, category, delta) feeds memory traces. */
#include "core/core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Every block is [header | user bytes], the header padded to FSDP_MEM_ALIGN so the user pointer keeps
 * the block's 64-byte alignment. The header lets fsdp_mem_free work from the pointer alone. */
#define FSDP_MEM_ALIGN  64
#define MEM_MAGIC_LIVE  0x66736470u /* "fsdp" */
#define MEM_MAGIC_FREED 0xdeadf5d0u

typedef struct {
    size_t bytes; /* bytes the caller asked for (what the accounting counts) */
    uint32_t cat; /* fsdp_mem_cat */
    uint32_t magic;
    uint32_t shared; /* from the host-shared heap (shm_heap.c), not the C library */
} mem_header;
_Static_assert(sizeof(mem_header) <= FSDP_MEM_ALIGN, "header must fit in one alignment unit");

/* All accounting and the timeline sit behind one mutex: an allocation is far rarer than the work done
 * on its buffer, and one lock makes every count (and the peak of the sum) exact under concurrency. */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t mem_cur[FSDP_MEM_NCAT], mem_peak[FSDP_MEM_NCAT];
static size_t mem_total_cur, mem_total_peak;

/* Timeline: a growable array of events, recorded only while enabled. */
static int tl_on;
static double tl_t0;
static fsdp_mem_event *tl_ev;
static size_t tl_n, tl_cap;

/* Reuse of big freed blocks. A training step frees and allocates the same big sizes every step (each
 * unit's full parameters and main_grad); handed back to the C library such blocks are unmapped, and the
 * next allocation faults in fresh zeroed pages, a cost on every step (bench_train_step shows it: the
 * figures are in docs/benchmarks-history.md). Blocks of at least
 * MEM_REUSE_MIN bytes are parked here when freed (at most MEM_REUSE_SLOTS blocks, MEM_REUSE_MAX bytes)
 * and handed to the next allocation of the same block size. Parked blocks are freed bytes for the
 * accounting (the tracked numbers do not change); the process holds at most MEM_REUSE_MAX more. An
 * allocation the C library refuses empties the park and retries. Off with FSDP_DEBUG_CHECKS (and so
 * under the sanitizers), where a use after free must stay visible. Guarded by mem_lock. */
#ifndef FSDP_DEBUG_CHECKS
#define MEM_REUSE     1
#define MEM_REUSE_MIN ((size_t)1 << 20)
#define MEM_REUSE_MAX ((size_t)512 << 20)
/* 8 slots let ~77K page faults per fp32 step through (GPT-2-124M, B=4, T=64, world 1: more big blocks
 * are free at once than 8); 32 take them to ~0 (perf stat, steps 6 minus steps 2) and the step 1.02-1.17x
 * faster, side by side (docs/benchmarks-history.md, round 4). The byte bound is unchanged. */
#define MEM_REUSE_SLOTS 32
static void *reuse_blk[MEM_REUSE_SLOTS];
static size_t reuse_size[MEM_REUSE_SLOTS]; /* block bytes (header included); 0: empty slot */
static size_t reuse_total, reuse_peak;     /* bytes parked now / at most since start or the last trim */

/* A parked block of exactly `total` bytes, or NULL. */
static void *reuse_take(size_t total) {
    void *b = NULL;
    if (total < MEM_REUSE_MIN) return NULL;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < MEM_REUSE_SLOTS && b == NULL; i++) {
        if (reuse_size[i] == total) {
            b = reuse_blk[i];
            reuse_blk[i] = NULL;
            reuse_size[i] = 0;
            reuse_total -= total;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return b;
}

/* Parks a freed block; 0 if it is too small or the park is full (the caller frees it). */
static int reuse_park(void *base, size_t total) {
    int parked = 0;
    if (total < MEM_REUSE_MIN) return 0;
    pthread_mutex_lock(&mem_lock);
    if (reuse_total + total <= MEM_REUSE_MAX) {
        for (int i = 0; i < MEM_REUSE_SLOTS && !parked; i++) {
            if (reuse_size[i] == 0) {
                reuse_blk[i] = base;
                reuse_size[i] = total;
                reuse_total += total;
                if (reuse_total > reuse_peak) reuse_peak = reuse_total;
                parked = 1;
            }
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return parked;
}

/* Frees every parked block (before retrying a refused allocation). */
static void reuse_drain(void) {
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < MEM_REUSE_SLOTS; i++) {
        free(reuse_blk[i]);
        reuse_blk[i] = NULL;
        reuse_size[i] = 0;
    }
    reuse_total = 0;
    pthread_mutex_unlock(&mem_lock);
}
#endif

static const char *const cat_names[FSDP_MEM_NCAT] = {
    "master", "optim", "grad_shard", "param_full", "main_grad", "activation", "comm", "other",
};

const char *fsdp_mem_cat_name(fsdp_mem_cat c) {
    if ((unsigned)c >= FSDP_MEM_NCAT) return "unknown";
    return cat_names[c];
}

fsdp_status fsdp_mem_cat_parse(const char *name, fsdp_mem_cat *out) {
    if (name == NULL || out == NULL) return FSDP_ERR(FSDP_EINVAL, "name and out must not be NULL");
    for (int c = 0; c < FSDP_MEM_NCAT; c++) {
        if (strcmp(name, cat_names[c]) == 0) {
            *out = (fsdp_mem_cat)c;
            return FSDP_OK;
        }
    }
    return FSDP_ERR(FSDP_EINVAL,
                    "unknown memory category \"%s\"; use one of master, optim, grad_shard, param_full, "
                    "main_grad, activation, comm, other",
                    name);
}

/* Called with mem_lock held. A timeline that cannot grow drops the event rather than failing the
 * allocation it describes; the loss shows up as timeline deltas not summing to the current bytes. */
static void timeline_record_locked(fsdp_mem_cat cat, int64_t delta) {
    if (!tl_on) return;
    if (tl_n == tl_cap) {
        size_t cap = tl_cap ? 2 * tl_cap : 1024;
        fsdp_mem_event *ev = realloc(tl_ev, cap * sizeof *ev);
        if (ev == NULL) return;
        tl_ev = ev;
        tl_cap = cap;
    }
    tl_ev[tl_n++] = (fsdp_mem_event){.t_s = fsdp_time_s() - tl_t0, .cat = cat, .delta = delta};
}

/* A block enters or leaves the counts: its category's and the total, their peaks, the timeline. Both
 * kinds of block (the header allocator's and the device side table's) go through these. mem_lock held. */
static void count_in_locked(fsdp_mem_cat cat, size_t bytes) {
    mem_cur[cat] += bytes;
    if (mem_cur[cat] > mem_peak[cat]) mem_peak[cat] = mem_cur[cat];
    mem_total_cur += bytes;
    if (mem_total_cur > mem_total_peak) mem_total_peak = mem_total_cur;
    timeline_record_locked(cat, (int64_t)bytes);
}
static void count_out_locked(fsdp_mem_cat cat, size_t bytes) {
    FSDP_INVARIANT(mem_cur[cat] >= bytes && mem_total_cur >= bytes);
    mem_cur[cat] -= bytes;
    mem_total_cur -= bytes;
    timeline_record_locked(cat, -(int64_t)bytes);
}

/* A block's whole size: the header's alignment unit plus the request rounded up to whole units. The
 * allocation and the free (the reuse park, the shared heap's extent) must agree on it. */
static size_t block_bytes(size_t bytes) {
    return FSDP_MEM_ALIGN + ((bytes + FSDP_MEM_ALIGN - 1) / FSDP_MEM_ALIGN) * FSDP_MEM_ALIGN;
}

static fsdp_status mem_alloc_impl(void **out, size_t bytes, fsdp_mem_cat cat, int zero, int shared,
                                  const char *who) {
    if (out == NULL) return fsdp_set_error_at(FSDP_EINVAL, who, "out must not be NULL");
    *out = NULL;
    if ((unsigned)cat >= FSDP_MEM_NCAT)
        return fsdp_set_error_at(FSDP_EINVAL, who, "memory category %d is out of range [0, %d)", (int)cat,
                                 FSDP_MEM_NCAT);
    if (bytes == 0) return FSDP_OK;
    /* Header plus bytes rounded up to the alignment (aligned_alloc wants a multiple of it). Requests
     * this close to SIZE_MAX can never succeed; refuse them before the arithmetic wraps. */
    if (bytes > (size_t)INT64_MAX - 2 * FSDP_MEM_ALIGN)
        return fsdp_set_error_at(FSDP_ENOMEM, who,
                                 "cannot allocate %zu bytes for category %s: the size overflows; this is "
                                 "likely a negative or corrupted size computed by the caller",
                                 bytes, cat_names[cat]);
    size_t total = block_bytes(bytes);
    unsigned char *base = shared ? core_heap_alloc(total) : NULL;
    shared = base != NULL;
#ifdef MEM_REUSE
    if (base == NULL) base = reuse_take(total);
    if (base == NULL) base = aligned_alloc(FSDP_MEM_ALIGN, total);
    if (base == NULL) {
        reuse_drain();
        base = aligned_alloc(FSDP_MEM_ALIGN, total);
    }
#else
    if (base == NULL) base = aligned_alloc(FSDP_MEM_ALIGN, total);
#endif
    if (base == NULL) {
        size_t cur = fsdp_mem_total_current();
        return fsdp_set_error_at(FSDP_ENOMEM, who,
                                 "cannot allocate %zu bytes (%.1f MiB) for category %s (%zu bytes already "
                                 "held by fsdp); reduce the model, batch or sequence size, or use more ranks",
                                 bytes, (double)bytes / (1024.0 * 1024.0), cat_names[cat], cur);
    }
    if (zero) memset(base + FSDP_MEM_ALIGN, 0, bytes);
    mem_header *h = (mem_header *)base;
    h->bytes = bytes;
    h->cat = (uint32_t)cat;
    h->magic = MEM_MAGIC_LIVE;
    h->shared = (uint32_t)shared;

    pthread_mutex_lock(&mem_lock);
    count_in_locked(cat, bytes);
    pthread_mutex_unlock(&mem_lock);

    *out = base + FSDP_MEM_ALIGN;
    return FSDP_OK;
}

fsdp_status fsdp_mem_alloc(void **out, size_t bytes, fsdp_mem_cat cat) {
    return mem_alloc_impl(out, bytes, cat, 0, 0, __func__);
}

fsdp_status fsdp_mem_alloc_shared(void **out, size_t bytes, fsdp_mem_cat cat) {
    return mem_alloc_impl(out, bytes, cat, 0, 1, __func__);
}

int fsdp_mem_is_shared(const void *p) {
    return p != NULL && ((const mem_header *)((const unsigned char *)p - FSDP_MEM_ALIGN))->shared != 0;
}

fsdp_status fsdp_mem_calloc(void **out, size_t bytes, fsdp_mem_cat cat) {
    return mem_alloc_impl(out, bytes, cat, 1, 0, __func__);
}

void fsdp_mem_free(void *p) {
    if (p == NULL) return;
    unsigned char *base = (unsigned char *)p - FSDP_MEM_ALIGN;
    mem_header *h = (mem_header *)base;
    /* A pointer not from fsdp_mem_alloc, or one freed twice, is a bug in the caller; carrying on would
     * corrupt the accounting (and the heap), so stop with a message like the C library does. */
    if (h->magic != MEM_MAGIC_LIVE) {
        fprintf(stderr, "fsdp_mem_free: %p was not allocated by fsdp_mem_alloc or was already freed\n", p);
        FSDP_INVARIANT(h->magic == MEM_MAGIC_LIVE);
    }
    FSDP_INVARIANT(h->cat < FSDP_MEM_NCAT);
    size_t bytes = h->bytes;
    fsdp_mem_cat cat = (fsdp_mem_cat)h->cat;
    h->magic = MEM_MAGIC_FREED;
#ifdef FSDP_DEBUG_CHECKS
    /* 0xff bytes read as NaN in fp32 and bf16: a stale view shows up as NaN, not plausible numbers. */
    memset(p, 0xff, bytes);
#endif

    pthread_mutex_lock(&mem_lock);
    count_out_locked(cat, bytes);
    pthread_mutex_unlock(&mem_lock);
    size_t total = block_bytes(bytes);
    if (h->shared) {
        fsdp_status st = core_heap_free(base, total);
        FSDP_INVARIANT(st == FSDP_OK);
        return;
    }
#ifdef MEM_REUSE
    if (reuse_park(base, total)) return;
#endif
    free(base);
}

/* ---------------------------------------------------------------- device memory: a side table */

/* A device's pointer cannot carry the header above (the host may not even address it), so a device row
 * (core/device.h) counts its blocks here: the same categories, peaks and timeline, keyed by pointer in an
 * open-addressing table (linear probing, tombstones, grown at half full). Guarded by mem_lock. */
#define TRK_EMPTY 0
#define TRK_GONE  1
typedef struct {
    uintptr_t key; /* the pointer; TRK_EMPTY or TRK_GONE */
    size_t bytes;
    uint32_t cat;
} trk_slot;
static trk_slot *trk;
static size_t trk_cap, trk_used; /* slots; slots not empty (live and tombstones) */

static size_t trk_hash(uintptr_t k) { return (size_t)((k >> 6) * 0x9E3779B97F4A7C15ull); }

/* The slot of key, or of its insertion (the first tombstone on the way, else the empty slot). */
static trk_slot *trk_find(uintptr_t key, int for_insert) {
    trk_slot *tomb = NULL;
    for (size_t i = trk_hash(key) & (trk_cap - 1);; i = (i + 1) & (trk_cap - 1)) {
        trk_slot *t = &trk[i];
        if (t->key == key) return t;
        if (t->key == TRK_GONE && tomb == NULL) tomb = t;
        if (t->key == TRK_EMPTY) return for_insert ? (tomb ? tomb : t) : NULL;
    }
}

static int trk_grow(void) {
    size_t cap = trk_cap ? 2 * trk_cap : 256;
    trk_slot *old = trk, *nt = calloc(cap, sizeof *nt);
    if (nt == NULL) return 0;
    size_t old_cap = trk_cap;
    trk = nt;
    trk_cap = cap;
    trk_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key > TRK_GONE) {
            *trk_find(old[i].key, 1) = old[i];
            trk_used++;
        }
    free(old);
    return 1;
}

fsdp_status fsdp_mem_track(const void *p, size_t bytes, fsdp_mem_cat cat) {
    if ((uintptr_t)p <= TRK_GONE || (unsigned)cat >= FSDP_MEM_NCAT)
        return FSDP_ERR(FSDP_EINVAL, "need a device pointer and a category in [0, %d) (got %p, %d)",
                        FSDP_MEM_NCAT, p, (int)cat);
    pthread_mutex_lock(&mem_lock);
    fsdp_status st = FSDP_OK;
    if (2 * (trk_used + 1) > trk_cap && !trk_grow())
        st = FSDP_ERR(FSDP_ENOMEM, "no memory for the device memory table (%zu entries)", trk_cap);
    trk_slot *t = st == FSDP_OK ? trk_find((uintptr_t)p, 1) : NULL;
    if (t && t->key == (uintptr_t)p)
        st = FSDP_ERR(FSDP_EINVAL, "%p is already counted (%zu bytes of %s): freed twice or never untracked",
                      p, t->bytes, cat_names[t->cat]);
    else if (t) {
        if (t->key == TRK_EMPTY) trk_used++;
        *t = (trk_slot){(uintptr_t)p, bytes, (uint32_t)cat};
        count_in_locked(cat, bytes);
    }
    pthread_mutex_unlock(&mem_lock);
    return st;
}

int fsdp_mem_tracked(const void *p, size_t *bytes, fsdp_mem_cat *cat) {
    pthread_mutex_lock(&mem_lock);
    trk_slot *t = trk_cap && (uintptr_t)p > TRK_GONE ? trk_find((uintptr_t)p, 0) : NULL;
    if (t && bytes) *bytes = t->bytes;
    if (t && cat) *cat = (fsdp_mem_cat)t->cat;
    pthread_mutex_unlock(&mem_lock);
    return t != NULL;
}

int fsdp_mem_untrack(const void *p, size_t *bytes) {
    pthread_mutex_lock(&mem_lock);
    trk_slot *t = trk_cap && (uintptr_t)p > TRK_GONE ? trk_find((uintptr_t)p, 0) : NULL;
    if (t) {
        count_out_locked((fsdp_mem_cat)t->cat, t->bytes);
        if (bytes) *bytes = t->bytes;
        t->key = TRK_GONE;
    }
    pthread_mutex_unlock(&mem_lock);
    return t != NULL;
}

/* The shared heap's freed pages count as kept blocks too (core_heap_cached: an upper bound). The
 * peak is the sum of the two peaks, an upper bound of the peak of the sum. */
size_t fsdp_mem_cached(void) {
    size_t h = 0, hp = 0;
    core_heap_cached(&h, &hp);
#ifdef MEM_REUSE
    pthread_mutex_lock(&mem_lock);
    size_t v = reuse_total;
    pthread_mutex_unlock(&mem_lock);
    return v + h;
#else
    return h;
#endif
}

size_t fsdp_mem_cached_peak(void) {
    size_t h = 0, hp = 0;
    core_heap_cached(&h, &hp);
#ifdef MEM_REUSE
    pthread_mutex_lock(&mem_lock);
    size_t v = reuse_peak;
    pthread_mutex_unlock(&mem_lock);
    return v + hp;
#else
    return hp;
#endif
}

void fsdp_mem_trim(void) {
    core_heap_trim();
#ifdef MEM_REUSE
    reuse_drain();
    pthread_mutex_lock(&mem_lock);
    reuse_peak = 0;
    pthread_mutex_unlock(&mem_lock);
#endif
}

size_t fsdp_mem_current(fsdp_mem_cat c) {
    if ((unsigned)c >= FSDP_MEM_NCAT) return 0;
    pthread_mutex_lock(&mem_lock);
    size_t v = mem_cur[c];
    pthread_mutex_unlock(&mem_lock);
    return v;
}

size_t fsdp_mem_peak(fsdp_mem_cat c) {
    if ((unsigned)c >= FSDP_MEM_NCAT) return 0;
    pthread_mutex_lock(&mem_lock);
    size_t v = mem_peak[c];
    pthread_mutex_unlock(&mem_lock);
    return v;
}

size_t fsdp_mem_total_current(void) {
    pthread_mutex_lock(&mem_lock);
    size_t v = mem_total_cur;
    pthread_mutex_unlock(&mem_lock);
    return v;
}

size_t fsdp_mem_total_peak(void) {
    pthread_mutex_lock(&mem_lock);
    size_t v = mem_total_peak;
    pthread_mutex_unlock(&mem_lock);
    return v;
}

void fsdp_mem_reset_peaks(void) {
    pthread_mutex_lock(&mem_lock);
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        mem_peak[c] = mem_cur[c];
    mem_total_peak = mem_total_cur;
    pthread_mutex_unlock(&mem_lock);
}

void fsdp_mem_timeline_enable(int on) {
    pthread_mutex_lock(&mem_lock);
    if (on) {
        tl_n = 0;
        tl_t0 = fsdp_time_s();
    }
    tl_on = on != 0;
    pthread_mutex_unlock(&mem_lock);
}

size_t fsdp_mem_timeline(fsdp_mem_event *out, size_t cap) {
    pthread_mutex_lock(&mem_lock);
    size_t n = tl_n;
    size_t k = n < cap ? n : cap;
    if (out != NULL && k > 0) memcpy(out, tl_ev, k * sizeof *out);
    pthread_mutex_unlock(&mem_lock);
    return n;
}
