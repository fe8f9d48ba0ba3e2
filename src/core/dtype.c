/* dtype.c — bf16 <-> f32 conversions: the scalar definitions and their bulk forms with AVX-512 and AVX2
 * paths chosen at run time. Every path gives the same bits as the scalar form for every input, so a
 * result never depends on which machine (or forced path) produced it. */
#include "core/core.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FSDP_X86 1
#endif

size_t fsdp_dtype_size(fsdp_dtype t) {
    switch (t) {
    case FSDP_F32: return 4;
    case FSDP_BF16: return 2;
    case FSDP_I32: return 4;
    case FSDP_I64: return 8;
    case FSDP_U8: return 1;
    }
    return 0;
}

const char *fsdp_dtype_name(fsdp_dtype t) {
    switch (t) {
    case FSDP_F32: return "f32";
    case FSDP_BF16: return "bf16";
    case FSDP_I32: return "i32";
    case FSDP_I64: return "i64";
    case FSDP_U8: return "u8";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- scalar definitions */

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round to nearest, ties to even, done in integers on the bit pattern: adding 0x7fff plus the lowest
 * kept bit carries into bit 16 exactly when the dropped half is above one half, or exactly one half
 * with an odd kept part. The carry runs into the exponent as IEEE requires, so the largest finite
 * values round up to infinity, subnormals round like any other value, and +-0 and +-inf are unchanged.
 * NaN: the top 16 bits are kept (sign and payload high bits) and the quiet bit (0x0040) is set, so a
 * NaN whose payload lives only in the low 16 bits cannot truncate to infinity. Consequently a
 * signalling NaN comes out quiet: f32 or bf16 signalling NaNs (quiet bit clear, payload non-zero) do
 * not round-trip bit for bit; their payload otherwise survives. */
static inline fsdp_bf16 f32_to_bf16_bits(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (fsdp_bf16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (fsdp_bf16)(u >> 16);
}

fsdp_bf16 fsdp_f32_to_bf16(float x) { return f32_to_bf16_bits(f32_bits(x)); }

/* Exact: bf16 is the top half of an f32. A NaN keeps its bits (a signalling NaN stays signalling:
 * no floating-point operation is involved). */
float fsdp_bf16_to_f32(fsdp_bf16 x) { return bits_f32((uint32_t)x << 16); }

/* NaN + anything: the dst operand's NaN (quieted) wins, else src's; the same rule x86's addps applies
 * to (dst, src), so every path returns the same NaN bits. A NaN made from non-NaN inputs (inf - inf)
 * is the hardware's default NaN on every path. */
static inline float add_f32(float d, float s) {
    float r = d + s;
    if (r != r) {
        if (d != d) return bits_f32(f32_bits(d) | 0x00400000u);
        if (s != s) return bits_f32(f32_bits(s) | 0x00400000u);
    }
    return r;
}

static void f32_to_bf16_scalar(fsdp_bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16_bits(f32_bits(src[i]));
}

static void bf16_to_f32_scalar(float *dst, const fsdp_bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = bits_f32((uint32_t)src[i] << 16);
}

static void bf16_add_f32_scalar(float *dst, const fsdp_bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = add_f32(dst[i], bits_f32((uint32_t)src[i] << 16));
}

/* The rank-order sum of k contributions at element i: ((src[0] + src[1]) + ...) + src[k-1], each
 * addition by add_f32's rule. */
static inline float sum_at(const float *const *src, int k, size_t i) {
    float a = src[0][i];
    for (int s = 1; s < k; s++)
        a = add_f32(a, src[s][i]);
    return a;
}

/* bf16 contributions: upcast (exact), the same rank-order additions, one rounding to bf16 at the end. */
static void bf16_sum_scalar(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int k, size_t i0, size_t n) {
    for (size_t i = i0; i < n; i++) {
        float a = bits_f32((uint32_t)src[0][i] << 16);
        for (int s = 1; s < k; s++)
            a = add_f32(a, bits_f32((uint32_t)src[s][i] << 16));
        dst[i] = f32_to_bf16_bits(f32_bits(a));
    }
}

/* Elements [i0, n); the vector forms finish their tails here. */
static void f32_sum_scalar(float *dst, const float *const *src, int k, size_t i0, size_t n) {
    for (size_t i = i0; i < n; i++)
        dst[i] = sum_at(src, k, i);
}

/* acc += sum * scale: the product rounded to fp32, then the addition (two roundings, never an fma). */
static void f32_sum_axpy_scalar(float *acc, const float *const *src, int k, size_t i0, size_t n,
                                float scale) {
    for (size_t i = i0; i < n; i++) {
        volatile float p = sum_at(src, k, i) * scale; /* rounded: no fma with the addition */
        acc[i] = add_f32(acc[i], p);
    }
}

#ifdef FSDP_X86
/* ---------------------------------------------------------------- AVX-512 (avx512f + avx512bw)
 * The native avx512_bf16 instruction (vcvtneps2bf16) is NOT used: it treats subnormal inputs as zero
 * (DAZ). Checked on an AMD Zen 4: 0x007fffff gives 0x0000 instead of 0x0080 and 0x00018000 gives
 * 0x0000 instead of 0x0002; its NaN handling (top bits | 0x0040) does match. The integer form below
 * is exact and still memory-bound. Tails go through the scalar code. */

/* Stores at least this many output bytes with non-temporal stores: a buffer this large does not stay
 * in cache anyway, and streaming saves the read-for-ownership of the destination (a third of the
 * traffic of an upcast-copy). Below it, ordinary stores keep the result in cache for its consumer. */
#define NT_MIN_BYTES ((size_t)8 << 20)

__attribute__((target("avx512f,avx512bw"))) static inline __m256i cvt16_avx512(__m512i u) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    const __m512i quiet = _mm512_set1_epi32(0x0040);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
    return _mm512_cvtepi32_epi16(r); /* every lane is <= 0xffff: plain truncation */
}

__attribute__((target("avx512f,avx512bw"))) static void f32_to_bf16_avx512(fsdp_bf16 *dst, const float *src,
                                                                           size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = cvt16_avx512(_mm512_loadu_si512((const void *)(src + i)));
        __m256i b = cvt16_avx512(_mm512_loadu_si512((const void *)(src + i + 16)));
        _mm512_storeu_si512((void *)(dst + i), _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
    }
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), cvt16_avx512(_mm512_loadu_si512((const void *)(src + i))));
    f32_to_bf16_scalar(dst + i, src + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) static inline __m512 up16_avx512(const fsdp_bf16 *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

__attribute__((target("avx512f,avx512bw"))) static void bf16_to_f32_avx512(float *dst, const fsdp_bf16 *src,
                                                                           size_t n) {
    size_t i = 0;
    if (n * sizeof(float) >= NT_MIN_BYTES) {
        /* Peel to a 64-byte aligned dst, then stream whole cache lines. */
        size_t head = ((64 - ((uintptr_t)dst & 63)) & 63) / sizeof(float);
        if (((uintptr_t)dst & 3) == 0 && head <= n) {
            bf16_to_f32_scalar(dst, src, head);
            for (i = head; i + 32 <= n; i += 32) {
                _mm512_stream_ps(dst + i, up16_avx512(src + i));
                _mm512_stream_ps(dst + i + 16, up16_avx512(src + i + 16));
            }
            _mm_sfence(); /* streamed stores become visible before anything this thread does next */
        }
    }
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(dst + i, up16_avx512(src + i));
        _mm512_storeu_ps(dst + i + 16, up16_avx512(src + i + 16));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, up16_avx512(src + i));
    bf16_to_f32_scalar(dst + i, src + i, n - i);
}

/* When both operands are NaN, which one vaddps returns depends on the operand order the compiler
 * picked (it treats + as commutative), so a NaN dst is put back explicitly (quieted): add_f32's rule.
 * A single NaN operand comes out quieted in either order. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512 add16_avx512(__m512 d, __m512 s) {
    __mmask16 dnan = _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    __m512i q = _mm512_mask_or_epi32(_mm512_castps_si512(_mm512_add_ps(d, s)), dnan, _mm512_castps_si512(d),
                                     _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(q);
}

__attribute__((target("avx512f,avx512bw"))) static void bf16_add_f32_avx512(float *dst, const fsdp_bf16 *src,
                                                                            size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 d0 = _mm512_loadu_ps(dst + i), d1 = _mm512_loadu_ps(dst + i + 16);
        _mm512_storeu_ps(dst + i, add16_avx512(d0, up16_avx512(src + i)));
        _mm512_storeu_ps(dst + i + 16, add16_avx512(d1, up16_avx512(src + i + 16)));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, add16_avx512(_mm512_loadu_ps(dst + i), up16_avx512(src + i)));
    bf16_add_f32_scalar(dst + i, src + i, n - i);
}

/* Sum of k contributions of 16 elements at i, in rank order (the same additions as sum_at). */
__attribute__((target("avx512f,avx512bw"))) static inline __m512 sum16_avx512(const float *const *src, int k,
                                                                              size_t i) {
    __m512 a = _mm512_loadu_ps(src[0] + i);
    for (int s = 1; s < k; s++)
        a = add16_avx512(a, _mm512_loadu_ps(src[s] + i));
    return a;
}

__attribute__((target("avx512f,avx512bw"))) static void f32_sum_avx512(float *dst, const float *const *src,
                                                                       int k, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = sum16_avx512(src, k, i), b = sum16_avx512(src, k, i + 16);
        _mm512_storeu_ps(dst + i, a);
        _mm512_storeu_ps(dst + i + 16, b);
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, sum16_avx512(src, k, i));
    f32_sum_scalar(dst, src, k, i, n);
}

/* 32 elements at a time without a cross-lane shuffle: unpacking each 128-bit lane's words against zero
 * puts elements 0-3 (and 8-11, ...) in the dwords of lo as fp32 and 4-7 (12-15, ...) in hi; packing
 * the two rounded halves back per lane restores the order. The sums run without the NaN rule, and the
 * rounding without its NaN branch: a NaN anywhere in the chain leaves a NaN in the result, so a block
 * whose results hold none needed neither, and a block that does is redone by the exact code. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i round16_nonan_avx512(__m512 a) {
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    __m512i u = _mm512_castps_si512(a);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
}

__attribute__((target("avx512f,avx512bw"))) static void
bf16_sum_avx512(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int k, size_t n) {
    size_t i = 0;
    const __m512i zero = _mm512_setzero_si512();
    for (; i + 32 <= n; i += 32) {
        __m512i w = _mm512_loadu_si512((const void *)(src[0] + i));
        __m512 lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w));
        __m512 hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w));
        for (int s = 1; s < k; s++) {
            w = _mm512_loadu_si512((const void *)(src[s] + i));
            lo = _mm512_add_ps(lo, _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w)));
            hi = _mm512_add_ps(hi, _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w)));
        }
        __mmask16 nan = _mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q);
        if (nan) {
            bf16_sum_scalar(dst, src, k, i, i + 32);
            continue;
        }
        _mm512_storeu_si512((void *)(dst + i),
                            _mm512_packus_epi32(round16_nonan_avx512(lo), round16_nonan_avx512(hi)));
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a = up16_avx512(src[0] + i);
        for (int s = 1; s < k; s++)
            a = add16_avx512(a, up16_avx512(src[s] + i));
        _mm256_storeu_si256((__m256i *)(dst + i), cvt16_avx512(_mm512_castps_si512(a)));
    }
    bf16_sum_scalar(dst, src, k, i, n);
}

/* The product of 16 sums, kept out of an fma with the addition that follows (GCC contracts across
 * intrinsics, and AVX-512F has fmas): the scalar form's two roundings. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512 prod16_avx512(__m512 a, __m512 sc) {
    __m512 p = _mm512_mul_ps(a, sc);
    __asm__("" : "+v"(p));
    return p;
}

__attribute__((target("avx512f,avx512bw"))) static void
f32_sum_axpy_avx512(float *acc, const float *const *src, int k, size_t n, float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = prod16_avx512(sum16_avx512(src, k, i), sc),
               b = prod16_avx512(sum16_avx512(src, k, i + 16), sc);
        _mm512_storeu_ps(acc + i, add16_avx512(_mm512_loadu_ps(acc + i), a));
        _mm512_storeu_ps(acc + i + 16, add16_avx512(_mm512_loadu_ps(acc + i + 16), b));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(acc + i,
                         add16_avx512(_mm512_loadu_ps(acc + i), prod16_avx512(sum16_avx512(src, k, i), sc)));
    f32_sum_axpy_scalar(acc, src, k, i, n, scale);
}

/* ---------------------------------------------------------------- AVX2 */

__attribute__((target("avx2"))) static inline __m256i cvt8_avx2(__m256i u) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    /* |u| as a signed int is non-negative, so the signed compare is the unsigned one. */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(fsdp_bf16 *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = cvt8_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i b = cvt8_avx2(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus works per 128-bit lane: [a0-3 b0-3 a4-7 b4-7]; the permute restores the order.
         * Lanes are <= 0xffff as non-negative int32, so the unsigned saturation never bites. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    f32_to_bf16_scalar(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static inline __m256 up8_avx2(const fsdp_bf16 *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(float *dst, const fsdp_bf16 *src, size_t n) {
    size_t i = 0;
    if (n * sizeof(float) >= NT_MIN_BYTES) {
        size_t head = ((32 - ((uintptr_t)dst & 31)) & 31) / sizeof(float);
        if (((uintptr_t)dst & 3) == 0 && head <= n) {
            bf16_to_f32_scalar(dst, src, head);
            for (i = head; i + 16 <= n; i += 16) {
                _mm256_stream_ps(dst + i, up8_avx2(src + i));
                _mm256_stream_ps(dst + i + 8, up8_avx2(src + i + 8));
            }
            _mm_sfence();
        }
    }
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(dst + i, up8_avx2(src + i));
        _mm256_storeu_ps(dst + i + 8, up8_avx2(src + i + 8));
    }
    bf16_to_f32_scalar(dst + i, src + i, n - i);
}

/* Same NaN rule as add16_avx512. */
__attribute__((target("avx2"))) static inline __m256 add8_avx2(__m256 d, __m256 s) {
    __m256 dnan = _mm256_cmp_ps(d, d, _CMP_UNORD_Q);
    __m256 dq = _mm256_or_ps(d, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
    return _mm256_blendv_ps(_mm256_add_ps(d, s), dq, dnan);
}

__attribute__((target("avx2"))) static void bf16_add_f32_avx2(float *dst, const fsdp_bf16 *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_loadu_ps(dst + i), d1 = _mm256_loadu_ps(dst + i + 8);
        _mm256_storeu_ps(dst + i, add8_avx2(d0, up8_avx2(src + i)));
        _mm256_storeu_ps(dst + i + 8, add8_avx2(d1, up8_avx2(src + i + 8)));
    }
    bf16_add_f32_scalar(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static inline __m256 sum8_avx2(const float *const *src, int k, size_t i) {
    __m256 a = _mm256_loadu_ps(src[0] + i);
    for (int s = 1; s < k; s++)
        a = add8_avx2(a, _mm256_loadu_ps(src[s] + i));
    return a;
}

__attribute__((target("avx2"))) static void f32_sum_avx2(float *dst, const float *const *src, int k,
                                                         size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, sum8_avx2(src, k, i));
    f32_sum_scalar(dst, src, k, i, n);
}

__attribute__((target("avx2"))) static void bf16_sum_avx2(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int k,
                                                          size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = up8_avx2(src[0] + i), b = up8_avx2(src[0] + i + 8);
        for (int s = 1; s < k; s++) {
            a = add8_avx2(a, up8_avx2(src[s] + i));
            b = add8_avx2(b, up8_avx2(src[s] + i + 8));
        }
        __m256i p = _mm256_packus_epi32(cvt8_avx2(_mm256_castps_si256(a)), cvt8_avx2(_mm256_castps_si256(b)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(p, 0xD8));
    }
    bf16_sum_scalar(dst, src, k, i, n);
}

/* target avx2 has no fma: the product and the addition stay two roundings. */
__attribute__((target("avx2"))) static void f32_sum_axpy_avx2(float *acc, const float *const *src, int k,
                                                              size_t n, float scale) {
    const __m256 sc = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i,
                         add8_avx2(_mm256_loadu_ps(acc + i), _mm256_mul_ps(sum8_avx2(src, k, i), sc)));
    f32_sum_axpy_scalar(acc, src, k, i, n, scale);
}
#endif /* FSDP_X86 */

/* ---------------------------------------------------------------- dispatch */

static int simd_supported(fsdp_simd p) {
    switch (p) {
    case FSDP_SIMD_SCALAR: return 1;
#ifdef FSDP_X86
    /* __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0). */
    case FSDP_SIMD_AVX2: return __builtin_cpu_supports("avx2");
    case FSDP_SIMD_AVX512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif
    default: return 0;
    }
}

static fsdp_simd simd_best(void) {
    if (simd_supported(FSDP_SIMD_AVX512)) return FSDP_SIMD_AVX512;
    if (simd_supported(FSDP_SIMD_AVX2)) return FSDP_SIMD_AVX2;
    return FSDP_SIMD_SCALAR;
}

/* The path in use: FSDP_SIMD_AUTO until first resolved. A relaxed atomic is enough: every path
 * computes the same bits, so a thread seeing a stale choice is still correct. */
static _Atomic int simd_cur = FSDP_SIMD_AUTO;

static fsdp_simd simd_get(void) {
    int p = atomic_load_explicit(&simd_cur, memory_order_relaxed);
    if (p == FSDP_SIMD_AUTO) {
        p = simd_best();
        atomic_store_explicit(&simd_cur, p, memory_order_relaxed);
    }
    return (fsdp_simd)p;
}

fsdp_status fsdp_simd_force(fsdp_simd path) {
    if (path == FSDP_SIMD_AUTO) {
        atomic_store_explicit(&simd_cur, simd_best(), memory_order_relaxed);
        return FSDP_OK;
    }
    if ((int)path < FSDP_SIMD_SCALAR || (int)path > FSDP_SIMD_AVX512)
        return FSDP_ERR(FSDP_EINVAL, "SIMD path %d is not one of auto, scalar, avx2, avx512", (int)path);
    if (!simd_supported(path))
        return FSDP_ERR(FSDP_EUNSUPPORTED, "this CPU (or build) cannot run the %s path; use auto or scalar",
                        fsdp_simd_name(path));
    atomic_store_explicit(&simd_cur, (int)path, memory_order_relaxed);
    return FSDP_OK;
}

fsdp_simd fsdp_simd_active(void) { return simd_get(); }

const char *fsdp_simd_name(fsdp_simd path) {
    switch (path) {
    case FSDP_SIMD_AUTO: return "auto";
    case FSDP_SIMD_SCALAR: return "scalar";
    case FSDP_SIMD_AVX2: return "avx2";
    case FSDP_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

void fsdp_f32_to_bf16_n(fsdp_bf16 *dst, const float *src, size_t n) {
    if (n == 0) return; /* dst and src may be NULL then */
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: f32_to_bf16_avx512(dst, src, n); return;
    case FSDP_SIMD_AVX2: f32_to_bf16_avx2(dst, src, n); return;
#endif
    default: f32_to_bf16_scalar(dst, src, n); return;
    }
}

void fsdp_bf16_to_f32_n(float *dst, const fsdp_bf16 *src, size_t n) {
    if (n == 0) return; /* dst and src may be NULL then */
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: bf16_to_f32_avx512(dst, src, n); return;
    case FSDP_SIMD_AVX2: bf16_to_f32_avx2(dst, src, n); return;
#endif
    default: bf16_to_f32_scalar(dst, src, n); return;
    }
}

void fsdp_bf16_add_f32_n(float *dst, const fsdp_bf16 *src, size_t n) {
    if (n == 0) return; /* dst and src may be NULL then */
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: bf16_add_f32_avx512(dst, src, n); return;
    case FSDP_SIMD_AVX2: bf16_add_f32_avx2(dst, src, n); return;
#endif
    default: bf16_add_f32_scalar(dst, src, n); return;
    }
}

void fsdp_f32_sum_n(float *dst, const float *const *src, int k, size_t n) {
    if (n == 0 || k < 1) return;
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: f32_sum_avx512(dst, src, k, n); return;
    case FSDP_SIMD_AVX2: f32_sum_avx2(dst, src, k, n); return;
#endif
    default: f32_sum_scalar(dst, src, k, 0, n); return;
    }
}

void fsdp_bf16_sum_n(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int k, size_t n) {
    if (n == 0 || k < 1) return;
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: bf16_sum_avx512(dst, src, k, n); return;
    case FSDP_SIMD_AVX2: bf16_sum_avx2(dst, src, k, n); return;
#endif
    default: bf16_sum_scalar(dst, src, k, 0, n); return;
    }
}

void fsdp_f32_sum_axpy_n(float *acc, const float *const *src, int k, size_t n, float scale) {
    if (n == 0 || k < 1) return;
    switch (simd_get()) {
#ifdef FSDP_X86
    case FSDP_SIMD_AVX512: f32_sum_axpy_avx512(acc, src, k, n, scale); return;
    case FSDP_SIMD_AVX2: f32_sum_axpy_avx2(acc, src, k, n, scale); return;
#endif
    default: f32_sum_axpy_scalar(acc, src, k, 0, n, scale); return;
    }
}
