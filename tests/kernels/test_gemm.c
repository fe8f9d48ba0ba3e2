/* test_gemm.c — oneDNN GEMMs against a float64 recomputation: forward (+bias), dinp, dweight into
 * main_grad with beta 0 (NaN-prefilled buffer fully overwritten) and beta 1 (added exactly once), dbias;
 * fp32, and bf16 parameters on every mixed path (native bf16, forced bf16-via-f32 fallback, f32-compute
 * with one and with many widened weight blocks); odd shapes; the primitive cache; the mixed-compute
 * choice (setting, FSDP_MIXED_COMPUTE, auto). FSDP_TEST_EXPECT_AUTO=<path name> additionally requires
 * auto to pick that path, FSDP_TEST_EXPECT_ISA=<isa> oneDNN to run that ISA without a bf16 matmul (the
 * ctest run under ONEDNN_MAX_CPU_ISA=AVX2 expects f32-compute and avx2). */
#include "kernels/kernels.h"

#include "kref.h"

/* Error bound for an fp32-accumulated dot product of length k (products exact or rounded once) plus
 * `extra` roundings of the final additions: (k + extra + 1) * 2^-24 * sum of |terms|. Worst case of
 * recursive summation (Higham, gamma_n); any blocking order oneDNN picks stays inside it. The bf16 path
 * multiplies bf16-rounded inputs: the products are exact in fp32, so the same bound holds against the
 * float64 product of the rounded inputs; the f32-compute path rounds each product once, which gamma_k
 * covers too (its reference uses the unrounded fp32 activations and the bf16 weights). A wrong index or
 * a double accumulation is off by O(|terms|). */
static double bound(int k, int extra, double abssum) { return (k + extra + 1) * 0x1p-24 * abssum + 1e-30; }

typedef struct {
    int M, K, N;
    fsdp_dtype pdt;
    float *X, *Xr; /* [M,K] input, and as the GEMM sees it (bf16-rounded on the bf16 paths) */
    float *W, *Wr; /* [N,K] fp32 values, and as seen (bf16-rounded) */
    uint16_t *Wb;  /* [N,K] bf16 bits (mixed) */
    float *bias, *biasr;
    uint16_t *biasb; /* [N] */
    float *dY, *dYr; /* [M,N] */
} gcase;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* ract: the path rounds the activation operands to bf16 (the bf16 paths, not f32-compute). */
static void case_init(gcase *c, fsdp_dtype pdt, int ract, int M, int K, int N) {
    c->M = M, c->K = K, c->N = N, c->pdt = pdt;
    size_t mk = (size_t)M * K, nk = (size_t)N * K, mn = (size_t)M * N;
    c->X = xmalloc(mk * 4), c->Xr = xmalloc(mk * 4);
    c->W = xmalloc(nk * 4), c->Wr = xmalloc(nk * 4), c->Wb = xmalloc(nk * 2);
    c->bias = xmalloc((size_t)N * 4), c->biasr = xmalloc((size_t)N * 4), c->biasb = xmalloc((size_t)N * 2);
    c->dY = xmalloc(mn * 4), c->dYr = xmalloc(mn * 4);
    kref_fill(c->X, mk, 1.0f);
    kref_fill(c->W, nk, 0.5f);
    kref_fill(c->bias, N, 0.3f);
    kref_fill(c->dY, mn, 1.0f);
    int r = pdt == FSDP_BF16;
    for (size_t i = 0; i < mk; i++)
        c->Xr[i] = ract ? kref_round_bf16(c->X[i]) : c->X[i];
    for (size_t i = 0; i < nk; i++)
        c->Wb[i] = kref_bf16(c->W[i]), c->Wr[i] = r ? kref_bf16_f(c->Wb[i]) : c->W[i];
    for (int i = 0; i < N; i++)
        c->biasb[i] = kref_bf16(c->bias[i]), c->biasr[i] = r ? kref_bf16_f(c->biasb[i]) : c->bias[i];
    for (size_t i = 0; i < mn; i++)
        c->dYr[i] = ract ? kref_round_bf16(c->dY[i]) : c->dY[i];
}

static void case_free(gcase *c) {
    free(c->X), free(c->Xr), free(c->W), free(c->Wr), free(c->Wb);
    free(c->bias), free(c->biasr), free(c->biasb), free(c->dY), free(c->dYr);
}

static const void *wparam(const gcase *c) { return c->pdt == FSDP_BF16 ? (const void *)c->Wb : c->W; }
static const void *bparam(const gcase *c) { return c->pdt == FSDP_BF16 ? (const void *)c->biasb : c->bias; }

/* Checks the forward with and without bias. */
static void check_forward(const gcase *c, const char *tag) {
    int M = c->M, K = c->K, N = c->N;
    size_t mn = (size_t)M * N;
    float *out = xmalloc(mn * 4), *out2 = xmalloc(mn * 4);
    double *ref = xmalloc(mn * 8), *tol = xmalloc(mn * 8);
    for (int wb = 0; wb < 2; wb++) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, a = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)c->Xr[(size_t)m * K + k] * c->Wr[(size_t)n * K + k];
                    s += p, a += fabs(p);
                }
                if (wb) s += c->biasr[n], a += fabs(c->biasr[n]);
                ref[(size_t)m * N + n] = s, tol[(size_t)m * N + n] = bound(K, 1, a);
            }
        kref_fill_nan(out, mn);
        CHECK_OK(fsdp_matmul_forward(out, c->X, wparam(c), wb ? bparam(c) : NULL, c->pdt, M, K, N));
        CHECKF(kref_check_bound("forward", out, ref, tol, mn) == 0, "%s M=%d K=%d N=%d bias=%d", tag, M, K, N,
               wb);
        /* Same call again: a primitive cache hit, bit-identical result. */
        fsdp_gemm_cache_stats s0, s1;
        fsdp_gemm_get_cache_stats(&s0);
        kref_fill_nan(out2, mn);
        CHECK_OK(fsdp_matmul_forward(out2, c->X, wparam(c), wb ? bparam(c) : NULL, c->pdt, M, K, N));
        fsdp_gemm_get_cache_stats(&s1);
        CHECKF(s1.hits > s0.hits && s1.misses == s0.misses, "%s: repeated shape must hit the cache", tag);
        CHECKF(memcmp(out, out2, mn * 4) == 0, "%s: cache hit changed the result", tag);
    }
    free(out), free(out2), free(ref), free(tol);
}

/* Checks dinp, dweight and dbias with accumulate 0 (NaN prefill) and 1 (random prefill, added once). */
static void check_backward(const gcase *c, const char *tag) {
    int M = c->M, K = c->K, N = c->N;
    size_t mk = (size_t)M * K, nk = (size_t)N * K;
    float *dX = xmalloc(mk * 4), *dW = xmalloc(nk * 4), *db = xmalloc((size_t)N * 4);
    float *pX = xmalloc(mk * 4), *pW = xmalloc(nk * 4), *pb = xmalloc((size_t)N * 4);
    float *dX0 = xmalloc(mk * 4), *dW0 = xmalloc(nk * 4), *one = xmalloc((mk > nk ? mk : nk) * 4);
    double *rX = xmalloc(mk * 8), *tX = xmalloc(mk * 8), *rW = xmalloc(nk * 8), *tW = xmalloc(nk * 8);
    double *rb = xmalloc((size_t)N * 8), *tb = xmalloc((size_t)N * 8);
    kref_fill(pX, mk, 2.0f), kref_fill(pW, nk, 2.0f), kref_fill(pb, N, 2.0f);

    for (int acc = 0; acc < 2; acc++) {
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                double s = acc ? pX[(size_t)m * K + k] : 0, a = fabs(s);
                for (int n = 0; n < N; n++) {
                    double p = (double)c->dYr[(size_t)m * N + n] * c->Wr[(size_t)n * K + k];
                    s += p, a += fabs(p);
                }
                rX[(size_t)m * K + k] = s, tX[(size_t)m * K + k] = bound(N, 1, a);
            }
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = acc ? pW[(size_t)n * K + k] : 0, a = fabs(s);
                for (int m = 0; m < M; m++) {
                    double p = (double)c->dYr[(size_t)m * N + n] * c->Xr[(size_t)m * K + k];
                    s += p, a += fabs(p);
                }
                rW[(size_t)n * K + k] = s, tW[(size_t)n * K + k] = bound(M, 1, a);
            }
        for (int n = 0; n < N; n++) {
            double s = acc ? pb[n] : 0, a = fabs(s);
            for (int m = 0; m < M; m++)
                s += c->dY[(size_t)m * N + n], a += fabs(c->dY[(size_t)m * N + n]);
            rb[n] = s, tb[n] = bound(M, 1, a);
        }
        if (acc) {
            memcpy(dX, pX, mk * 4), memcpy(dW, pW, nk * 4), memcpy(db, pb, (size_t)N * 4);
        } else {
            kref_fill_nan(dX, mk), kref_fill_nan(dW, nk), kref_fill_nan(db, N);
        }
        CHECK_OK(fsdp_matmul_backward(dX, acc, dW, acc, db, acc, c->dY, c->X, wparam(c), c->pdt, M, K, N));
        CHECKF(kref_check_bound("dinp", dX, rX, tX, mk) == 0, "%s M=%d K=%d N=%d acc=%d", tag, M, K, N, acc);
        CHECKF(kref_check_bound("dweight", dW, rW, tW, nk) == 0, "%s M=%d K=%d N=%d acc=%d", tag, M, K, N,
               acc);
        CHECKF(kref_check_bound("dbias", db, rb, tb, N) == 0, "%s M=%d K=%d N=%d acc=%d", tag, M, K, N, acc);
        if (!acc) memcpy(dX0, dX, mk * 4), memcpy(dW0, dW, nk * 4);
    }
    /* Each output alone (the others NULL) gives the same bits as the combined call. */
    kref_fill_nan(one, mk);
    CHECK_OK(fsdp_matmul_backward(one, 0, NULL, 0, NULL, 0, c->dY, NULL, wparam(c), c->pdt, M, K, N));
    CHECKF(memcmp(one, dX0, mk * 4) == 0, "%s: dinp alone differs from the combined call", tag);
    kref_fill_nan(one, nk);
    CHECK_OK(fsdp_matmul_backward(NULL, 0, one, 0, NULL, 0, c->dY, c->X, NULL, c->pdt, M, K, N));
    CHECKF(memcmp(one, dW0, nk * 4) == 0, "%s: dweight alone differs from the combined call", tag);
    free(dX), free(dW), free(db), free(pX), free(pW), free(pb), free(dX0), free(dW0), free(one);
    free(rX), free(tX), free(rW), free(tW), free(rb), free(tb);
}

static void run_shapes(fsdp_dtype pdt, int ract, const char *tag) {
    /* 1s, primes, one larger shape (blocked kernels, tails), and K > 1024: dinp's and dweight's f32
     * GEMMs then run in column blocks (gemm.c's GEMM_SPLIT_N; 2 blocks of 550, 4 of 577 with a
     * shorter last one) */
    static const int shapes[][3] = {{1, 1, 1},    {1, 7, 3},      {5, 1, 11},   {13, 17, 19},
                                    {37, 64, 29}, {96, 200, 131}, {9, 1100, 7}, {3, 2305, 5}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        gcase c;
        case_init(&c, pdt, ract, shapes[i][0], shapes[i][1], shapes[i][2]);
        check_forward(&c, tag);
        check_backward(&c, tag);
        case_free(&c);
    }
}

static fsdp_gemm_mixed_choice choice(void) {
    fsdp_gemm_mixed_choice c = {0};
    CHECK_OK(fsdp_gemm_mixed_choice_get(&c));
    return c;
}

/* The setting, the environment variable and auto. native: oneDNN has a bf16 matmul here. */
static void check_choice(int native) {
    fsdp_gemm_path bf16_path = native ? FSDP_GEMM_BF16 : FSDP_GEMM_BF16_VIA_F32;
    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_BF16));
    CHECK(fsdp_gemm_path_for(FSDP_BF16) == bf16_path && strcmp(choice().source, "the setting") == 0);
    CHECK_ERR(fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)9), FSDP_EINVAL, "9");

    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_AUTO));
    setenv("FSDP_MIXED_COMPUTE", "f32", 1);
    fsdp_gemm_mixed_choice c = choice();
    CHECK(c.path == FSDP_GEMM_F32_COMPUTE && c.setting == FSDP_MIXED_COMPUTE_F32);
    CHECK(strcmp(c.source, "FSDP_MIXED_COMPUTE") == 0 && c.probe_bf16_ms == 0);
    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_AUTO)); /* resolves again */
    setenv("FSDP_MIXED_COMPUTE", "bf16", 1);
    CHECK(choice().path == bf16_path);
    /* a setting other than auto wins over the variable */
    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_F32));
    CHECK(fsdp_gemm_path_for(FSDP_BF16) == FSDP_GEMM_F32_COMPUTE);

    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_AUTO));
    setenv("FSDP_MIXED_COMPUTE", "fp16", 1);
    fsdp_gemm_mixed_choice bad;
    CHECK_ERR(fsdp_gemm_mixed_choice_get(&bad), FSDP_EINVAL, "fp16");
    float x[4] = {1, 2, 3, 4}, y[4];
    fsdp_bf16 w[4] = {0};
    CHECK_ERR(fsdp_matmul_forward(y, x, w, NULL, FSDP_BF16, 2, 2, 2), FSDP_EINVAL, "FSDP_MIXED_COMPUTE");
    CHECK_OK(fsdp_matmul_forward(y, x, x, NULL, FSDP_F32, 2, 2, 2)); /* fp32 GEMMs are unaffected */

    unsetenv("FSDP_MIXED_COMPUTE");
    c = choice();
    fprintf(stderr, "auto: %s (%s; probe bf16 %.3f ms, f32-compute %.3f ms)\n", fsdp_gemm_path_name(c.path),
            c.source, c.probe_bf16_ms, c.probe_f32_ms);
    CHECK(c.setting == FSDP_MIXED_COMPUTE_AUTO);
    if (native)
        CHECK((c.path == FSDP_GEMM_BF16 || c.path == FSDP_GEMM_F32_COMPUTE) && c.probe_bf16_ms > 0 &&
              c.probe_f32_ms > 0 && strcmp(c.source, "a probe") == 0);
    else /* CPUs without a bf16 matmul always compute in f32, without a probe */
        CHECK(c.path == FSDP_GEMM_F32_COMPUTE && c.probe_bf16_ms == 0);
    const char *want = getenv("FSDP_TEST_EXPECT_AUTO");
    if (want)
        CHECKF(strcmp(fsdp_gemm_path_name(c.path), want) == 0, "auto chose %s, expected %s",
               fsdp_gemm_path_name(c.path), want);
}

int main(void) {
    kref_seed(42);
    unsetenv("FSDP_MIXED_COMPUTE"); /* this test sets it itself */
    CHECK_OK(fsdp_kernels_init());
    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_BF16));
    fsdp_gemm_path p = fsdp_gemm_path_for(FSDP_BF16);
    int native = p == FSDP_GEMM_BF16;
    fprintf(stderr, "oneDNN ISA %s; f32 impl %s; bf16 path %s, impl %s\n", fsdp_kernels_isa_name(),
            fsdp_gemm_impl_name(FSDP_F32), fsdp_gemm_path_name(p), fsdp_gemm_impl_name(FSDP_BF16));
    CHECK(fsdp_gemm_path_for(FSDP_F32) == FSDP_GEMM_F32);
    CHECK(strlen(fsdp_kernels_isa_name()) > 0);
    CHECK(p == FSDP_GEMM_BF16 || p == FSDP_GEMM_BF16_VIA_F32);
    const char *isa = getenv("FSDP_TEST_EXPECT_ISA"); /* the ISA cap took effect: no bf16 matmul */
    if (isa)
        CHECKF(strcmp(fsdp_kernels_isa_name(), isa) == 0 && !native, "ISA %s (expected %s), bf16 path %s",
               fsdp_kernels_isa_name(), isa, fsdp_gemm_path_name(p));

    run_shapes(FSDP_F32, 0, "f32");
    run_shapes(FSDP_BF16, 1, fsdp_gemm_path_name(p));

    /* The fallback must give the same math. */
    CHECK_OK(fsdp_gemm_force_bf16_fallback(1));
    CHECK(fsdp_gemm_path_for(FSDP_BF16) == FSDP_GEMM_BF16_VIA_F32);
    run_shapes(FSDP_BF16, 1, "bf16-via-f32");
    CHECK_OK(fsdp_gemm_force_bf16_fallback(0));
    CHECK(fsdp_gemm_path_for(FSDP_BF16) == p);

    /* f32-compute: unrounded activations against bf16 weights; the weight in one block, then in blocks
     * of 16 rows (a 1 KiB bound: 2-9 blocks per shape, the last one shorter), which splits dinp's sum
     * over blocks (the first block takes the accumulate flag, the rest add). */
    CHECK_OK(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_F32));
    CHECK(fsdp_gemm_path_for(FSDP_BF16) == FSDP_GEMM_F32_COMPUTE);
    CHECK(fsdp_gemm_widen_rows(200, 131) == 131 && fsdp_gemm_widen_rows(768, 50304) < 50304);
    CHECK(fsdp_gemm_widen_rows(768, 50304) * 768 * 4 <= (32 << 20) && fsdp_gemm_widen_rows(0, 5) == 0);
    run_shapes(FSDP_BF16, 0, "f32-compute");
    fsdp_gemm_set_widen_bytes(1024);
    CHECK(fsdp_gemm_widen_rows(200, 131) == 16 && fsdp_gemm_widen_rows(64, 29) == 16);
    CHECK(fsdp_gemm_widen_rows(64, 16) == 16 && fsdp_gemm_widen_rows(64, 17) == 16);
    run_shapes(FSDP_BF16, 0, "f32-compute, 16-row blocks");
    size_t wb, cb;
    fsdp_gemm_widen_workspace(5, 200, 131, &wb, &cb); /* 9 blocks of 16 rows */
    CHECK(wb == 16 * 200 * 4 && (cb == 0 || cb == 5 * 16 * 4));
    fsdp_gemm_widen_workspace(5, 8, 16, &wb, &cb); /* one block: no dense buffer */
    CHECK(wb == 16 * 8 * 4 && cb == 0);
    fsdp_gemm_set_widen_bytes(0);

    check_choice(native);

    /* Bad input: nothing computed, a message naming the problem. */
    float x[4] = {0}, w[4] = {0}, y[4] = {0};
    CHECK_ERR(fsdp_matmul_forward(y, x, w, NULL, FSDP_F32, 0, 2, 2), FSDP_EINVAL, "M=0");
    CHECK_ERR(fsdp_matmul_forward(y, x, w, NULL, FSDP_F32, 2, -1, 2), FSDP_EINVAL, "K=-1");
    CHECK_ERR(fsdp_matmul_forward(y, x, w, NULL, (fsdp_dtype)7, 2, 2, 1), FSDP_EINVAL, "dtype");
    CHECK_ERR(fsdp_matmul_forward(y, x, NULL, NULL, FSDP_F32, 2, 2, 1), FSDP_EINVAL, "weight");
    CHECK_ERR(fsdp_matmul_forward(x, x, w, NULL, FSDP_F32, 2, 2, 1), FSDP_EINVAL, "alias");
    CHECK_ERR(fsdp_matmul_backward(y, 0, NULL, 0, NULL, 0, y, x, w, FSDP_F32, 2, 2, 1), FSDP_EINVAL, "alias");
    CHECK_ERR(fsdp_matmul_backward(NULL, 0, y, 0, NULL, 0, y, NULL, w, FSDP_F32, 2, 2, 1), FSDP_EINVAL,
              "inp");

    fsdp_gemm_cache_stats st;
    CHECK_OK(fsdp_matmul_forward(y, x, w, NULL, FSDP_F32, 2, 2, 1));
    fsdp_gemm_get_cache_stats(&st);
    CHECK(st.entries > 0 && st.hits > 0);
    fsdp_kernels_shutdown();
    fsdp_gemm_get_cache_stats(&st);
    CHECK(st.entries == 0);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0 && fsdp_mem_current(FSDP_MEM_OTHER) == 0);
    return TEST_MAIN_END();
}
