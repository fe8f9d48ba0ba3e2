/* test_alloc.c — the tracked allocator: exact per-category and total byte counts, peaks (total peak is
 * the peak of the sum), reset, the timeline, alignment, zero-fill, ENOMEM with counts untouched, and
 * exact totals after many threads allocate and free concurrently. */
#include "core/core.h"
#include "test_util.h"

#include <pthread.h>
#include <stdint.h>

/* ASan aborts on impossible sizes by default; the allocator must see NULL and report ENOMEM. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void check_all_zero(void) {
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        CHECKF(fsdp_mem_current((fsdp_mem_cat)c) == 0, "cat %d", c);
    CHECK(fsdp_mem_total_current() == 0);
}

static void test_names(void) {
    const char *want[FSDP_MEM_NCAT] = {"master",    "optim",      "grad_shard", "param_full",
                                       "main_grad", "activation", "comm",       "other"};
    for (int c = 0; c < FSDP_MEM_NCAT; c++) {
        CHECK(strcmp(fsdp_mem_cat_name((fsdp_mem_cat)c), want[c]) == 0);
        fsdp_mem_cat back = FSDP_MEM_NCAT;
        CHECK_OK(fsdp_mem_cat_parse(want[c], &back));
        CHECK(back == (fsdp_mem_cat)c);
    }
    fsdp_mem_cat x;
    CHECK_ERR(fsdp_mem_cat_parse("maingrad", &x), FSDP_EINVAL, "maingrad");
    CHECK_ERR(fsdp_mem_cat_parse(NULL, &x), FSDP_EINVAL, NULL);
    CHECK(strcmp(fsdp_mem_cat_name(FSDP_MEM_NCAT), "unknown") == 0);
}

static void test_accounting(void) {
    check_all_zero();
    fsdp_mem_reset_peaks();
    CHECK(fsdp_mem_total_peak() == 0);

    void *p0 = (void *)1;
    CHECK_OK(fsdp_mem_alloc(&p0, 0, FSDP_MEM_MASTER));
    CHECK(p0 == NULL);
    check_all_zero();

    /* Odd sizes so a rounded-up count would show. */
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(fsdp_mem_alloc(&a, 1000, FSDP_MEM_MASTER));
    CHECK_OK(fsdp_mem_alloc(&b, 333, FSDP_MEM_MAIN_GRAD));
    CHECK_OK(fsdp_mem_alloc(&c, 77, FSDP_MEM_MAIN_GRAD));
    CHECK(a && b && c);
    CHECK(fsdp_mem_current(FSDP_MEM_MASTER) == 1000);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 410);
    CHECK(fsdp_mem_current(FSDP_MEM_OPTIM) == 0);
    CHECK(fsdp_mem_total_current() == 1410);
    CHECK(fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == 410);
    CHECK(fsdp_mem_total_peak() == 1410);
    /* Buffers are usable end to end (ASan would catch an overrun). */
    memset(a, 1, 1000);
    memset(b, 2, 333);
    memset(c, 3, 77);

    fsdp_mem_free(b); /* main_grad 77, total 1077 */
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 77);
    CHECK(fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == 410);
    CHECK(fsdp_mem_total_current() == 1077);
    CHECK(fsdp_mem_total_peak() == 1410);

    /* Peak of the sum, not the sum of peaks: main_grad peaked at 410 while master was 1000; now free
     * master and allocate 500 of activation: total 577, peak still 1410 (sum of peaks would be 1910). */
    fsdp_mem_free(a);
    CHECK_OK(fsdp_mem_alloc(&d, 500, FSDP_MEM_ACTIVATION));
    CHECK(fsdp_mem_total_current() == 577);
    CHECK(fsdp_mem_total_peak() == 1410);
    CHECK(fsdp_mem_peak(FSDP_MEM_MASTER) == 1000);
    CHECK(fsdp_mem_peak(FSDP_MEM_ACTIVATION) == 500);

    fsdp_mem_reset_peaks();
    CHECK(fsdp_mem_peak(FSDP_MEM_MASTER) == 0);
    CHECK(fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == 77);
    CHECK(fsdp_mem_peak(FSDP_MEM_ACTIVATION) == 500);
    CHECK(fsdp_mem_total_peak() == 577);

    fsdp_mem_free(c);
    fsdp_mem_free(d);
    fsdp_mem_free(NULL);
    check_all_zero();
    CHECK(fsdp_mem_total_peak() == 577);
    fsdp_mem_reset_peaks();
    CHECK(fsdp_mem_total_peak() == 0);
}

static void test_alignment_and_calloc(void) {
    for (size_t n = 1; n <= 300; n += 13) {
        void *p = NULL;
        CHECK_OK(fsdp_mem_alloc(&p, n, FSDP_MEM_OTHER));
        CHECKF(((uintptr_t)p % 64) == 0, "alloc(%zu) gave %p", n, p);
        fsdp_mem_free(p);
    }
    /* calloc: fill-free-reuse a few times so a non-zeroing calloc would very likely see old bytes. */
    for (int rep = 0; rep < 4; rep++) {
        unsigned char *p = NULL;
        CHECK_OK(fsdp_mem_alloc((void **)&p, 4099, FSDP_MEM_COMM));
        memset(p, 0xab, 4099);
        fsdp_mem_free(p);
        unsigned char *q = NULL;
        CHECK_OK(fsdp_mem_calloc((void **)&q, 4099, FSDP_MEM_COMM));
        CHECK(((uintptr_t)q % 64) == 0);
        CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 4099);
        size_t nonzero = 0;
        for (size_t i = 0; i < 4099; i++)
            nonzero += q[i] != 0;
        CHECK(nonzero == 0);
        fsdp_mem_free(q);
    }
    check_all_zero();
}

static void test_enomem(void) {
    void *keep = NULL;
    CHECK_OK(fsdp_mem_alloc(&keep, 123, FSDP_MEM_OPTIM));
    fsdp_mem_reset_peaks();
    void *p = (void *)1;
    /* 1 EiB: larger than any address space here, so the system allocator must refuse it. */
    CHECK_ERR(fsdp_mem_alloc(&p, (size_t)1 << 60, FSDP_MEM_MAIN_GRAD), FSDP_ENOMEM, "main_grad");
    CHECK(strstr(fsdp_last_error(), "1152921504606846976") != NULL);
    CHECK(p == NULL);
    /* Sizes that would wrap the header arithmetic. */
    p = (void *)1;
    CHECK_ERR(fsdp_mem_alloc(&p, SIZE_MAX, FSDP_MEM_PARAM_FULL), FSDP_ENOMEM, "param_full");
    CHECK(p == NULL);
    p = (void *)1;
    CHECK_ERR(fsdp_mem_calloc(&p, SIZE_MAX - 10, FSDP_MEM_ACTIVATION), FSDP_ENOMEM, "activation");
    CHECK(p == NULL);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0 && fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == 0);
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0 && fsdp_mem_peak(FSDP_MEM_PARAM_FULL) == 0);
    CHECK(fsdp_mem_total_current() == 123 && fsdp_mem_total_peak() == 123);
    /* Bad category and NULL out. */
    CHECK_ERR(fsdp_mem_alloc(&p, 8, FSDP_MEM_NCAT), FSDP_EINVAL, "category");
    CHECK_ERR(fsdp_mem_alloc(NULL, 8, FSDP_MEM_OTHER), FSDP_EINVAL, NULL);
    CHECK(fsdp_mem_total_current() == 123);
    fsdp_mem_free(keep);
    check_all_zero();
}

static void test_timeline(void) {
    void *pre = NULL; /* allocated before enable: its free shows up as a negative delta */
    CHECK_OK(fsdp_mem_alloc(&pre, 40, FSDP_MEM_OTHER));
    fsdp_mem_timeline_enable(1);
    CHECK(fsdp_mem_timeline(NULL, 0) == 0);
    void *a = NULL, *b = NULL;
    CHECK_OK(fsdp_mem_alloc(&a, 100, FSDP_MEM_MASTER));
    CHECK_OK(fsdp_mem_calloc(&b, 28, FSDP_MEM_GRAD_SHARD));
    fsdp_mem_free(a);
    fsdp_mem_free(pre);
    void *z = NULL;
    CHECK_OK(fsdp_mem_alloc(&z, 0, FSDP_MEM_OTHER)); /* no event for zero bytes */

    fsdp_mem_event ev[8];
    size_t n = fsdp_mem_timeline(ev, 8);
    CHECK(n == 4);
    if (n == 4) {
        CHECK(ev[0].cat == FSDP_MEM_MASTER && ev[0].delta == 100);
        CHECK(ev[1].cat == FSDP_MEM_GRAD_SHARD && ev[1].delta == 28);
        CHECK(ev[2].cat == FSDP_MEM_MASTER && ev[2].delta == -100);
        CHECK(ev[3].cat == FSDP_MEM_OTHER && ev[3].delta == -40);
        for (size_t i = 0; i < n; i++)
            CHECK(ev[i].t_s >= 0.0 && ev[i].t_s < 60.0);
        for (size_t i = 1; i < n; i++)
            CHECK(ev[i].t_s >= ev[i - 1].t_s);
        /* Deltas since enable + what was live at enable (40) == current. */
        int64_t sum = 40;
        for (size_t i = 0; i < n; i++)
            sum += ev[i].delta;
        CHECK(sum == (int64_t)fsdp_mem_total_current());
    }
    /* cap smaller than the count: copies cap, returns the count. */
    fsdp_mem_event one[1] = {{0}};
    CHECK(fsdp_mem_timeline(one, 1) == 4 && one[0].delta == 100);

    /* Disabled: nothing recorded, old events kept. */
    fsdp_mem_timeline_enable(0);
    void *c = NULL;
    CHECK_OK(fsdp_mem_alloc(&c, 5, FSDP_MEM_OTHER));
    fsdp_mem_free(c);
    CHECK(fsdp_mem_timeline(NULL, 0) == 4);

    /* Re-enable clears; many events force the array to grow. */
    fsdp_mem_timeline_enable(1);
    CHECK(fsdp_mem_timeline(NULL, 0) == 0);
    enum { K = 3000 };
    for (int i = 0; i < K; i++) {
        void *t = NULL;
        CHECK_OK(fsdp_mem_alloc(&t, (size_t)i + 1, (fsdp_mem_cat)(i % FSDP_MEM_NCAT)));
        fsdp_mem_free(t);
    }
    size_t m = fsdp_mem_timeline(NULL, 0);
    CHECK(m == 2 * K);
    fsdp_mem_event *all = malloc(m * sizeof *all);
    CHECK(all != NULL);
    if (all && m == 2 * K) {
        CHECK(fsdp_mem_timeline(all, m) == m);
        int ok = 1;
        for (int i = 0; i < K; i++) {
            ok &= all[2 * i].delta == i + 1 && all[2 * i + 1].delta == -(i + 1);
            ok &= all[2 * i].cat == (fsdp_mem_cat)(i % FSDP_MEM_NCAT) && all[2 * i + 1].cat == all[2 * i].cat;
        }
        CHECK(ok);
    }
    free(all);
    fsdp_mem_timeline_enable(0);
    fsdp_mem_free(b);
    check_all_zero();
}

/* Threads: each allocates a known pattern of sizes in every category, holds them, frees half, and
 * leaves the rest for the main thread to check exactly, then free. */
enum { NTHREADS = 8, PER_THREAD = 400 };
typedef struct {
    int id;
    void *held[PER_THREAD];
    int fail;
} thread_arg;

static size_t thread_size(int id, int i) { return (size_t)(id * 1000 + i * 7 + 1); }

static void *thread_main(void *p) {
    thread_arg *a = p;
    for (int i = 0; i < PER_THREAD; i++) {
        if (fsdp_mem_alloc(&a->held[i], thread_size(a->id, i), (fsdp_mem_cat)(i % FSDP_MEM_NCAT)) != FSDP_OK)
            a->fail++;
        else
            memset(a->held[i], a->id, thread_size(a->id, i));
    }
    for (int i = 0; i < PER_THREAD; i += 2) {
        fsdp_mem_free(a->held[i]);
        a->held[i] = NULL;
    }
    return NULL;
}

static void test_threads(void) {
    fsdp_mem_reset_peaks();
    fsdp_mem_timeline_enable(1);
    thread_arg args[NTHREADS];
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].id = t;
        CHECK(pthread_create(&th[t], NULL, thread_main, &args[t]) == 0);
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);

    size_t want_cat[FSDP_MEM_NCAT] = {0}, want_total = 0, all_total = 0;
    for (int t = 0; t < NTHREADS; t++) {
        CHECK(args[t].fail == 0);
        for (int i = 0; i < PER_THREAD; i++) {
            all_total += thread_size(t, i);
            if (i % 2 == 1) {
                want_cat[i % FSDP_MEM_NCAT] += thread_size(t, i);
                want_total += thread_size(t, i);
            }
        }
    }
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        CHECKF(fsdp_mem_current((fsdp_mem_cat)c) == want_cat[c], "cat %d: %zu vs %zu", c,
               fsdp_mem_current((fsdp_mem_cat)c), want_cat[c]);
    CHECK(fsdp_mem_total_current() == want_total);
    /* The peak lies between what is held now and everything ever allocated in this phase. */
    CHECK(fsdp_mem_total_peak() >= want_total && fsdp_mem_total_peak() <= all_total);
    size_t n = fsdp_mem_timeline(NULL, 0);
    CHECK(n == (size_t)NTHREADS * (PER_THREAD + PER_THREAD / 2));
    fsdp_mem_event *ev = malloc(n * sizeof *ev);
    if (ev) {
        fsdp_mem_timeline(ev, n);
        int64_t sum = 0;
        int64_t run = 0, run_peak = 0;
        for (size_t i = 0; i < n; i++) {
            sum += ev[i].delta;
            run += ev[i].delta;
            if (run > run_peak) run_peak = run;
        }
        CHECK(sum == (int64_t)want_total);
        /* Events are recorded in the same critical section as the counts: replaying them gives the peak. */
        CHECK(run_peak == (int64_t)fsdp_mem_total_peak());
    }
    free(ev);
    fsdp_mem_timeline_enable(0);
    for (int t = 0; t < NTHREADS; t++)
        for (int i = 1; i < PER_THREAD; i += 2) {
            const unsigned char *q = args[t].held[i];
            CHECK(q[0] == (unsigned char)t && q[thread_size(t, i) - 1] == (unsigned char)t);
            fsdp_mem_free(args[t].held[i]);
        }
    check_all_zero();
}

/* Freed big blocks are kept for the next allocation of the same size (not in debug builds): the
 * categories still count them as freed, fsdp_mem_cached says how much is kept, trim returns it. */
static void test_cache(void) {
    fsdp_mem_trim();
    const size_t big = (size_t)3 << 20, small = 1000;
#ifdef FSDP_DEBUG_CHECKS
    const size_t kept = 0; /* reuse is off: a use after free must stay visible */
#else
    const size_t kept = 64 + big; /* the 64-byte header plus the (64-aligned) payload */
#endif
    size_t cur0 = fsdp_mem_current(FSDP_MEM_MAIN_GRAD);
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(fsdp_mem_alloc(&a, big, FSDP_MEM_MAIN_GRAD));
    CHECK_OK(fsdp_mem_alloc(&c, small, FSDP_MEM_MAIN_GRAD));
    fsdp_mem_free(c); /* under 1 MiB: never kept */
    CHECK(fsdp_mem_cached() == 0);
    fsdp_mem_free(a);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == cur0);
    CHECKF(fsdp_mem_cached() == kept, "cached %zu, want %zu", fsdp_mem_cached(), kept);
    CHECK(fsdp_mem_cached_peak() == kept);
    CHECK_OK(fsdp_mem_alloc(&b, big, FSDP_MEM_PARAM_FULL)); /* same size: takes the kept block */
    CHECK(fsdp_mem_cached() == 0);
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) >= big);
    CHECK(((uintptr_t)b % 64) == 0);
    memset(b, 1, big);
    fsdp_mem_free(b);
    CHECK(fsdp_mem_cached() == kept);
    fsdp_mem_trim();
    CHECK(fsdp_mem_cached() == 0 && fsdp_mem_cached_peak() == 0);
}

/* The host-shared heap (shm_heap.c) through fsdp_mem_alloc_shared: blocks come from the arena only
 * while a user holds it open, are counted exactly as ordinary blocks, are reused first fit with free
 * neighbours merged, fall back to the ordinary heap when the arena is full, and a pointer that is not
 * a live block is refused. The arena is 8 MiB here (FSDP_SHM_HEAP_MIB). */
static void test_shared_heap(void) {
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(fsdp_mem_alloc_shared(&a, 1000, FSDP_MEM_MAIN_GRAD)); /* nobody opened the heap yet */
    CHECK(a != NULL && !fsdp_mem_is_shared(a) && core_heap_offset(a, 1) == 0);
    fsdp_mem_free(a);
    setenv("FSDP_SHM_HEAP_MIB", "8", 1);
    core_heap_info hi = {0};
    CHECK_OK(core_heap_open(2, &hi));
    unsetenv("FSDP_SHM_HEAP_MIB");
    CHECK(hi.fd >= 0 && hi.base != NULL && hi.size == (size_t)8 << 20);
    CHECK_OK(fsdp_mem_alloc_shared(&a, 100000, FSDP_MEM_MAIN_GRAD));
    CHECK_OK(fsdp_mem_alloc_shared(&b, 5000, FSDP_MEM_PARAM_FULL));
    CHECK_OK(fsdp_mem_alloc_shared(&c, 300000, FSDP_MEM_COMM));
    CHECK(fsdp_mem_is_shared(a) && fsdp_mem_is_shared(b) && fsdp_mem_is_shared(c));
    CHECK(core_heap_offset(a, 1) != 0 && core_heap_offset(c, 1) != 0);
    CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0 && (uintptr_t)c % 64 == 0);
    /* first fit from the bottom: a, b, c lie in that order, page-rounded with the 64-byte header */
    CHECK((char *)a == hi.base + 64);
    CHECK((char *)b == (char *)a + 102400);
    CHECK((char *)c == (char *)b + 8192);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 100000 && fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 5000);
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 300000);
    CHECK(core_heap_live() == 102400 + 8192 + 303104);
    CHECK(core_heap_offset(b, 5000) == (uint64_t)((char *)b - hi.base) + 1);
    CHECK(core_heap_offset(b, hi.size) == 0); /* runs past the arena's end */
    int on_stack = 0;
    CHECK(core_heap_offset(&on_stack, sizeof on_stack) == 0);
    memset(a, 1, 100000);
    memset(b, 2, 5000);
    memset(c, 3, 300000);
    fsdp_mem_free(b);
    CHECK_OK(fsdp_mem_alloc_shared(&d, 4000, FSDP_MEM_MAIN_GRAD)); /* fits where b was */
    CHECK(d == b);
    fsdp_mem_free(d);
    fsdp_mem_free(a); /* merges with b's extent: 110592 free bytes at the bottom */
    CHECK_OK(fsdp_mem_alloc_shared(&d, 110592 - 64, FSDP_MEM_MAIN_GRAD));
    CHECK((char *)d == hi.base + 64);
    fsdp_mem_free(d);
    fsdp_mem_free(c); /* everything merged back into one extent */
    CHECK(core_heap_live() == 0);
    /* the freed pages below the high-water mark are still held: reported as kept (cached) bytes */
    CHECKF(fsdp_mem_cached() == 413696 && fsdp_mem_cached_peak() == 413696, "cached %zu peak %zu",
           fsdp_mem_cached(), fsdp_mem_cached_peak());
    CHECK_OK(fsdp_mem_alloc_shared(&a, ((size_t)8 << 20) - 64, FSDP_MEM_MAIN_GRAD)); /* the whole arena */
    CHECK(fsdp_mem_is_shared(a) && (char *)a == hi.base + 64);
    CHECK_OK(fsdp_mem_alloc_shared(&b, 1, FSDP_MEM_MAIN_GRAD)); /* full: the ordinary heap */
    CHECK(b != NULL && !fsdp_mem_is_shared(b));
    fsdp_mem_free(b);
    /* a pointer that is no block: refused with a message, nothing changed */
    CHECK_ERR(core_heap_free(hi.base + 100, 4096), FSDP_EINVAL, "not a block");
    CHECK_ERR(core_heap_free(&on_stack, 4096), FSDP_EINVAL, "not a block");
    fsdp_mem_free(a);
    CHECK_ERR(core_heap_free(hi.base, 4096), FSDP_EINVAL, "shared heap"); /* freed twice */
    CHECK(core_heap_live() == 0);
    CHECK(fsdp_mem_cached() == (size_t)8 << 20);
    fsdp_mem_trim(); /* punches the free pages out of the file */
    CHECK(fsdp_mem_cached() == 0 && fsdp_mem_cached_peak() == 0);
    core_heap_close();
    CHECK_OK(fsdp_mem_alloc_shared(&a, 1000, FSDP_MEM_MAIN_GRAD)); /* no user left */
    CHECK(!fsdp_mem_is_shared(a));
    fsdp_mem_free(a);
    check_all_zero();
}

/* Device memory's side table (fsdp_mem_track): counted like the header allocator's blocks (categories,
 * peaks, the timeline), refused twice, many pointers at once (the table grows and keeps tombstones), and
 * gone from the counts once untracked. Fake device pointers: the table never dereferences them. */
static void test_track(void) {
    check_all_zero();
    fsdp_mem_reset_peaks();
    fsdp_mem_timeline_enable(1);
    char base[1];
    const void *p = base;
    CHECK_OK(fsdp_mem_track(p, 1000, FSDP_MEM_MAIN_GRAD));
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 1000 && fsdp_mem_total_current() == 1000);
    size_t b = 0;
    fsdp_mem_cat c = FSDP_MEM_NCAT;
    CHECK(fsdp_mem_tracked(p, &b, &c) == 1 && b == 1000 && c == FSDP_MEM_MAIN_GRAD);
    CHECK_ERR(fsdp_mem_track(p, 8, FSDP_MEM_COMM), FSDP_EINVAL, "already counted (1000 bytes of main_grad)");
    CHECK_ERR(fsdp_mem_track((void *)16, 8, FSDP_MEM_NCAT), FSDP_EINVAL, "category");
    CHECK_ERR(fsdp_mem_track(NULL, 8, FSDP_MEM_COMM), FSDP_EINVAL, "device pointer");
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0);
    /* many at once, every third one gone again: counts exact, lookups right */
    enum { N = 5000 };
    size_t want = 1000;
    for (int i = 1; i <= N; i++) {
        CHECK_OK(
            fsdp_mem_track((const void *)(uintptr_t)(4096 * (uintptr_t)i), (size_t)i, FSDP_MEM_PARAM_FULL));
        want += (size_t)i;
    }
    size_t peak_total = fsdp_mem_total_peak();
    CHECK(peak_total == want);
    for (int i = 3; i <= N; i += 3) {
        size_t got = 0;
        CHECK(fsdp_mem_untrack((const void *)(uintptr_t)(4096 * (uintptr_t)i), &got) == 1 &&
              got == (size_t)i);
        want -= (size_t)i;
    }
    CHECK(fsdp_mem_total_current() == want);
    int bad = 0;
    for (int i = 1; i <= N; i++)
        bad += fsdp_mem_tracked((const void *)(uintptr_t)(4096 * (uintptr_t)i), &b, NULL) != (i % 3 != 0) ||
               (i % 3 != 0 && b != (size_t)i);
    CHECKF(bad == 0, "%d lookups wrong after growth and tombstones", bad);
    CHECK(fsdp_mem_untrack((const void *)(uintptr_t)(4096 * 3), &b) == 0); /* already gone */
    for (int i = 1; i <= N; i++)
        if (i % 3) CHECK(fsdp_mem_untrack((const void *)(uintptr_t)(4096 * (uintptr_t)i), NULL) == 1);
    CHECK(fsdp_mem_untrack(p, NULL) == 1);
    check_all_zero();
    CHECK(fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == 1000 && fsdp_mem_total_peak() == peak_total);
    fsdp_mem_event ev[4];
    size_t n = fsdp_mem_timeline(ev, 4);
    CHECK(n >= 2 && ev[0].cat == FSDP_MEM_MAIN_GRAD && ev[0].delta == 1000 && ev[1].delta == 1);
    fsdp_mem_timeline_enable(0);
    fsdp_mem_reset_peaks();
}

int main(void) {
    test_track();
    test_shared_heap();
    test_cache();
    test_names();
    test_accounting();
    test_alignment_and_calloc();
    test_enomem();
    test_timeline();
    test_threads();
    double t0 = fsdp_time_s(), t1 = fsdp_time_s();
    CHECK(t0 > 0.0 && t1 >= t0);
    return TEST_MAIN_END();
}
