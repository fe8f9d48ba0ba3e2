/* mpi_comm.c — every collective of the MPI backend under mpirun -np 1..4. Each rank derives the data
 * of every rank from (rank, element index) and recomputes the expected result in float64 (rounded
 * once to the dtype), so no golden files: out of place and in place, F32 and BF16, SUM/AVG/MAX,
 * counts 1, small primes and a 16M-element one, non-blocking forms, the chunked / derived-datatype
 * paths for counts above INT_MAX (with the int limit lowered), and every FSDP_EINVAL case. Run on the
 * shared-memory transport (the default on one host), on Open MPI's collectives (shm 0), and on the
 * shared-memory transport with tiny slots (many rounds per collective, partial last rounds). */
#include "comm/comm_impl.h"
#include "comm/comm_shm.h"
#include "test_util.h"

#include <stdint.h>

static int R, W; /* this rank, world size */

/* Contribution of rank r at global element index i (F32): a multiple of 0.5 in [-50, 75], so sums
 * over 4 ranks are exact in fp32 and the reduction order cannot matter. */
static float vf(int r, size_t i) { return 0.5f * (float)((int)((i * 7 + (size_t)r * 13) % 251) - 100); }
/* BF16: small integers in [-16, 15]; every sum over <= 4 ranks is representable in bf16 exactly. */
static float vb(int r, size_t i) { return (float)((int)((i * 5 + (size_t)r * 11) % 32) - 16); }
/* BF16 where rounding matters: rank 0 gives 256, the others 1. Summed in fp32 and rounded once the
 * result is bf16(256 + W - 1); rounded at every hop it would stay 256 (bf16 spacing at 256 is 2). */
static float vr(int r, size_t i) {
    (void)i;
    return r == 0 ? 256.0f : 1.0f;
}

typedef float (*valfn)(int r, size_t i);

/* Expected reduction of contributions f(s, i) over all ranks, rounded once to dtype t (as float). */
static float expect(valfn f, size_t i, fsdp_reduce_op op, fsdp_dtype t) {
    double acc = f(0, i);
    for (int s = 1; s < W; s++)
        acc = op == FSDP_MAX ? fmax(acc, f(s, i)) : acc + f(s, i);
    float a = (float)acc;              /* exact: the sums are small */
    if (op == FSDP_AVG) a /= (float)W; /* AVG: the exact sum divided once, in fp32 */
    return t == FSDP_BF16 ? fsdp_bf16_to_f32(fsdp_f32_to_bf16(a)) : a;
}

/* Test buffers. In the "heap" pass (second_transport) they come from the host-shared heap, except
 * every third allocation, shifted by rank: peers then read some buffers with plain loads and others
 * through process_vm_readv within one collective, and the results must not differ. */
static int use_heap;
static size_t heap_allocs, heap_hits;

static void *xalloc(size_t n) {
    void *p = NULL;
    if (use_heap && (heap_allocs++ + (size_t)R) % 3 != 0) {
        if (fsdp_mem_alloc_shared(&p, n ? n : 1, FSDP_MEM_OTHER) != FSDP_OK) p = NULL;
        heap_hits += p != NULL && fsdp_mem_is_shared(p);
    } else if (use_heap) {
        if (fsdp_mem_alloc(&p, n ? n : 1, FSDP_MEM_OTHER) != FSDP_OK) p = NULL;
    } else
        p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static void xfree(void *p) {
    if (use_heap)
        fsdp_mem_free(p);
    else
        free(p);
}

static void put(void *buf, fsdp_dtype t, size_t i, float v) {
    if (t == FSDP_F32)
        ((float *)buf)[i] = v;
    else
        ((fsdp_bf16 *)buf)[i] = fsdp_f32_to_bf16(v);
}
static float get(const void *buf, fsdp_dtype t, size_t i) {
    return t == FSDP_F32 ? ((const float *)buf)[i] : fsdp_bf16_to_f32(((const fsdp_bf16 *)buf)[i]);
}

/* Counts up to here are checked element by element; beyond, a strided sample (keeps the 16M case fast). */
static size_t stride_for(size_t n) { return n <= 100000 ? 1 : 9973; }

static void test_all_gather(fsdp_comm_t *c, size_t count, fsdp_dtype t, int in_place, int nonblocking) {
    size_t es = fsdp_dtype_size(t);
    char *recv = xalloc((size_t)W * count * es);
    char *send = in_place ? recv + (size_t)R * count * es : xalloc(count * es);
    memset(recv, 0xee, (size_t)W * count * es);
    for (size_t i = 0; i < count; i++)
        put(send, t, i, vf(R, i));
    if (nonblocking) {
        fsdp_comm_req_t *q = NULL;
        CHECK_OK(fsdp_comm_iall_gather(c, send, recv, count, t, &q));
        int done = 0;
        while (!done) {
            fsdp_status s = fsdp_comm_test(q, &done);
            CHECK_OK(s);
            if (s != FSDP_OK) break;
        }
    } else {
        CHECK_OK(fsdp_comm_all_gather(c, send, recv, count, t));
    }
    size_t bad = 0;
    for (int b = 0; b < W; b++)
        for (size_t i = 0; i < count; i += stride_for(count)) {
            float want = t == FSDP_BF16 ? fsdp_bf16_to_f32(fsdp_f32_to_bf16(vf(b, i))) : vf(b, i);
            if (get(recv, t, (size_t)b * count + i) != want) bad++;
        }
    CHECKF(bad == 0, "all-gather count %zu %s in_place %d nb %d: %zu wrong", count, fsdp_dtype_name(t),
           in_place, nonblocking, bad);
    if (!in_place) xfree(send);
    xfree(recv);
}

/* in_place: 0 separate buffers; 1 recv == send; 2 recv == send + rank*count (the own block). */
static void test_reduce_scatter(fsdp_comm_t *c, size_t count, fsdp_dtype t, fsdp_reduce_op op, valfn f,
                                int in_place, int nonblocking) {
    size_t es = fsdp_dtype_size(t);
    char *send = xalloc((size_t)W * count * es);
    char *recv = in_place == 1 ? send : in_place == 2 ? send + (size_t)R * count * es : xalloc(count * es);
    for (size_t j = 0; j < (size_t)W * count; j++)
        put(send, t, j, f(R, j));
    if (nonblocking) {
        fsdp_comm_req_t *q = NULL;
        CHECK_OK(fsdp_comm_ireduce_scatter(c, send, recv, count, t, op, &q));
        if (q != NULL) CHECK_OK(fsdp_comm_wait(q));
    } else {
        CHECK_OK(fsdp_comm_reduce_scatter(c, send, recv, count, t, op));
    }
    size_t bad = 0;
    for (size_t i = 0; i < count; i += stride_for(count)) {
        float want = expect(f, (size_t)R * count + i, op, t), got = get(recv, t, i);
        if (got != want) {
            if (bad < 3) fprintf(stderr, "[rank %d] rs i=%zu got %g want %g\n", R, i, got, want);
            bad++;
        }
    }
    CHECKF(bad == 0, "reduce-scatter count %zu %s op %d in_place %d nb %d: %zu wrong", count,
           fsdp_dtype_name(t), (int)op, in_place, nonblocking, bad);
    if (in_place == 2) { /* the peers' blocks of send are left as they were */
        size_t moved = 0;
        for (size_t j = 0; j < (size_t)W * count; j += stride_for(count))
            moved += j / count != (size_t)R && get(send, t, j) != f(R, j);
        CHECKF(moved == 0, "reduce-scatter into the own block changed %zu elements of other blocks", moved);
    }
    if (!in_place) xfree(recv);
    xfree(send);
}

/* Accumulating reduce-scatter: acc += scale * (the rank-order sum), the product rounded first. The
 * sums are exact (vf), the scale 1/3 is not, so the product's rounding is visible. */
static void test_reduce_scatter_acc(fsdp_comm_t *c, size_t count) {
    float *send = xalloc((size_t)W * count * 4), *acc = xalloc(count * 4 + 4);
    const float scale = 1.0f / 3.0f;
    for (size_t j = 0; j < (size_t)W * count; j++)
        send[j] = vf(R, j);
    for (size_t i = 0; i <= count; i++)
        acc[i] = vf(R + 7, i) * 0.5f; /* acc[count]: a guard */
    fsdp_comm_req_t *q = NULL;
    CHECK_OK(fsdp_comm_ireduce_scatter_acc(c, send, acc, count, scale, &q));
    if (q != NULL) CHECK_OK(fsdp_comm_wait(q));
    size_t bad = 0;
    for (size_t i = 0; i < count; i += stride_for(count)) {
        volatile float p = expect(vf, (size_t)R * count + i, FSDP_SUM, FSDP_F32) * scale;
        float want = vf(R + 7, i) * 0.5f + p;
        if (acc[i] != want) {
            if (bad < 3) fprintf(stderr, "[rank %d] rs-acc i=%zu got %.9g want %.9g\n", R, i, acc[i], want);
            bad++;
        }
    }
    bad += acc[count] != vf(R + 7, count) * 0.5f;
    for (size_t j = 0; j < (size_t)W * count; j += stride_for(count))
        bad += send[j] != vf(R, j); /* the input is left as it was */
    CHECKF(bad == 0, "reduce-scatter-acc count %zu: %zu wrong", count, bad);
    xfree(acc);
    xfree(send);
}

static void test_all_reduce(fsdp_comm_t *c, size_t count, fsdp_dtype t, fsdp_reduce_op op, valfn f,
                            int in_place) {
    size_t es = fsdp_dtype_size(t);
    char *send = xalloc(count * es);
    char *recv = in_place ? send : xalloc(count * es);
    for (size_t i = 0; i < count; i++)
        put(send, t, i, f(R, i));
    CHECK_OK(fsdp_comm_all_reduce(c, send, recv, count, t, op));
    size_t bad = 0;
    for (size_t i = 0; i < count; i += stride_for(count)) {
        float want = expect(f, i, op, t), got = get(recv, t, i);
        if (got != want) {
            if (bad < 3) fprintf(stderr, "[rank %d] ar i=%zu got %g want %g\n", R, i, got, want);
            bad++;
        }
    }
    CHECKF(bad == 0, "all-reduce count %zu %s op %d in_place %d: %zu wrong", count, fsdp_dtype_name(t),
           (int)op, in_place, bad);
    if (!in_place) xfree(recv);
    xfree(send);
}

static void test_broadcast(fsdp_comm_t *c, size_t count, fsdp_dtype t, int root) {
    size_t es = fsdp_dtype_size(t);
    char *buf = xalloc(count * es);
    for (size_t i = 0; i < count; i++)
        put(buf, t, i, R == root ? vb(root, i) : -99.0f);
    CHECK_OK(fsdp_comm_broadcast(c, buf, count, t, root));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        if (get(buf, t, i) != vb(root, i)) bad++;
    CHECKF(bad == 0, "broadcast count %zu %s root %d: %zu wrong", count, fsdp_dtype_name(t), root, bad);
    xfree(buf);
}

/* Every collective kind on one count, both dtypes, every op, in and out of place. */
static void sweep(fsdp_comm_t *c, size_t count) {
    fsdp_dtype ts[] = {FSDP_F32, FSDP_BF16};
    fsdp_reduce_op ops[] = {FSDP_SUM, FSDP_AVG, FSDP_MAX};
    for (int d = 0; d < 2; d++) {
        valfn f = ts[d] == FSDP_F32 ? vf : vb;
        for (int ip = 0; ip < 3; ip++) {
            if (ip < 2) test_all_gather(c, count, ts[d], ip, ip);
            for (int o = 0; o < 3; o++) {
                test_reduce_scatter(c, count, ts[d], ops[o], f, ip, o == 1);
                if (ip < 2) test_all_reduce(c, count, ts[d], ops[o], f, ip);
            }
        }
        test_broadcast(c, count, ts[d], W - 1);
        test_broadcast(c, count, ts[d], 0);
    }
    test_reduce_scatter_acc(c, count);
}

/* BF16 summed in fp32 and rounded once: with 3+ ranks the once-rounded sum differs from rounding
 * after every addition, and the library must give the former. */
static void test_round_once(fsdp_comm_t *c) {
    float hop = 256.0f; /* rank-order sum rounded to bf16 after each addition */
    for (int s = 1; s < W; s++)
        hop = fsdp_bf16_to_f32(fsdp_f32_to_bf16(hop + 1.0f));
    float once = fsdp_bf16_to_f32(fsdp_f32_to_bf16(256.0f + (float)(W - 1)));
    if (W >= 3) CHECK(once != hop); /* the case really distinguishes the two */
    for (int ip = 0; ip < 2; ip++) {
        test_reduce_scatter(c, 5, FSDP_BF16, FSDP_SUM, vr, ip, ip);
        test_all_reduce(c, 5, FSDP_BF16, FSDP_SUM, vr, ip);
    }
    fsdp_bf16 x = fsdp_f32_to_bf16(vr(R, 0)), y = 0;
    CHECK_OK(fsdp_comm_all_reduce(c, &x, &y, 1, FSDP_BF16, FSDP_SUM));
    CHECKF(fsdp_bf16_to_f32(y) == once, "round once: got %g want %g (per hop %g)", fsdp_bf16_to_f32(y), once,
           hop);
}

/* Two non-blocking collectives in flight at once, completed in reverse order. */
static void test_overlap(fsdp_comm_t *c) {
    size_t n = 1009;
    float *ag = xalloc((size_t)W * n * 4), *s = xalloc(n * 4);
    fsdp_bf16 *rs = xalloc((size_t)W * n * 2), *out = xalloc(n * 2);
    for (size_t i = 0; i < n; i++)
        s[i] = vf(R, i);
    for (size_t j = 0; j < (size_t)W * n; j++)
        rs[j] = fsdp_f32_to_bf16(vb(R, j));
    fsdp_comm_req_t *a = NULL, *b = NULL;
    CHECK_OK(fsdp_comm_iall_gather(c, s, ag, n, FSDP_F32, &a));
    CHECK_OK(fsdp_comm_ireduce_scatter(c, rs, out, n, FSDP_BF16, FSDP_SUM, &b));
    if (b) CHECK_OK(fsdp_comm_wait(b));
    if (a) CHECK_OK(fsdp_comm_wait(a));
    size_t bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++)
            bad += ag[(size_t)r * n + i] != vf(r, i);
    for (size_t i = 0; i < n; i++)
        bad += fsdp_bf16_to_f32(out[i]) != expect(vb, (size_t)R * n + i, FSDP_SUM, FSDP_BF16);
    CHECKF(bad == 0, "overlapping requests: %zu wrong", bad);
    xfree(ag);
    xfree(s);
    xfree(rs);
    xfree(out);
}

static void test_einval(fsdp_comm_t *c) {
    float buf[64] = {0};
    fsdp_comm_req_t *q = NULL;
    /* Identical bad calls on every rank: each fails locally before any communication, so none hangs. */
    CHECK_ERR(fsdp_comm_all_gather(c, NULL, buf, 2, FSDP_F32), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, buf, NULL, 2, FSDP_BF16, FSDP_SUM), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_all_reduce(c, NULL, NULL, 2, FSDP_F32, FSDP_AVG), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_broadcast(c, NULL, 2, FSDP_F32, 0), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_all_reduce(c, buf, buf + 8, SIZE_MAX / 3, FSDP_F32, FSDP_SUM), FSDP_EINVAL,
              "overflows");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, buf, buf + 8, (size_t)PTRDIFF_MAX / 4 / (size_t)W + 1, FSDP_F32,
                                       FSDP_SUM),
              FSDP_EINVAL, "overflows");
    CHECK_ERR(fsdp_comm_all_gather(c, buf, buf + 8, 1, (fsdp_dtype)7), FSDP_EINVAL, "dtype");
    CHECK_ERR(fsdp_comm_all_reduce(c, buf, buf + 8, 1, FSDP_F32, (fsdp_reduce_op)3), FSDP_EINVAL, "op");
    CHECK_ERR(fsdp_comm_broadcast(c, buf, 1, FSDP_F32, W), FSDP_EINVAL, "root");
    CHECK_ERR(fsdp_comm_broadcast(c, buf, 1, FSDP_BF16, -3), FSDP_EINVAL, "root");
    CHECK_ERR(fsdp_comm_all_gather(c, buf + 1, buf, 3, FSDP_F32), FSDP_EINVAL, "in-place position");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, buf + 1, buf, 3, FSDP_F32, FSDP_SUM), FSDP_EINVAL, "overlaps");
    CHECK_ERR(fsdp_comm_iall_gather(c, buf, buf + 8, 1, FSDP_F32, NULL), FSDP_EINVAL, "req");
    CHECK_ERR(fsdp_comm_ireduce_scatter(c, buf, buf + 8, 1, FSDP_BF16, (fsdp_reduce_op)7, &q), FSDP_EINVAL,
              "op");
    CHECK(q == NULL);
    CHECK_ERR(fsdp_comm_ireduce_scatter_acc(c, buf, buf, 2, 1.0f, &q), FSDP_EINVAL, "acc must not be send");
    CHECK_ERR(fsdp_comm_ireduce_scatter_acc(c, buf + 1, buf, 3, 1.0f, &q), FSDP_EINVAL, "overlaps");
    if (R > 0) /* acc at send + rank*count: the plain form's own-block position, refused here */
        CHECK_ERR(fsdp_comm_ireduce_scatter_acc(c, buf, buf + (size_t)R * 2, 2, 1.0f, &q), FSDP_EINVAL,
                  "overlaps");
    CHECK_ERR(fsdp_comm_ireduce_scatter_acc(c, buf, buf + 8, 1, NAN, &q), FSDP_EINVAL, "NaN");
    CHECK_ERR(fsdp_comm_ireduce_scatter_acc(c, buf, buf + 8, 1, 1.0f, NULL), FSDP_EINVAL, "req");
    CHECK(q == NULL);
    /* count 0 is a no-op on every rank */
    CHECK_OK(fsdp_comm_reduce_scatter(c, NULL, NULL, 0, FSDP_BF16, FSDP_AVG));
    CHECK_OK(fsdp_comm_broadcast(c, NULL, 0, FSDP_F32, 0));
    /* after all that, the communicator still works */
    test_all_reduce(c, 3, FSDP_F32, FSDP_SUM, vf, 0);
}

/* Three requests in flight, moved by fsdp_comm_progress alone, then waited for in reverse order. */
static void test_progress(fsdp_comm_t *c) {
    size_t n = 3001;
    float *s = xalloc(n * 4), *ag = xalloc((size_t)W * n * 4), *rs_in = xalloc((size_t)W * n * 4);
    float *rs_out = xalloc(n * 4), *ar = xalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        s[i] = vf(R, i);
    for (size_t j = 0; j < (size_t)W * n; j++)
        rs_in[j] = vf(R, j);
    fsdp_comm_req_t *q[3] = {NULL, NULL, NULL};
    CHECK_OK(fsdp_comm_iall_gather(c, s, ag, n, FSDP_F32, &q[0]));
    CHECK_OK(fsdp_comm_ireduce_scatter(c, rs_in, rs_out, n, FSDP_F32, FSDP_SUM, &q[1]));
    CHECK_OK(fsdp_comm_iall_gather(c, s, ag, 0, FSDP_F32, &q[2])); /* count 0: done at once */
    for (int k = 0; k < 1000; k++)
        fsdp_comm_progress(c);
    for (int k = 2; k >= 0; k--)
        if (q[k]) CHECK_OK(fsdp_comm_wait(q[k]));
    CHECK_OK(fsdp_comm_all_reduce(c, s, ar, n, FSDP_F32, FSDP_MAX));
    size_t bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++)
            bad += ag[(size_t)r * n + i] != vf(r, i);
    for (size_t i = 0; i < n; i++) {
        bad += rs_out[i] != expect(vf, (size_t)R * n + i, FSDP_SUM, FSDP_F32);
        bad += ar[i] != expect(vf, i, FSDP_MAX, FSDP_F32);
    }
    CHECKF(bad == 0, "requests moved by fsdp_comm_progress: %zu wrong", bad);
    xfree(s);
    xfree(ag);
    xfree(rs_in);
    xfree(rs_out);
    xfree(ar);
}

/* The whole sweep on one more communicator: shm 0 (Open MPI's collectives on one host too); the
 * shared-memory slots alone with 4 KiB slots (every collective takes many rounds); or the single-copy
 * path for every size ("cma", where the kernel allows reading peers' memory). */
static void second_transport(int shm, const char *mode) {
    int slots = mode && strcmp(mode, "slots") == 0, cma = mode && strcmp(mode, "cma") == 0;
    int heap = mode && strcmp(mode, "heap") == 0 && W > 1; /* one rank: no transport, no heap */
    cma |= heap; /* the shared heap is read in the single-copy rounds: every size takes one */
    if (slots) {
        setenv("FSDP_COMM_SHM_SLOT_KIB", "4", 1);
        setenv("FSDP_COMM_SHM_CMA", "0", 1);
    }
    if (cma) setenv("FSDP_COMM_SHM_CMA_MIN_KIB", "0", 1);
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 120;
    cfg.shm = shm;
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    unsetenv("FSDP_COMM_SHM_SLOT_KIB");
    unsetenv("FSDP_COMM_SHM_CMA");
    unsetenv("FSDP_COMM_SHM_CMA_MIN_KIB");
    if (c == NULL) return;
    CHECK(fsdp_comm_shm_active(c) == (shm && W > 1));
    int on_cma = 0, on_heap = 0;
    comm_shm_test_info(c, &on_cma, &on_heap);
    if (slots) CHECK(on_cma == 0);
    if (R == 0 && cma) fprintf(stderr, "single-copy path %s\n", on_cma ? "on" : "refused by this kernel");
    if (heap) {
        /* this host allows the single-copy path (the "cma" pass said so); the heap needs no more */
        CHECKF(on_cma && on_heap, "shared heap not set up (single copy %d, heap %d)", on_cma, on_heap);
        use_heap = 1;
        heap_allocs = heap_hits = 0;
    }
    size_t counts[] = {1, 7, 1009, 3000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        sweep(c, counts[k]);
    test_round_once(c);
    test_overlap(c);
    test_progress(c);
    if (!shm) { /* the chunked / derived-datatype MPI paths (see main) */
        comm_test_set_int_limit(c, 1000);
        sweep(c, 2500);
        comm_test_set_int_limit(c, 0);
    }
    test_reduce_scatter(c, (size_t)1 << 20, FSDP_F32, FSDP_AVG, vf, 1, 1);
    test_reduce_scatter_acc(c, (size_t)1 << 20);
    test_all_gather(c, (size_t)1 << 18, FSDP_BF16, 1, 1);
    if (heap) {
        test_reduce_scatter(c, (size_t)1 << 20, FSDP_BF16, FSDP_SUM, vb, 1, 1);
        test_reduce_scatter(c, (size_t)1 << 20, FSDP_BF16, FSDP_SUM, vb, 2, 0);
        test_reduce_scatter(c, (size_t)1 << 18, FSDP_F32, FSDP_SUM, vf, 2, 1);
        test_reduce_scatter(c, (size_t)1 << 18, FSDP_F32, FSDP_SUM, vf, 0, 0);
        test_all_gather(c, (size_t)1 << 18, FSDP_F32, 0, 0);
        use_heap = 0;
        CHECKF(heap_hits > 50 && heap_hits * 3 >= heap_allocs,
               "%zu of %zu test buffers came from the shared heap", heap_hits, heap_allocs);
    }
    fsdp_comm_free(c);
}

int main(int argc, char **argv) {
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 120; /* generous: ranks share two cores with other jobs */
    fsdp_status s = fsdp_comm_init(&c, &cfg, &argc, &argv);
    if (s != FSDP_OK) {
        fprintf(stderr, "fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    R = fsdp_comm_rank(c);
    W = fsdp_comm_size(c);
    test_set_rank(R);
    CHECK(strcmp(fsdp_comm_backend_name(c), "mpi") == 0);
    /* every test job runs on this one host: the shared-memory transport is on from 2 ranks */
    CHECK(fsdp_comm_shm_active(c) == (W > 1 && getenv("FSDP_COMM_SHM") == NULL));
    CHECK(fsdp_comm_local_size(c) >= 1 && fsdp_comm_local_size(c) <= W);
    fsdp_comm_set_label(c, "mpi_comm test");
    CHECK_OK(fsdp_comm_barrier(c));

    size_t counts[] = {1, 2, 3, 7, 13, 1009};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        sweep(c, counts[k]);
    test_round_once(c);
    test_overlap(c);
    test_progress(c);
    test_einval(c);

    /* Counts above the int limit: chunked all-reduce, derived-datatype all-gather/broadcast/alltoall
     * reduce-scatter. The limit is lowered to 1000 so 2500 (2 chunks + remainder) and 3000 (exact
     * multiple) exercise what a count above INT_MAX would. */
    comm_test_set_int_limit(c, 1000);
    sweep(c, 2500);
    sweep(c, 3000);
    comm_test_set_int_limit(c, 0);

    /* Big: 16M elements (64 MiB f32) in one all-reduce, and a 4M-per-rank BF16 reduce-scatter. */
    double t0 = fsdp_time_s();
    test_all_reduce(c, (size_t)1 << 24, FSDP_F32, FSDP_AVG, vf, 1);
    test_reduce_scatter(c, (size_t)1 << 22, FSDP_BF16, FSDP_SUM, vb, 0, 1);
    test_all_gather(c, ((size_t)1 << 24) / (size_t)W, FSDP_BF16, 1, 0);
    if (R == 0) fprintf(stderr, "big collectives at np %d: %.2f s\n", W, fsdp_time_s() - t0);

    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0); /* staging all returned */
    second_transport(0, NULL);                   /* before c goes: freeing c finalises MPI */
    second_transport(1, "slots");
    second_transport(1, "cma");
    second_transport(1, "heap");
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0);
    fsdp_comm_free(c);
    return TEST_MAIN_END();
}
