/* gpt_test_util.h — helpers shared by the GPT-2 model tests: gather a tensor's full fp32 gradient
 * from the sharded gradients, load fixture weights into the model's units, compare arrays with a
 * per-tensor relative error, and a rank's disjoint slice of the batch. */
#ifndef FSDP_TEST_MODEL_GPT_TEST_UTIL_H
#define FSDP_TEST_MODEL_GPT_TEST_UTIL_H

#include "fixture.h"
#include "model/gpt2/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows [*b0, *b1) of a B-row batch for `rank` of `world`: contiguous, disjoint, covering all rows
 * (sizes differ by at most one). */
static inline void gt_rows(int B, int rank, int world, int *b0, int *b1) {
    *b0 = (int)((long long)B * rank / world);
    *b1 = (int)((long long)B * (rank + 1) / world);
}

/* Full fp32 sharded gradient of unit u (padded numel floats, caller frees) on every rank: one
 * all-gather of each rank's grad shard. */
static inline fsdp_status gt_gather_grad(fsdp_engine_t *e, fsdp_unit_t *u, float **out) {
    fsdp_shard_view sv;
    fsdp_status s = fsdp_unit_shard(u, &sv);
    if (s != FSDP_OK) return s;
    size_t padded = fsdp_unit_padded_numel(u);
    float *full = malloc(padded * sizeof(float));
    if (!full) return fsdp_set_error(FSDP_ENOMEM, "gt_gather_grad: %zu floats", padded);
    fsdp_comm_t *c = fsdp_engine_comm(e);
    if (fsdp_engine_get_config(e)->strategy == FSDP_NO_SHARD || fsdp_comm_size(c) == 1) {
        memcpy(full, sv.grad, padded * sizeof(float));
    } else {
        s = fsdp_comm_all_gather(c, sv.grad, full, sv.numel, FSDP_F32);
        if (s != FSDP_OK) {
            free(full);
            return s;
        }
    }
    *out = full;
    return FSDP_OK;
}

/* Loads every non-alias tensor "w.<unit>.<tensor>" of the fixture into the model (all ranks pass the
 * same data). */
static inline fsdp_status gt_load_weights(gpt_model_t *m, const gpt_fixture *fx) {
    int L = gpt_get_config(m)->n_layer;
    for (int ui = -1; ui < L; ui++) {
        fsdp_unit_t *u = ui < 0 ? gpt_root_unit(m) : gpt_block_unit(m, ui);
        fsdp_status s = gpt_fixture_load_unit(fx, u, "gt_load_weights");
        if (s != FSDP_OK) return s;
    }
    return FSDP_OK;
}

/* Per-tensor relative error: max_i |a_i - b_i| / max_i |b_i| (b the reference; 0 if both are all
 * zero). Scale-relative, so near-zero elements of a tensor are judged by the tensor's scale. */
static inline double gt_rel_err(const float *a, const float *b, size_t n) {
    double dmax = 0, bmax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > dmax) dmax = d;
        if (fabs((double)b[i]) > bmax) bmax = fabs((double)b[i]);
    }
    return bmax > 0 ? dmax / bmax : dmax;
}

#endif
