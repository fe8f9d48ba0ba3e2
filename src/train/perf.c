/* perf.c — the GEMM peak measured at start-up (MFU's denominator), the MFU arithmetic and the outlier
 * guard's running statistics (perf.h). */
#include "train/perf.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
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

fsdp_status fsdp_train_gemm_peak(fsdp_dtype pdt, double budget_s, fsdp_train_peak *out) {
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

double fsdp_train_model_flops(double flops_per_token, double tokens, double dt) {
    return flops_per_token > 0 && tokens > 0 && dt > 0 ? flops_per_token * tokens / dt : 0;
}

double fsdp_train_mfu(double flops_per_token, double tokens, double dt, double peak_flops) {
    return peak_flops > 0 ? fsdp_train_model_flops(flops_per_token, tokens, dt) / peak_flops : 0;
}

fsdp_status fsdp_outlier_init(fsdp_outlier *o, int window) {
    if (o == NULL || window < 2 || window > FSDP_OUTLIER_MAX_WINDOW)
        return fsdp_set_error(FSDP_EINVAL, "--skip-update-window %d: need 2..%d", window,
                              FSDP_OUTLIER_MAX_WINDOW);
    memset(o, 0, sizeof *o);
    o->window = window;
    return FSDP_OK;
}

double fsdp_outlier_z(const fsdp_outlier *o, int k, double x) {
    if (o == NULL || k < 0 || k > 1 || o->n < o->window || !isfinite(x)) return NAN;
    double mean = 0, var = 0;
    for (int i = 0; i < o->n; i++)
        mean += o->val[k][i];
    mean /= o->n;
    for (int i = 0; i < o->n; i++)
        var += (o->val[k][i] - mean) * (o->val[k][i] - mean);
    double sd = sqrt(var / o->n);
    if (sd == 0) return x == mean ? 0 : (x > mean ? INFINITY : -INFINITY);
    return (x - mean) / sd;
}

void fsdp_outlier_push(fsdp_outlier *o, double loss, double norm) {
    if (o == NULL || o->window < 2 || !isfinite(loss) || !isfinite(norm)) return;
    o->val[0][o->head] = loss;
    o->val[1][o->head] = norm;
    o->head = (o->head + 1) % o->window;
    if (o->n < o->window) o->n++;
}
