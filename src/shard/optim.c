/* optim.c — the optimizer side of the shard layer: global gradient-norm clipping over the fp32 sharded
 * gradients (one all-reduce, each element counted once) and AdamW on the fp32 master shards in
 * torch.optim.AdamW's formula order, with per-tensor no-decay ranges. */
#include "shard/shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Calls fn(u, tensor, lo, hi) for each non-alias tensor's part of [r_lo, r_hi) (flat indices):
 * layout gaps and padding are never visited, aliases take no space so nothing is visited twice. */
#define FOR_TENSOR_RANGES(u, r_lo, r_hi, t, lo, hi)                                                          \
    for (int t = 0; t < (u)->n_tensors; t++)                                                                 \
        for (size_t lo = (u)->tensors[t].offset > (r_lo) ? (u)->tensors[t].offset : (r_lo),                  \
                    hi = (u)->tensors[t].offset + (u)->tensors[t].numel < (r_hi)                             \
                             ? (u)->tensors[t].offset + (u)->tensors[t].numel                                \
                             : (r_hi);                                                                       \
             (u)->tensors[t].alias_of < 0 && lo < hi; lo = hi)

/* The sum of squares of the gradient elements this rank counts for unit u: its shard. Under NO_SHARD
 * every rank holds everything, so it counts only its fsdp_shard_range slice, and the all-reduce sums
 * every element exactly once. One device op per tensor range, each writing its own double (parts),
 * added on the host in tensor order once the compute stream ran them. parts: (n_tensors) per unit. */
static void unit_sumsq(const fsdp_engine_t *e, const fsdp_unit_t *u, double *parts) {
    size_t c_off = u->shard_off, c_len = u->shard_len;
    if (e->cfg.strategy == FSDP_NO_SHARD) fsdp_shard_range(u->padded, e->rank, e->world, &c_off, &c_len);
    FOR_TENSOR_RANGES(u, c_off, c_off + c_len, t, lo, hi) {
        e->dev->sumsq(e->dev, e->compute, u->grad + (lo - u->shard_off), hi - lo, &parts[t]);
    }
}

static double unit_sum(const fsdp_unit_t *u, const double *parts) {
    double local = 0.0;
    for (int t = 0; t < u->n_tensors; t++)
        local += parts[t];
    return local;
}

fsdp_status fsdp_engine_clip_grad_norm(fsdp_engine_t *e, float max_norm, float *norm) {
    FSDP_PROF_SCOPE(FSDP_PROF_ADAMW);
    if (e == NULL || norm == NULL) return FSDP_ERR(FSDP_EINVAL, "engine and norm must not be NULL");
    if (isnan(max_norm))
        return FSDP_ERR(FSDP_EINVAL, "max_norm is NaN; pass > 0 to clip, <= 0 to only measure");
    /* Per-unit sums, added in unit order at the end: the same bits whether or not a reduction was still
     * running. The units whose gradients are final go first, while the pending reduction (overlap:
     * the last unit's) keeps moving; then it is finished and its unit counted. The host reads the parts
     * once, after the compute stream ran every sum. */
    size_t n_parts = 0;
    for (int i = 0; i < e->n_units; i++)
        n_parts += (size_t)e->units[i]->n_tensors;
    double *parts = calloc(n_parts + 1, sizeof *parts);
    if (parts == NULL) return FSDP_ERR(FSDP_ENOMEM, "clip: %zu tensor sums", n_parts);
    for (int i = 0, o = 0; i < e->n_units; o += e->units[i]->n_tensors, i++) {
        if (e->units[i]->life.reducing) continue;
        unit_sumsq(e, e->units[i], parts + o);
        shard_progress(e);
    }
    const int pending = e->sched.pending;
    fsdp_status st = shard_drain(e, 1); /* every pending reduction is in the gradient shards */
    if (st == FSDP_OK && pending >= 0) {
        size_t o = 0;
        for (int i = 0; i < pending; i++)
            o += (size_t)e->units[i]->n_tensors;
        unit_sumsq(e, e->units[pending], parts + o);
    }
    if (st == FSDP_OK) {
        e->dev->record(e->dev, e->ev_compute, e->compute);
        st = e->dev->event_sync(e->dev, e->ev_compute);
    }
    if (st != FSDP_OK) {
        free(parts);
        return st;
    }
    double local = 0.0;
    for (int i = 0, o = 0; i < e->n_units; o += e->units[i]->n_tensors, i++)
        local += unit_sum(e->units[i], parts + o);
    free(parts);
    /* One F32 all-reduce of the double as a (hi, lo) float pair keeps ~48 bits of the local sums. */
    float pair[2];
    pair[0] = (float)local;
    pair[1] = isfinite(pair[0]) ? (float)(local - (double)pair[0]) : 0.0f; /* Inf stays Inf, not NaN */
    /* HYBRID: every group holds the same gradient, so the shard group's sum is the whole norm */
    fsdp_comm_set_label(e->shard_comm, "engine / clip-grad-norm all-reduce");
    FSDP_TRY(fsdp_comm_all_reduce(e->shard_comm, pair, pair, 2, FSDP_F32, FSDP_SUM));
    double total = (double)pair[0] + (double)pair[1];
    /* A NaN or Inf gradient makes the norm NaN or Inf (never 0), for the caller to see. */
    float nrm = (float)sqrt(total > 0.0 || isnan(total) ? total : 0.0);
    *norm = nrm;
    if (max_norm > 0.0f) {
        /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6) in fp32, applied if < 1. */
        float coef = max_norm / (nrm + 1e-6f);
        if (coef < 1.0f)
            for (int i = 0; i < e->n_units; i++)
                e->dev->scale(e->dev, e->compute, e->units[i]->grad, e->units[i]->shard_len, coef);
    }
    return FSDP_OK;
}

fsdp_adamw_config fsdp_adamw_config_default(void) {
    fsdp_adamw_config c = {
        .version = 1, .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    return c;
}

/* The double a Python script would have written for this float: the shortest decimal that rounds to
 * f, read as a double (0.9f -> 0.9, not 0.89999997615...). torch computes 1 - beta1, 1 - lr*wd and the
 * bias corrections in double from such literals; doing the same keeps the fp32 scalars identical. */
static double decimal_double(float f) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

int64_t fsdp_engine_step_count(const fsdp_engine_t *e) { return e ? e->step : 0; }
void fsdp_engine_set_step_count(fsdp_engine_t *e, int64_t step) {
    if (e) e->step = step;
}

/* One AdamW step in torch.optim.AdamW's order (torch 1.13 single-tensor path), fp32 per element:
 *   p = p * (1 - lr*wd)                 [not for no_decay tensors]
 *   m = m * b1 + (1 - b1) * g           (fused: see below)
 *   v = v * b2 + ((1 - b2) * g) * g     (fused)
 *   denom = sqrt(v) / sqrt(bc2) + eps    bc1 = 1 - b1^t, bc2 = 1 - b2^t (double)
 *   p = p + (-(lr / bc1) * m) / denom
 * Scalars are formed in double and rounded to fp32 once, as torch does with Python floats. The m and v
 * updates are fused multiply-adds, m = fma(g, 1-b1, m*b1) and v = fma((1-b2)*g, g, v*b2), as torch's
 * vectorised CPU kernels compute them: with that, 5 steps on 1000 elements matched torch 1.13's
 * AdamW bit for bit (the plain unfused form differed in 7 elements by one ulp). */
fsdp_status fsdp_engine_adamw_step(fsdp_engine_t *e, const fsdp_adamw_config *cfg) {
    FSDP_PROF_SCOPE(FSDP_PROF_ADAMW);
    if (e == NULL || cfg == NULL) return FSDP_ERR(FSDP_EINVAL, "engine and cfg must not be NULL");
    if (cfg->version != 1)
        return FSDP_ERR(FSDP_EINVAL, "adamw config version %d unsupported; use fsdp_adamw_config_default()",
                        cfg->version);
    if (!(cfg->lr >= 0.0f && isfinite(cfg->lr)) || !(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) ||
        !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f) || !(cfg->eps > 0.0f && isfinite(cfg->eps)) ||
        !(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay)))
        return FSDP_ERR(
            FSDP_EINVAL,
            "bad AdamW config lr=%g beta1=%g beta2=%g eps=%g weight_decay=%g; need lr >= 0, betas in "
            "[0,1), eps > 0, weight_decay >= 0",
            (double)cfg->lr, (double)cfg->beta1, (double)cfg->beta2, (double)cfg->eps,
            (double)cfg->weight_decay);
    FSDP_TRY(shard_drain(e, 0)); /* gradients complete; prefetched parameters would go stale */
    e->step++;
    double lr = decimal_double(cfg->lr), b1 = decimal_double(cfg->beta1), b2 = decimal_double(cfg->beta2);
    double wd = decimal_double(cfg->weight_decay), t = (double)e->step;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const float decay = (float)(1.0 - lr * wd), b1f = (float)b1, omb1 = (float)(1.0 - b1), b2f = (float)b2,
                omb2 = (float)(1.0 - b2), bc2_sqrt = (float)sqrt(bc2), eps = cfg->eps,
                neg_step = (float)(-(lr / bc1));
    const fsdp_adamw_scalars sc = {decay, b1f, omb1, b2f, omb2, bc2_sqrt, eps, neg_step};
    for (int i = 0; i < e->n_units; i++) {
        fsdp_unit_t *u = e->units[i];
        fsdp_trace_unit_begin(u->name, "optimizer");
        FOR_TENSOR_RANGES(u, u->shard_off, u->shard_off + u->shard_len, tt, lo, hi) {
            size_t o = lo - u->shard_off;
            const int do_decay = !u->tensors[tt].no_decay && cfg->weight_decay != 0.0f;
            e->dev->adamw(e->dev, e->compute, u->master + o, u->adam_m + o, u->adam_v + o, u->grad + o,
                          hi - lo, do_decay, &sc);
        }
        fsdp_trace_unit_end(u->name, "optimizer");
        /* the next step's first units: their gathers run while the others are updated */
        FSDP_TRY(life_after_update(&e->sched, i));
        shard_progress(e);
    }
    return FSDP_OK;
}
