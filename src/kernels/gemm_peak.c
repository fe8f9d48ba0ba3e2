/* gemm_peak.c — the GEMM peak of this process on its path (fsdp_gemm_peak, kernels.h): MFU's
 * denominator, measured with the project's own GEMM as the models run it. */
#include "kernels/kernels.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* Square sizes: 512, or 1024 where four of those fit the budget (2 x 1024^3 = 2.1 GFLOP: large enough
 * for oneDNN's blocked kernels to reach their steady rate). */
#define PEAK_MAX 1024

/* Seconds of one S^3 GEMM; < 0 on failure. */
static double time_gemm(float *Y, const float *X, const void *W, fsdp_dtype pdt, int S, fsdp_status *s) {
    double a = fsdp_time_s();
    *s = fsdp_matmul_forward(Y, X, W, NULL, pdt, S, S, S);
    return *s == FSDP_OK ? fsdp_time_s() - a : -1;
}

fsdp_status fsdp_gemm_peak(fsdp_dtype pdt, double budget_s, fsdp_gemm_peak_result *out) {
    if (out == NULL || budget_s <= 0 || (pdt != FSDP_F32 && pdt != FSDP_BF16))
        return FSDP_ERR(FSDP_EINVAL, "gemm peak: need an output, a budget > 0 s and f32 or bf16 parameters");
    memset(out, 0, sizeof *out);
    const size_t n = (size_t)PEAK_MAX * PEAK_MAX;
    /* plain aligned_alloc on purpose: the probe must not change the tracked memory figures */
    float *X = aligned_alloc(64, n * sizeof(float)), *Y = aligned_alloc(64, n * sizeof(float));
    void *W = aligned_alloc(64, n * fsdp_dtype_size(pdt));
    fsdp_status s =
        X && Y && W ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "gemm peak: no memory for 3 x %d^2", PEAK_MAX);
    if (s == FSDP_OK) {
        for (size_t i = 0; i < n; i++) {
            X[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            float w = (float)((i * 69069u) % 991) / 991.0f - 0.5f;
            if (pdt == FSDP_BF16)
                ((fsdp_bf16 *)W)[i] = fsdp_f32_to_bf16(w);
            else
                ((float *)W)[i] = w;
        }
        const double t0 = fsdp_time_s();
        int S = 512;
        double best = 1e30, t = time_gemm(Y, X, W, pdt, S, &s); /* warm-up: primitive creation */
        if (s == FSDP_OK) t = time_gemm(Y, X, W, pdt, S, &s);
        if (s == FSDP_OK && 4 * 8 * t < budget_s - (fsdp_time_s() - t0)) { /* four 1024^3 GEMMs fit */
            S = PEAK_MAX;
            t = time_gemm(Y, X, W, pdt, S, &s); /* its warm-up */
        } else if (s == FSDP_OK) {
            best = t;
            out->reps = 1;
        }
        /* repetitions while the next one fits in the budget */
        while (s == FSDP_OK && out->reps < 16 && (out->reps == 0 || fsdp_time_s() - t0 + t <= budget_s)) {
            t = time_gemm(Y, X, W, pdt, S, &s);
            if (s != FSDP_OK) break;
            out->reps++;
            if (t < best) best = t;
        }
        out->total_s = fsdp_time_s() - t0;
        out->best_s = best;
        out->size = S;
        out->gflops = s == FSDP_OK && best > 0 ? 2.0 * S * (double)S * (double)S / best / 1e9 : 0;
    }
    free(W);
    free(Y);
    free(X);
    /* The GEMMs' grow-only workspace (the f32-compute path's widened weight, the bf16 path's operand
     * copies) holds the probe's sizes now: released, so the run's memory figures are its own (the path
     * setting stays; the next GEMM initialises oneDNN again). */
    fsdp_kernels_shutdown();
    return s;
}
