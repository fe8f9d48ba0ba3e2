/* device_cpu.c — the CPU device row (device.h): every call runs at once on the calling thread, streams
 * and events are NULL, memory is the tracked allocator's. The element ops are the engine's loops as they
 * were in shard/main_grad.c and shard/optim.c (moved here unchanged, so the CPU keeps its bits): fixed
 * chunks over OpenMP threads, and for the sum of squares, the scaling and AdamW the run-time SIMD path
 * (fsdp_simd_active). */
#include "core/device.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DEV_X86 1
#endif

/* gnu11 lets GCC fuse a*b + c into one fma wherever the target has FMA (-ffp-contract=fast), even
 * across intrinsics; that would round p*decay + step once instead of twice and break the bit-exact
 * match with torch. Every function here that does arithmetic keeps one rounding per operation. */
FSDP_FILE_NOCONTRACT

/* Element loops shorter than this run on one thread: a parallel region costs more than it saves, and
 * with ranks oversubscribing the cores idle OpenMP threads spin against the other ranks. */
#define DEV_OMP_MIN 32768
#define SUMSQ_CHUNK 65536 /* elements per OpenMP work item of the sum of squares and the scaling */

/* The path for this call: the process-wide fsdp_simd choice (tests force each one); AVX2 also needs
 * FMA, which every AVX2 CPU fsdp.c targets has, but the check is cheap. */
static int simd_path(void) {
#ifdef DEV_X86
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

#ifdef DEV_X86
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
#ifdef DEV_X86
    if (path == 2) return sumsq_avx512(g, n);
    if (path == 1) return sumsq_avx2(g, n);
#endif
    (void)path;
    return sumsq_scalar(g, n);
}

/* g *= c: one rounding per element on every path. */
static void scale(float *g, size_t n, float c, int path) {
#ifdef DEV_X86
    if (path == 2) return scale_avx512(g, n, c);
#endif
    (void)path;
    for (size_t k = 0; k < n; k++)
        g[k] *= c;
}

#define ADAMW_CHUNK 16384 /* elements per OpenMP work item */

/* The element update, the reference for every SIMD path. Each operation is one IEEE-rounded fp32
 * operation (fmaf is exact-then-rounded), so the vector paths below, doing the same operations in
 * the same order, give the same bits on every machine. */
__attribute__((FSDP_NOCONTRACT)) static inline void adamw_elem(float *p, float *m, float *v, float g,
                                                               int do_decay, const fsdp_adamw_scalars *sc) {
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
                                                                const fsdp_adamw_scalars *sc) {
    for (size_t k = 0; k < n; k++)
        adamw_elem(p + k, m + k, v + k, g[k], do_decay, sc);
}

#ifdef DEV_X86
__attribute__((target("avx512f,fma"), FSDP_NOCONTRACT)) static void
adamw_range_avx512(float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
                   int do_decay, const fsdp_adamw_scalars *sc) {
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
                 int do_decay, const fsdp_adamw_scalars *sc) {
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
                        size_t n, int do_decay, const fsdp_adamw_scalars *sc, int path) {
#ifdef DEV_X86
    if (path == 2) return adamw_range_avx512(p, m, v, g, n, do_decay, sc);
    if (path == 1) return adamw_range_avx2(p, m, v, g, n, do_decay, sc);
#endif
    (void)path;
    adamw_range_scalar(p, m, v, g, n, do_decay, sc);
}

/* ---------------------------------------------------------------- the element ops */

void fsdp_cpu_f32_to_bf16(fsdp_bf16 *dst, const float *src, size_t n) {
    /* split over threads in fixed chunks (exact conversion: the split changes no bit) */
    const size_t ch = DEV_OMP_MIN, nc = (n + ch - 1) / ch;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++)
        fsdp_f32_to_bf16_n(dst + c * ch, src + c * ch, n - c * ch < ch ? n - c * ch : ch);
}

void fsdp_cpu_bf16_to_f32(float *dst, const fsdp_bf16 *src, size_t n, int accumulate) {
    if (accumulate)
        fsdp_bf16_add_f32_n(dst, src, n);
    else
        fsdp_bf16_to_f32_n(dst, src, n);
}

void fsdp_cpu_f32_add(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DEV_OMP_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void fsdp_cpu_axpy(float *y, const float *x, size_t n, float a) {
#pragma omp parallel for schedule(static) if (n > DEV_OMP_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i] * a;
}

double fsdp_cpu_sumsq(const float *x, size_t n) {
    const int path = simd_path();
    const size_t n_chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > DEV_OMP_MIN)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t a = c * SUMSQ_CHUNK;
        s += sumsq(x + a, n - a < SUMSQ_CHUNK ? n - a : SUMSQ_CHUNK, path);
    }
    return s;
}

void fsdp_cpu_scale(float *x, size_t n, float c) {
    const int path = simd_path();
    const size_t n_chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
#pragma omp parallel for schedule(static) if (n > DEV_OMP_MIN)
    for (size_t k = 0; k < n_chunks; k++) {
        size_t a = k * SUMSQ_CHUNK;
        scale(x + a, n - a < SUMSQ_CHUNK ? n - a : SUMSQ_CHUNK, c, path);
    }
}

void fsdp_cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, int decay,
                    const fsdp_adamw_scalars *sc) {
    const int path = simd_path();
    const size_t n_chunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (n > DEV_OMP_MIN)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t a = c * ADAMW_CHUNK, len = n - a < ADAMW_CHUNK ? n - a : ADAMW_CHUNK;
        adamw_range(p + a, m + a, v + a, g + a, len, decay, sc, path);
    }
}

void fsdp_cpu_memset0(void *p, size_t bytes) {
    const size_t ch = (size_t)DEV_OMP_MIN * sizeof(float), nc = (bytes + ch - 1) / ch;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++)
        memset((char *)p + c * ch, 0, bytes - c * ch < ch ? bytes - c * ch : ch);
}

/* ---------------------------------------------------------------- the CPU row */

static fsdp_status cpu_stream_create(fsdp_device_t *d, fsdp_stream_t **out) {
    *out = NULL;
    return FSDP_OK;
}
static void cpu_stream_destroy(fsdp_device_t *d, fsdp_stream_t *s) {}
static fsdp_status cpu_event_create(fsdp_device_t *d, fsdp_event_t **out) {
    *out = NULL;
    return FSDP_OK;
}
static void cpu_event_destroy(fsdp_device_t *d, fsdp_event_t *ev) {}
static void cpu_record(fsdp_device_t *d, fsdp_event_t *ev, fsdp_stream_t *s) {}
static void cpu_wait(fsdp_device_t *d, fsdp_stream_t *s, fsdp_event_t *ev) {}
static int cpu_query(fsdp_device_t *d, fsdp_event_t *ev) { return 1; }
static fsdp_status cpu_event_sync(fsdp_device_t *d, fsdp_event_t *ev) { return FSDP_OK; }
static fsdp_status cpu_sync(fsdp_device_t *d) { return FSDP_OK; }

static fsdp_status cpu_alloc(fsdp_device_t *d, void **out, size_t bytes, fsdp_mem_cat cat, unsigned flags,
                             fsdp_stream_t *s) {
    if (flags & FSDP_ALLOC_SHARED) {
        FSDP_TRY(fsdp_mem_alloc_shared(out, bytes, cat));
        if (flags & FSDP_ALLOC_ZERO) fsdp_cpu_memset0(*out, bytes);
        return FSDP_OK;
    }
    return (flags & FSDP_ALLOC_ZERO) ? fsdp_mem_calloc(out, bytes, cat) : fsdp_mem_alloc(out, bytes, cat);
}
static void cpu_free(fsdp_device_t *d, void *p, fsdp_stream_t *s) { fsdp_mem_free(p); }
static void cpu_memset0(fsdp_device_t *d, void *p, size_t bytes, fsdp_stream_t *s) {
    fsdp_cpu_memset0(p, bytes);
}
static void cpu_copy(fsdp_device_t *d, void *dst, const void *src, size_t bytes, fsdp_stream_t *s) {
    memcpy(dst, src, bytes);
}
static void cpu_host_fn(fsdp_device_t *d, fsdp_stream_t *s, void (*fn)(void *), const void *arg,
                        size_t arg_bytes) {
    fn((void *)arg);
}
static void cpu_f32_to_bf16(fsdp_device_t *d, fsdp_stream_t *s, fsdp_bf16 *dst, const float *src, size_t n) {
    fsdp_cpu_f32_to_bf16(dst, src, n);
}
static void cpu_bf16_to_f32(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const fsdp_bf16 *src, size_t n,
                            int accumulate) {
    fsdp_cpu_bf16_to_f32(dst, src, n, accumulate);
}
static void cpu_f32_add(fsdp_device_t *d, fsdp_stream_t *s, float *dst, const float *src, size_t n) {
    fsdp_cpu_f32_add(dst, src, n);
}
static void cpu_axpy(fsdp_device_t *d, fsdp_stream_t *s, float *y, const float *x, size_t n, float a) {
    fsdp_cpu_axpy(y, x, n, a);
}
static void cpu_sumsq(fsdp_device_t *d, fsdp_stream_t *s, const float *x, size_t n, double *out) {
    *out = fsdp_cpu_sumsq(x, n);
}
static void cpu_scale(fsdp_device_t *d, fsdp_stream_t *s, float *x, size_t n, float c) {
    fsdp_cpu_scale(x, n, c);
}
static void cpu_adamw(fsdp_device_t *d, fsdp_stream_t *s, float *p, float *m, float *v, const float *g,
                      size_t n, int decay, const fsdp_adamw_scalars *sc) {
    fsdp_cpu_adamw(p, m, v, g, n, decay, sc);
}

static fsdp_device_t cpu_device = {
    .name = "cpu",
    .caps = FSDP_DEV_HOST_MEMORY,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .record = cpu_record,
    .wait = cpu_wait,
    .query = cpu_query,
    .event_sync = cpu_event_sync,
    .sync = cpu_sync,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .host_fn = cpu_host_fn,
    .f32_to_bf16 = cpu_f32_to_bf16,
    .bf16_to_f32 = cpu_bf16_to_f32,
    .f32_add = cpu_f32_add,
    .axpy = cpu_axpy,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
};

fsdp_device_t *fsdp_device_cpu(void) { return &cpu_device; }
