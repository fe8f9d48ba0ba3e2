/* vmath.c — vectorised exp, max and GELU for the element-wise kernels (see vmath.h for the accuracy
 * contract). One algorithm, three forms: AVX-512F, AVX2+FMA and scalar, picked by fsdp_simd_active().
 * Every form does the same fp32 operations in the same order (fmaf in the scalar form), so results
 * are bit-identical across machines and paths. exp is Cephes' expf: n = rint(x log2 e), r = x - n ln2
 * in two fmas (Cody-Waite), a degree-5 polynomial for (e^r - 1 - r) / r^2, and 2^n from the exponent
 * bits. */
#include "kernels/vmath.h"

#include "core/core.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VM_X86 1
#endif

/* gnu11 lets GCC contract a*b + c into an fma where the target has one (-ffp-contract=fast), also
 * across intrinsics; that would make the vector forms round differently from the scalar form. */
FSDP_FILE_NOCONTRACT

#define EXP_HI 88.3762626647949f  /* above: +inf (e^x > FLT_MAX near 88.72; n stays <= 127) */
#define EXP_LO -87.3365478515625f /* below: 0 (e^x < 2^-126) */
#define LOG2E  1.44269504088896341f
#define LN2_HI 0.693359375f /* ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 bits, so n * LN2_HI is exact */
#define LN2_LO -2.12194440e-4f
#define P0     1.9875691500E-4f
#define P1     1.3981999507E-3f
#define P2     8.3334519073E-3f
#define P3     4.1665795894E-2f
#define P4     1.6666665459E-1f
#define P5     5.0000001201E-1f

#define GELU_K     0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A     0.044715f
#define GELU_3A    (3.0f * GELU_A)
#define GELU_CLAMP 87.0f /* |2y| beyond this: sigmoid is 0 or 1 to far below fp32 resolution */

/* ---------------------------------------------------------------- scalar forms (the definition) */

__attribute__((FSDP_NOCONTRACT)) static inline float exp1(float x) {
    if (x != x) return x + x;
    if (x > EXP_HI) return INFINITY;
    if (x < EXP_LO) return 0.0f;
    float n = rintf(x * LOG2E);
    float r = fmaf(n, -LN2_HI, x);
    r = fmaf(n, -LN2_LO, r);
    float p = fmaf(P0, r, P1);
    p = fmaf(p, r, P2);
    p = fmaf(p, r, P3);
    p = fmaf(p, r, P4);
    p = fmaf(p, r, P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* The 16 interleaved double partial sums, reduced in the order the vector forms use. */
static double lanes_reduce(const double a[16]) {
    double t[8];
    for (int i = 0; i < 8; i++)
        t[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] += t[i + 4];
    t[0] += t[2];
    t[1] += t[3];
    return t[0] + t[1];
}

/* Elements [j0, n) into the lanes acc[j % 16] (j0 a multiple of 16). */
__attribute__((FSDP_NOCONTRACT)) static void exp_shift_tail(float *out, const float *x, size_t j0, size_t n,
                                                            float shift, double acc[16]) {
    for (size_t j = j0; j < n; j++) {
        float e = exp1(x[j] - shift);
        if (out) out[j] = e;
        acc[j & 15] += e;
    }
}

__attribute__((FSDP_NOCONTRACT)) static inline float sigmoid2y(float x, float *e_out) {
    float y = GELU_K * (x + GELU_A * x * x * x);
    float u = -2.0f * y;
    u = u > GELU_CLAMP ? GELU_CLAMP : u;
    u = u < -GELU_CLAMP ? -GELU_CLAMP : u;
    float e = exp1(u);
    *e_out = e;
    return 1.0f / (1.0f + e);
}

__attribute__((FSDP_NOCONTRACT)) static inline float gelu1(float x) {
    float e;
    return x * sigmoid2y(x, &e);
}

/* gelu'(x) = s + 2x s(1-s) K (1 + 3A x^2) with s = sigmoid(2y) and 1 - s = e s. */
__attribute__((FSDP_NOCONTRACT)) static inline float gelu_grad1(float x) {
    float e, s = sigmoid2y(x, &e);
    float es = e * s;
    float dy = GELU_K * (1.0f + GELU_3A * x * x);
    return s + ((2.0f * x) * (s * es)) * dy;
}

__attribute__((FSDP_NOCONTRACT)) static float vmax_scalar(const float *x, size_t n) {
    float m = -INFINITY;
    for (size_t j = 0; j < n; j++)
        if (x[j] > m) m = x[j];
    return m;
}

#ifdef VM_X86
/* ---------------------------------------------------------------- AVX-512F */

#define T512 __attribute__((target("avx512f"), FSDP_NOCONTRACT))

T512 static inline __m512 exp16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(EXP_HI), lo = _mm512_set1_ps(EXP_LO);
    /* min/max return their second operand for a NaN: the clamp keeps NaNs. */
    __m512 xc = _mm512_max_ps(lo, _mm512_min_ps(hi, x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(P0), r, _mm512_set1_ps(P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n); /* NaN -> 0x80000000: y is NaN anyway */
    __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23));
    __m512 res = _mm512_mul_ps(y, scale);
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
}

T512 static void vexp_avx512(float *out, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(out + j, exp16(_mm512_loadu_ps(x + j)));
    for (; j < n; j++)
        out[j] = exp1(x[j]);
}

T512 static double vexp_shift_sum_avx512(float *out, const float *x, size_t n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), sh));
        if (out) _mm512_storeu_ps(out + j, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1,
                           _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    double acc[16];
    _mm512_storeu_pd(acc, s0);
    _mm512_storeu_pd(acc + 8, s1);
    exp_shift_tail(out, x, j, n, shift, acc);
    return lanes_reduce(acc);
}

T512 static float vmax_avx512(const float *x, size_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        m = _mm512_max_ps(_mm512_loadu_ps(x + j), m); /* a NaN element yields m */
    float r = _mm512_reduce_max_ps(m), t = vmax_scalar(x + j, n - j);
    return t > r ? t : r;
}

T512 static void vscale2_avx512(float *out, const float *x, size_t n, float a, float b) {
    const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(out + j, _mm512_mul_ps(av, _mm512_mul_ps(_mm512_loadu_ps(x + j), bv)));
    for (; j < n; j++)
        out[j] = a * (x[j] * b);
}

/* s = sigmoid(2y) and e = exp(-2y) for 16 lanes, as sigmoid2y. */
T512 static inline __m512 sigmoid2y16(__m512 x, __m512 *e_out) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_A), x), x), x);
    __m512 y = _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_add_ps(x, x3));
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(-2.0f), y);
    u = _mm512_max_ps(_mm512_set1_ps(-GELU_CLAMP), _mm512_min_ps(_mm512_set1_ps(GELU_CLAMP), u));
    __m512 e = exp16(u);
    *e_out = e;
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

T512 static void gelu_fwd_avx512(float *out, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 xv = _mm512_loadu_ps(x + j), e;
        _mm512_storeu_ps(out + j, _mm512_mul_ps(xv, sigmoid2y16(xv, &e)));
    }
    for (; j < n; j++)
        out[j] = gelu1(x[j]);
}

T512 static void gelu_bwd_avx512(float *dinp, const float *x, const float *dout, size_t n) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 xv = _mm512_loadu_ps(x + j), e;
        __m512 s = sigmoid2y16(xv, &e);
        __m512 es = _mm512_mul_ps(e, s);
        __m512 x2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_3A), xv), xv);
        __m512 dy = _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_add_ps(_mm512_set1_ps(1.0f), x2));
        __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(xv, xv), _mm512_mul_ps(s, es)), dy);
        __m512 g = _mm512_add_ps(s, t);
        _mm512_storeu_ps(dinp + j, _mm512_mul_ps(g, _mm512_loadu_ps(dout + j)));
    }
    for (; j < n; j++)
        dinp[j] = gelu_grad1(x[j]) * dout[j];
}

/* ---------------------------------------------------------------- AVX2 + FMA */

#define T256 __attribute__((target("avx2,fma"), FSDP_NOCONTRACT))

T256 static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(EXP_HI), lo = _mm256_set1_ps(EXP_LO);
    __m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(P0), r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    __m256 res = _mm256_mul_ps(y, scale);
    res = _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
}

T256 static void vexp_avx2(float *out, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, exp8(_mm256_loadu_ps(x + j)));
    for (; j < n; j++)
        out[j] = exp1(x[j]);
}

T256 static double vexp_shift_sum_avx2(float *out, const float *x, size_t n, float shift) {
    const __m256 sh = _mm256_set1_ps(shift);
    __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), sh));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), sh));
        if (out) {
            _mm256_storeu_ps(out + j, e0);
            _mm256_storeu_ps(out + j + 8, e1);
        }
        s[0] = _mm256_add_pd(s[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
        s[1] = _mm256_add_pd(s[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
        s[2] = _mm256_add_pd(s[2], _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
        s[3] = _mm256_add_pd(s[3], _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
    }
    double acc[16];
    for (int i = 0; i < 4; i++)
        _mm256_storeu_pd(acc + 4 * i, s[i]);
    exp_shift_tail(out, x, j, n, shift, acc);
    return lanes_reduce(acc);
}

T256 static float vmax_avx2(const float *x, size_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        m = _mm256_max_ps(_mm256_loadu_ps(x + j), m);
    float l[8];
    _mm256_storeu_ps(l, m);
    float r = vmax_scalar(l, 8), t = vmax_scalar(x + j, n - j);
    return t > r ? t : r;
}

T256 static void vscale2_avx2(float *out, const float *x, size_t n, float a, float b) {
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, _mm256_mul_ps(av, _mm256_mul_ps(_mm256_loadu_ps(x + j), bv)));
    for (; j < n; j++)
        out[j] = a * (x[j] * b);
}

T256 static inline __m256 sigmoid2y8(__m256 x, __m256 *e_out) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_A), x), x), x);
    __m256 y = _mm256_mul_ps(_mm256_set1_ps(GELU_K), _mm256_add_ps(x, x3));
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(-2.0f), y);
    u = _mm256_max_ps(_mm256_set1_ps(-GELU_CLAMP), _mm256_min_ps(_mm256_set1_ps(GELU_CLAMP), u));
    __m256 e = exp8(u);
    *e_out = e;
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

T256 static void gelu_fwd_avx2(float *out, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 xv = _mm256_loadu_ps(x + j), e;
        _mm256_storeu_ps(out + j, _mm256_mul_ps(xv, sigmoid2y8(xv, &e)));
    }
    for (; j < n; j++)
        out[j] = gelu1(x[j]);
}

T256 static void gelu_bwd_avx2(float *dinp, const float *x, const float *dout, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 xv = _mm256_loadu_ps(x + j), e;
        __m256 s = sigmoid2y8(xv, &e);
        __m256 es = _mm256_mul_ps(e, s);
        __m256 x2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_3A), xv), xv);
        __m256 dy = _mm256_mul_ps(_mm256_set1_ps(GELU_K), _mm256_add_ps(_mm256_set1_ps(1.0f), x2));
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(xv, xv), _mm256_mul_ps(s, es)), dy);
        __m256 g = _mm256_add_ps(s, t);
        _mm256_storeu_ps(dinp + j, _mm256_mul_ps(g, _mm256_loadu_ps(dout + j)));
    }
    for (; j < n; j++)
        dinp[j] = gelu_grad1(x[j]) * dout[j];
}
#endif

/* ---------------------------------------------------------------- dispatch */

/* 2: AVX-512F, 1: AVX2 + FMA, 0: scalar. Follows fsdp_simd_force (tests run every path). */
static int vm_path(void) {
#ifdef VM_X86
    fsdp_simd s = fsdp_simd_active();
    if (s == FSDP_SIMD_AVX512) return 2;
    if (s == FSDP_SIMD_AVX2 && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

void fsdp_vexp(float *out, const float *x, size_t n) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: vexp_avx512(out, x, n); return;
    case 1: vexp_avx2(out, x, n); return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        out[j] = exp1(x[j]);
}

double fsdp_vexp_shift_sum(float *out, const float *x, size_t n, float shift) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: return vexp_shift_sum_avx512(out, x, n, shift);
    case 1: return vexp_shift_sum_avx2(out, x, n, shift);
    }
#endif
    double acc[16] = {0};
    exp_shift_tail(out, x, 0, n, shift, acc);
    return lanes_reduce(acc);
}

float fsdp_vmax(const float *x, size_t n) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: return vmax_avx512(x, n);
    case 1: return vmax_avx2(x, n);
    }
#endif
    return vmax_scalar(x, n);
}

__attribute__((FSDP_NOCONTRACT)) void fsdp_vscale2(float *out, const float *x, size_t n, float a, float b) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: vscale2_avx512(out, x, n, a, b); return;
    case 1: vscale2_avx2(out, x, n, a, b); return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        out[j] = a * (x[j] * b);
}

void fsdp_vgelu_forward(float *out, const float *x, size_t n) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: gelu_fwd_avx512(out, x, n); return;
    case 1: gelu_fwd_avx2(out, x, n); return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        out[j] = gelu1(x[j]);
}

__attribute__((FSDP_NOCONTRACT)) void fsdp_vgelu_backward(float *dinp, const float *x, const float *dout,
                                                          size_t n) {
#ifdef VM_X86
    switch (vm_path()) {
    case 2: gelu_bwd_avx512(dinp, x, dout, n); return;
    case 1: gelu_bwd_avx2(dinp, x, dout, n); return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        dinp[j] = gelu_grad1(x[j]) * dout[j];
}
