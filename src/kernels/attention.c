/* attention.c — causal multi-head self-attention from packed qkv [B,T,3C] to out [B,T,C], as llm.c's
 * attention_forward/backward: scores q·k/sqrt(hs), row-max-subtracted softmax (probabilities saved for
 * backward), weighted sum of v; the backward uses the O(T) softmax gradient. Two implementations:
 * per-row C + OpenMP kernels (dot products as `omp simd` reductions, a blocked AVX-512 form), and for
 * long sequences the same math as oneDNN sgemm calls over the causal lower triangle in row blocks
 * (fsdp_attention_impl_for picks by T). The softmax's exp goes through vmath.c in both. */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <string.h>

static fsdp_status check_att(int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
        return fsdp_set_error(FSDP_EINVAL, "attention: dims must be positive, got B=%d T=%d C=%d NH=%d", B, T,
                              C, NH);
    if (C % NH != 0)
        return fsdp_set_error(FSDP_EINVAL, "attention: C=%d is not a multiple of the head count NH=%d", C,
                              NH);
    return FSDP_OK;
}

/* Document mask of the scores a[0..t] of query t (drow: its batch row's ids): keys of another document
 * become -inf, so the softmax gives them exactly 0 (the backward, reading the probabilities, needs no
 * mask). Only called with document ids: without them no row is touched. */
static inline __attribute__((always_inline)) void att_mask_row(float *a, const int32_t *drow, int t) {
    const int32_t d = drow[t];
    for (int t2 = 0; t2 < t; t2++)
        if (drow[t2] != d) a[t2] = -INFINITY;
}

/* The work of one query row (b, t, h) of the forward: scores, softmax into att, weighted sum of v.
 * always_inline: instantiated in the generic and the AVX-512 drivers below, so its `omp simd` loops
 * are compiled for each ISA. Different ISAs sum the head dot products in different orders (and the
 * AVX-512 form fuses multiply-adds): results agree to rounding, each is deterministic. */
static inline __attribute__((always_inline)) void att_fwd_row(float *out, float *preatt, float *att,
                                                              const float *qkv, const int32_t *doc, int b,
                                                              int t, int h, int T, int C, int NH, int hs,
                                                              float scale) {
    const size_t C3 = (size_t)3 * C;
    const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
    size_t row = (((size_t)b * NH + h) * T + t) * T;
    float *a = att + row;
    /* scores into the att row (t2 <= t), tracking the max */
    float mx = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < hs; i++)
            s += q[i] * k[i];
        s *= scale;
        if (doc && doc[(size_t)b * T + t2] != doc[(size_t)b * T + t]) s = -INFINITY;
        a[t2] = s;
        if (s > mx) mx = s;
    }
    if (preatt) {
        memcpy(preatt + row, a, (size_t)(t + 1) * sizeof(float));
        memset(preatt + row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
    }
    double sum = fsdp_vexp_shift_sum(a, a, (size_t)t + 1, mx);
    float inv = (float)(1.0 / sum);
    for (int t2 = 0; t2 <= t; t2++)
        a[t2] *= inv;
    memset(a + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
    float *restrict o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
    for (int i = 0; i < hs; i++)
        o[i] = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *restrict v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
        float w = a[t2];
#pragma omp simd
        for (int i = 0; i < hs; i++)
            o[i] += w * v[i];
    }
}

/* The backward of one (b, h): it owns the channels [h*hs, (h+1)*hs) of q, k and v for batch row b,
 * so (b, h) pairs run in parallel without races. dp: T floats of scratch. */
static inline __attribute__((always_inline)) void att_bwd_head(float *dqkv, const float *dout,
                                                               const float *qkv, const float *att, float *dp,
                                                               int b, int h, int T, int C, int NH, int hs,
                                                               float scale) {
    const size_t C3 = (size_t)3 * C;
    for (int t = 0; t < T; t++) {
        float *g = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        for (int i = 0; i < hs; i++)
            g[i] = g[C + i] = g[2 * C + i] = 0.0f;
    }
    for (int t = 0; t < T; t++) {
        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
        const float *restrict d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        const float *restrict q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        float *restrict dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        /* datt[t2] = d · v[t2];  dv[t2] += att[t2] * d;  ds = sum att * datt */
        double dsum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            const float *restrict v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
            float *restrict dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
            float s = 0.0f, w = a[t2];
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < hs; i++) {
                s += d[i] * v[i];
                dv[i] += w * d[i];
            }
            dp[t2] = s;
            dsum += (double)a[t2] * s;
        }
        float ds = (float)dsum;
        /* dpreatt = att * (datt - ds); scores were q·k*scale */
        for (int t2 = 0; t2 <= t; t2++) {
            float gp = a[t2] * (dp[t2] - ds) * scale;
            const float *restrict k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
            float *restrict dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
#pragma omp simd
            for (int i = 0; i < hs; i++) {
                dq[i] += gp * k[i];
                dk[i] += gp * q[i];
            }
        }
    }
}

static void att_fwd_generic(float *out, float *preatt, float *att, const float *qkv, const int32_t *doc,
                            int B, int T, int C, int NH, int hs, float scale) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                att_fwd_row(out, preatt, att, qkv, doc, b, t, h, T, C, NH, hs, scale);
}

static void att_bwd_generic(float *dqkv, const float *dout, const float *qkv, const float *att,
                            float *scratch, int nthr, int B, int T, int C, int NH, int hs, float scale) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            att_bwd_head(dqkv, dout, qkv, att, scratch + (size_t)omp_get_thread_num() * T, b, h, T, C, NH, hs,
                         scale);
}

#if defined(__x86_64__) || defined(__i386__)
#define ATT_X86 1
/* 512-bit vectors (GCC's generic tuning would otherwise prefer 256-bit ones). */
#define T512 FSDP_TARGET_AVX512

T512 static void att_fwd_avx512(float *out, float *preatt, float *att, const float *qkv, const int32_t *doc,
                                int B, int T, int C, int NH, int hs, float scale) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                att_fwd_row(out, preatt, att, qkv, doc, b, t, h, T, C, NH, hs, scale);
}

T512 static void att_bwd_avx512(float *dqkv, const float *dout, const float *qkv, const float *att,
                                float *scratch, int nthr, int B, int T, int C, int NH, int hs, float scale) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            att_bwd_head(dqkv, dout, qkv, att, scratch + (size_t)omp_get_thread_num() * T, b, h, T, C, NH, hs,
                         scale);
}

/* Blocked AVX-512 forms for head sizes that are a multiple of 16 (GPT-2: 64). Per (b, h), K (forward)
 * or V (backward) is transposed into scratch kt[hs][Tp] (Tp = T rounded up to 16, padding zero), so
 * 16 scores q·k[t2..t2+15] are one chain of hs fmas with broadcast q[i], no horizontal sums; the
 * weighted sums over t2 keep the hs/16 output vectors in registers. NC = hs / 16 is a compile-time
 * constant for hs = 64 (the call sites below), a run-time one otherwise. */
#define ATT_MAXNC 16 /* hs <= 256 */

T512 static inline __attribute__((always_inline)) void att_transpose(float *kt, const float *src, size_t C3,
                                                                     int T, int Tp, int hs) {
    for (int i = 0; i < hs; i++) {
        float *r = kt + (size_t)i * Tp;
        for (int t2 = 0; t2 < T; t2++)
            r[t2] = src[(size_t)t2 * C3 + i];
        for (int t2 = T; t2 < Tp; t2++)
            r[t2] = 0.0f;
    }
}

/* dst[j] = sum_i x[i] * kt[i][j] for j in [0, n) (n <= Tp; lanes beyond n are not stored). */
T512 static inline __attribute__((always_inline)) void
att_rowdots(float *dst, const float *x, const float *kt, int Tp, int n, int hs, float mul) {
    for (int jb = 0; jb < n; jb += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < hs; i++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(x[i]), _mm512_loadu_ps(kt + (size_t)i * Tp + jb), acc);
        acc = _mm512_mul_ps(acc, _mm512_set1_ps(mul));
        int left = n - jb;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        _mm512_mask_storeu_ps(dst + jb, m, acc);
    }
}

T512 static inline __attribute__((always_inline)) void
att_fwd_head_blk(float *out, float *preatt, float *att, const float *qkv, const int32_t *doc, float *kt,
                 int b, int h, int T, int C, int NH, int hs, const int NC, float scale) {
    const size_t C3 = (size_t)3 * C;
    const int Tp = (T + 15) & ~15;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    att_transpose(kt, base + C, C3, T, Tp, hs);
    for (int t = 0; t < T; t++) {
        const float *q = base + (size_t)t * C3;
        size_t row = (((size_t)b * NH + h) * T + t) * T;
        float *a = att + row;
        att_rowdots(a, q, kt, Tp, t + 1, hs, scale);
        if (doc) att_mask_row(a, doc + (size_t)b * T, t);
        float mx = fsdp_vmax(a, (size_t)t + 1);
        if (preatt) {
            memcpy(preatt + row, a, (size_t)(t + 1) * sizeof(float));
            memset(preatt + row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
        }
        double sum = fsdp_vexp_shift_sum(a, a, (size_t)t + 1, mx);
        float inv = (float)(1.0 / sum);
        for (int t2 = 0; t2 <= t; t2++)
            a[t2] *= inv;
        memset(a + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
        __m512 o[ATT_MAXNC];
        for (int c = 0; c < NC; c++)
            o[c] = _mm512_setzero_ps();
        for (int t2 = 0; t2 <= t; t2++) {
            const float *v = base + (size_t)t2 * C3 + 2 * (size_t)C;
            __m512 w = _mm512_set1_ps(a[t2]);
            for (int c = 0; c < NC; c++)
                o[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16 * c), o[c]);
        }
        float *op = out + ((size_t)b * T + t) * C + (size_t)h * hs;
        for (int c = 0; c < NC; c++)
            _mm512_storeu_ps(op + 16 * c, o[c]);
    }
}

T512 static inline __attribute__((always_inline)) void
att_bwd_head_blk(float *dqkv, const float *dout, const float *qkv, const float *att, float *vt, float *dp,
                 int b, int h, int T, int C, int NH, int hs, const int NC, float scale) {
    const size_t C3 = (size_t)3 * C;
    const int Tp = (T + 15) & ~15;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    float *gbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
    for (int t = 0; t < T; t++) {
        float *g = gbase + (size_t)t * C3;
        for (int i = 0; i < hs; i++)
            g[i] = g[C + i] = g[2 * C + i] = 0.0f;
    }
    att_transpose(vt, base + 2 * (size_t)C, C3, T, Tp, hs);
    for (int t = 0; t < T; t++) {
        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
        const float *d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        const float *q = base + (size_t)t * C3;
        /* datt[t2] = d · v[t2];  ds = sum att * datt;  dv[t2] += att[t2] * d */
        att_rowdots(dp, d, vt, Tp, t + 1, hs, 1.0f);
        double dsum = 0.0;
        for (int t2 = 0; t2 <= t; t2++)
            dsum += (double)a[t2] * dp[t2];
        float ds = (float)dsum;
        __m512 dv_in[ATT_MAXNC], q_in[ATT_MAXNC], dq[ATT_MAXNC];
        for (int c = 0; c < NC; c++) {
            dv_in[c] = _mm512_loadu_ps(d + 16 * c);
            q_in[c] = _mm512_loadu_ps(q + 16 * c);
            dq[c] = _mm512_setzero_ps();
        }
        /* dpreatt = att * (datt - ds) * scale; dq += gp k[t2]; dk[t2] += gp q */
        for (int t2 = 0; t2 <= t; t2++) {
            float *g2 = gbase + (size_t)t2 * C3;
            const float *k = base + (size_t)t2 * C3 + C;
            __m512 w = _mm512_set1_ps(a[t2]), gp = _mm512_set1_ps(a[t2] * (dp[t2] - ds) * scale);
            for (int c = 0; c < NC; c++) {
                float *dv = g2 + 2 * (size_t)C + 16 * c, *dk = g2 + C + 16 * c;
                _mm512_storeu_ps(dv, _mm512_fmadd_ps(w, dv_in[c], _mm512_loadu_ps(dv)));
                _mm512_storeu_ps(dk, _mm512_fmadd_ps(gp, q_in[c], _mm512_loadu_ps(dk)));
                dq[c] = _mm512_fmadd_ps(gp, _mm512_loadu_ps(k + 16 * c), dq[c]);
            }
        }
        float *dqp = gbase + (size_t)t * C3;
        for (int c = 0; c < NC; c++)
            _mm512_storeu_ps(dqp + 16 * c, _mm512_add_ps(_mm512_loadu_ps(dqp + 16 * c), dq[c]));
    }
}

/* scratch: per thread hs * Tp (+ Tp for the backward's datt row) floats. */
T512 static void att_fwd_blk(float *out, float *preatt, float *att, const float *qkv, const int32_t *doc,
                             float *scratch, size_t per_thr, int nthr, int B, int T, int C, int NH, int hs,
                             float scale) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *kt = scratch + (size_t)omp_get_thread_num() * per_thr;
            if (hs == 64)
                att_fwd_head_blk(out, preatt, att, qkv, doc, kt, b, h, T, C, NH, hs, 4, scale);
            else
                att_fwd_head_blk(out, preatt, att, qkv, doc, kt, b, h, T, C, NH, hs, hs / 16, scale);
        }
}

T512 static void att_bwd_blk(float *dqkv, const float *dout, const float *qkv, const float *att,
                             float *scratch, size_t per_thr, int nthr, int B, int T, int C, int NH, int hs,
                             float scale) {
    const int Tp = (T + 15) & ~15;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *vt = scratch + (size_t)omp_get_thread_num() * per_thr, *dp = vt + (size_t)hs * Tp;
            if (hs == 64)
                att_bwd_head_blk(dqkv, dout, qkv, att, vt, dp, b, h, T, C, NH, hs, 4, scale);
            else
                att_bwd_head_blk(dqkv, dout, qkv, att, vt, dp, b, h, T, C, NH, hs, hs / 16, scale);
        }
}
#endif

/* ---------------------------------------------------------------- attention as GEMMs (long sequences)
 * Per (b, h) and per block of ATT_GEMM_R query rows [t0, t0 + r), only the causal columns [0, n),
 * n = t0 + r, are computed (the diagonal block's upper part is computed and then zeroed), with oneDNN's
 * row-major sgemm reading q, k, v and writing the gradients in place through leading dimensions:
 *   forward   S = scale * Q_blk K[0:n]^T  (into att)   softmax per row   out_blk = P_blk V[0:n]
 *   backward  dP = dout_blk V[0:n]^T      dS = P * (dP - rowsum(P * dP)) * scale
 *             dq_blk = dS K[0:n]          dk[0:n] (+)= dS^T q_blk           dv[0:n] (+)= P_blk^T dout_blk
 * The backward walks the blocks from the last (whose n = T covers every key row: beta 0 writes all of
 * dk and dv) to the first (beta 1 adds). (b, h) pairs run in parallel over OpenMP threads; inside the
 * parallel region each sgemm runs on its calling thread, so the order of every sum is fixed by the
 * shape and the thread count: deterministic, and the same on every call (bit-identical recompute). */

enum { ATT_GEMM_R = 64 }; /* query rows per causal block */

static int att_forced = FSDP_ATT_AUTO;

fsdp_att_impl fsdp_attention_impl_for(int T, int hs) {
    (void)hs;
    int f = __atomic_load_n(&att_forced, __ATOMIC_RELAXED);
    if (f != FSDP_ATT_AUTO) return (fsdp_att_impl)f;
    return T >= FSDP_ATT_GEMM_MIN_T ? FSDP_ATT_GEMM : FSDP_ATT_BLOCKED;
}

fsdp_status fsdp_attention_force_impl(fsdp_att_impl impl) {
    if (impl != FSDP_ATT_AUTO && impl != FSDP_ATT_BLOCKED && impl != FSDP_ATT_GEMM)
        return FSDP_ERR(FSDP_EINVAL, "attention implementation %d is not AUTO, BLOCKED or GEMM", (int)impl);
    __atomic_store_n(&att_forced, (int)impl, __ATOMIC_RELAXED);
    return FSDP_OK;
}

const char *fsdp_attention_impl_name(fsdp_att_impl impl) {
    switch (impl) {
    case FSDP_ATT_AUTO: return "auto";
    case FSDP_ATT_BLOCKED: return "blocked";
    case FSDP_ATT_GEMM: return "gemm";
    }
    return "unknown";
}

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C (beta 0: C is not read). */
static inline dnnl_status_t sgemm(char ta, char tb, int M, int N, int K, float alpha, const float *A,
                                  size_t lda, const float *Bm, size_t ldb, float beta, float *Cm,
                                  size_t ldc) {
    return dnnl_sgemm(ta, tb, M, N, K, alpha, A, (dnnl_dim_t)lda, Bm, (dnnl_dim_t)ldb, beta, Cm,
                      (dnnl_dim_t)ldc);
}

/* Softmax of the scaled scores a[0..t] in place (row max subtracted), preatt copy, a[t+1..T) = 0. */
static inline void att_softmax_row(float *a, float *pre, const int32_t *drow, int t, int T) {
    if (drow) att_mask_row(a, drow, t);
    float mx = fsdp_vmax(a, (size_t)t + 1);
    if (pre) {
        memcpy(pre, a, (size_t)(t + 1) * sizeof(float));
        memset(pre + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
    }
    double sum = fsdp_vexp_shift_sum(a, a, (size_t)t + 1, mx);
    float inv = (float)(1.0 / sum);
    for (int t2 = 0; t2 <= t; t2++)
        a[t2] *= inv;
    memset(a + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
}

static dnnl_status_t att_fwd_gemm_head(float *out, float *preatt, float *att, const float *qkv,
                                       const int32_t *doc, int b, int h, int T, int C, int NH, int hs,
                                       float scale) {
    const size_t C3 = (size_t)3 * C;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * (size_t)C;
    const size_t head = ((size_t)b * NH + h) * T * T;
    float *A = att + head;
    dnnl_status_t ds = dnnl_success;
    for (int t0 = 0; t0 < T && ds == dnnl_success; t0 += ATT_GEMM_R) {
        const int r = T - t0 < ATT_GEMM_R ? T - t0 : ATT_GEMM_R, n = t0 + r;
        float *Ab = A + (size_t)t0 * T;
        ds = sgemm('N', 'T', r, n, hs, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, Ab, (size_t)T);
        if (ds != dnnl_success) break;
        for (int j = 0; j < r; j++)
            att_softmax_row(Ab + (size_t)j * T, preatt ? preatt + head + (size_t)(t0 + j) * T : NULL,
                            doc ? doc + (size_t)b * T : NULL, t0 + j, T);
        ds = sgemm('N', 'N', r, hs, n, 1.0f, Ab, (size_t)T, v, C3, 0.0f,
                   out + ((size_t)b * T + t0) * C + (size_t)h * hs, (size_t)C);
    }
    return ds;
}

/* dP -> dS in place for the rows [t0, t0 + r) of one head: g[t2] = a[t2] * (g[t2] - sum(a * g)) * scale
 * for t2 <= t, 0 for t < t2 < n. g: [r, n], a: the att rows (leading dimension T). Instantiated
 * generic and for AVX-512 (the row sums are `omp simd` reductions in double). */
static inline __attribute__((always_inline)) void att_ds_rows_body(float *ds, const float *Ab, int t0, int r,
                                                                   int n, int T, float scale) {
    for (int j = 0; j < r; j++) {
        const int t = t0 + j;
        const float *a = Ab + (size_t)j * T;
        float *g = ds + (size_t)j * n;
        double dsum = 0.0;
#pragma omp simd reduction(+ : dsum)
        for (int t2 = 0; t2 <= t; t2++)
            dsum += (double)a[t2] * g[t2];
        const float dsf = (float)dsum;
#pragma omp simd
        for (int t2 = 0; t2 <= t; t2++)
            g[t2] = a[t2] * (g[t2] - dsf) * scale;
        for (int t2 = t + 1; t2 < n; t2++)
            g[t2] = 0.0f;
    }
}

static void att_ds_rows_generic(float *ds, const float *Ab, int t0, int r, int n, int T, float scale) {
    att_ds_rows_body(ds, Ab, t0, r, n, T, scale);
}
#ifdef ATT_X86
T512 static void att_ds_rows_avx512(float *ds, const float *Ab, int t0, int r, int n, int T, float scale) {
    att_ds_rows_body(ds, Ab, t0, r, n, T, scale);
}
#endif

/* ds: scratch of ATT_GEMM_R * T floats; v512: take the AVX-512 instantiation of the row pass. */
static dnnl_status_t att_bwd_gemm_head(float *dqkv, const float *dout, const float *qkv, const float *att,
                                       float *ds, int b, int h, int T, int C, int NH, int hs, float scale,
                                       int v512) {
    const size_t C3 = (size_t)3 * C;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * (size_t)C;
    float *dq = dqkv + (size_t)b * T * C3 + (size_t)h * hs, *dk = dq + C, *dv = dq + 2 * (size_t)C;
    const float *A = att + ((size_t)b * NH + h) * T * T;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
    dnnl_status_t st = dnnl_success;
    const int nb = (T + ATT_GEMM_R - 1) / ATT_GEMM_R;
    for (int i = nb - 1; i >= 0 && st == dnnl_success; i--) {
        const int t0 = i * ATT_GEMM_R, r = T - t0 < ATT_GEMM_R ? T - t0 : ATT_GEMM_R, n = t0 + r;
        const float *Ab = A + (size_t)t0 * T, *dOb = dO + (size_t)t0 * C;
        const float beta = i == nb - 1 ? 0.0f : 1.0f;
        /* dP [r, n] (leading dimension n) */
        st = sgemm('N', 'T', r, n, hs, 1.0f, dOb, (size_t)C, v, C3, 0.0f, ds, (size_t)n);
        if (st != dnnl_success) break;
#ifdef ATT_X86
        if (v512)
            att_ds_rows_avx512(ds, Ab, t0, r, n, T, scale);
        else
#endif
            att_ds_rows_generic(ds, Ab, t0, r, n, T, scale);
        (void)v512;
        st = sgemm('N', 'N', r, hs, n, 1.0f, ds, (size_t)n, k, C3, 0.0f, dq + (size_t)t0 * C3, C3);
        if (st == dnnl_success)
            st = sgemm('T', 'N', n, hs, r, 1.0f, ds, (size_t)n, q + (size_t)t0 * C3, C3, beta, dk, C3);
        if (st == dnnl_success)
            st = sgemm('T', 'N', n, hs, r, 1.0f, Ab, (size_t)T, dOb, (size_t)C, beta, dv, C3);
    }
    return st;
}

static fsdp_status att_gemm_status(dnnl_status_t ds, const char *what) {
    if (ds == dnnl_success) return FSDP_OK;
    return fsdp_set_error(FSDP_EINTERNAL, "attention (%s): oneDNN sgemm failed with status %d", what,
                          (int)ds);
}

static fsdp_status att_fwd_gemm(float *out, float *preatt, float *att, const float *qkv, const int32_t *doc,
                                int B, int T, int C, int NH, int hs, float scale) {
    int bad = dnnl_success;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            dnnl_status_t ds = att_fwd_gemm_head(out, preatt, att, qkv, doc, b, h, T, C, NH, hs, scale);
            if (ds != dnnl_success) __atomic_store_n(&bad, (int)ds, __ATOMIC_RELAXED);
        }
    return att_gemm_status((dnnl_status_t)bad, "forward");
}

static fsdp_status att_bwd_gemm(float *dqkv, const float *dout, const float *qkv, const float *att,
                                float *scratch, size_t per_thr, int nthr, int B, int T, int C, int NH, int hs,
                                float scale) {
    int bad = dnnl_success;
#ifdef ATT_X86
    const int v512 = fsdp_simd_active() == FSDP_SIMD_AVX512;
#else
    const int v512 = 0;
#endif
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *ds = scratch + (size_t)omp_get_thread_num() * per_thr;
            dnnl_status_t st = att_bwd_gemm_head(dqkv, dout, qkv, att, ds, b, h, T, C, NH, hs, scale, v512);
            if (st != dnnl_success) __atomic_store_n(&bad, (int)st, __ATOMIC_RELAXED);
        }
    return att_gemm_status((dnnl_status_t)bad, "backward");
}

fsdp_status fsdp_attention_forward(float *out, float *preatt, float *att, const float *qkv, int B, int T,
                                   int C, int NH) {
    return fsdp_attention_forward_doc(out, preatt, att, qkv, NULL, B, T, C, NH);
}

fsdp_status fsdp_attention_forward_doc(float *out, float *preatt, float *att, const float *qkv,
                                       const int32_t *doc, int B, int T, int C, int NH) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_att(B, T, C, NH));
    if (!out || !att || !qkv) return FSDP_ERR(FSDP_EINVAL, "out, att and qkv must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    if (fsdp_attention_impl_for(T, hs) == FSDP_ATT_GEMM)
        return att_fwd_gemm(out, preatt, att, qkv, doc, B, T, C, NH, hs, scale);
#ifdef ATT_X86
    if (fsdp_simd_active() == FSDP_SIMD_AVX512) {
        if (hs % 16 == 0 && hs <= 16 * ATT_MAXNC) {
            const int nthr = omp_get_max_threads();
            const size_t per_thr = (size_t)hs * (size_t)((T + 15) & ~15);
            float *scratch = NULL; /* [nthr, hs, Tp]: K^T of one head */
            FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float),
                                    FSDP_MEM_ACTIVATION));
            att_fwd_blk(out, preatt, att, qkv, doc, scratch, per_thr, nthr, B, T, C, NH, hs, scale);
            fsdp_mem_free(scratch);
        } else {
            att_fwd_avx512(out, preatt, att, qkv, doc, B, T, C, NH, hs, scale);
        }
        return FSDP_OK;
    }
#endif
    att_fwd_generic(out, preatt, att, qkv, doc, B, T, C, NH, hs, scale);
    return FSDP_OK;
}

/* The backward's scratch floats per thread: dL/datt of one row (T, generic), V^T of one head and that
 * row (hs*Tp + Tp, blocked AVX-512), or dS of one block of rows (ATT_GEMM_R * T, sgemm form). */
static size_t att_bwd_per_thread(int T, int hs, int *gemm, int *blk) {
    *gemm = fsdp_attention_impl_for(T, hs) == FSDP_ATT_GEMM;
#ifdef ATT_X86
    *blk = !*gemm && fsdp_simd_active() == FSDP_SIMD_AVX512 && hs % 16 == 0 && hs <= 16 * ATT_MAXNC;
#else
    *blk = 0;
#endif
    const size_t Tp = (size_t)((T + 15) & ~15);
    return *gemm ? (size_t)ATT_GEMM_R * T : *blk ? (size_t)hs * Tp + Tp : (size_t)T;
}

size_t fsdp_attention_backward_scratch_bytes(int T, int hs, int nthr) {
    if (T <= 0 || hs <= 0 || nthr <= 0) return 0;
    int gemm, blk;
    return (size_t)nthr * att_bwd_per_thread(T, hs, &gemm, &blk) * sizeof(float);
}

fsdp_status fsdp_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                    int T, int C, int NH) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_att(B, T, C, NH));
    if (!dqkv || !dout || !qkv || !att)
        return FSDP_ERR(FSDP_EINVAL, "dqkv, dout, qkv and att must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int nthr = omp_get_max_threads(), gemm, blk;
    const size_t per_thr = att_bwd_per_thread(T, hs, &gemm, &blk);
    float *scratch = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float), FSDP_MEM_ACTIVATION));
    if (gemm) {
        fsdp_status st = att_bwd_gemm(dqkv, dout, qkv, att, scratch, per_thr, nthr, B, T, C, NH, hs, scale);
        fsdp_mem_free(scratch);
        return st;
    }
#ifdef ATT_X86
    if (blk)
        att_bwd_blk(dqkv, dout, qkv, att, scratch, per_thr, nthr, B, T, C, NH, hs, scale);
    else if (fsdp_simd_active() == FSDP_SIMD_AVX512)
        att_bwd_avx512(dqkv, dout, qkv, att, scratch, nthr, B, T, C, NH, hs, scale);
    else
#endif
        att_bwd_generic(dqkv, dout, qkv, att, scratch, nthr, B, T, C, NH, hs, scale);
    fsdp_mem_free(scratch);
    return FSDP_OK;
}
