/* mpi_main_grad.c — the main_grad protocol under mpirun 1..4: first-touch flags and alias resolution,
 * poisoned fresh buffers in debug builds, zero-fill of untouched tensors and gaps decided from the
 * bitmask, exact reduced values with fp32 and bf16 on the wire (FULL_SHARD and NO_SHARD), peak
 * main_grad bytes for LAZY / EAGER / NO_SYNC, and fp32 micro-batch accumulation precision vs float64
 * (with the bf16-accumulation error printed beside it). */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

static int g_rank, g_world;

static const fsdp_tensor_spec SPECS[] = {
    {.name = "a", .ndim = 2, .shape = {3, 7}, .init = FSDP_INIT_NORMAL, .std = 1},
    {.name = "unused", .ndim = 1, .shape = {11}, .init = FSDP_INIT_NORMAL, .std = 1},
    {.name = "rank0only", .ndim = 1, .shape = {5}, .init = FSDP_INIT_NORMAL, .std = 1},
    {.name = "a_tied", .ndim = 2, .shape = {7, 3}, .alias_of = "a"},
    {.name = "c", .ndim = 1, .shape = {2}, .init = FSDP_INIT_ZEROS},
};
#define NS 5

/* Rank r's gradient value for element k of tensor t (one use). Not bf16-exact on purpose. */
static float gval(int r, int t, size_t k) {
    return (float)(1.0 + 0.001 * (r + 1) + 0.0137 * k - 0.31 * t) * 0.7f;
}

/* What each rank writes, and the exact value the sharded gradient must then hold. */
static void test_reduce_values(fsdp_comm_t *comm, fsdp_strategy strat, fsdp_dtype reduce, int eager) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.max_inflight = 0; /* the synchronous lifetimes (mpi_overlap tests the overlapped ones) */
    ec.strategy = strat;
    ec.reduce_dtype = reduce;
    ec.compute_dtype = FSDP_F32;
    ec.main_grad = eager ? FSDP_MAIN_GRAD_EAGER : FSDP_MAIN_GRAD_LAZY;
    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    CHECK_OK(fsdp_engine_add_unit(e, "u", SPECS, NS, NULL, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!u) goto done;
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    CHECK_OK(fsdp_unit_pre_forward(u));
    CHECK_OK(fsdp_unit_post_forward(u));
    CHECK_OK(fsdp_unit_pre_backward(u));
    float *v = NULL, *v2 = NULL;
    int acc = -1;
    CHECK_OK(fsdp_unit_main_grad(u, 0, &v, &acc)); /* first use of "a": overwrite */
    CHECK(v != NULL && acc == 0);
#ifdef FSDP_DEBUG_CHECKS
    /* debug builds poison the fresh buffer: nothing may rely on it being zero */
    CHECK(v && isnan(v[0]) && isnan(v[20]));
#endif
    if (v)
        for (size_t k = 0; k < 21; k++)
            v[k] = gval(g_rank, 0, k);
    CHECK(fsdp_unit_grad_touched(u, 0) == 1 && fsdp_unit_grad_touched(u, 3) == 1);
    CHECK_OK(fsdp_unit_main_grad(u, 3, &v2, &acc)); /* the tie: same slice, accumulate */
    CHECK(v2 == v && acc == 1);
    if (v2)
        for (size_t k = 0; k < 21; k++)
            v2[k] += gval(g_rank, 3, k);
    if (g_rank == 0) { /* touched on one rank only: others contribute zeros */
        fsdp_bf16 b[5];
        for (int k = 0; k < 5; k++)
            b[k] = fsdp_f32_to_bf16(gval(0, 2, (size_t)k));
        CHECK_OK(fsdp_unit_grad_from_bf16(u, 2, b)); /* first touch: upcast-copy */
        CHECK_OK(fsdp_unit_grad_from_bf16(u, 2, b)); /* then upcast-add */
    }
    float cg[2] = {0.5f, -0.25f};
    CHECK_OK(fsdp_unit_grad_from_f32(u, 4, cg));
    CHECK(fsdp_unit_grad_touched(u, 1) == 0);
    CHECK(fsdp_unit_grad_touched(u, 2) == (g_rank == 0));
    CHECK_OK(fsdp_unit_post_backward(u));
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0 && fsdp_mem_current(FSDP_MEM_COMM) == 0);

    /* expected flat gradient, element by element */
    size_t padded = fsdp_unit_padded_numel(u);
    float *want = calloc(padded, sizeof(float));
    const float scale = 1.0f / (float)g_world;
    fsdp_tensor_info ti[NS];
    for (int t = 0; t < NS; t++)
        CHECK_OK(fsdp_unit_tensor_info(u, t, &ti[t]));
    for (size_t k = 0; k < padded; k++) {
        /* per rank contribution in fp32 as written, then the wire dtype, summed over ranks */
        double sum = 0.0;
        float fsum = 0.0f;
        int in = 0;
        for (int r = 0; r < g_world; r++) {
            float c = 0.0f;
            if (k >= ti[0].offset && k < ti[0].offset + 21) {
                c = gval(r, 0, k - ti[0].offset) + gval(r, 3, k - ti[0].offset);
                in = 1;
            } else if (k >= ti[2].offset && k < ti[2].offset + 5 && r == 0) {
                float b = fsdp_bf16_to_f32(fsdp_f32_to_bf16(gval(0, 2, k - ti[2].offset)));
                c = b + b;
                in = 1;
            } else if (k >= ti[4].offset && k < ti[4].offset + 2) {
                c = cg[k - ti[4].offset];
            }
            if (reduce == FSDP_BF16) c = fsdp_bf16_to_f32(fsdp_f32_to_bf16(c));
            sum += c;
            fsum += c;
        }
        (void)in;
        if (reduce == FSDP_BF16) /* bf16 sums are formed in fp32 over ranks (rank order) and rounded once */
            want[k] = fsdp_bf16_to_f32(fsdp_f32_to_bf16(fsum)) * scale;
        else
            want[k] = (float)sum * scale; /* fp32 sum of <= 4 terms: order-independent within tolerance */
    }
    fsdp_shard_view sv;
    CHECK_OK(fsdp_unit_shard(u, &sv));
    int bad = 0, nonzero_unused = 0;
    for (size_t k = 0; k < sv.numel; k++) {
        size_t gi = sv.offset + k;
        int exact = reduce == FSDP_BF16 || want[gi] == 0.0f;
        int ok = exact ? sv.grad[k] == want[gi] : test_close(sv.grad[k], want[gi], 1e-6, 0);
        if (!ok && bad++ < 5)
            fprintf(stderr, "[rank %d] flat %zu: got %.9g want %.9g\n", g_rank, gi, (double)sv.grad[k],
                    (double)want[gi]);
        if (gi >= ti[1].offset && gi < ti[1].offset + 11) nonzero_unused += sv.grad[k] != 0.0f;
    }
    CHECKF(bad == 0, "%d reduced gradient elements wrong (strategy %d reduce %s)", bad, (int)strat,
           fsdp_dtype_name(reduce));
    CHECK(nonzero_unused == 0);
    free(want);
done:
    fsdp_engine_free(e);
}

/* Peak main_grad bytes over a step of 2 micro-batches through a stack of 3 units whose backward
 * windows do not overlap (each unit's pre_backward .. post_backward in turn). */
static void test_peaks(fsdp_comm_t *comm, fsdp_main_grad_policy pol, fsdp_accum_mode accum) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.max_inflight = 0; /* the synchronous lifetimes (mpi_overlap tests the overlapped ones) */
    ec.main_grad = pol;
    ec.accum = accum;
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    fsdp_tensor_spec s[3][2] = {
        {{.name = "w", .ndim = 1, .shape = {37}}, {.name = "b", .ndim = 1, .shape = {3}}},
        {{.name = "w", .ndim = 2, .shape = {101, 3}}, {.name = "b", .ndim = 1, .shape = {1}}},
        {{.name = "w", .ndim = 2, .shape = {5, 5}}, {.name = "b", .ndim = 1, .shape = {17}}},
    };
    fsdp_unit_t *u[3] = {0};
    size_t sum = 0, max = 0;
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        CHECK_OK(fsdp_engine_add_unit(e, name, s[i], 2, NULL, &u[i]));
        if (!u[i]) goto done;
        size_t b = fsdp_unit_padded_numel(u[i]) * sizeof(float);
        sum += b;
        max = b > max ? b : max;
    }
    CHECK_OK(fsdp_engine_init_params(e));
    fsdp_mem_reset_peaks();
    CHECK_OK(fsdp_engine_begin_step(e, 2));
    for (int m = 0; m < 2; m++) {
        CHECK_OK(fsdp_engine_begin_micro(e, m));
        for (int i = 0; i < 3; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        for (int i = 2; i >= 0; i--) {
            CHECK_OK(fsdp_unit_pre_backward(u[i]));
            for (int t = 0; t < 2; t++) {
                float *v;
                int acc;
                CHECK_OK(fsdp_unit_main_grad(u[i], t, &v, &acc));
                CHECK(acc == (accum == FSDP_ACCUM_NO_SYNC && m == 1));
                fsdp_tensor_info ti;
                CHECK_OK(fsdp_unit_tensor_info(u[i], t, &ti));
                for (size_t k = 0; k < ti.numel; k++)
                    v[k] = acc ? v[k] + 1.0f : 1.0f;
            }
            CHECK_OK(fsdp_unit_post_backward(u[i]));
        }
        if (accum == FSDP_ACCUM_NO_SYNC && m == 0) CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == sum);
    }
    size_t want = (pol == FSDP_MAIN_GRAD_EAGER || accum == FSDP_ACCUM_NO_SYNC) ? sum : max;
    CHECKF(fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) == want, "policy %d accum %d: main_grad peak %zu, want %zu",
           (int)pol, (int)accum, fsdp_mem_peak(FSDP_MEM_MAIN_GRAD), want);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
    /* every element got 1 per rank per micro-batch: the average is exactly 1 */
    for (int i = 0; i < 3; i++) {
        fsdp_shard_view sv;
        CHECK_OK(fsdp_unit_shard(u[i], &sv));
        double gsum = 0;
        for (size_t k = 0; k < sv.numel; k++)
            gsum += sv.grad[k];
        double total = gsum;
        float pair = (float)total;
        CHECK_OK(fsdp_comm_all_reduce(comm, &pair, &pair, 1, FSDP_F32, FSDP_SUM));
        size_t n = (size_t)(s[i][0].shape[0] * (s[i][0].ndim > 1 ? s[i][0].shape[1] : 1) + s[i][1].shape[0]);
        CHECKF(test_close(pair, (double)n, 1e-5, 0), "unit %d grad sum %g want %zu", i, (double)pair, n);
    }
    /* NO_SYNC: begin_step refuses while an accumulation is pending */
    if (accum == FSDP_ACCUM_NO_SYNC) {
        CHECK_OK(fsdp_engine_begin_step(e, 2));
        CHECK_OK(fsdp_unit_pre_forward(u[0]));
        CHECK_OK(fsdp_unit_post_forward(u[0]));
        CHECK_OK(fsdp_unit_pre_backward(u[0]));
        float *v;
        int acc;
        CHECK_OK(fsdp_unit_main_grad(u[0], 0, &v, &acc));
        for (int k = 0; k < 37; k++)
            v[k] = 0;
        CHECK_OK(fsdp_unit_post_backward(u[0]));
        CHECK_ERR(fsdp_engine_begin_step(e, 2), FSDP_ESTATE, "'s0'");
        CHECK_ERR(fsdp_engine_begin_micro(e, 2), FSDP_EINVAL, "micro-batch 2");
    }
done:
    fsdp_engine_free(e);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
}

/* Many micro-batches of small bf16 gradients accumulated in fp32 main_grad (NO_SYNC) vs a float64
 * sum; the error of accumulating the same data in bf16 (a bf16 running sum per rank, as bf16 no_sync
 * accumulation does) is printed beside it. */
static void test_precision(fsdp_comm_t *comm) {
    enum { N = 1000, MICRO = 256 };
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.max_inflight = 0; /* the synchronous lifetimes (mpi_overlap tests the overlapped ones) */
    ec.accum = FSDP_ACCUM_NO_SYNC;
    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u = NULL;
    fsdp_tensor_spec sp = {.name = "g", .ndim = 1, .shape = {N}};
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    CHECK_OK(fsdp_engine_add_unit(e, "acc", &sp, 1, NULL, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!u) goto done;
    double *ref = calloc(N, sizeof(double));
    float *bf_acc_f = calloc(N, sizeof(float)); /* this rank's bf16 running sum, stored as f32 */
    CHECK_OK(fsdp_engine_begin_step(e, MICRO));
    for (int m = 0; m < MICRO; m++) {
        CHECK_OK(fsdp_engine_begin_micro(e, m));
        CHECK_OK(fsdp_unit_pre_forward(u));
        CHECK_OK(fsdp_unit_post_forward(u));
        CHECK_OK(fsdp_unit_pre_backward(u));
        float *v;
        int acc;
        CHECK_OK(fsdp_unit_main_grad(u, 0, &v, &acc)); /* as a fused wgrad GEMM would: beta = acc */
        CHECK(acc == (m > 0));
        for (int k = 0; k < N; k++) {
            float gk = (float)(1e-3 * (1.0 + 0.5 * sin(0.1 * k + 0.37 * m + 1.3 * g_rank)));
            v[k] = acc ? v[k] + gk : gk;
            bf_acc_f[k] = fsdp_bf16_to_f32(fsdp_f32_to_bf16(bf_acc_f[k] + gk));
            for (int r = 0; r < g_world; r++) /* every rank's data, recomputed, in float64 */
                ref[k] += (double)(float)(1e-3 * (1.0 + 0.5 * sin(0.1 * k + 0.37 * m + 1.3 * r)));
        }
        CHECK_OK(fsdp_unit_post_backward(u));
    }
    /* bf16 accumulation: every rank's bf16 sums, reduced in fp32 */
    CHECK_OK(fsdp_comm_all_reduce(comm, bf_acc_f, bf_acc_f, N, FSDP_F32, FSDP_SUM));
    fsdp_shard_view sv;
    CHECK_OK(fsdp_unit_shard(u, &sv));
    double den = (double)g_world * MICRO, err32 = 0, err16 = 0;
    for (size_t k = 0; k < sv.numel; k++) {
        size_t gi = sv.offset + k;
        if (gi >= N) continue;
        double want = ref[gi] / den;
        double e32 = fabs(sv.grad[k] - want) / fabs(want), e16 = fabs(bf_acc_f[gi] / den - want) / fabs(want);
        err32 = e32 > err32 ? e32 : err32;
        err16 = e16 > err16 ? e16 : err16;
    }
    float errs[2] = {(float)err32, (float)err16};
    CHECK_OK(fsdp_comm_all_reduce(comm, errs, errs, 2, FSDP_F32, FSDP_MAX));
    if (g_rank == 0)
        printf(
            "precision: %d micro-batches x %d ranks of ~1e-3 fp32 gradients: max relative error vs float64: "
            "fp32 main_grad %.3g, bf16 accumulation %.3g\n",
            MICRO, g_world, (double)errs[0], (double)errs[1]);
    CHECKF(errs[0] < 2e-6, "fp32 accumulation error %g", (double)errs[0]);
    CHECK(errs[1] > 100 * errs[0]); /* the comparison means something: bf16 loses */
    free(ref);
    free(bf_acc_f);
done:
    fsdp_engine_free(e);
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);
    const fsdp_strategy strats[] = {FSDP_FULL_SHARD, FSDP_SHARD_GRAD_OP, FSDP_NO_SHARD};
    for (int s = 0; s < 3; s++)
        for (int eager = 0; eager < 2; eager++) {
            test_reduce_values(comm, strats[s], FSDP_F32, eager);
            test_reduce_values(comm, strats[s], FSDP_BF16, eager);
        }
    test_peaks(comm, FSDP_MAIN_GRAD_LAZY, FSDP_ACCUM_SHARDED);
    test_peaks(comm, FSDP_MAIN_GRAD_EAGER, FSDP_ACCUM_SHARDED);
    test_peaks(comm, FSDP_MAIN_GRAD_LAZY, FSDP_ACCUM_NO_SYNC);
    test_peaks(comm, FSDP_MAIN_GRAD_EAGER, FSDP_ACCUM_NO_SYNC);
    test_precision(comm);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
