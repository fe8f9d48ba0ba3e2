/* gpt2_family.c — GPT-2 as a model family (include/fsdp_model.h): the fsdp_model_config <-> gpt_config
 * mapping, the family table over the decoder driver with gpt.c's block table, and GPT-2's Hugging Face side
 * (config.json in and out, and the one tensor-name map that --init-from and export both use). */
#include "fsdp_model.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gpt2/gpt.h"
#include "model/hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gpt_config to_gpt(const fsdp_model_config *c) {
    gpt_config g = gpt_config_default();
    g.n_layer = c->n_layer;
    g.n_embd = c->n_embd;
    g.n_head = c->n_head;
    g.vocab_size = c->vocab_size;
    g.padded_vocab_size = c->padded_vocab_size;
    g.max_seq_len = c->max_seq_len;
    g.recompute = c->recompute;
    g.lora_rank = c->lora_rank;
    g.lora_alpha = c->lora_alpha;
    g.lora_targets = c->lora_targets;
    return g;
}

static fsdp_status config_default(fsdp_model_config *c) {
    gpt_config g = gpt_config_default();
    c->n_layer = g.n_layer;
    c->n_embd = g.n_embd;
    c->n_head = g.n_head;
    c->vocab_size = g.vocab_size;
    c->padded_vocab_size = 0;
    c->max_seq_len = g.max_seq_len;
    c->tie_embeddings = 1;
    c->norm_eps = FSDP_LAYERNORM_EPS;
    return FSDP_OK;
}

/* What GPT-2 fixes: the fields other families set must hold GPT-2's own values here. */
static fsdp_status validate(const fsdp_model_config *c) {
    FSDP_TRY(gpt_config_validate(&(gpt_config){.version = 1,
                                               .n_layer = c->n_layer,
                                               .n_embd = c->n_embd,
                                               .n_head = c->n_head,
                                               .vocab_size = c->vocab_size,
                                               .padded_vocab_size = c->padded_vocab_size,
                                               .max_seq_len = c->max_seq_len,
                                               .recompute = c->recompute,
                                               .lora_rank = c->lora_rank,
                                               .lora_alpha = c->lora_alpha,
                                               .lora_targets = c->lora_targets}));
    const int hs = c->n_embd / c->n_head;
    const char *bad = NULL;
    if (c->n_kv_head != 0 && c->n_kv_head != c->n_head)
        bad = "n_kv_head (GPT-2 has one key/value head per head)";
    else if (c->head_dim != 0 && c->head_dim != hs)
        bad = "head_dim (GPT-2's is n_embd / n_head)";
    else if (c->intermediate != 0 && c->intermediate != 4 * c->n_embd)
        bad = "intermediate (GPT-2's MLP is 4 x n_embd)";
    else if (c->tie_embeddings != 1)
        bad = "tie_embeddings (GPT-2's LM head is tied to wte)";
    else if (fabs(c->norm_eps - (double)FSDP_LAYERNORM_EPS) > 1e-12)
        bad = "norm_eps (GPT-2's LayerNorm uses 1e-5)";
    if (bad) return fsdp_set_error(FSDP_EINVAL, "model gpt2: %s", bad);
    return FSDP_OK;
}

static size_t num_params(const fsdp_model_config *c) {
    gpt_config g = to_gpt(c);
    return gpt_num_params(&g);
}

/* 6 FLOPs per weight per token (forward 2, backward 4) over every matmul weight (the LM head included,
 * the position table not), plus attention's QK^T and AV: 12 * L * T * C per token (forward + backward,
 * the full T x T square as PaLM's MFU counts it). */
static double flops_per_token(const fsdp_model_config *c, int T) {
    double C = c->n_embd, L = c->n_layer;
    double Vp = c->padded_vocab_size ? c->padded_vocab_size : (double)((c->vocab_size + 127) / 128 * 128);
    double matmul = L * 12.0 * C * C + Vp * C;
    if (c->lora_rank <= 0) return 6.0 * matmul + 12.0 * L * (double)T * C;
    /* LoRA: the frozen base has no weight-gradient GEMM (4 FLOPs per weight); each adapter all 6 */
    const int tg = c->lora_targets ? c->lora_targets : FSDP_LORA_GPT2_ALL;
    static const double in_out[4] = {4, 2, 5, 5}; /* (in + out) / C of c_attn, attn_proj, c_fc, mlp_proj */
    double ad = 0;
    for (int p = 0; p < 4; p++)
        if (tg & (FSDP_LORA_C_ATTN << p)) ad += c->lora_rank * in_out[p] * C;
    return 4.0 * matmul + 6.0 * L * ad + 12.0 * L * (double)T * C;
}

static void release_units(void *owner) {
    gpt_units_free(owner);
    free(owner);
}

static fsdp_status units(fsdp_model_units *out, const fsdp_model_config *c) {
    gpt_config g = to_gpt(c);
    gpt_units *u = calloc(1, sizeof *u);
    if (!u) return FSDP_ERR(FSDP_ENOMEM, "no memory for the unit table");
    fsdp_status s = gpt_units_init(u, &g);
    if (s != FSDP_OK) {
        free(u);
        return s;
    }
    out->units = malloc((size_t)u->n_units * sizeof *out->units);
    if (!out->units) {
        gpt_units_free(u);
        free(u);
        return FSDP_ERR(FSDP_ENOMEM, "no memory for the unit table");
    }
    memcpy(out->units, u->units, (size_t)u->n_units * sizeof *out->units);
    out->n_units = u->n_units;
    out->owner = u;
    out->release = release_units;
    return FSDP_OK;
}

static size_t activation_bytes(const fsdp_model_config *c, int B, int T, int threads) {
    return fsdp_decoder_arena_bytes(&fsdp_gpt2_blocks, c, B, T) +
           fsdp_attention_backward_scratch_bytes(T, c->n_embd / c->n_head, threads);
}

static fsdp_status init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *c) {
    return fsdp_decoder_init(impl, eng, c, &fsdp_gpt2_blocks);
}

/* ---------------------------------------------------------------- Hugging Face */

static fsdp_status hf_read_config(const cJSON *j, const char *path, fsdp_model_config *c) {
    static const char *const gpt2_type[] = {"gpt2", NULL};
    static const char *const gelu_tanh[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", NULL};
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "gpt2")))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"model_type\" is not \"gpt2\": only GPT-2 models load here",
                              path);
    (void)gpt2_type;
    int L, C, NH, V, P;
    FSDP_TRY(fsdp_hfc_int(j, path, "n_layer", 1, 1024, &L));
    FSDP_TRY(fsdp_hfc_int(j, path, "n_embd", 1, 65536, &C));
    FSDP_TRY(fsdp_hfc_int(j, path, "n_head", 1, 1024, &NH));
    FSDP_TRY(fsdp_hfc_int(j, path, "vocab_size", 2, 1 << 30, &V));
    FSDP_TRY(fsdp_hfc_int(j, path, "n_positions", 1, 1 << 20, &P));
    if (C % NH != 0)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"n_embd\" %d is not divisible by \"n_head\" %d", path, C,
                              NH);
    v = cJSON_GetObjectItemCaseSensitive(j, "n_ctx");
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == P))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"n_ctx\" differs from \"n_positions\" %d", path, P);
    v = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 4.0 * C))
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: \"n_inner\" is not null or 4 x n_embd (%d): this model's MLP is 4 x n_embd wide", path,
            4 * C);
    FSDP_TRY(fsdp_hfc_str_in(j, path, "activation_function", gelu_tanh,
                             "this model has only the tanh GELU (gelu_new)"));
    v = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (v && !(cJSON_IsNumber(v) && fabs(v->valuedouble - (double)FSDP_LAYERNORM_EPS) <= 1e-12))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"layer_norm_epsilon\" is not %g (this model's LayerNorm)",
                              path, (double)FSDP_LAYERNORM_EPS);
    FSDP_TRY(fsdp_hfc_bool_is(j, path, "scale_attn_weights", 1,
                              "attention scores are always scaled by 1/sqrt(head size)"));
    FSDP_TRY(fsdp_hfc_bool_is(j, path, "scale_attn_by_inverse_layer_idx", 0, "no per-layer attention scale"));
    FSDP_TRY(fsdp_hfc_bool_is(j, path, "add_cross_attention", 0, "no cross-attention"));
    FSDP_TRY(fsdp_hfc_bool_is(j, path, "tie_word_embeddings", 1, "the LM head is tied to wte"));
    FSDP_TRY(config_default(c));
    c->n_layer = L;
    c->n_embd = C;
    c->n_head = NH;
    c->vocab_size = V;
    c->max_seq_len = P;
    snprintf(c->hf_architecture, sizeof c->hf_architecture, "GPT2LMHeadModel");
    return FSDP_OK;
}

static fsdp_status hf_write_config(const fsdp_model_config *c, cJSON *j) {
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNullToObject(j, "n_inner");
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddTrueToObject(j, "tie_word_embeddings");
    cJSON_AddNumberToObject(j, "resid_pdrop", 0);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0);
    return FSDP_OK;
}

/* GPT-2's names: "wte.weight", "h.{l}.attn.c_attn.weight", ... (optionally under "transformer."); Conv1D
 * weights stored [in, out]; wte holds the real vocabulary only; lm_head.weight tied to wte. */
typedef struct {
    const char *ours, *hf;
    int transpose;
} gpt2_name;
static const gpt2_name root_names[] = {{"wte", "wte.weight", 0},
                                       {"wpe", "wpe.weight", 0},
                                       {"lnf_w", "ln_f.weight", 0},
                                       {"lnf_b", "ln_f.bias", 0}};
static const gpt2_name block_names[] = {{"ln1_w", "ln_1.weight", 0},
                                        {"ln1_b", "ln_1.bias", 0},
                                        {"qkv_w", "attn.c_attn.weight", 1},
                                        {"qkv_b", "attn.c_attn.bias", 0},
                                        {"attproj_w", "attn.c_proj.weight", 1},
                                        {"attproj_b", "attn.c_proj.bias", 0},
                                        {"ln2_w", "ln_2.weight", 0},
                                        {"ln2_b", "ln_2.bias", 0},
                                        {"fc_w", "mlp.c_fc.weight", 1},
                                        {"fc_b", "mlp.c_fc.bias", 0},
                                        {"fcproj_w", "mlp.c_proj.weight", 1},
                                        {"fcproj_b", "mlp.c_proj.bias", 0}};
#define N_ROOT  ((int)(sizeof root_names / sizeof root_names[0]))
#define N_BLOCK ((int)(sizeof block_names / sizeof block_names[0]))
static const char *const gpt2_skip[] = {"attn.bias", "attn.masked_bias", NULL};

static fsdp_status hf_map(const fsdp_model_config *c, fsdp_hf_map *out) {
    gpt_config g = to_gpt(c);
    gpt_units u;
    FSDP_TRY(gpt_units_init(&u, &g));
    const int L = c->n_layer, n = N_ROOT + 1 + L * N_BLOCK;
    out->t = calloc((size_t)n, sizeof *out->t);
    if (!out->t) {
        gpt_units_free(&u);
        return FSDP_ERR(FSDP_ENOMEM, "no memory for the tensor map of %d layers", L);
    }
    int k = 0;
    for (int l = -1; l < L; l++) {
        const fsdp_tensor_spec *specs = l < 0 ? u.root : u.block;
        const gpt2_name *names = l < 0 ? root_names : block_names;
        for (int i = 0; i < (l < 0 ? N_ROOT : N_BLOCK); i++) {
            const fsdp_tensor_spec *sp = NULL;
            for (int s = 0; s < (l < 0 ? GPT_ROOT_NTENSORS : GPT_BLOCK_NTENSORS); s++)
                if (!strcmp(specs[s].name, names[i].ours)) sp = &specs[s];
            FSDP_INVARIANT(sp != NULL);
            fsdp_hf_tensor *t = &out->t[k++];
            if (l < 0)
                snprintf(t->hf_name, sizeof t->hf_name, "%s", names[i].hf);
            else
                snprintf(t->hf_name, sizeof t->hf_name, "h.%d.%s", l, names[i].hf);
            snprintf(t->unit, sizeof t->unit, "%s", l < 0 ? "root" : u.names[l + 1]);
            snprintf(t->tensor, sizeof t->tensor, "%s", names[i].ours);
            t->rows = sp->shape[0];
            t->cols = sp->ndim == 2 ? sp->shape[1] : 0;
            if (l < 0 && !strcmp(names[i].ours, "wte")) t->rows = c->vocab_size; /* padded rows stay 0 */
            t->transpose = names[i].transpose;
        }
    }
    fsdp_hf_tensor *h = &out->t[k++];
    snprintf(h->hf_name, sizeof h->hf_name, "lm_head.weight");
    snprintf(h->unit, sizeof h->unit, "root");
    snprintf(h->tensor, sizeof h->tensor, "wte");
    h->rows = c->vocab_size;
    h->cols = c->n_embd;
    h->optional = h->tied = 1;
    out->n = k;
    out->skip = gpt2_skip;
    out->alt_prefix = "transformer.";
    gpt_units_free(&u);
    return FSDP_OK;
}

static const char *const gpt2_archs[] = {"GPT2LMHeadModel", "GPT2Model",
                                         NULL}; /* GPT2Model: no head (tied) */

const fsdp_model_family fsdp_gpt2_family = {
    .name = "gpt2",
    .hf_architectures = gpt2_archs,
    .config_default = config_default,
    .validate = validate,
    .num_params = num_params,
    .flops_per_token = flops_per_token,
    .units = units,
    .activation_bytes = activation_bytes,
    .other_bytes = gpt2_other_bytes,
    .init = init,
    FSDP_DECODER_ENTRIES,
    .hf_read_config = hf_read_config,
    .hf_write_config = hf_write_config,
    .hf_map = hf_map,
};
