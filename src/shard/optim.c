/* optim.c — the optimizer side of the shard layer: global gradient-norm clipping over the fp32 sharded
 * gradients (one all-reduce, each element counted once) and AdamW on the fp32 master shards in
 * torch.optim.AdamW's formula order, with per-tensor no-decay ranges. */
#include "shard/shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SHARD_X86 1
#endif

/* gnu11 lets GCC fuse a*b + c into one fma wherever the target has FMA (-ffp-contract=fast), even
 * across intrinsics; that would round p*decay + step once instead of twice and break the bit-exact
 * match with torch. Every function here that does arithmetic keeps one rounding per operation. */
FSDP_FILE_NOCONTRACT

/* Calls fn(u, tensor, lo, hi) for each non-alias tensor's part of [r_lo, r_hi) (flat indices):
 * layout gaps and padding are never visited, aliases take no space so nothing is visited twice. */
#define FOR_TENSOR_RANGES(u, r_lo, r_hi, t, lo, hi)                                                          \
    for (int t = 0; t < (u)->n_tensors; t++)                                                                 \
        for (size_t lo = (u)->tensors[t].offset > (r_lo) ? (u)->tensors[t].offset : (r_lo),                  \
                    hi = (u)->tensors[t].offset + (u)->tensors[t].numel < (r_hi)                             \
                             ? (u)->tensors[t].offset + (u)->tensors[t].numel                                \
                             : (r_hi);                                                                       \
             (u)->tensors[t].alias_of < 0 && lo < hi; lo = hi)

/* The path for this call: the process-wide fsdp_simd choice (tests force each one); AVX2 also needs
 * FMA, which every AVX2 CPU fsdp.c targets has, but the check is cheap. */
static int simd_path(void) {
#ifdef SHARD_X86
    fsdp_simd s = fsdp_simd_active();
    if (s == FSDP_SIMD_AVX512) return 2;
    if (s == FSDP_SIMD_AVX2 && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

/* sum of g[k]^2 in double. Each (double)g*g is exact, so an fma into a double accumulator rounds
 * exactly like the scalar s += g*g; the vector paths only change the order of the additions (16
 * interleaved partial sums), which moves the result by a few double ulps at most. */
static double sumsq_scalar(const float *g, size_t n) {
    double s = 0.0;
    for (size_t k = 0; k < n; k++)
        s += (double)g[k] * (double)g[k];
    return s;
}

#ifdef SHARD_X86
__attribute__((target("avx512f"), FSDP_NOCONTRACT)) static double sumsq_avx512(const float *g, size_t n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    size_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(g + k)), b = _mm512_cvtps_pd(_mm256_loadu_ps(g + k + 8));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) + sumsq_scalar(g + k, n - k);
}

__attribute__((target("avx2,fma"), FSDP_NOCONTRACT)) static double sumsq_avx2(const float *g, size_t n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(g + k)), b = _mm256_cvtps_pd(_mm_loadu_ps(g + k + 4));
        s0 = _mm256_fmadd_pd(a, a, s0);
        s1 = _mm256_fmadd_pd(b, b, s1);
    }
    __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h))) + sumsq_scalar(g + k, n - k);
}

__attribute__((target("avx512f"), FSDP_NOCONTRACT)) static void scale_avx512(float *g, size_t n, float c) {
    const __m512 cv = _mm512_set1_ps(c);
    size_t k = 0;
    for (; k + 16 <= n; k += 16)
        _mm512_storeu_ps(g + k, _mm512_mul_ps(_mm512_loadu_ps(g + k), cv));
    for (; k < n; k++)
        g[k] *= c;
}
#endif

static double sumsq(const float *g, size_t n, int path) {
#ifdef SHARD_X86
    if (path == 2) return sumsq_avx512(g, n);
    if (path == 1) return sumsq_avx2(g, n);
#endif
    (void)path;
    return sumsq_scalar(g, n);
}

/* g *= c: one rounding per element on every path. */
static void scale(float *g, size_t n, float c, int path) {
#ifdef SHARD_X86
    if (path == 2) return scale_avx512(g, n, c);
#endif
    (void)path;
    for (size_t k = 0; k < n; k++)
        g[k] *= c;
}

#define CLIP_CHUNK 65536 /* elements per OpenMP work item */

/* The sum of squares of the gradient elements this rank counts for unit u: its shard. Under NO_SHARD
 * every rank holds everything, so it counts only its fsdp_shard_range slice, and the all-reduce sums
 * every element exactly once. */
static double unit_sumsq(const fsdp_engine_t *e, const fsdp_unit_t *u, int path) {
    size_t c_off = u->shard_off, c_len = u->shard_len;
    if (e->cfg.strategy == FSDP_NO_SHARD) fsdp_shard_range(u->padded, e->rank, e->world, &c_off, &c_len);
    double local = 0.0;
    FOR_TENSOR_RANGES(u, c_off, c_off + c_len, t, lo, hi) {
        const float *g = u->grad + (lo - u->shard_off);
        size_t n = hi - lo, n_chunks = (n + CLIP_CHUNK - 1) / CLIP_CHUNK;
        double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > SHARD_OMP_MIN)
        for (size_t c = 0; c < n_chunks; c++) {
            size_t a = c * CLIP_CHUNK;
            s += sumsq(g + a, n - a < CLIP_CHUNK ? n - a : CLIP_CHUNK, path);
        }
        local += s;
    }
    return local;
}

fsdp_status fsdp_engine_clip_grad_norm(fsdp_engine_t *e, float max_norm, float *norm) {
    FSDP_PROF_SCOPE(FSDP_PROF_ADAMW);
    if (e == NULL || norm == NULL) return FSDP_ERR(FSDP_EINVAL, "engine and norm must not be NULL");
    if (isnan(max_norm))
        return FSDP_ERR(FSDP_EINVAL, "max_norm is NaN; pass > 0 to clip, <= 0 to only measure");
    const int path = simd_path();
    /* Per-unit sums, added in unit order at the end: the same bits whether or not a reduction was still
     * running. The units whose gradients are final go first, while the pending reduction (overlap:
     * the last unit's) keeps moving; then it is finished and its unit counted. */
    double *us = calloc((size_t)e->n_units + 1, sizeof *us);
    if (us == NULL) return FSDP_ERR(FSDP_ENOMEM, "clip: %d unit sums", e->n_units);
    for (int i = 0; i < e->n_units; i++) {
        if (e->units[i]->life.reducing) continue;
        us[i] = unit_sumsq(e, e->units[i], path);
        shard_progress(e);
    }
    const int pending = e->sched.pending;
    fsdp_status st = shard_drain(e, 1); /* every pending reduction is in the gradient shards */
    if (st != FSDP_OK) {
        free(us);
        return st;
    }
    if (pending >= 0) us[pending] = unit_sumsq(e, e->units[pending], path);
    double local = 0.0;
    for (int i = 0; i < e->n_units; i++)
        local += us[i];
    free(us);
    /* One F32 all-reduce of the double as a (hi, lo) float pair keeps ~48 bits of the local sums. */
    float pair[2];
    pair[0] = (float)local;
    pair[1] = isfinite(pair[0]) ? (float)(local - (double)pair[0]) : 0.0f; /* Inf stays Inf, not NaN */
    /* HYBRID: every group holds the same gradient, so the shard group's sum is the whole norm */
    fsdp_comm_set_label(e->shard_comm, "engine / clip-grad-norm all-reduce");
    FSDP_TRY(fsdp_comm_all_reduce(e->shard_comm, pair, pair, 2, FSDP_F32, FSDP_SUM));
    double total = (double)pair[0] + (double)pair[1];
    /* A NaN or Inf gradient makes the norm NaN or Inf (never 0), for the caller to see. */
    float nrm = (float)sqrt(total > 0.0 || isnan(total) ? total : 0.0);
    *norm = nrm;
    if (max_norm > 0.0f) {
        /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6) in fp32, applied if < 1. */
        float coef = max_norm / (nrm + 1e-6f);
        if (coef < 1.0f) {
            for (int i = 0; i < e->n_units; i++) {
                float *g = e->units[i]->grad;
                size_t n = e->units[i]->shard_len;
                size_t n_chunks = (n + CLIP_CHUNK - 1) / CLIP_CHUNK;
#pragma omp parallel for schedule(static) if (n > SHARD_OMP_MIN)
                for (size_t c = 0; c < n_chunks; c++) {
                    size_t a = c * CLIP_CHUNK;
                    scale(g + a, n - a < CLIP_CHUNK ? n - a : CLIP_CHUNK, coef, path);
                }
            }
        }
    }
    return FSDP_OK;
}

fsdp_adamw_config fsdp_adamw_config_default(void) {
    fsdp_adamw_config c = {
        .version = 1, .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    return c;
}

/* The double a Python script would have written for this float: the shortest decimal that rounds to
 * f, read as a double (0.9f -> 0.9, not 0.89999997615...). torch computes 1 - beta1, 1 - lr*wd and the
 * bias corrections in double from such literals; doing the same keeps the fp32 scalars identical. */
static double decimal_double(float f) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

int64_t fsdp_engine_step_count(const fsdp_engine_t *e) { return e ? e->step : 0; }
void fsdp_engine_set_step_count(fsdp_engine_t *e, int64_t step) {
    if (e) e->step = step;
}

typedef struct {
    float decay, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
} adamw_scalars;

#define ADAMW_CHUNK 16384 /* elements per OpenMP work item */

/* The element update, the reference for every SIMD path. Each operation is one IEEE-rounded fp32
 * operation (fmaf is exact-then-rounded), so the vector paths below, doing the same operations in
 * the same order, give the same bits on every machine. */
__attribute__((FSDP_NOCONTRACT)) static inline void adamw_elem(float *p, float *m, float *v, float g,
                                                               int do_decay, const adamw_scalars *sc) {
    float pk = *p;
    if (do_decay) pk = pk * sc->decay;
    float mk = fmaf(g, sc->omb1, *m * sc->b1);
    float vk = fmaf(sc->omb2 * g, g, *v * sc->b2);
    float denom = sqrtf(vk) / sc->bc2_sqrt + sc->eps;
    *p = pk + (sc->neg_step * mk) / denom;
    *m = mk;
    *v = vk;
}

__attribute__((FSDP_NOCONTRACT)) static void adamw_range_scalar(float *restrict p, float *restrict m,
                                                                float *restrict v, const float *restrict g,
                                                                size_t n, int do_decay,
                                                                const adamw_scalars *sc) {
    for (size_t k = 0; k < n; k++)
        adamw_elem(p + k, m + k, v + k, g[k], do_decay, sc);
}

#ifdef SHARD_X86
__attribute__((target("avx512f,fma"), FSDP_NOCONTRACT)) static void
adamw_range_avx512(float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
                   int do_decay, const adamw_scalars *sc) {
    const __m512 decay = _mm512_set1_ps(do_decay ? sc->decay : 1.0f), b1 = _mm512_set1_ps(sc->b1);
    const __m512 omb1 = _mm512_set1_ps(sc->omb1), b2 = _mm512_set1_ps(sc->b2),
                 omb2 = _mm512_set1_ps(sc->omb2);
    const __m512 bc2 = _mm512_set1_ps(sc->bc2_sqrt), eps = _mm512_set1_ps(sc->eps);
    const __m512 nstep = _mm512_set1_ps(sc->neg_step);
    size_t k = 0;
    /* p * 1.0f is exact, so a no-decay tensor may share the multiply. */
    for (; k + 16 <= n; k += 16) {
        __m512 gk = _mm512_loadu_ps(g + k);
        __m512 pk = _mm512_mul_ps(_mm512_loadu_ps(p + k), decay);
        __m512 mk = _mm512_fmadd_ps(gk, omb1, _mm512_mul_ps(_mm512_loadu_ps(m + k), b1));
        __m512 vk = _mm512_fmadd_ps(_mm512_mul_ps(omb2, gk), gk, _mm512_mul_ps(_mm512_loadu_ps(v + k), b2));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vk), bc2), eps);
        pk = _mm512_add_ps(pk, _mm512_div_ps(_mm512_mul_ps(nstep, mk), denom));
        _mm512_storeu_ps(p + k, pk);
        _mm512_storeu_ps(m + k, mk);
        _mm512_storeu_ps(v + k, vk);
    }
    for (; k < n; k++)
        adamw_elem(p + k, m + k, v + k, g[k], do_decay, sc);
}

__attribute__((target("avx2,fma"), FSDP_NOCONTRACT)) static void
adamw_range_avx2(float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
                 int do_decay, const adamw_scalars *sc) {
    const __m256 decay = _mm256_set1_ps(do_decay ? sc->decay : 1.0f), b1 = _mm256_set1_ps(sc->b1);
    const __m256 omb1 = _mm256_set1_ps(sc->omb1), b2 = _mm256_set1_ps(sc->b2),
                 omb2 = _mm256_set1_ps(sc->omb2);
    const __m256 bc2 = _mm256_set1_ps(sc->bc2_sqrt), eps = _mm256_set1_ps(sc->eps);
    const __m256 nstep = _mm256_set1_ps(sc->neg_step);
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 gk = _mm256_loadu_ps(g + k);
        __m256 pk = _mm256_mul_ps(_mm256_loadu_ps(p + k), decay);
        __m256 mk = _mm256_fmadd_ps(gk, omb1, _mm256_mul_ps(_mm256_loadu_ps(m + k), b1));
        __m256 vk = _mm256_fmadd_ps(_mm256_mul_ps(omb2, gk), gk, _mm256_mul_ps(_mm256_loadu_ps(v + k), b2));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vk), bc2), eps);
        pk = _mm256_add_ps(pk, _mm256_div_ps(_mm256_mul_ps(nstep, mk), denom));
        _mm256_storeu_ps(p + k, pk);
        _mm256_storeu_ps(m + k, mk);
        _mm256_storeu_ps(v + k, vk);
    }
    for (; k < n; k++)
        adamw_elem(p + k, m + k, v + k, g[k], do_decay, sc);
}
#endif

static void adamw_range(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                        size_t n, int do_decay, const adamw_scalars *sc, int path) {
#ifdef SHARD_X86
    if (path == 2) return adamw_range_avx512(p, m, v, g, n, do_decay, sc);
    if (path == 1) return adamw_range_avx2(p, m, v, g, n, do_decay, sc);
#endif
    (void)path;
    adamw_range_scalar(p, m, v, g, n, do_decay, sc);
}

/* One AdamW step in torch.optim.AdamW's order (torch 1.13 single-tensor path), fp32 per element:
 *   p = p * (1 - lr*wd)                 [not for no_decay tensors]
 *   m = m * b1 + (1 - b1) * g           (fused: see below)
 *   v = v * b2 + ((1 - b2) * g) * g     (fused)
 *   denom = sqrt(v) / sqrt(bc2) + eps    bc1 = 1 - b1^t, bc2 = 1 - b2^t (double)
 *   p = p + (-(lr / bc1) * m) / denom
 * Scalars are formed in double and rounded to fp32 once, as torch does with Python floats. The m and v
 * updates are fused multiply-adds, m = fma(g, 1-b1, m*b1) and v = fma((1-b2)*g, g, v*b2), as torch's
 * vectorised CPU kernels compute them: with that, 5 steps on 1000 elements matched torch 1.13's
 * AdamW bit for bit (the plain unfused form differed in 7 elements by one ulp). */
fsdp_status fsdp_engine_adamw_step(fsdp_engine_t *e, const fsdp_adamw_config *cfg) {
    FSDP_PROF_SCOPE(FSDP_PROF_ADAMW);
    if (e == NULL || cfg == NULL) return FSDP_ERR(FSDP_EINVAL, "engine and cfg must not be NULL");
    if (cfg->version != 1)
        return FSDP_ERR(FSDP_EINVAL, "adamw config version %d unsupported; use fsdp_adamw_config_default()",
                        cfg->version);
    if (!(cfg->lr >= 0.0f && isfinite(cfg->lr)) || !(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) ||
        !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f) || !(cfg->eps > 0.0f && isfinite(cfg->eps)) ||
        !(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay)))
        return FSDP_ERR(
            FSDP_EINVAL,
            "bad AdamW config lr=%g beta1=%g beta2=%g eps=%g weight_decay=%g; need lr >= 0, betas in "
            "[0,1), eps > 0, weight_decay >= 0",
            (double)cfg->lr, (double)cfg->beta1, (double)cfg->beta2, (double)cfg->eps,
            (double)cfg->weight_decay);
    FSDP_TRY(shard_drain(e, 0)); /* gradients complete; prefetched parameters would go stale */
    e->step++;
    double lr = decimal_double(cfg->lr), b1 = decimal_double(cfg->beta1), b2 = decimal_double(cfg->beta2);
    double wd = decimal_double(cfg->weight_decay), t = (double)e->step;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const float decay = (float)(1.0 - lr * wd), b1f = (float)b1, omb1 = (float)(1.0 - b1), b2f = (float)b2,
                omb2 = (float)(1.0 - b2), bc2_sqrt = (float)sqrt(bc2), eps = cfg->eps,
                neg_step = (float)(-(lr / bc1));
    const int path = simd_path();
    for (int i = 0; i < e->n_units; i++) {
        fsdp_unit_t *u = e->units[i];
        fsdp_trace_unit_begin(u->name, "optimizer");
        FOR_TENSOR_RANGES(u, u->shard_off, u->shard_off + u->shard_len, tt, lo, hi) {
            size_t o = lo - u->shard_off, n = hi - lo;
            float *p = u->master + o, *m = u->adam_m + o, *v = u->adam_v + o;
            const float *g = u->grad + o;
            const int do_decay = !u->tensors[tt].no_decay && cfg->weight_decay != 0.0f;
            const adamw_scalars sc = {decay, b1f, omb1, b2f, omb2, bc2_sqrt, eps, neg_step};
            const size_t n_chunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (n > SHARD_OMP_MIN)
            for (size_t c = 0; c < n_chunks; c++) {
                size_t a = c * ADAMW_CHUNK, len = n - a < ADAMW_CHUNK ? n - a : ADAMW_CHUNK;
                adamw_range(p + a, m + a, v + a, g + a, len, do_decay, &sc, path);
            }
        }
        fsdp_trace_unit_end(u->name, "optimizer");
        /* the next step's first units: their gathers run while the others are updated */
        FSDP_TRY(life_after_update(&e->sched, i));
        shard_progress(e);
    }
    return FSDP_OK;
}
