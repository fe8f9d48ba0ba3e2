/* llama_ops.c — element-wise kernels of the Llama family in plain C + OpenMP: RMSNorm (weight only, over
 * whole rows or per attention head), rotary position embedding in Hugging Face's rotate-half layout
 * (inv_freq as transformers computes it, llama3 rescaling included) and the SwiGLU activation, forward
 * and backward. Parameter inputs are F32 or BF16 (kernels.h); activations fp32; row statistics and
 * parameter-gradient sums in double, in fixed orders (deterministic for any thread count). */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The rotation and the inv_freq arithmetic must round as PyTorch's separate fp32 operations do. */
FSDP_FILE_NOCONTRACT

static inline float bf16_val(fsdp_bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static fsdp_status check_pdt(const char *fn, fsdp_dtype pdt) {
    if (pdt != FSDP_F32 && pdt != FSDP_BF16)
        return fsdp_set_error(FSDP_EINVAL, "%s: parameter dtype %d is neither FSDP_F32 nor FSDP_BF16", fn,
                              (int)pdt);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- RMSNorm
 * One implementation for both entry points: R = N_tok * n_heads rows of C elements, row r = (t, h) at
 * base + t * ld + h * C. The whole-row form is n_heads = 1. */

typedef struct {
    int ntok, nh, C;
} rms_shape;

static inline size_t rms_off(const rms_shape *s, long r, int ld) {
    return (size_t)(r / s->nh) * (size_t)ld + (size_t)(r % s->nh) * (size_t)s->C;
}

static fsdp_status rms_check(const char *fn, int ntok, int nh, int C, int ld_a, int ld_b, int ld_c) {
    if (ntok <= 0 || nh <= 0 || C <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got rows=%d heads=%d width=%d", fn,
                              ntok, nh, C);
    const long w = (long)nh * C;
    if (w > INT32_MAX) return fsdp_set_error(FSDP_EINVAL, "%s: heads*width=%ld is too large", fn, w);
    if (ld_a < w || ld_b < w || ld_c < w)
        return fsdp_set_error(FSDP_EINVAL, "%s: row strides (%d, %d, %d) must be >= the row width %ld", fn,
                              ld_a, ld_b, ld_c, w);
    return FSDP_OK;
}

/* Weight as fp32 (fsdp_mem_alloc, activation). */
static fsdp_status rms_weight(const void *p, fsdp_dtype pdt, int C, float **out) {
    FSDP_TRY(fsdp_mem_alloc((void **)out, (size_t)C * sizeof(float), FSDP_MEM_ACTIVATION));
    if (pdt == FSDP_BF16)
        for (int c = 0; c < C; c++)
            (*out)[c] = bf16_val(((const fsdp_bf16 *)p)[c]);
    else
        memcpy(*out, p, (size_t)C * sizeof(float));
    return FSDP_OK;
}

static fsdp_status rms_forward(const char *fn, float *out, int ld_out, float *rstd, const float *inp,
                               int ld_in, const void *weight, fsdp_dtype pdt, int ntok, int nh, int C,
                               float eps) {
    FSDP_PROF_SCOPE(FSDP_PROF_LAYERNORM);
    FSDP_TRY(rms_check(fn, ntok, nh, C, ld_out, ld_in, ld_in));
    if (!out || !inp || !weight)
        return fsdp_set_error(FSDP_EINVAL, "%s: out, inp and weight must be non-NULL", fn);
    if (!(eps >= 0.0f) || isinf(eps))
        return fsdp_set_error(FSDP_EINVAL, "%s: eps must be finite and >= 0, got %g", fn, (double)eps);
    FSDP_TRY(check_pdt(fn, pdt));
    float *w = NULL;
    FSDP_TRY(rms_weight(weight, pdt, C, &w));
    const rms_shape s = {ntok, nh, C};
    const long R = (long)ntok * nh;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < R; r++) {
        const float *x = inp + rms_off(&s, r, ld_in);
        float *o = out + rms_off(&s, r, ld_out);
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
#pragma omp simd
        for (int c = 0; c < C; c++)
            o[c] = (x[c] * rs) * w[c];
        if (rstd) rstd[r] = rs;
    }
    fsdp_mem_free(w);
    return FSDP_OK;
}

/* Parameter-gradient partial sums: rows in RMS_MAX_CHUNKS (or fewer) fixed chunks of at least
 * RMS_MIN_ROWS rows; the chunking depends on the row count only, and chunks are summed in order. */
enum { RMS_MAX_CHUNKS = 64, RMS_MIN_ROWS = 32 };

static long rms_chunk_rows(long R) {
    long ch = (R + RMS_MAX_CHUNKS - 1) / RMS_MAX_CHUNKS;
    return ch < RMS_MIN_ROWS ? RMS_MIN_ROWS : ch;
}

size_t fsdp_rmsnorm_backward_scratch_bytes(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    const long R = N, nch = (R + rms_chunk_rows(R) - 1) / rms_chunk_rows(R);
    return (size_t)C * sizeof(float) + (size_t)nch * (size_t)C * sizeof(double);
}

static fsdp_status rms_backward(const char *fn, float *dinp, int ld_dinp, int dinp_acc, float *dweight,
                                int dweight_acc, const float *dout, int ld_dout, const float *inp, int ld_in,
                                const void *weight, fsdp_dtype pdt, const float *rstd, int ntok, int nh,
                                int C) {
    FSDP_PROF_SCOPE(FSDP_PROF_LAYERNORM);
    FSDP_TRY(rms_check(fn, ntok, nh, C, dinp ? ld_dinp : ld_in, ld_dout, ld_in));
    if (!dout || !inp || !rstd || !weight)
        return fsdp_set_error(FSDP_EINVAL,
                              "%s: dout, inp, weight and rstd (from the forward) must be non-NULL", fn);
    FSDP_TRY(check_pdt(fn, pdt));
    if (!dinp && !dweight) return FSDP_OK;
    const rms_shape s = {ntok, nh, C};
    const long R = (long)ntok * nh, CH = rms_chunk_rows(R), nch = (R + CH - 1) / CH;
    float *w = NULL;
    double *part = NULL; /* [nch, C] */
    FSDP_TRY(rms_weight(weight, pdt, C, &w));
    if (dweight) {
        fsdp_status st =
            fsdp_mem_alloc((void **)&part, (size_t)nch * C * sizeof(double), FSDP_MEM_ACTIVATION);
        if (st != FSDP_OK) {
            fsdp_mem_free(w);
            return st;
        }
    }
#pragma omp parallel for schedule(static)
    for (long ch = 0; ch < nch; ch++) {
        double *p = part ? part + (size_t)ch * C : NULL;
        if (p) memset(p, 0, (size_t)C * sizeof(double));
        const long r1 = (ch + 1) * CH < R ? (ch + 1) * CH : R;
        for (long r = ch * CH; r < r1; r++) {
            const float *x = inp + rms_off(&s, r, ld_in), *d = dout + rms_off(&s, r, ld_dout);
            const float rs = rstd[r];
            if (p) {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    p[c] += (double)d[c] * (x[c] * rs);
            }
            if (!dinp) continue;
            /* y = x rs w, rs = (mean x^2 + eps)^-1/2:  dx = rs w d - x rs^3 sum(w d x) / C */
            float *g = dinp + rms_off(&s, r, ld_dinp);
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++)
                dot += (double)(w[c] * d[c]) * x[c];
            const float k = (float)(dot * ((double)rs * rs * rs) / C);
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float v = rs * (w[c] * d[c]) - k * x[c];
                g[c] = dinp_acc ? g[c] + v : v;
            }
        }
    }
    if (dweight) {
#pragma omp parallel for schedule(static)
        for (int c = 0; c < C; c++) {
            double a = 0.0;
            for (long ch = 0; ch < nch; ch++)
                a += part[(size_t)ch * C + c];
            dweight[c] = dweight_acc ? (float)(dweight[c] + a) : (float)a;
        }
    }
    fsdp_mem_free(part);
    fsdp_mem_free(w);
    return FSDP_OK;
}

fsdp_status fsdp_rmsnorm_forward(float *out, int ld_out, float *rstd, const float *inp, int ld_in,
                                 const void *weight, fsdp_dtype pdt, int N, int C, float eps) {
    return rms_forward(__func__, out, ld_out, rstd, inp, ld_in, weight, pdt, N, 1, C, eps);
}

fsdp_status fsdp_rmsnorm_backward(float *dinp, int ld_dinp, int dinp_acc, float *dweight, int dweight_acc,
                                  const float *dout, int ld_dout, const float *inp, int ld_in,
                                  const void *weight, fsdp_dtype pdt, const float *rstd, int N, int C) {
    return rms_backward(__func__, dinp, ld_dinp, dinp_acc, dweight, dweight_acc, dout, ld_dout, inp, ld_in,
                        weight, pdt, rstd, N, 1, C);
}

fsdp_status fsdp_head_rmsnorm_forward(float *out, int ld_out, float *rstd, const float *inp, int ld_in,
                                      const void *weight, fsdp_dtype pdt, int N_tok, int n_heads, int hd,
                                      float eps) {
    return rms_forward(__func__, out, ld_out, rstd, inp, ld_in, weight, pdt, N_tok, n_heads, hd, eps);
}

fsdp_status fsdp_head_rmsnorm_backward(float *dinp, int ld_dinp, int dinp_acc, float *dweight,
                                       int dweight_acc, const float *dout, int ld_dout, const float *inp,
                                       int ld_in, const void *weight, fsdp_dtype pdt, const float *rstd,
                                       int N_tok, int n_heads, int hd) {
    return rms_backward(__func__, dinp, ld_dinp, dinp_acc, dweight, dweight_acc, dout, ld_dout, inp, ld_in,
                        weight, pdt, rstd, N_tok, n_heads, hd);
}

/* ---------------------------------------------------------------- RoPE */

fsdp_status fsdp_rope_inv_freq(float *inv_freq, int hd, double theta, const fsdp_rope_scaling *sc) {
    if (!inv_freq) return FSDP_ERR(FSDP_EINVAL, "inv_freq must be non-NULL");
    if (hd <= 0 || hd % 2 || hd > FSDP_ROPE_MAX_HD)
        return FSDP_ERR(FSDP_EINVAL, "head_dim must be even and in [2, %d], got %d", FSDP_ROPE_MAX_HD, hd);
    if (!(theta > 0.0) || isinf(theta) || !((float)theta > 0.0f) || isinf((float)theta))
        return FSDP_ERR(FSDP_EINVAL, "rope_theta must be positive and finite (as fp32), got %g", theta);
    const int type = sc ? sc->type : 0;
    if (type != 0 && type != 1)
        return FSDP_ERR(FSDP_EINVAL, "rope scaling type %d is neither 0 (default) nor 1 (llama3)", type);
    if (type == 1) {
        if (!(sc->factor > 0.0f) || isinf(sc->factor) || !(sc->low_freq_factor > 0.0f) ||
            isinf(sc->low_freq_factor) || !(sc->high_freq_factor > sc->low_freq_factor) ||
            isinf(sc->high_freq_factor) || sc->original_max_position_embeddings <= 0)
            return FSDP_ERR(
                FSDP_EINVAL,
                "llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
                "(finite) and original_max_position_embeddings > 0; got factor=%g low_freq_factor=%g "
                "high_freq_factor=%g original_max_position_embeddings=%d",
                (double)sc->factor, (double)sc->low_freq_factor, (double)sc->high_freq_factor,
                sc->original_max_position_embeddings);
    }
    /* transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), every step an fp32 operation
     * (the power of two fp32 values, correctly rounded here). */
    const float base = (float)theta, dimf = (float)hd;
    const int h = hd / 2;
    for (int i = 0; i < h; i++) {
        float e = (float)(2 * i) / dimf;
        float p = (float)pow((double)base, (double)e);
        inv_freq[i] = 1.0f / p;
    }
    if (type != 1) return FSDP_OK;
    /* _compute_llama3_parameters, operation by operation in fp32 (a Python scalar meets an fp32
     * tensor as fp32; `s / t` is t.reciprocal() * s). */
    const double old = (double)sc->original_max_position_embeddings;
    const float factor = sc->factor, low = sc->low_freq_factor, high = sc->high_freq_factor;
    const float low_wl = (float)(old / (double)low), high_wl = (float)(old / (double)high);
    const float two_pi = (float)(2.0 * M_PI), oldf = (float)old, span = (float)((double)high - (double)low);
    for (int i = 0; i < h; i++) {
        const float f = inv_freq[i];
        const float wl = (1.0f / f) * two_pi;
        const float fl = wl > low_wl ? f / factor : f;
        const float smooth = ((1.0f / wl) * oldf - low) / span;
        const float smoothed = ((1.0f - smooth) * fl) / factor + smooth * fl;
        const int medium = !(wl < high_wl) && !(wl > low_wl);
        inv_freq[i] = medium ? smoothed : fl;
    }
    return FSDP_OK;
}

static fsdp_status rope_check(const char *fn, const float *x, int ld, const int *pos, const float *inv_freq,
                              int ntok, int nh, int hd) {
    if (!x || !pos || !inv_freq)
        return fsdp_set_error(FSDP_EINVAL, "%s: x, pos and inv_freq must be non-NULL", fn);
    if (ntok <= 0 || nh <= 0 || hd <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got N_tok=%d n_heads=%d hd=%d", fn,
                              ntok, nh, hd);
    if (hd % 2 || hd > FSDP_ROPE_MAX_HD)
        return fsdp_set_error(FSDP_EINVAL, "%s: head size must be even and at most %d, got %d", fn,
                              FSDP_ROPE_MAX_HD, hd);
    if ((long)nh * hd > ld)
        return fsdp_set_error(FSDP_EINVAL, "%s: row stride %d is below n_heads*hd = %ld", fn, ld,
                              (long)nh * hd);
    for (int t = 0; t < ntok; t++)
        if (pos[t] < 0)
            return fsdp_set_error(FSDP_EINVAL, "%s: position %d of token %d is negative", fn, pos[t], t);
    return FSDP_OK;
}

/* sgn +1: forward rotation by pos * inv_freq; -1: the inverse (the transpose, for the gradient).
 * cos and sin of the fp32 angle pos * inv_freq (one fp32 product, as transformers' K=1 matmul) are
 * computed in double and rounded once: within an ulp of PyTorch's fp32 cos/sin. */
static void rope_apply(float *x, int ld, const int *pos, const float *inv_freq, int ntok, int nh, int hd,
                       float sgn) {
    const int h = hd / 2;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < ntok; t++) {
        float cs[FSDP_ROPE_MAX_HD / 2], sn[FSDP_ROPE_MAX_HD / 2];
        const float p = (float)pos[t];
        for (int i = 0; i < h; i++) {
            const double a = (double)(p * inv_freq[i]);
            cs[i] = (float)cos(a);
            sn[i] = sgn * (float)sin(a);
        }
        float *row = x + (size_t)t * ld;
        for (int k = 0; k < nh; k++) {
            float *restrict x1 = row + (size_t)k * hd, *restrict x2 = x1 + h;
#pragma omp simd
            for (int i = 0; i < h; i++) {
                const float a = x1[i], b = x2[i];
                x1[i] = a * cs[i] - b * sn[i];
                x2[i] = b * cs[i] + a * sn[i];
            }
        }
    }
}

fsdp_status fsdp_rope_forward(float *x, int ld, const int *pos, const float *inv_freq, int N_tok, int n_heads,
                              int hd) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(rope_check(__func__, x, ld, pos, inv_freq, N_tok, n_heads, hd));
    rope_apply(x, ld, pos, inv_freq, N_tok, n_heads, hd, 1.0f);
    return FSDP_OK;
}

fsdp_status fsdp_rope_backward(float *dx, int ld, const int *pos, const float *inv_freq, int N_tok,
                               int n_heads, int hd) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(rope_check(__func__, dx, ld, pos, inv_freq, N_tok, n_heads, hd));
    rope_apply(dx, ld, pos, inv_freq, N_tok, n_heads, hd, -1.0f);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- SwiGLU
 * silu(g) = g / (1 + e), e = exp(-g) through vmath (vectorised, <= 2 ulp); rows in parallel, each in
 * chunks of SW_CHUNK elements. */

enum { SW_CHUNK = 256 };

static fsdp_status sw_check(const char *fn, int N, int I) {
    if (N <= 0 || I <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got N=%d I=%d", fn, N, I);
    if ((long)I * 2 > INT32_MAX) return fsdp_set_error(FSDP_EINVAL, "%s: I=%d is too large", fn, I);
    return FSDP_OK;
}

fsdp_status fsdp_swiglu_forward(float *out, const float *gu, int N, int I) {
    FSDP_PROF_SCOPE(FSDP_PROF_GELU);
    FSDP_TRY(sw_check(__func__, N, I));
    if (!out || !gu) return FSDP_ERR(FSDP_EINVAL, "out and gu must be non-NULL");
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * I, *u = g + I;
        float *o = out + (size_t)n * I, e[SW_CHUNK];
        for (int j0 = 0; j0 < I; j0 += SW_CHUNK) {
            const int len = I - j0 < SW_CHUNK ? I - j0 : SW_CHUNK;
            for (int j = 0; j < len; j++)
                e[j] = -g[j0 + j];
            fsdp_vexp(e, e, (size_t)len);
#pragma omp simd
            for (int j = 0; j < len; j++)
                o[j0 + j] = (g[j0 + j] / (1.0f + e[j])) * u[j0 + j];
        }
    }
    return FSDP_OK;
}

fsdp_status fsdp_swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int I) {
    FSDP_PROF_SCOPE(FSDP_PROF_GELU);
    FSDP_TRY(sw_check(__func__, N, I));
    if (!dgu || !dout || !gu) return FSDP_ERR(FSDP_EINVAL, "dgu, dout and gu must be non-NULL");
    if (dgu == gu) return FSDP_ERR(FSDP_EINVAL, "dgu must not alias gu");
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * I, *u = g + I, *d = dout + (size_t)n * I;
        float *dg = dgu + (size_t)n * 2 * I, *du = dg + I, e[SW_CHUNK];
        for (int j0 = 0; j0 < I; j0 += SW_CHUNK) {
            const int len = I - j0 < SW_CHUNK ? I - j0 : SW_CHUNK;
            for (int j = 0; j < len; j++)
                e[j] = -g[j0 + j];
            fsdp_vexp(e, e, (size_t)len);
            /* silu' = sig (1 + g (1 - sig)), sig = 1 / (1 + e) */
#pragma omp simd
            for (int j = 0; j < len; j++) {
                const float x = g[j0 + j], sig = 1.0f / (1.0f + e[j]), dj = d[j0 + j];
                const float silu = x * sig;
                const float ds = sig * (1.0f + x * (1.0f - sig));
                dg[j0 + j] = dj * u[j0 + j] * ds;
                du[j0 + j] = dj * silu;
            }
        }
    }
    return FSDP_OK;
}
