/* finite.c — finding the first non-finite float of an array (core.h): fixed-size blocks whose
 * exponent tests are OR-ed branch-free (a loop of known trip count, which the compiler vectorizes),
 * then the one block that has one searched. */
#include "core/core.h"

#include <stdint.h>
#include <string.h>

enum { BLOCK = 256 };

/* 1 if any of x[0, BLOCK) has an all-ones exponent (Inf or NaN). */
static int block_bad(const float *x) {
    uint32_t b[BLOCK];
    memcpy(b, x, sizeof b);
    uint32_t bad = 0;
    for (int k = 0; k < BLOCK; k++)
        bad |= (uint32_t)((b[k] & 0x7f800000u) == 0x7f800000u);
    return bad != 0;
}

static size_t first_in(const float *x, size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; k++) {
        uint32_t b;
        memcpy(&b, &x[k], 4);
        if ((b & 0x7f800000u) == 0x7f800000u) return k;
    }
    return hi;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* The same test, 8 lanes at a time (the SSE form the compiler makes runs at half the speed). */
__attribute__((target("avx2"))) static int block_bad_avx2(const float *x) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < BLOCK; k += 8) {
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + k)), e);
        acc = _mm256_or_si256(acc, _mm256_cmpeq_epi32(v, e));
    }
    return !_mm256_testz_si256(acc, acc);
}
static int have_avx2(void) {
    static int v = -1; /* a benign race: every thread computes the same value */
    if (v < 0) v = __builtin_cpu_supports("avx2") ? 1 : 0;
    return v;
}
#else
static int block_bad_avx2(const float *x) { return block_bad(x); }
static int have_avx2(void) { return 0; }
#endif

size_t fsdp_first_nonfinite(const float *x, size_t n) {
    size_t i = 0;
    if (have_avx2()) {
        for (; i + BLOCK <= n; i += BLOCK)
            if (block_bad_avx2(x + i)) return first_in(x, i, i + BLOCK);
    }
    for (; i + BLOCK <= n; i += BLOCK)
        if (block_bad(x + i)) return first_in(x, i, i + BLOCK);
    size_t k = first_in(x, i, n);
    return k;
}

const char *fsdp_nonfinite_name(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return "NaN";
    return b >> 31 ? "-Inf" : "+Inf";
}
