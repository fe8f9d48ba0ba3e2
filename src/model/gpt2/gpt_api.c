/* gpt_api.c — include/fsdp_gpt.h, the GPT-2 API that predates the model-family interface, as a thin
 * layer over include/fsdp_model.h: a gpt_model_t is an fsdp_model_t of family "gpt2" and its config. */
#include "model/gpt2/gpt.h"

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>

struct gpt_model {
    fsdp_model_t *m;
    gpt_config cfg; /* resolved (padded vocab set) */
};

/* A state error of the model (a call out of order) in this API's names: the driver's messages say
 * "a forward" and "the backward", which are gpt_forward and gpt_backward here. */
static fsdp_status named(fsdp_status st) {
    if (st != FSDP_ESTATE) return st;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    return fsdp_set_error(FSDP_ESTATE, "%s (fsdp_gpt.h: gpt_forward, then gpt_backward)", msg);
}

static fsdp_model_config to_model(const gpt_config *g) {
    fsdp_model_config c;
    if (fsdp_model_config_init(&c, "gpt2") != FSDP_OK) fsdp_clear_error(); /* gpt2 is always registered */
    c.n_layer = g->n_layer;
    c.n_embd = g->n_embd;
    c.n_head = g->n_head;
    c.vocab_size = g->vocab_size;
    c.padded_vocab_size = g->padded_vocab_size;
    c.max_seq_len = g->max_seq_len;
    c.recompute = g->recompute;
    c.lora_rank = g->lora_rank;
    c.lora_alpha = g->lora_alpha;
    c.lora_targets = g->lora_targets;
    return c;
}

size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T) {
    if (gpt_config_validate(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    const fsdp_model_config c = to_model(cfg);
    return fsdp_decoder_arena_bytes(&fsdp_gpt2_blocks, &c, B, T);
}

size_t gpt_other_bytes(const gpt_config *cfg, int B, int T, fsdp_dtype compute) {
    if (gpt_config_validate(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    const fsdp_model_config c = to_model(cfg);
    return gpt2_other_bytes(&c, B, T, compute, NULL);
}

fsdp_status gpt_init(gpt_model_t **out, fsdp_engine_t *eng, const gpt_config *cfg) {
    if (out == NULL || eng == NULL) return FSDP_ERR(FSDP_EINVAL, "out and eng must not be NULL");
    *out = NULL;
    FSDP_TRY(gpt_config_validate(cfg));
    gpt_model_t *g = calloc(1, sizeof *g);
    if (g == NULL) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model struct");
    const fsdp_model_config c = to_model(cfg);
    fsdp_status st = fsdp_model_init(&g->m, eng, &c);
    if (st != FSDP_OK) {
        free(g);
        return st;
    }
    g->cfg = gpt_config_resolve(cfg);
    *out = g;
    return FSDP_OK;
}

void gpt_free(gpt_model_t *g) {
    if (g == NULL) return;
    fsdp_model_free(g->m);
    free(g);
}

const gpt_config *gpt_get_config(const gpt_model_t *g) { return g ? &g->cfg : NULL; }
fsdp_unit_t *gpt_root_unit(gpt_model_t *g) { return g ? fsdp_model_unit(g->m, 0) : NULL; }
fsdp_unit_t *gpt_block_unit(gpt_model_t *g, int layer) {
    return (g && layer >= 0 && layer < g->cfg.n_layer) ? fsdp_model_unit(g->m, layer + 1) : NULL;
}

fsdp_status gpt_set_recompute(gpt_model_t *g, int on) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    FSDP_TRY(named(fsdp_model_set_recompute(g->m, on)));
    g->cfg.recompute = on;
    return FSDP_OK;
}

fsdp_status gpt_forward(gpt_model_t *g, const int *tokens, const int *targets, int B, int T, float *loss) {
    if (g == NULL || tokens == NULL) return FSDP_ERR(FSDP_EINVAL, "model and tokens must not be NULL");
    const fsdp_model_batch b = {.tokens = tokens, .targets = targets, .doc = NULL, .B = B, .T = T};
    return named(fsdp_model_forward(g->m, &b, loss));
}

fsdp_status gpt_logits(const gpt_model_t *g, const float **logits, int *B, int *T, int *Vp) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    return named(fsdp_model_logits(g->m, logits, B, T, Vp));
}

fsdp_status gpt_backward(gpt_model_t *g, float loss_scale) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    return named(fsdp_model_backward(g->m, loss_scale));
}

fsdp_status gpt_end_eval(gpt_model_t *g) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    return named(fsdp_model_end_eval(g->m));
}

fsdp_status gpt_decode(gpt_model_t *g, const int *tokens, int n, int pos, const float **logits) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    return named(fsdp_model_decode(g->m, tokens, n, pos, logits));
}
