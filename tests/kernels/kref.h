/* kref.h — helpers shared by the kernel tests: a deterministic RNG, an independent bf16 rounding (so
 * the tests do not trust core's converter), NaN-filled buffers and tolerance checks against float64. */
#ifndef FSDP_KREF_H
#define FSDP_KREF_H

#include "test_util.h"

#include <stdint.h>
#include <string.h>

static uint64_t kref_state_ = 0x9E3779B97F4A7C15ull;
static inline void kref_seed(uint64_t s) { kref_state_ = s * 0x9E3779B97F4A7C15ull + 1; }
/* Uniform in [-1, 1). */
static inline float kref_uniform(void) {
    kref_state_ ^= kref_state_ << 13;
    kref_state_ ^= kref_state_ >> 7;
    kref_state_ ^= kref_state_ << 17;
    return (float)((double)(kref_state_ >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static inline void kref_fill(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        p[i] = scale * kref_uniform();
}
static inline void kref_fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* f32 -> bf16 round to nearest even, finite inputs only (written here, independent of core). */
static inline uint16_t kref_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float kref_bf16_f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float kref_round_bf16(float f) { return kref_bf16_f(kref_bf16(f)); }

/* Checks got[i] against ref[i] with |got - ref| <= tol[i] (per-element bound computed by the caller)
 * and reports the first few failures. Returns the number of failures. */
static inline int kref_check_bound(const char *what, const float *got, const double *ref, const double *tol,
                                   size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= tol[i])) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (|diff| %.3g > tol %.3g)\n", what, i, got[i],
                        ref[i], d, tol[i]);
            bad++;
        }
    }
    return bad;
}

/* Same with one relative + absolute tolerance for every element. */
static inline int kref_check_close(const char *what, const float *got, const double *ref, size_t n,
                                   double rtol, double atol) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!test_close(got[i], ref[i], rtol, atol)) {
            if (bad < 5) fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", what, i, got[i], ref[i]);
            bad++;
        }
    }
    return bad;
}

#endif
