/* softmax_ce.c — fused softmax + cross-entropy over padded-vocab logits [N, Vp] (only the first V
 * columns are real; padded columns are never read into the math and get zero gradient), and a plain
 * softmax with temperature for sampling. Row max subtracted; sums in double. */
#include "kernels/kernels.h"

#include "core/core.h"

#include <math.h>

static fsdp_status check_vocab(const char *fn, int N, int V, int Vp) {
    if (N <= 0 || V <= 0 || Vp <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got N=%d V=%d Vp=%d", fn, N, V, Vp);
    if (V > Vp)
        return fsdp_set_error(FSDP_EINVAL, "%s: real vocabulary V=%d exceeds the padded width Vp=%d", fn, V,
                              Vp);
    return FSDP_OK;
}

fsdp_status fsdp_softmax_crossentropy(float *losses, float *mean_loss, float *dlogits, const float *logits,
                                      const int *targets, int N, int V, int Vp, float dloss) {
    FSDP_TRY(check_vocab(__func__, N, V, Vp));
    if (!logits || !targets) return FSDP_ERR(FSDP_EINVAL, "logits and targets must be non-NULL");
    for (int n = 0; n < N; n++)
        if (targets[n] < 0 || targets[n] >= V)
            return FSDP_ERR(FSDP_EINVAL, "target %d at position %d is outside the real vocabulary [0, %d)",
                            targets[n], n, V);
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++)
            if (x[j] > mx) mx = x[j];
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += expf(x[j] - mx);
        int tg = targets[n];
        double loss = log(sum) - ((double)x[tg] - mx);
        total += loss;
        if (losses) losses[n] = (float)loss;
        if (dlogits) {
            /* x may alias dlogits: each element is read just before it is overwritten. */
            float *g = dlogits + (size_t)n * Vp;
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < V; j++) {
                float p = expf(x[j] - mx) * inv;
                g[j] = dloss * (p - (j == tg ? 1.0f : 0.0f));
            }
            for (int j = V; j < Vp; j++)
                g[j] = 0.0f;
        }
    }
    if (mean_loss) *mean_loss = (float)(total / N);
    return FSDP_OK;
}

fsdp_status fsdp_softmax_forward(float *probs, const float *logits, int N, int V, int Vp, float temperature) {
    FSDP_TRY(check_vocab(__func__, N, V, Vp));
    if (!probs || !logits) return FSDP_ERR(FSDP_EINVAL, "probs and logits must be non-NULL");
    if (!(temperature > 0.0f)) return FSDP_ERR(FSDP_EINVAL, "temperature must be > 0, got %g", temperature);
    float it = 1.0f / temperature;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++)
            if (x[j] > mx) mx = x[j];
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            float e = expf((x[j] - mx) * it);
            p[j] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++)
            p[j] *= inv;
        for (int j = V; j < Vp; j++)
            p[j] = 0.0f;
    }
    return FSDP_OK;
}
