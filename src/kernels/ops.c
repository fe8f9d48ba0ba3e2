/* ops.c — element-wise GPT-2 kernels in plain C + OpenMP: encoder (token + position embedding) and
 * its scatter-add backward, LayerNorm, GELU (tanh form) and residual add, forward and backward.
 * Parameter inputs are F32 or BF16 (see kernels.h); all arithmetic is fp32 (statistics in double).
 * GELU runs through vmath.c (vectorised, accuracy contract in vmath.h). */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

FSDP_FILE_NOCONTRACT /* clang: like the AVX-512 LayerNorm bodies' FSDP_NOCONTRACT under GCC */

    /* Exact bf16 -> f32 widening (the upper 16 bits of the f32). */
    static inline float
    bf16_val(fsdp_bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element i of a parameter of dtype pdt as float. */
static inline float param_at(const void *p, fsdp_dtype pdt, size_t i) {
    return pdt == FSDP_BF16 ? bf16_val(((const fsdp_bf16 *)p)[i]) : ((const float *)p)[i];
}

static fsdp_status check_pdt(const char *fn, fsdp_dtype pdt) {
    if (pdt != FSDP_F32 && pdt != FSDP_BF16)
        return fsdp_set_error(FSDP_EINVAL, "%s: parameter dtype %d is neither FSDP_F32 nor FSDP_BF16", fn,
                              (int)pdt);
    return FSDP_OK;
}

/* Copies n parameter values into a fresh fp32 buffer (fsdp_mem_alloc, other). */
static fsdp_status param_to_f32(const void *p, fsdp_dtype pdt, size_t n, float **out) {
    FSDP_TRY(fsdp_mem_alloc((void **)out, n * sizeof(float), FSDP_MEM_OTHER));
    for (size_t i = 0; i < n; i++)
        (*out)[i] = param_at(p, pdt, i);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- encoder */

static fsdp_status check_tokens(const char *fn, const int *tokens, size_t n, int Vrows) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= Vrows)
            return fsdp_set_error(FSDP_EINVAL,
                                  "%s: token %d at position %zu is outside [0, %d); check the data "
                                  "file against the model's vocabulary size",
                                  fn, tokens[i], i, Vrows);
    return FSDP_OK;
}

/* pos: NULL (position t of each row, T <= maxT) or explicit positions, each in [0, maxT). */
static fsdp_status check_enc(const char *fn, const int *pos, int B, int T, int C, int Vrows, int maxT) {
    if (B <= 0 || T <= 0 || C <= 0 || Vrows <= 0 || maxT <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got B=%d T=%d C=%d Vrows=%d maxT=%d",
                              fn, B, T, C, Vrows, maxT);
    if (!pos && T > maxT)
        return fsdp_set_error(FSDP_EINVAL, "%s: sequence length T=%d exceeds the model's maxT=%d", fn, T,
                              maxT);
    for (size_t i = 0; pos && i < (size_t)B * T; i++)
        if (pos[i] < 0 || pos[i] >= maxT)
            return fsdp_set_error(FSDP_EINVAL, "%s: position %d at %zu is outside [0, maxT=%d)", fn, pos[i],
                                  i, maxT);
    return FSDP_OK;
}

fsdp_status fsdp_encoder_forward(float *out, const int *tokens, const void *wte, const void *wpe,
                                 fsdp_dtype pdt, int B, int T, int C, int Vrows, int maxT) {
    return fsdp_encoder_forward_pos(out, tokens, NULL, wte, wpe, pdt, B, T, C, Vrows, maxT);
}

fsdp_status fsdp_encoder_forward_pos(float *out, const int *tokens, const int *pos, const void *wte,
                                     const void *wpe, fsdp_dtype pdt, int B, int T, int C, int Vrows,
                                     int maxT) {
    FSDP_PROF_SCOPE(FSDP_PROF_ENCODER);
    FSDP_TRY(check_enc("fsdp_encoder_forward", pos, B, T, C, Vrows, maxT));
    if (!out || !tokens || !wte) return FSDP_ERR(FSDP_EINVAL, "out, tokens and wte must be non-NULL");
    FSDP_TRY(check_pdt(__func__, pdt));
    FSDP_TRY(check_tokens(__func__, tokens, (size_t)B * T, Vrows));
    long rows = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        int t = pos ? pos[r] : (int)(r % T);
        size_t we = (size_t)tokens[r] * C, pe = (size_t)t * C;
        float *o = out + (size_t)r * C;
        if (!wpe && pdt == FSDP_F32) {
            memcpy(o, (const float *)wte + we, (size_t)C * sizeof(float));
        } else if (!wpe) {
            const fsdp_bf16 *a = (const fsdp_bf16 *)wte + we;
            for (int c = 0; c < C; c++)
                o[c] = bf16_val(a[c]);
        } else if (pdt == FSDP_F32) {
            const float *a = (const float *)wte + we, *b = (const float *)wpe + pe;
            for (int c = 0; c < C; c++)
                o[c] = a[c] + b[c];
        } else {
            const fsdp_bf16 *a = (const fsdp_bf16 *)wte + we, *b = (const fsdp_bf16 *)wpe + pe;
            for (int c = 0; c < C; c++)
                o[c] = bf16_val(a[c]) + bf16_val(b[c]);
        }
    }
    return FSDP_OK;
}

fsdp_status fsdp_encoder_backward(float *dwte, int dwte_acc, float *dwpe, int dwpe_acc, const float *dout,
                                  const int *tokens, int B, int T, int C, int Vrows, int maxT) {
    return fsdp_encoder_backward_pos(dwte, dwte_acc, dwpe, dwpe_acc, dout, tokens, NULL, B, T, C, Vrows,
                                     maxT);
}

fsdp_status fsdp_encoder_backward_pos(float *dwte, int dwte_acc, float *dwpe, int dwpe_acc, const float *dout,
                                      const int *tokens, const int *pos, int B, int T, int C, int Vrows,
                                      int maxT) {
    FSDP_PROF_SCOPE(FSDP_PROF_ENCODER);
    FSDP_TRY(check_enc("fsdp_encoder_backward", pos, B, T, C, Vrows, maxT));
    if (!dout || !tokens) return FSDP_ERR(FSDP_EINVAL, "dout and tokens must be non-NULL");
    FSDP_TRY(check_tokens(__func__, tokens, (size_t)B * T, Vrows));
    if (dwte) {
        if (!dwte_acc) {
            long nrow = Vrows;
#pragma omp parallel for schedule(static)
            for (long v = 0; v < nrow; v++)
                memset(dwte + (size_t)v * C, 0, (size_t)C * sizeof(float));
        }
        /* Scatter-add: channel blocks (one cache line) are split over threads, so no two threads touch
         * the same element, and each element sums its tokens in (b, t) order: deterministic. */
        enum { CB = 16 };
        int nb = (C + CB - 1) / CB;
        long rows = (long)B * T;
#pragma omp parallel for schedule(static)
        for (int cb = 0; cb < nb; cb++) {
            int c0 = cb * CB, c1 = c0 + CB < C ? c0 + CB : C;
            for (long r = 0; r < rows; r++) {
                float *g = dwte + (size_t)tokens[r] * C;
                const float *d = dout + (size_t)r * C;
                for (int c = c0; c < c1; c++)
                    g[c] += d[c];
            }
        }
    }
    if (dwpe && pos) { /* scatter-add by position, as dwte's by token: deterministic */
        if (!dwpe_acc) {
#pragma omp parallel for schedule(static)
            for (int t = 0; t < maxT; t++)
                memset(dwpe + (size_t)t * C, 0, (size_t)C * sizeof(float));
        }
        enum { CB = 16 };
        int nb = (C + CB - 1) / CB;
        long rows = (long)B * T;
#pragma omp parallel for schedule(static)
        for (int cb = 0; cb < nb; cb++) {
            int c0 = cb * CB, c1 = c0 + CB < C ? c0 + CB : C;
            for (long r = 0; r < rows; r++) {
                float *g = dwpe + (size_t)pos[r] * C;
                const float *d = dout + (size_t)r * C;
                for (int c = c0; c < c1; c++)
                    g[c] += d[c];
            }
        }
    } else if (dwpe) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < maxT; t++) {
            float *g = dwpe + (size_t)t * C;
            if (t >= T) {
                if (!dwpe_acc) memset(g, 0, (size_t)C * sizeof(float));
                continue;
            }
            for (int c = 0; c < C; c++) {
                float s = 0.0f;
                for (int b = 0; b < B; b++)
                    s += dout[((size_t)b * T + t) * C + c];
                g[c] = dwpe_acc ? g[c] + s : s;
            }
        }
    }
    return FSDP_OK;
}

/* ---------------------------------------------------------------- LayerNorm
 * The per-row and per-column-block bodies are always_inline and instantiated twice: generic, and
 * compiled for AVX-512 (512-bit `omp simd`) when fsdp_simd_active() says so. Row statistics are
 * `omp simd` reductions in double (the vector width sets the summation order: each path is
 * deterministic, paths agree to rounding); the parameter gradients sum rows in order per column on
 * every path. */

#define INL static inline __attribute__((always_inline))

INL void ln_fwd_row(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *bb,
                    int n, int C) {
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++)
        s += x[c];
    double m = s / C, v = 0.0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
        v += ((double)x[c] - m) * ((double)x[c] - m);
    float mf = (float)m, rs = (float)(1.0 / sqrt(v / C + (double)FSDP_LAYERNORM_EPS));
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - mf) * rs * w[c] + bb[c];
    if (mean) mean[n] = mf;
    if (rstd) rstd[n] = rs;
}

enum { LN_CB = 32 }; /* columns per parameter-gradient work item */

INL void ln_bwd_params_block(float *dweight, float *dbias, int dparam_acc, const float *dout,
                             const float *inp, const float *mean, const float *rstd, int cb, int N, int C) {
    double sw[LN_CB] = {0}, sb[LN_CB] = {0};
    int c0 = cb * LN_CB, c1 = c0 + LN_CB < C ? c0 + LN_CB : C;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C + c0, *d = dout + (size_t)n * C + c0;
        float m = mean[n], rs = rstd[n];
#pragma omp simd
        for (int c = 0; c < c1 - c0; c++) {
            sw[c] += (double)((x[c] - m) * rs) * d[c];
            sb[c] += d[c];
        }
    }
    for (int c = c0; c < c1; c++) {
        if (dweight) dweight[c] = (float)(dparam_acc ? dweight[c] + sw[c - c0] : sw[c - c0]);
        if (dbias) dbias[c] = (float)(dparam_acc ? dbias[c] + sb[c - c0] : sb[c - c0]);
    }
}

INL void ln_bwd_row(float *dinp, int dinp_acc, const float *dout, const float *inp, const float *w,
                    const float *mean, const float *rstd, int n, int C) {
    const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
    float *g = dinp + (size_t)n * C;
    float m = mean[n], rs = rstd[n];
    double a = 0.0, b = 0.0; /* sums of w*dout and of w*dout*xhat */
#pragma omp simd reduction(+ : a, b)
    for (int c = 0; c < C; c++) {
        float dn = w[c] * d[c];
        a += dn;
        b += (double)dn * ((x[c] - m) * rs);
    }
    float am = (float)(a / C), bm = (float)(b / C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xh = (x[c] - m) * rs;
        float v = (w[c] * d[c] - am - xh * bm) * rs;
        g[c] = dinp_acc ? g[c] + v : v;
    }
}

/* The three parallel loops, once per ISA. */
#define LN_DRIVERS(sfx, attr)                                                                                \
    attr static void ln_fwd_##sfx(float *out, float *mean, float *rstd, const float *inp, const float *w,    \
                                  const float *bb, int N, int C) {                                           \
        _Pragma("omp parallel for schedule(static)") for (int n = 0; n < N; n++)                             \
            ln_fwd_row(out, mean, rstd, inp, w, bb, n, C);                                                   \
    }                                                                                                        \
    attr static void ln_bwd_params_##sfx(float *dweight, float *dbias, int dparam_acc, const float *dout,    \
                                         const float *inp, const float *mean, const float *rstd, int N,      \
                                         int C) {                                                            \
        int nb = (C + LN_CB - 1) / LN_CB;                                                                    \
        _Pragma("omp parallel for schedule(static)") for (int cb = 0; cb < nb; cb++)                         \
            ln_bwd_params_block(dweight, dbias, dparam_acc, dout, inp, mean, rstd, cb, N, C);                \
    }                                                                                                        \
    attr static void ln_bwd_dinp_##sfx(float *dinp, int dinp_acc, const float *dout, const float *inp,       \
                                       const float *w, const float *mean, const float *rstd, int N, int C) { \
        _Pragma("omp parallel for schedule(static)") for (int n = 0; n < N; n++)                             \
            ln_bwd_row(dinp, dinp_acc, dout, inp, w, mean, rstd, n, C);                                      \
    }

LN_DRIVERS(generic, )
#if defined(__x86_64__) || defined(__i386__)
#define OPS_X86 1
LN_DRIVERS(avx512, FSDP_TARGET_AVX512 __attribute__((FSDP_NOCONTRACT)))
#endif

static int use_avx512(void) {
#ifdef OPS_X86
    return fsdp_simd_active() == FSDP_SIMD_AVX512;
#else
    return 0;
#endif
}

fsdp_status fsdp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const void *weight,
                                   const void *bias, fsdp_dtype pdt, int N, int C) {
    FSDP_PROF_SCOPE(FSDP_PROF_LAYERNORM);
    if (N <= 0 || C <= 0) return FSDP_ERR(FSDP_EINVAL, "dims must be positive, got N=%d C=%d", N, C);
    if (!out || !inp || !weight || !bias)
        return FSDP_ERR(FSDP_EINVAL, "out, inp, weight and bias must be non-NULL");
    FSDP_TRY(check_pdt(__func__, pdt));
    float *w = NULL, *bb = NULL;
    fsdp_status st = param_to_f32(weight, pdt, (size_t)C, &w);
    if (st == FSDP_OK) st = param_to_f32(bias, pdt, (size_t)C, &bb);
    if (st != FSDP_OK) goto done;
#ifdef OPS_X86
    if (use_avx512())
        ln_fwd_avx512(out, mean, rstd, inp, w, bb, N, C);
    else
#endif
        ln_fwd_generic(out, mean, rstd, inp, w, bb, N, C);
done:
    fsdp_mem_free(bb);
    fsdp_mem_free(w);
    return st;
}

fsdp_status fsdp_layernorm_backward(float *dinp, int dinp_acc, float *dweight, float *dbias, int dparam_acc,
                                    const float *dout, const float *inp, const void *weight, fsdp_dtype pdt,
                                    const float *mean, const float *rstd, int N, int C) {
    FSDP_PROF_SCOPE(FSDP_PROF_LAYERNORM);
    if (N <= 0 || C <= 0) return FSDP_ERR(FSDP_EINVAL, "dims must be positive, got N=%d C=%d", N, C);
    if (!dout || !inp || !mean || !rstd)
        return FSDP_ERR(FSDP_EINVAL,
                        "dout, inp, mean and rstd must be non-NULL (mean/rstd from the forward)");
    if (dinp && !weight) return FSDP_ERR(FSDP_EINVAL, "dinp requested but weight is NULL");
    FSDP_TRY(check_pdt(__func__, pdt));
    const int v512 = use_avx512();
    if (dweight || dbias) {
#ifdef OPS_X86
        if (v512)
            ln_bwd_params_avx512(dweight, dbias, dparam_acc, dout, inp, mean, rstd, N, C);
        else
#endif
            ln_bwd_params_generic(dweight, dbias, dparam_acc, dout, inp, mean, rstd, N, C);
    }
    if (!dinp) return FSDP_OK;
    float *w = NULL;
    FSDP_TRY(param_to_f32(weight, pdt, (size_t)C, &w));
#ifdef OPS_X86
    if (v512)
        ln_bwd_dinp_avx512(dinp, dinp_acc, dout, inp, w, mean, rstd, N, C);
    else
#endif
        ln_bwd_dinp_generic(dinp, dinp_acc, dout, inp, w, mean, rstd, N, C);
    (void)v512;
    fsdp_mem_free(w);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- GELU, residual */

/* GELU through vmath (x * sigmoid(2y), vectorised; accuracy contract in vmath.h), split over threads
 * in fixed chunks. */
#define GELU_CHUNK ((size_t)1 << 14)

fsdp_status fsdp_gelu_forward(float *out, const float *inp, size_t n) {
    FSDP_PROF_SCOPE(FSDP_PROF_GELU);
    if (!out || !inp) return FSDP_ERR(FSDP_EINVAL, "out and inp must be non-NULL");
    long nc = (long)((n + GELU_CHUNK - 1) / GELU_CHUNK);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (long c = 0; c < nc; c++) {
        size_t o = (size_t)c * GELU_CHUNK, len = n - o < GELU_CHUNK ? n - o : GELU_CHUNK;
        fsdp_vgelu_forward(out + o, inp + o, len);
    }
    return FSDP_OK;
}

fsdp_status fsdp_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    FSDP_PROF_SCOPE(FSDP_PROF_GELU);
    if (!dinp || !inp || !dout) return FSDP_ERR(FSDP_EINVAL, "dinp, inp and dout must be non-NULL");
    if (dinp == inp) return FSDP_ERR(FSDP_EINVAL, "dinp must not alias inp (it may alias dout)");
    long nc = (long)((n + GELU_CHUNK - 1) / GELU_CHUNK);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (long c = 0; c < nc; c++) {
        size_t o = (size_t)c * GELU_CHUNK, len = n - o < GELU_CHUNK ? n - o : GELU_CHUNK;
        fsdp_vgelu_backward(dinp + o, inp + o, dout + o, len);
    }
    return FSDP_OK;
}

fsdp_status fsdp_residual_forward(float *out, const float *a, const float *b, size_t n) {
    FSDP_PROF_SCOPE(FSDP_PROF_RESIDUAL);
    if (!out || !a || !b) return FSDP_ERR(FSDP_EINVAL, "out, a and b must be non-NULL");
    long ln = (long)n;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < ln; i++)
        out[i] = a[i] + b[i];
    return FSDP_OK;
}

fsdp_status fsdp_residual_backward(float *da, float *db, const float *dout, size_t n, int accumulate) {
    FSDP_PROF_SCOPE(FSDP_PROF_RESIDUAL);
    if (!dout) return FSDP_ERR(FSDP_EINVAL, "dout must be non-NULL");
    if (accumulate && (da == dout || db == dout))
        return FSDP_ERR(FSDP_EINVAL, "da/db may alias dout only with accumulate == 0");
    long ln = (long)n;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < ln; i++) {
        float d = dout[i];
        if (da) da[i] = accumulate ? da[i] + d : d;
        if (db) db[i] = accumulate ? db[i] + d : d;
    }
    return FSDP_OK;
}
