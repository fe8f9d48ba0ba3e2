/* test_attention.c — causal multi-head attention against float64, for each implementation (per-row
 * kernels on every SIMD path, and the sgemm form): out, att and preatt recomputed in double; dqkv
 * against the analytic double backward, and for small shapes also against central finite differences
 * of the double forward (L = sum out * dout). */
#include "kernels/kernels.h"

#include "kref.h"

/* Double forward; att may be NULL. doc int32 [B,T] or NULL: keys of another document are left out. */
static void att_ref_doc(double *out, double *att, double *pre, const double *qkv, const int32_t *doc, int B,
                        int T, int C, int NH) {
    int hs = C / NH;
    double sc = 1.0 / sqrt((double)hs), *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    if (doc && doc[b * T + t2] != doc[b * T + t]) {
                        s[t2] = -INFINITY;
                        continue;
                    }
                    s[t2] = 0;
                    for (int i = 0; i < hs; i++)
                        s[t2] += q[i] * k[i];
                    s[t2] *= sc;
                    mx = s[t2] > mx ? s[t2] : mx;
                }
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 < T; t2++) {
                    if (pre) pre[row + t2] = t2 <= t ? s[t2] : 0; /* -inf where masked */
                    if (att) att[row + t2] = 0;
                }
                for (int t2 = 0; t2 <= t; t2++)
                    sum += exp(s[t2] - mx);
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    double p = exp(s[t2] - mx) / sum;
                    if (att) att[row + t2] = p;
                    const double *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += p * v[i];
                }
            }
    free(s);
}

static void att_ref(double *out, double *att, double *pre, const double *qkv, int B, int T, int C, int NH) {
    att_ref_doc(out, att, pre, qkv, NULL, B, T, C, NH);
}

/* Analytic double backward of L = sum(out * dout), given the double probabilities att. */
static void att_bwd_ref(double *dqkv, const double *dout, const double *qkv, const double *att, int B, int T,
                        int C, int NH) {
    int hs = C / NH;
    double sc = 1.0 / sqrt((double)hs), *dp = malloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *a = att + (((size_t)b * NH + h) * T + t) * T,
                             *d = dout + ((size_t)b * T + t) * C + h * hs;
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs, ds = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    double *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    dp[t2] = 0;
                    for (int i = 0; i < hs; i++) {
                        dp[t2] += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    ds += a[t2] * dp[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    double g = a[t2] * (dp[t2] - ds) * sc;
                    const double *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += g * k[i];
                        dk[i] += g * q[i];
                    }
                }
            }
    free(dp);
}

static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

static fsdp_att_impl g_impl; /* the implementation main forces for run() */

/* fd: also check dqkv against finite differences (costs B*T*3C double forwards). */
static void run(int B, int T, int C, int NH, float qscale, int fd) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4), *att = malloc(na * 4),
          *pre = malloc(na * 4), *dqkv = malloc(nq * 4), *out2 = malloc(no * 4), *att2 = malloc(na * 4);
    double *qd = malloc(nq * 8), *od = malloc(no * 8), *ad = malloc(na * 8), *pd = malloc(na * 8),
           *ref = malloc(nq * 8), *dd = malloc(no * 8);
    kref_fill(qkv, nq, qscale), kref_fill(dout, no, 1.0f);
    for (size_t i = 0; i < nq; i++)
        qd[i] = qkv[i];
    for (size_t i = 0; i < no; i++)
        dd[i] = dout[i];

    kref_fill_nan(out, no), kref_fill_nan(att, na), kref_fill_nan(pre, na);
    CHECK_OK(fsdp_attention_forward(out, pre, att, qkv, B, T, C, NH));
    att_ref(od, ad, pd, qd, B, T, C, NH);
    CHECKF(kref_check_close("att out", out, od, no, 1e-5, 1e-6 * maxabs(od, no)) == 0, "B=%d T=%d C=%d NH=%d",
           B, T, C, NH);
    CHECKF(kref_check_close("att probs", att, ad, na, 1e-5, 1e-7) == 0, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    CHECKF(kref_check_close("preatt", pre, pd, na, 1e-5, 1e-6 * maxabs(pd, na)) == 0, "B=%d T=%d C=%d NH=%d",
           B, T, C, NH);
    /* masked entries exactly 0 */
    int bad = 0;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int t2 = t + 1; t2 < T; t2++)
                bad += att[((size_t)bh * T + t) * T + t2] != 0.0f;
    CHECK(bad == 0);
    /* preatt NULL: same out and att */
    CHECK_OK(fsdp_attention_forward(out2, NULL, att2, qkv, B, T, C, NH));
    CHECK(memcmp(out, out2, no * 4) == 0 && memcmp(att, att2, na * 4) == 0);

    kref_fill_nan(dqkv, nq);
    CHECK_OK(fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH));
    att_bwd_ref(ref, dd, qd, ad, B, T, C, NH);
    CHECKF(kref_check_close("dqkv (analytic)", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0,
           "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    /* the other implementation's backward from this forward's probabilities */
    CHECK_OK(fsdp_attention_force_impl(g_impl == FSDP_ATT_GEMM ? FSDP_ATT_BLOCKED : FSDP_ATT_GEMM));
    kref_fill_nan(dqkv, nq);
    CHECK_OK(fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH));
    CHECK_OK(fsdp_attention_force_impl(g_impl));
    CHECKF(kref_check_close("dqkv (other backward)", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0,
           "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    /* dqkv vs central differences of L = sum(out * dout), h = 1e-4 */
    const double h = 1e-4;
    for (size_t i = 0; fd && i < nq; i++) {
        double s = qd[i], lp = 0, lm = 0;
        qd[i] = s + h;
        att_ref(od, NULL, NULL, qd, B, T, C, NH);
        for (size_t j = 0; j < no; j++)
            lp += od[j] * dout[j];
        qd[i] = s - h;
        att_ref(od, NULL, NULL, qd, B, T, C, NH);
        for (size_t j = 0; j < no; j++)
            lm += od[j] * dout[j];
        qd[i] = s;
        ref[i] = (lp - lm) / (2 * h);
    }
    kref_fill_nan(dqkv, nq);
    CHECK_OK(fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH));
    if (fd)
        CHECKF(kref_check_close("dqkv (differences)", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0,
               "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    free(qkv), free(out), free(dout), free(att), free(pre), free(dqkv), free(out2), free(att2);
    free(qd), free(od), free(ad), free(pd), free(ref), free(dd);
}

/* Document ids (fsdp_attention_forward_doc): documents of uneven lengths per row, one-token ones and
 * ids that come back; out, att, preatt against the masked double forward, masked probabilities exactly
 * 0, the backward (which reads only att) against the analytic double backward; ids all equal give the
 * bits of the plain forward, and NULL ids are the plain forward. */
static void run_doc(int B, int T, int C, int NH, int kind) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4), *att = malloc(na * 4),
          *pre = malloc(na * 4), *dqkv = malloc(nq * 4), *out2 = malloc(no * 4), *att2 = malloc(na * 4);
    double *qd = malloc(nq * 8), *od = malloc(no * 8), *ad = malloc(na * 8), *pd = malloc(na * 8),
           *ref = malloc(nq * 8), *dd = malloc(no * 8);
    int32_t *doc = malloc((size_t)B * T * sizeof(int32_t)), *same = malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t *d = doc + (size_t)b * T + t;
            *d = kind == 0 ? (t + 3 * b) / (5 + 4 * b) : kind == 1 ? (t < 3 ? t : 3 + t / 17) : (t / 4) % 3;
            same[(size_t)b * T + t] = 42;
        }
    kref_fill(qkv, nq, 1.0f), kref_fill(dout, no, 1.0f);
    for (size_t i = 0; i < nq; i++)
        qd[i] = qkv[i];
    for (size_t i = 0; i < no; i++)
        dd[i] = dout[i];
    kref_fill_nan(out, no), kref_fill_nan(att, na), kref_fill_nan(pre, na);
    CHECK_OK(fsdp_attention_forward_doc(out, pre, att, qkv, doc, B, T, C, NH));
    att_ref_doc(od, ad, pd, qd, doc, B, T, C, NH);
    CHECKF(kref_check_close("doc out", out, od, no, 1e-5, 1e-6 * maxabs(od, no)) == 0, "B=%d T=%d kind %d", B,
           T, kind);
    CHECKF(kref_check_close("doc probs", att, ad, na, 1e-5, 1e-7) == 0, "B=%d T=%d kind %d", B, T, kind);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int t2 = 0; t2 < T; t2++) {
                    const size_t i = (((size_t)b * NH + h) * T + t) * T + t2;
                    const int masked = t2 > t || doc[b * T + t2] != doc[b * T + t];
                    if (masked) bad += att[i] != 0.0f;
                    if (t2 <= t && masked) bad += !(isinf(pre[i]) && pre[i] < 0);
                    if (!masked) bad += fabs(pre[i] - pd[i]) > 1e-5 * (1 + fabs(pd[i]));
                }
    CHECKF(bad == 0, "B=%d T=%d kind %d: %d masked or preatt entries wrong", B, T, kind, bad);
    kref_fill_nan(dqkv, nq);
    CHECK_OK(fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH));
    att_bwd_ref(ref, dd, qd, ad, B, T, C, NH);
    CHECKF(kref_check_close("doc dqkv", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0,
           "B=%d T=%d kind %d", B, T, kind);
    /* one document everywhere, or no ids: the plain forward's bits */
    CHECK_OK(fsdp_attention_forward(out, pre, att, qkv, B, T, C, NH));
    CHECK_OK(fsdp_attention_forward_doc(out2, NULL, att2, qkv, same, B, T, C, NH));
    CHECK(memcmp(out, out2, no * 4) == 0 && memcmp(att, att2, na * 4) == 0);
    CHECK_OK(fsdp_attention_forward_doc(out2, NULL, att2, qkv, NULL, B, T, C, NH));
    CHECK(memcmp(out, out2, no * 4) == 0 && memcmp(att, att2, na * 4) == 0);
    free(qkv), free(out), free(dout), free(att), free(pre), free(dqkv), free(out2), free(att2);
    free(qd), free(od), free(ad), free(pd), free(ref), free(dd), free(doc), free(same);
}

/* The small shapes, with finite differences. */
static void run_small(void) {
    run(1, 1, 4, 1, 1.0f, 1);  /* T = 1: att is 1, dq = dk = 0 */
    run(2, 5, 12, 3, 1.0f, 1); /* hs = 4 */
    run(1, 7, 10, 2, 3.0f, 1); /* hs = 5, peaked softmax */
    run(3, 4, 8, 1, 0.5f, 1);  /* one head */
    /* head sizes that are multiples of 16 take the blocked AVX-512 form where the CPU has it; T
     * not a multiple of 16 exercises its partial blocks */
    run(2, 17, 32, 2, 2.0f, 1); /* hs = 16 */
    run(1, 18, 64, 1, 1.0f, 1); /* hs = 64, as GPT-2 */
}

int main(void) {
    /* both implementations on every SIMD form this CPU has: generic, and the AVX-512 ones (per-row:
     * omp simd clone and blocked; sgemm form: its dS pass) */
    const fsdp_att_impl impls[2] = {FSDP_ATT_BLOCKED, FSDP_ATT_GEMM};
    const fsdp_simd paths[3] = {FSDP_SIMD_AUTO, FSDP_SIMD_AVX2, FSDP_SIMD_SCALAR};
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 3; p++) {
            CHECK_OK(fsdp_attention_force_impl(g_impl = impls[k]));
            if (fsdp_simd_force(paths[p]) != FSDP_OK) {
                fsdp_clear_error();
                continue;
            }
            kref_seed(3);
            run_small();
            run(1, 130, 128, 2, 1.0f, 0); /* three 64-row blocks in the sgemm form, the last of 2 rows */
            for (int kind = 0; kind < 3; kind++) {
                run_doc(2, 23, 24, 2, kind); /* hs 12 */
                run_doc(1, 70, 64, 1, kind); /* hs 64: the blocked AVX-512 form; two sgemm blocks */
            }
        }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    /* the sgemm form at T around its 64-row blocks: one partial block, exactly one, one and a row */
    CHECK_OK(fsdp_attention_force_impl(g_impl = FSDP_ATT_GEMM));
    run(2, 63, 64, 2, 1.0f, 0);
    run(1, 64, 64, 1, 2.0f, 0);
    run(1, 65, 96, 3, 1.0f, 0);
    /* AUTO picks by T */
    CHECK_OK(fsdp_attention_force_impl(FSDP_ATT_AUTO));
    CHECK(fsdp_attention_impl_for(FSDP_ATT_GEMM_MIN_T - 1, 64) == FSDP_ATT_BLOCKED);
    CHECK(fsdp_attention_impl_for(FSDP_ATT_GEMM_MIN_T, 64) == FSDP_ATT_GEMM);
    CHECK(strcmp(fsdp_attention_impl_name(FSDP_ATT_GEMM), "gemm") == 0);
    CHECK_ERR(fsdp_attention_force_impl((fsdp_att_impl)7), FSDP_EINVAL, "AUTO");
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    float x[24] = {0}, y[8];
    CHECK_ERR(fsdp_attention_forward(y, NULL, y, x, 1, 1, 8, 3), FSDP_EINVAL, "multiple");
    CHECK_ERR(fsdp_attention_forward(y, NULL, y, x, 1, 0, 8, 2), FSDP_EINVAL, "T=0");
    CHECK_ERR(fsdp_attention_backward(x, y, x, NULL, 1, 1, 8, 2), FSDP_EINVAL, "att");
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0);
    return TEST_MAIN_END();
}
