/* test_attention.c — causal multi-head attention against float64: out, att and preatt recomputed in
 * double; dqkv against central finite differences of the double forward (L = sum out * dout). */
#include "kernels/kernels.h"

#include "kref.h"

/* Double forward; att may be NULL. */
static void att_ref(double *out, double *att, double *pre, const double *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double sc = 1.0 / sqrt((double)hs), s[64];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    s[t2] = 0;
                    for (int i = 0; i < hs; i++)
                        s[t2] += q[i] * k[i];
                    s[t2] *= sc;
                    mx = s[t2] > mx ? s[t2] : mx;
                }
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 < T; t2++) {
                    if (pre) pre[row + t2] = t2 <= t ? s[t2] : 0;
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
}

static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

static void run(int B, int T, int C, int NH, float qscale) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4), *att = malloc(na * 4),
          *pre = malloc(na * 4), *dqkv = malloc(nq * 4), *out2 = malloc(no * 4), *att2 = malloc(na * 4);
    double *qd = malloc(nq * 8), *od = malloc(no * 8), *ad = malloc(na * 8), *pd = malloc(na * 8),
           *ref = malloc(nq * 8);
    kref_fill(qkv, nq, qscale), kref_fill(dout, no, 1.0f);
    for (size_t i = 0; i < nq; i++)
        qd[i] = qkv[i];

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

    /* dqkv vs central differences of L = sum(out * dout), h = 1e-4 */
    const double h = 1e-4;
    for (size_t i = 0; i < nq; i++) {
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
    CHECKF(kref_check_close("dqkv", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0, "B=%d T=%d C=%d NH=%d",
           B, T, C, NH);
    free(qkv), free(out), free(dout), free(att), free(pre), free(dqkv), free(out2), free(att2);
    free(qd), free(od), free(ad), free(pd), free(ref);
}

int main(void) {
    /* every SIMD form this CPU has: generic, and the AVX-512 ones (omp simd clone, blocked) */
    const fsdp_simd paths[3] = {FSDP_SIMD_AUTO, FSDP_SIMD_AVX2, FSDP_SIMD_SCALAR};
    for (int p = 0; p < 3; p++) {
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        kref_seed(3);
        run(1, 1, 4, 1, 1.0f);  /* T = 1: att is 1, dq = dk = 0 */
        run(2, 5, 12, 3, 1.0f); /* hs = 4 */
        run(1, 7, 10, 2, 3.0f); /* hs = 5, peaked softmax */
        run(3, 4, 8, 1, 0.5f);  /* one head */
        /* head sizes that are multiples of 16 take the blocked AVX-512 form where the CPU has it; T
         * not a multiple of 16 exercises its partial blocks */
        run(2, 17, 32, 2, 2.0f); /* hs = 16 */
        run(1, 18, 64, 1, 1.0f); /* hs = 64, as GPT-2 */
    }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    float x[24] = {0}, y[8];
    CHECK_ERR(fsdp_attention_forward(y, NULL, y, x, 1, 1, 8, 3), FSDP_EINVAL, "multiple");
    CHECK_ERR(fsdp_attention_forward(y, NULL, y, x, 1, 0, 8, 2), FSDP_EINVAL, "T=0");
    CHECK_ERR(fsdp_attention_backward(x, y, x, NULL, 1, 1, 8, 2), FSDP_EINVAL, "att");
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0);
    return TEST_MAIN_END();
}
