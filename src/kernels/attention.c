/* attention.c — causal multi-head self-attention from packed qkv [B,T,3C] to out [B,T,C] in plain C +
 * OpenMP, as llm.c's attention_forward/backward: scores q·k/sqrt(hs), row-max-subtracted softmax
 * (probabilities saved for backward), weighted sum of v; the backward uses the O(T) softmax gradient.
 * Dot products over a head use `omp simd` reductions (a fixed, vectorised summation order); the
 * softmax's exp goes through vmath.c. */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
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

/* The work of one query row (b, t, h) of the forward: scores, softmax into att, weighted sum of v.
 * always_inline: instantiated in the generic and the AVX-512 drivers below, so its `omp simd` loops
 * are compiled for each ISA. Different ISAs sum the head dot products in different orders (and the
 * AVX-512 form fuses multiply-adds): results agree to rounding, each is deterministic. */
static inline __attribute__((always_inline)) void att_fwd_row(float *out, float *preatt, float *att,
                                                              const float *qkv, int b, int t, int h, int T,
                                                              int C, int NH, int hs, float scale) {
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

static void att_fwd_generic(float *out, float *preatt, float *att, const float *qkv, int B, int T, int C,
                            int NH, int hs, float scale) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                att_fwd_row(out, preatt, att, qkv, b, t, h, T, C, NH, hs, scale);
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

T512 static void att_fwd_avx512(float *out, float *preatt, float *att, const float *qkv, int B, int T, int C,
                                int NH, int hs, float scale) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                att_fwd_row(out, preatt, att, qkv, b, t, h, T, C, NH, hs, scale);
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

T512 static inline __attribute__((always_inline)) void att_fwd_head_blk(float *out, float *preatt, float *att,
                                                                        const float *qkv, float *kt, int b,
                                                                        int h, int T, int C, int NH, int hs,
                                                                        const int NC, float scale) {
    const size_t C3 = (size_t)3 * C;
    const int Tp = (T + 15) & ~15;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    att_transpose(kt, base + C, C3, T, Tp, hs);
    for (int t = 0; t < T; t++) {
        const float *q = base + (size_t)t * C3;
        size_t row = (((size_t)b * NH + h) * T + t) * T;
        float *a = att + row;
        att_rowdots(a, q, kt, Tp, t + 1, hs, scale);
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
T512 static void att_fwd_blk(float *out, float *preatt, float *att, const float *qkv, float *scratch,
                             size_t per_thr, int nthr, int B, int T, int C, int NH, int hs, float scale) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthr)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *kt = scratch + (size_t)omp_get_thread_num() * per_thr;
            if (hs == 64)
                att_fwd_head_blk(out, preatt, att, qkv, kt, b, h, T, C, NH, hs, 4, scale);
            else
                att_fwd_head_blk(out, preatt, att, qkv, kt, b, h, T, C, NH, hs, hs / 16, scale);
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

fsdp_status fsdp_attention_forward(float *out, float *preatt, float *att, const float *qkv, int B, int T,
                                   int C, int NH) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_att(B, T, C, NH));
    if (!out || !att || !qkv) return FSDP_ERR(FSDP_EINVAL, "out, att and qkv must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#ifdef ATT_X86
    if (fsdp_simd_active() == FSDP_SIMD_AVX512) {
        if (hs % 16 == 0 && hs <= 16 * ATT_MAXNC) {
            const int nthr = omp_get_max_threads();
            const size_t per_thr = (size_t)hs * (size_t)((T + 15) & ~15);
            float *scratch = NULL; /* [nthr, hs, Tp]: K^T of one head */
            FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float),
                                    FSDP_MEM_ACTIVATION));
            att_fwd_blk(out, preatt, att, qkv, scratch, per_thr, nthr, B, T, C, NH, hs, scale);
            fsdp_mem_free(scratch);
        } else {
            att_fwd_avx512(out, preatt, att, qkv, B, T, C, NH, hs, scale);
        }
        return FSDP_OK;
    }
#endif
    att_fwd_generic(out, preatt, att, qkv, B, T, C, NH, hs, scale);
    return FSDP_OK;
}

fsdp_status fsdp_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                    int T, int C, int NH) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_att(B, T, C, NH));
    if (!dqkv || !dout || !qkv || !att)
        return FSDP_ERR(FSDP_EINVAL, "dqkv, dout, qkv and att must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int nthr = omp_get_max_threads();
#ifdef ATT_X86
    const int blk = fsdp_simd_active() == FSDP_SIMD_AVX512 && hs % 16 == 0 && hs <= 16 * ATT_MAXNC;
#else
    const int blk = 0;
#endif
    /* per thread: dL/datt of one row (T floats), or V^T of one head and that row (hs*Tp + Tp) */
    const size_t Tp = (size_t)((T + 15) & ~15), per_thr = blk ? (size_t)hs * Tp + Tp : (size_t)T;
    float *scratch = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float), FSDP_MEM_ACTIVATION));
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
