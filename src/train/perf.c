/* perf.c — the MFU arithmetic and the outlier guard's running statistics (perf.h); the GEMM peak
 * (MFU's denominator) is the kernels layer's (fsdp_gemm_peak). */
#include "train/perf.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
