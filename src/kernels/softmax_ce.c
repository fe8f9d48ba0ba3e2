/* softmax_ce.c — fused softmax + cross-entropy over padded-vocab logits [N, Vp] (only the first V
 * columns are real; padded columns are never read into the math and get zero gradient), and a plain
 * softmax with temperature for sampling. Targets equal to FSDP_IGNORE_INDEX (-100, PyTorch's
 * ignore_index) are not counted: loss 0, zero gradient row, the mean over the counted rows. Row max
 * subtracted; sums in double; exp, max and scaling through vmath.c (vectorised, accuracy contract in
 * vmath.h). */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
#include <string.h>

static fsdp_status check_vocab(const char *fn, int N, int V, int Vp) {
    if (N <= 0 || V <= 0 || Vp <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got N=%d V=%d Vp=%d", fn, N, V, Vp);
    if (V > Vp)
        return fsdp_set_error(FSDP_EINVAL, "%s: real vocabulary V=%d exceeds the padded width Vp=%d", fn, V,
                              Vp);
    return FSDP_OK;
}

static fsdp_status softmax_ce(const char *fn, float *losses, float *mean_loss, int *n_counted, float *dlogits,
                              const float *logits, const int *targets, int N, int V, int Vp, float dloss) {
    FSDP_PROF_SCOPE(FSDP_PROF_SOFTMAX_CE);
    FSDP_TRY(check_vocab(fn, N, V, Vp));
    if (!logits || !targets)
        return fsdp_set_error(FSDP_EINVAL, "%s: logits and targets must be non-NULL", fn);
    int counted = 0;
    for (int n = 0; n < N; n++) {
        if (targets[n] == FSDP_IGNORE_INDEX) continue;
        if (targets[n] < 0 || targets[n] >= V)
            return fsdp_set_error(
                FSDP_EINVAL,
                "%s: target %d at position %d is outside the real vocabulary [0, %d) and is "
                "not the ignore index %d",
                fn, targets[n], n, V, FSDP_IGNORE_INDEX);
        counted++;
    }
    /* Per-row losses in double, summed in row order afterwards: the mean does not depend on how
     * OpenMP combines partial sums. */
    double *rowloss = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&rowloss, (size_t)N * sizeof(double), FSDP_MEM_OTHER));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        int tg = targets[n];
        if (tg == FSDP_IGNORE_INDEX) { /* not counted: loss 0, no gradient */
            rowloss[n] = 0.0;
            if (losses) losses[n] = 0.0f;
            if (dlogits) memset(dlogits + (size_t)n * Vp, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        const float mx = fsdp_vmax(x, (size_t)V);
        float xt = x[tg]; /* read before dlogits (which may alias x) is written */
        float *g = dlogits ? dlogits + (size_t)n * Vp : NULL;
        /* one exp per element: exp(x - max) parked in g (x[j] is read before g[j] is written) */
        double sum = fsdp_vexp_shift_sum(g, x, (size_t)V, mx);
        double loss = log(sum) - ((double)xt - mx);
        rowloss[n] = loss;
        if (losses) losses[n] = (float)loss;
        if (g) {
            float inv = (float)(1.0 / sum);
            fsdp_vscale2(g, g, (size_t)V, dloss, inv); /* dloss * (e * inv) */
            g[tg] -= dloss;
            for (int j = V; j < Vp; j++)
                g[j] = 0.0f;
        }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++)
        total += rowloss[n];
    if (mean_loss) *mean_loss = counted ? (float)(total / counted) : 0.0f;
    if (n_counted) *n_counted = counted;
    fsdp_mem_free(rowloss);
    return FSDP_OK;
}

fsdp_status fsdp_softmax_crossentropy(float *losses, float *mean_loss, float *dlogits, const float *logits,
                                      const int *targets, int N, int V, int Vp, float dloss) {
    return softmax_ce(__func__, losses, mean_loss, NULL, dlogits, logits, targets, N, V, Vp, dloss);
}

fsdp_status fsdp_softmax_crossentropy_count(float *losses, float *mean_loss, int *n_counted, float *dlogits,
                                            const float *logits, const int *targets, int N, int V, int Vp,
                                            float dloss) {
    return softmax_ce(__func__, losses, mean_loss, n_counted, dlogits, logits, targets, N, V, Vp, dloss);
}

fsdp_status fsdp_softmax_forward(float *probs, const float *logits, int N, int V, int Vp, float temperature) {
    FSDP_PROF_SCOPE(FSDP_PROF_SOFTMAX_CE);
    FSDP_TRY(check_vocab(__func__, N, V, Vp));
    if (!probs || !logits) return FSDP_ERR(FSDP_EINVAL, "probs and logits must be non-NULL");
    if (!(temperature > 0.0f)) return FSDP_ERR(FSDP_EINVAL, "temperature must be > 0, got %g", temperature);
    float it = 1.0f / temperature;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        const float mx = fsdp_vmax(x, (size_t)V);
        /* p = exp((x - mx) / T) / sum: the scaled differences are written to p first (p may alias x;
         * each element is read once, before it is written) */
        for (int j = 0; j < V; j++)
            p[j] = (x[j] - mx) * it;
        double sum = fsdp_vexp_shift_sum(p, p, (size_t)V, 0.0f);
        fsdp_vscale2(p, p, (size_t)V, 1.0f, (float)(1.0 / sum));
        for (int j = V; j < Vp; j++)
            p[j] = 0.0f;
    }
    return FSDP_OK;
}
