/* test_attention_gqa.c — grouped-query, document-masked causal attention (attention_gqa.c) against a
 * float64 recomputation: out and the log-sum-exp from the masked softmax in double; dqkv (dq per query
 * head, dk and dv summed over each group) from the analytic double backward, and for small shapes
 * also from central differences of the double forward (L = sum out * dout). GQA ratios 1, 3 and 4, T
 * below, at and around the 64-row blocks, no documents, several contiguous ones, one-token ones and
 * ids that come back (not contiguous); on the scalar, AVX2 and automatic (AVX-512 where present) row
 * passes. The scratch the kernels allocate is exactly what the *_scratch_bytes functions say. */
#include "kernels/kernels.h"

#include "kref.h"

#include <omp.h>

typedef struct {
    int B, T, H, KV, hd;
} shape;

static size_t qkv_w(const shape *s) { return (size_t)(s->H + 2 * s->KV) * s->hd; }

/* Double forward: out [B,T,H hd], lse [B,H,T] (may be NULL). */
static void ref_fwd(double *out, double *lse, const double *qkv, const int32_t *doc, const shape *sh) {
    const int B = sh->B, T = sh->T, H = sh->H, KV = sh->KV, hd = sh->hd, G = H / KV;
    const size_t W = qkv_w(sh), A = (size_t)H * hd;
    const double sc = 1.0 / sqrt((double)hd);
    double *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / G;
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * W + (size_t)h * hd;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    s[u] = -INFINITY;
                    if (doc && doc[b * T + u] != doc[b * T + t]) continue;
                    const double *k = qkv + ((size_t)b * T + u) * W + A + (size_t)g * hd;
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += q[i] * k[i];
                    s[u] = d * sc;
                    mx = s[u] > mx ? s[u] : mx;
                }
                for (int u = 0; u <= t; u++)
                    sum += exp(s[u] - mx);
                if (lse) lse[((size_t)b * H + h) * T + t] = mx + log(sum);
                double *o = out + ((size_t)b * T + t) * A + (size_t)h * hd;
                for (int i = 0; i < hd; i++)
                    o[i] = 0;
                for (int u = 0; u <= t; u++) {
                    const double p = exp(s[u] - mx) / sum;
                    const double *v = qkv + ((size_t)b * T + u) * W + A + (size_t)(KV + g) * hd;
                    for (int i = 0; i < hd; i++)
                        o[i] += p * v[i];
                }
            }
        }
    free(s);
}

/* Analytic double backward of L = sum(out * dout) into dqkv [B,T,W] (zeroed here). */
static void ref_bwd(double *dqkv, const double *dout, const double *qkv, const int32_t *doc,
                    const shape *sh) {
    const int B = sh->B, T = sh->T, H = sh->H, KV = sh->KV, hd = sh->hd, G = H / KV;
    const size_t W = qkv_w(sh), A = (size_t)H * hd;
    const double sc = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * W * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / G;
            for (int t = 0; t < T; t++) {
                const size_t rt = ((size_t)b * T + t) * W;
                const double *q = qkv + rt + (size_t)h * hd,
                             *d = dout + ((size_t)b * T + t) * A + (size_t)h * hd;
                double mx = -INFINITY, sum = 0, ds = 0;
                for (int u = 0; u <= t; u++) {
                    p[u] = -INFINITY;
                    if (doc && doc[b * T + u] != doc[b * T + t]) continue;
                    const double *k = qkv + ((size_t)b * T + u) * W + A + (size_t)g * hd;
                    double x = 0;
                    for (int i = 0; i < hd; i++)
                        x += q[i] * k[i];
                    p[u] = x * sc;
                    mx = p[u] > mx ? p[u] : mx;
                }
                for (int u = 0; u <= t; u++)
                    sum += exp(p[u] - mx);
                for (int u = 0; u <= t; u++) {
                    p[u] = exp(p[u] - mx) / sum;
                    const size_t ru = ((size_t)b * T + u) * W;
                    const double *v = qkv + ru + A + (size_t)(KV + g) * hd;
                    double *dv = dqkv + ru + A + (size_t)(KV + g) * hd;
                    dp[u] = 0;
                    for (int i = 0; i < hd; i++) {
                        dp[u] += d[i] * v[i];
                        dv[i] += p[u] * d[i];
                    }
                    ds += p[u] * dp[u];
                }
                for (int u = 0; u <= t; u++) {
                    const double gr = p[u] * (dp[u] - ds) * sc;
                    const size_t ru = ((size_t)b * T + u) * W;
                    const double *k = qkv + ru + A + (size_t)g * hd;
                    double *dk = dqkv + ru + A + (size_t)g * hd, *dq = dqkv + rt + (size_t)h * hd;
                    for (int i = 0; i < hd; i++) {
                        dq[i] += gr * k[i];
                        dk[i] += gr * q[i];
                    }
                }
            }
        }
    free(p), free(dp);
}

static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

/* Document patterns: 0 none; 1 a few contiguous documents of uneven lengths; 2 one-token documents at
 * the start then longer ones; 3 ids that come back (0 1 0 2 1 ...: not contiguous). */
static void make_doc(int32_t *doc, int kind, const shape *s) {
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            int32_t *d = doc + (size_t)b * s->T + t;
            switch (kind) {
            case 1: *d = (t + 7 * b) / (11 + 13 * b) + 100 * b; break; /* lengths 11, 24 ... per row */
            case 2: *d = t < 5 ? t : 5 + (t - 5) / 37; break;
            default: *d = (int32_t)((t / 6) % 3 == 1 ? 7 : (t / 9) % 4); break;
            }
        }
}

static void run(shape sh, int dockind, float qscale, int fd) {
    const size_t W = qkv_w(&sh), N = (size_t)sh.B * sh.T, nq = N * W, no = N * (size_t)sh.H * sh.hd;
    const size_t nl = fsdp_attention_gqa_lse_floats(sh.B, sh.T, sh.H);
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4), *lse = malloc(nl * 4),
          *dqkv = malloc(nq * 4), *out2 = malloc(no * 4), *dqkv2 = malloc(nq * 4);
    double *qd = malloc(nq * 8), *od = malloc(no * 8), *ld = malloc(nl * 8), *ref = malloc(nq * 8),
           *dd = malloc(no * 8);
    int32_t *doc = dockind ? malloc(N * sizeof(int32_t)) : NULL;
    if (doc) make_doc(doc, dockind, &sh);
    kref_fill(qkv, nq, qscale), kref_fill(dout, no, 1.0f);
    for (size_t i = 0; i < nq; i++)
        qd[i] = qkv[i];
    for (size_t i = 0; i < no; i++)
        dd[i] = dout[i];
    char what[128];
    snprintf(what, sizeof what, "B=%d T=%d H=%d KV=%d hd=%d doc=%d simd=%s threads=%d", sh.B, sh.T, sh.H,
             sh.KV, sh.hd, dockind, fsdp_simd_name(fsdp_simd_active()), omp_get_max_threads());

    const int nthr = omp_get_max_threads();
    kref_fill_nan(out, no), kref_fill_nan(lse, nl);
    fsdp_mem_reset_peaks();
    CHECK_OK(fsdp_attention_gqa_forward(out, lse, qkv, doc, sh.B, sh.T, sh.H, sh.KV, sh.hd));
    CHECKF(fsdp_mem_peak(FSDP_MEM_ACTIVATION) == fsdp_attention_gqa_forward_scratch_bytes(sh.T, sh.hd, nthr),
           "%s: forward scratch %zu, predicted %zu", what, fsdp_mem_peak(FSDP_MEM_ACTIVATION),
           fsdp_attention_gqa_forward_scratch_bytes(sh.T, sh.hd, nthr));
    ref_fwd(od, ld, qd, doc, &sh);
    CHECKF(kref_check_close("out", out, od, no, 1e-5, 1e-6 * maxabs(od, no)) == 0, "%s", what);
    CHECKF(kref_check_close("lse", lse, ld, nl, 1e-6, 1e-6) == 0, "%s", what);
    /* a second call gives the same bits */
    CHECK_OK(fsdp_attention_gqa_forward(out2, lse, qkv, doc, sh.B, sh.T, sh.H, sh.KV, sh.hd));
    CHECKF(memcmp(out, out2, no * 4) == 0, "%s: forward not deterministic", what);

    kref_fill_nan(dqkv, nq);
    fsdp_mem_reset_peaks();
    CHECK_OK(fsdp_attention_gqa_backward(dqkv, dout, qkv, lse, doc, sh.B, sh.T, sh.H, sh.KV, sh.hd));
    CHECKF(fsdp_mem_peak(FSDP_MEM_ACTIVATION) ==
               fsdp_attention_gqa_backward_scratch_bytes(sh.B, sh.T, sh.KV, sh.hd, nthr),
           "%s: backward scratch %zu, predicted %zu", what, fsdp_mem_peak(FSDP_MEM_ACTIVATION),
           fsdp_attention_gqa_backward_scratch_bytes(sh.B, sh.T, sh.KV, sh.hd, nthr));
    ref_bwd(ref, dd, qd, doc, &sh);
    CHECKF(kref_check_close("dqkv (analytic)", dqkv, ref, nq, 1e-5, 2e-6 * maxabs(ref, nq)) == 0, "%s", what);
    kref_fill_nan(dqkv2, nq);
    CHECK_OK(fsdp_attention_gqa_backward(dqkv2, dout, qkv, lse, doc, sh.B, sh.T, sh.H, sh.KV, sh.hd));
    CHECKF(memcmp(dqkv, dqkv2, nq * 4) == 0, "%s: backward not deterministic", what);
    if (fd) { /* central differences of L = sum(out * dout), h = 1e-4 */
        const double h = 1e-4;
        for (size_t i = 0; i < nq; i++) {
            double s0 = qd[i], lp = 0, lm = 0;
            qd[i] = s0 + h;
            ref_fwd(od, NULL, qd, doc, &sh);
            for (size_t j = 0; j < no; j++)
                lp += od[j] * dd[j];
            qd[i] = s0 - h;
            ref_fwd(od, NULL, qd, doc, &sh);
            for (size_t j = 0; j < no; j++)
                lm += od[j] * dd[j];
            qd[i] = s0;
            ref[i] = (lp - lm) / (2 * h);
        }
        CHECKF(kref_check_close("dqkv (differences)", dqkv, ref, nq, 1e-4, 1e-5 * maxabs(ref, nq)) == 0, "%s",
               what);
    }
    /* with documents: every document alone (B = 1, its tokens only) gives the same out rows */
    if (doc && sh.B == 1 && dockind != 3) {
        int bad = 0;
        for (int t0 = 0; t0 < sh.T;) {
            int t1 = t0 + 1;
            while (t1 < sh.T && doc[t1] == doc[t0])
                t1++;
            shape one = sh;
            one.T = t1 - t0;
            double *o1 = malloc((size_t)one.T * sh.H * sh.hd * 8);
            ref_fwd(o1, NULL, qd + (size_t)t0 * W, NULL, &one);
            const size_t A = (size_t)sh.H * sh.hd;
            bad += kref_check_close("out (document alone)", out + (size_t)t0 * A, o1, (size_t)one.T * A, 1e-5,
                                    1e-6 * maxabs(od, no));
            free(o1);
            t0 = t1;
        }
        CHECKF(bad == 0, "%s", what);
    }
    free(qkv), free(out), free(dout), free(lse), free(dqkv), free(out2), free(dqkv2);
    free(qd), free(od), free(ld), free(ref), free(dd), free(doc);
}

int main(void) {
    /* 1, 2 and 3 threads: the backward's by-pair and by-block schedules (bwd_by_pair) both run */
    const fsdp_simd paths[3] = {FSDP_SIMD_AUTO, FSDP_SIMD_AVX2, FSDP_SIMD_SCALAR};
    for (int p = 0; p < 3 * 3; p++) {
        omp_set_num_threads(1 + p / 3);
        if (fsdp_simd_force(paths[p % 3]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        kref_seed(11);
        /* small shapes with finite differences: ratios 1, 3, 4 */
        run((shape){1, 1, 2, 2, 4}, 0, 1.0f, 1);
        run((shape){2, 9, 3, 3, 4}, 1, 1.0f, 1);
        run((shape){1, 11, 3, 1, 6}, 3, 2.0f, 1);
        run((shape){2, 8, 4, 1, 8}, 2, 1.0f, 1);
        /* around the 64-row blocks; SmolLM2's 9 / 3 heads of 64 */
        for (int dk = 0; dk < 4; dk++) {
            run((shape){1, 131, 9, 3, 64}, dk, 1.0f, 0);
            run((shape){2, 97, 8, 2, 32}, dk, 1.5f, 0);
            run((shape){2, 64, 4, 4, 16}, dk, 1.0f, 0);
            run((shape){1, 65, 6, 2, 24}, dk, 0.5f, 0);
        }
    }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    /* the schedule rule: 3 pairs on 2 threads leave one idle in the last round (partials), 4 do not */
    CHECK(fsdp_attention_gqa_backward_scratch_bytes(1, 100, 3, 8, 2) == 2 * (2 * 64 * 100 + 2 * 100 * 8) * 4);
    CHECK(fsdp_attention_gqa_backward_scratch_bytes(2, 100, 2, 8, 2) == 2 * (2 * 64 * 100) * 4);
    float x[64] = {0}, y[16];
    CHECK_ERR(fsdp_attention_gqa_forward(y, y, x, NULL, 1, 1, 3, 2, 4), FSDP_EINVAL, "multiple");
    CHECK_ERR(fsdp_attention_gqa_forward(y, y, x, NULL, 1, 0, 2, 2, 4), FSDP_EINVAL, "T=0");
    CHECK_ERR(fsdp_attention_gqa_forward(y, NULL, x, NULL, 1, 1, 2, 2, 4), FSDP_EINVAL, "lse");
    CHECK_ERR(fsdp_attention_gqa_backward(x, y, x, NULL, NULL, 1, 1, 2, 2, 4), FSDP_EINVAL, "lse");
    CHECK(fsdp_attention_gqa_forward_scratch_bytes(0, 4, 1) == 0);
    CHECK(fsdp_attention_gqa_lse_floats(2, 3, 4) == 24);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0);
    return TEST_MAIN_END();
}
