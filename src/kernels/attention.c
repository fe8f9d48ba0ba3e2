/* attention.c — causal multi-head self-attention from packed qkv [B,T,3C] to out [B,T,C] in plain C +
 * OpenMP, as llm.c's attention_forward/backward: scores q·k/sqrt(hs), row-max-subtracted softmax
 * (probabilities saved for backward), weighted sum of v; the backward uses the O(T) softmax gradient.
 * Dot products over a head use `omp simd` reductions (a fixed, vectorised summation order); the
 * softmax's exp goes through vmath.c. */
#include "kernels/kernels.h"

#include "core/core.h"
#include "kernels/vmath.h"

#include <math.h>
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
#define T512 __attribute__((target("avx512f,fma,prefer-vector-width=512")))

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
#endif

fsdp_status fsdp_attention_forward(float *out, float *preatt, float *att, const float *qkv, int B, int T,
                                   int C, int NH) {
    FSDP_TRY(check_att(B, T, C, NH));
    if (!out || !att || !qkv) return FSDP_ERR(FSDP_EINVAL, "out, att and qkv must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#ifdef ATT_X86
    if (fsdp_simd_active() == FSDP_SIMD_AVX512) {
        att_fwd_avx512(out, preatt, att, qkv, B, T, C, NH, hs, scale);
        return FSDP_OK;
    }
#endif
    att_fwd_generic(out, preatt, att, qkv, B, T, C, NH, hs, scale);
    return FSDP_OK;
}

fsdp_status fsdp_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                    int T, int C, int NH) {
    FSDP_TRY(check_att(B, T, C, NH));
    if (!dqkv || !dout || !qkv || !att)
        return FSDP_ERR(FSDP_EINVAL, "dqkv, dout, qkv and att must be non-NULL");
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int nthr = omp_get_max_threads();
    float *scratch = NULL; /* [nthr, T]: dL/datt of one row */
    FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * T * sizeof(float), FSDP_MEM_ACTIVATION));
#ifdef ATT_X86
    if (fsdp_simd_active() == FSDP_SIMD_AVX512)
        att_bwd_avx512(dqkv, dout, qkv, att, scratch, nthr, B, T, C, NH, hs, scale);
    else
#endif
        att_bwd_generic(dqkv, dout, qkv, att, scratch, nthr, B, T, C, NH, hs, scale);
    fsdp_mem_free(scratch);
    return FSDP_OK;
}
