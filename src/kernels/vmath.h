/* vmath.h — internal vectorised math for the kernels: exp (with the softmax's shift and double sum),
 * NaN-ignoring max, and GELU (tanh form) forward/backward. AVX-512, AVX2+FMA and scalar paths follow
 * fsdp_simd_active() and give the same bits on every path (same fp32 operations in the same order,
 * fmaf in the scalar form; the double sums keep 16 interleaved partial sums on every path).
 *
 * Accuracy (checked against float64 in tests/kernels/test_vmath.c):
 * - fsdp_vexp: <= 2 ulp relative for x in [-87.33, 88.37]; exactly 0 below -87.34 (the true value
 *   is below 2^-126: subnormal results are flushed), +inf above 88.37; NaN stays NaN.
 * - GELU: computed as x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3) — the same function as
 *   0.5 x (1 + tanh y) without its cancellation for negative x; forward and backward within a few
 *   fp32 ulps (relative) of float64 where |result| > 1e-30, |error| < 1e-36 below. */
#ifndef FSDP_KERNELS_VMATH_H
#define FSDP_KERNELS_VMATH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[j] = exp(x[j]) for j < n. out may alias x. */
void fsdp_vexp(float *out, const float *x, size_t n);

/* out[j] = exp(x[j] - shift) (the difference rounded to fp32 first, as expf(x - shift) would), and
 * returns the sum of those values in double. out may be NULL (only the sum) or alias x. */
double fsdp_vexp_shift_sum(float *out, const float *x, size_t n, float shift);

/* Largest x[j], ignoring NaNs; -inf when n == 0 or every element is NaN. */
float fsdp_vmax(const float *x, size_t n);

/* out[j] = a * (x[j] * b) (two fp32 roundings, in that order). out may alias x. */
void fsdp_vscale2(float *out, const float *x, size_t n, float a, float b);

/* out[j] = gelu(x[j]); out may alias x. */
void fsdp_vgelu_forward(float *out, const float *x, size_t n);
/* dinp[j] = gelu'(x[j]) * dout[j]; dinp may alias dout (not x). */
void fsdp_vgelu_backward(float *dinp, const float *x, const float *dout, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_KERNELS_VMATH_H */
