/* gpt.c — GPT-2 as a block table of the decoder driver (model/decoder.h): its config, its units, its
 * per-block activations and the kernels of its embeddings, blocks and final LayerNorm. The driver runs
 * forward, backward and decode; gpt_api.c keeps the older GPT-2 API (include/fsdp_gpt.h) over it. */
#include "model/gpt2/gpt.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-block saved activations (N = B*T rows). */
typedef struct {
    float *ln1;      /* (N, C)   LN1 output, input of the QKV GEMM */
    float *ln1_mean; /* (N) */
    float *ln1_rstd; /* (N) */
    float *qkv;      /* (N, 3C) */
    float *atty;     /* (N, C)   attention output, input of the attention projection */
    float *att;      /* (B, NH, T, T) softmax probabilities */
    float *res2;     /* (N, C)   residual after attention */
    float *ln2;      /* (N, C) */
    float *ln2_mean; /* (N) */
    float *ln2_rstd; /* (N) */
    float *fch;      /* (N, 4C)  MLP pre-activation */
    float *fch_gelu; /* (N, 4C) */
    float *lt[4];    /* (N, r) x A^T of each LoRA-targeted projection (c_attn, attn_proj, c_fc, mlp_proj) */
} block_acts;

/* LoRA's four projections (c_attn, attn_proj, c_fc, mlp_proj): input and output widths in units of C. */
static const int GPT_LORA_IN[4] = {1, 1, 1, 4}, GPT_LORA_OUT[4] = {3, 1, 4, 1};
static int gpt_lora_targets(int rank, int targets) {
    return rank > 0 ? (targets ? targets : FSDP_LORA_GPT2_ALL) : 0;
}
static int gpt_lora_on(int targets, int p) { return (targets & (FSDP_LORA_C_ATTN << p)) != 0; }

/* ---------------------------------------------------------------- config */

gpt_config gpt_config_default(void) {
    gpt_config c = {.version = 1,
                    .n_layer = 12,
                    .n_embd = 768,
                    .n_head = 12,
                    .vocab_size = 50257,
                    .padded_vocab_size = 50304,
                    .max_seq_len = 1024,
                    .recompute = 0};
    return c;
}

fsdp_status gpt_config_validate(const gpt_config *c) {
    if (c == NULL) return FSDP_ERR(FSDP_EINVAL, "config must not be NULL");
    if (c->version != 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_config.version is %d; this library knows 1 (start from gpt_config_default())",
                        c->version);
    if (c->n_layer < 1 || c->n_layer > 100000)
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.n_layer = %d: need 1..100000", c->n_layer);
    if (c->n_head < 1) return FSDP_ERR(FSDP_EINVAL, "gpt_config.n_head = %d: need >= 1", c->n_head);
    if (c->n_embd < 1 || c->n_embd % c->n_head != 0 || c->n_embd > (1 << 20))
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_config.n_embd = %d: need a positive multiple of n_head (%d), <= 2^20", c->n_embd,
                        c->n_head);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 30))
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.vocab_size = %d: need 1..2^30", c->vocab_size);
    if (c->padded_vocab_size != 0 &&
        (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 30)))
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_config.padded_vocab_size = %d: need 0 (auto) or >= vocab_size (%d), <= 2^30",
                        c->padded_vocab_size, c->vocab_size);
    if (c->max_seq_len < 1 || c->max_seq_len > (1 << 20))
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.max_seq_len = %d: need 1..2^20", c->max_seq_len);
    if (c->recompute != 0 && c->recompute != 1)
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.recompute = %d: need 0 or 1", c->recompute);
    if (c->lora_rank < 0 || c->lora_rank > 4096)
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.lora_rank = %d: need 0 (no LoRA) or 1..4096", c->lora_rank);
    if (c->lora_targets & ~FSDP_LORA_GPT2_ALL)
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_config.lora_targets = %#x: GPT-2's projections are c_attn, attn_proj, "
                        "c_fc and mlp_proj",
                        (unsigned)c->lora_targets);
    if (!(c->lora_alpha >= 0 && isfinite(c->lora_alpha)))
        return FSDP_ERR(FSDP_EINVAL, "gpt_config.lora_alpha = %g: need a finite value >= 0", c->lora_alpha);
    if (c->lora_rank == 0 && (c->lora_alpha != 0 || c->lora_targets != 0))
        return FSDP_ERR(FSDP_EINVAL, "gpt_config: lora_alpha and lora_targets need lora_rank > 0");
    return FSDP_OK;
}

gpt_config gpt_config_resolve(const gpt_config *c) {
    gpt_config r = *c;
    if (r.padded_vocab_size == 0) r.padded_vocab_size = (r.vocab_size + 127) / 128 * 128;
    return r;
}

size_t gpt_num_params(const gpt_config *cfg) {
    if (gpt_config_validate(cfg) != FSDP_OK) return 0;
    gpt_config c = gpt_config_resolve(cfg);
    size_t C = (size_t)c.n_embd, L = (size_t)c.n_layer;
    size_t root = (size_t)c.padded_vocab_size * C + (size_t)c.max_seq_len * C + 2 * C;
    size_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    const int tg = gpt_lora_targets(c.lora_rank, c.lora_targets);
    for (int p = 0; p < 4; p++) /* LoRA adapters: A (r, in) and B (out, r) */
        if (gpt_lora_on(tg, p)) block += (size_t)c.lora_rank * C * (size_t)(GPT_LORA_IN[p] + GPT_LORA_OUT[p]);
    return root + L * block;
}

/* ---------------------------------------------------------------- activations */

/* The family's state: the final LayerNorm's statistics and backward's scratch, carved in the arena. */
typedef struct {
    float *lnf_mean, *lnf_rstd; /* (N) */
    float *dqkv;                /* (N, 3C) */
    float *d4C;                 /* (N, 4C) */
    /* LoRA: each projection's adapter tensor indices (-1: not targeted), its scale, and the scratch of
     * one projection at a time (lu (N, 4C), ldt (N, r)) */
    int la[4], lb[4];
    int R;
    float lscale;
    float *lu, *ldt;
} gpt2_state;

static fsdp_model_config gpt2_resolve(const fsdp_model_config *c) {
    fsdp_model_config r = *c;
    if (r.padded_vocab_size == 0) r.padded_vocab_size = (r.vocab_size + 127) / 128 * 128;
    return r;
}

static fsdp_status state_init(const fsdp_model_config *c, void **fam) {
    gpt2_state *s = calloc(1, sizeof(gpt2_state));
    if (!s) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model's state");
    const int tg = gpt_lora_targets(c->lora_rank, c->lora_targets);
    int next = GPT_BLOCK_NTENSORS; /* the adapters follow the block's own tensors, A then B */
    for (int p = 0; p < 4; p++) {
        s->la[p] = gpt_lora_on(tg, p) ? next++ : -1;
        s->lb[p] = gpt_lora_on(tg, p) ? next++ : -1;
    }
    s->R = c->lora_rank;
    if (s->R > 0) s->lscale = (float)((c->lora_alpha > 0 ? c->lora_alpha : 2.0 * s->R) / s->R);
    *fam = s;
    return FSDP_OK;
}

static void state_free(void *fam) { free(fam); }

static void carve_block(const fsdp_model_config *c, fsdp_carve *k, size_t B, size_t T, void *acts) {
    const size_t N = B * T, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
    block_acts tmp, *a = acts ? acts : &tmp;
    a->ln1 = fsdp_carve_take(k, N * C);
    a->ln1_mean = fsdp_carve_take(k, N);
    a->ln1_rstd = fsdp_carve_take(k, N);
    a->qkv = fsdp_carve_take(k, 3 * N * C);
    a->atty = fsdp_carve_take(k, N * C);
    a->att = fsdp_carve_take(k, B * NH * T * T);
    a->res2 = fsdp_carve_take(k, N * C);
    a->ln2 = fsdp_carve_take(k, N * C);
    a->ln2_mean = fsdp_carve_take(k, N);
    a->ln2_rstd = fsdp_carve_take(k, N);
    a->fch = fsdp_carve_take(k, 4 * N * C);
    a->fch_gelu = fsdp_carve_take(k, 4 * N * C);
    const int tg = gpt_lora_targets(c->lora_rank, c->lora_targets);
    for (int p = 0; p < 4; p++)
        a->lt[p] = gpt_lora_on(tg, p) ? fsdp_carve_take(k, N * (size_t)c->lora_rank) : NULL;
}

static void carve_head(const fsdp_model_config *c, fsdp_carve *k, size_t N, void *fam) {
    gpt2_state tmp, *s = fam ? fam : &tmp;
    s->lnf_mean = fsdp_carve_take(k, N);
    s->lnf_rstd = fsdp_carve_take(k, N);
    s->lu = c->lora_rank > 0 ? fsdp_carve_take(k, 4 * N * (size_t)c->n_embd) : NULL;
    s->ldt = c->lora_rank > 0 ? fsdp_carve_take(k, N * (size_t)c->lora_rank) : NULL;
}

static void carve_grad(const fsdp_model_config *c, fsdp_carve *k, size_t N, void *fam) {
    const size_t C = (size_t)c->n_embd;
    gpt2_state tmp, *s = fam ? fam : &tmp;
    s->dqkv = fsdp_carve_take(k, 3 * N * C);
    s->d4C = fsdp_carve_take(k, 4 * N * C);
}

/* The GEMM workspace of GPT-2's weights (fsdp_gemm_workspace_bytes): out[N,n] = in[N,k] W[n,k]^T with
 * (k, n) in {(C,3C), (C,C), (C,4C), (4C,C)} with biases and the LM head (C,Vp) without; beside it the
 * short-lived softmax-CE row losses (N doubles) or LayerNorm forward's fp32 weight and bias (2C floats). */
size_t gpt2_other_bytes(const fsdp_model_config *cfg, int B, int T, fsdp_dtype compute, const char *freeze) {
    const fsdp_model_config c = gpt2_resolve(cfg);
    const size_t N = (size_t)B * (size_t)T;
    const int C = c.n_embd, L = c.n_layer;
    const int fz = c.lora_rank > 0; /* LoRA: the base is frozen, so no weight-gradient GEMM of its own */
    /* --freeze: a weight frozen in every block (the head: its storage, wte) has none either */
    fsdp_gemm_shape w[13] = {{C, 3 * C, 1, fz || fsdp_decoder_frozen_all(freeze, L, "qkv_w"), 0},
                             {C, C, 1, fz || fsdp_decoder_frozen_all(freeze, L, "attproj_w"), 0},
                             {C, 4 * C, 1, fz || fsdp_decoder_frozen_all(freeze, L, "fc_w"), 0},
                             {4 * C, C, 1, fz || fsdp_decoder_frozen_all(freeze, L, "fcproj_w"), 0},
                             {C, c.padded_vocab_size, 0, fz || fsdp_decoder_frozen_all(freeze, 0, "wte"), 0}};
    int n = 5;
    const int tg = gpt_lora_targets(c.lora_rank, c.lora_targets);
    for (int p = 0; p < 4; p++) /* LoRA: x A^T (in -> r, dx accumulates) and t B^T (r -> out) */
        if (gpt_lora_on(tg, p)) {
            w[n++] = (fsdp_gemm_shape){GPT_LORA_IN[p] * C, c.lora_rank, 0, 0, 1};
            w[n++] = (fsdp_gemm_shape){c.lora_rank, GPT_LORA_OUT[p] * C, 0, 0, 0};
        }
    size_t transient = N * sizeof(double);
    if (2 * (size_t)C * sizeof(float) > transient) transient = 2 * (size_t)C * sizeof(float);
    return fsdp_gemm_workspace_bytes(N, w, n, compute) + transient;
}

/* ---------------------------------------------------------------- units */

/* The one description of the model's units (gpt_init registers exactly these; the memory plan reads
 * them). Every block has the same specs, so one table serves all L blocks. */
fsdp_status gpt_units_init(gpt_units *out, const gpt_config *cfg) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(gpt_config_validate(cfg));
    const gpt_config c = gpt_config_resolve(cfg);
    const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size;
    out->units = calloc((size_t)L + 1, sizeof *out->units);
    out->names = calloc((size_t)L + 1, sizeof *out->names);
    out->root = calloc(GPT_ROOT_NTENSORS, sizeof *out->root);
    out->block = calloc(GPT_BLOCK_NTENSORS + 8, sizeof *out->block);
    out->root_cfg = calloc(1, sizeof *out->root_cfg);
    if (!out->units || !out->names || !out->root || !out->block || !out->root_cfg) {
        gpt_units_free(out);
        return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the unit table of %lld layers", (long long)L);
    }
    out->n_units = (int)L + 1;

    /* Root: embeddings and final LN; the LM head is an alias of wte in the same unit. */
    fsdp_tensor_spec *r = out->root;
    r[GPT_WTE] = (fsdp_tensor_spec){
        .name = "wte", .ndim = 2, .shape = {Vp, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    r[GPT_WPE] = (fsdp_tensor_spec){
        .name = "wpe", .ndim = 2, .shape = {c.max_seq_len, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    r[GPT_LNF_W] =
        (fsdp_tensor_spec){.name = "lnf_w", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1};
    r[GPT_LNF_B] =
        (fsdp_tensor_spec){.name = "lnf_b", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    r[GPT_LM_HEAD] = (fsdp_tensor_spec){.name = "lm_head", .ndim = 2, .shape = {Vp, C}, .alias_of = "wte"};
    *out->root_cfg = fsdp_unit_config_default();
    out->root_cfg->reshard_after_forward =
        0; /* the LM head runs at the end of forward and first in backward */

    const float std_proj = 0.02f / sqrtf(2.0f * (float)L); /* GPT-2: residual projections scaled */
    fsdp_tensor_spec *b = out->block;
    b[GPT_LN1_W] =
        (fsdp_tensor_spec){.name = "ln1_w", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1};
    b[GPT_LN1_B] =
        (fsdp_tensor_spec){.name = "ln1_b", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    b[GPT_QKV_W] = (fsdp_tensor_spec){
        .name = "qkv_w", .ndim = 2, .shape = {3 * C, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    b[GPT_QKV_B] = (fsdp_tensor_spec){
        .name = "qkv_b", .ndim = 1, .shape = {3 * C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    b[GPT_ATTPROJ_W] = (fsdp_tensor_spec){
        .name = "attproj_w", .ndim = 2, .shape = {C, C}, .init = FSDP_INIT_NORMAL, .std = std_proj};
    b[GPT_ATTPROJ_B] = (fsdp_tensor_spec){
        .name = "attproj_b", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    b[GPT_LN2_W] =
        (fsdp_tensor_spec){.name = "ln2_w", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1};
    b[GPT_LN2_B] =
        (fsdp_tensor_spec){.name = "ln2_b", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    b[GPT_FC_W] = (fsdp_tensor_spec){
        .name = "fc_w", .ndim = 2, .shape = {4 * C, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    b[GPT_FC_B] = (fsdp_tensor_spec){
        .name = "fc_b", .ndim = 1, .shape = {4 * C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};
    b[GPT_FCPROJ_W] = (fsdp_tensor_spec){
        .name = "fcproj_w", .ndim = 2, .shape = {C, 4 * C}, .init = FSDP_INIT_NORMAL, .std = std_proj};
    b[GPT_FCPROJ_B] = (fsdp_tensor_spec){
        .name = "fcproj_b", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ZEROS, .no_decay = 1};

    out->n_block = GPT_BLOCK_NTENSORS;
    if (c.lora_rank > 0) { /* LoRA: the base frozen, an adapter pair per targeted projection */
        static const char *const names[4][2] = {{"lora_a_c_attn", "lora_b_c_attn"},
                                                {"lora_a_attn_proj", "lora_b_attn_proj"},
                                                {"lora_a_c_fc", "lora_b_c_fc"},
                                                {"lora_a_mlp_proj", "lora_b_mlp_proj"}};
        const int tg = gpt_lora_targets(c.lora_rank, c.lora_targets);
        const int64_t R = c.lora_rank;
        for (int k = 0; k < GPT_ROOT_NTENSORS; k++)
            r[k].frozen = 1;
        for (int k = 0; k < GPT_BLOCK_NTENSORS; k++)
            b[k].frozen = 1;
        for (int p = 0; p < 4; p++) {
            if (!gpt_lora_on(tg, p)) continue;
            const int64_t in = GPT_LORA_IN[p] * C, o = GPT_LORA_OUT[p] * C;
            /* PEFT's A: kaiming_uniform_(a=sqrt(5)), uniform on +-1/sqrt(in); B: zeros */
            b[out->n_block++] = (fsdp_tensor_spec){.name = names[p][0],
                                                   .ndim = 2,
                                                   .shape = {R, in},
                                                   .init = FSDP_INIT_UNIFORM,
                                                   .std = (float)(1.0 / sqrt((double)in))};
            b[out->n_block++] =
                (fsdp_tensor_spec){.name = names[p][1], .ndim = 2, .shape = {o, R}, .init = FSDP_INIT_ZEROS};
        }
    }

    snprintf(out->names[0], sizeof out->names[0], "root");
    out->units[0] = (fsdp_plan_unit){
        .name = out->names[0], .specs = r, .n_specs = GPT_ROOT_NTENSORS, .cfg = out->root_cfg};
    for (int l = 0; l < L; l++) {
        snprintf(out->names[l + 1], sizeof out->names[l + 1], "h%d", l);
        out->units[l + 1] =
            (fsdp_plan_unit){.name = out->names[l + 1], .specs = b, .n_specs = out->n_block, .cfg = NULL};
    }
    return FSDP_OK;
}

void gpt_units_free(gpt_units *u) {
    if (u == NULL) return;
    free(u->units);
    free(u->names);
    free(u->root);
    free(u->block);
    free(u->root_cfg);
    memset(u, 0, sizeof *u);
}

/* ---------------------------------------------------------------- the block table's hooks */

/* main_grad views of tensors t0 and t1 that one kernel writes with one accumulate flag (LayerNorm
 * weight and bias); their flags always agree in this model because both are first touched together.
 * A frozen one has a NULL view and no say (the kernel skips it). */
static fsdp_status grad_pair(fsdp_unit_t *u, int t0, int t1, float **g0, float **g1, int *acc) {
    int a0, a1;
    FSDP_TRY(fsdp_unit_main_grad(u, t0, g0, &a0));
    FSDP_TRY(fsdp_unit_main_grad(u, t1, g1, &a1));
    if (*g0 && *g1 && a0 != a1)
        return FSDP_ERR(FSDP_EINTERNAL, "unit '%s': tensors %d and %d disagree on first touch (%d vs %d)",
                        fsdp_unit_name(u), t0, t1, a0, a1);
    *acc = *g0 ? a0 : a1;
    return FSDP_OK;
}

/* ---- LoRA: projection p's adapter over the shared code (model/decoder.h); A NULL when not targeted */
static fsdp_lora gpt_lora(const gpt2_state *s, const fsdp_kctx *kc, const void *const *w, int p, int C) {
    if (s->la[p] < 0) return (fsdp_lora){0};
    const int n = GPT_LORA_OUT[p] * C;
    return (fsdp_lora){.kc = kc,
                       .A = w[s->la[p]],
                       .B = w[s->lb[p]],
                       .in = GPT_LORA_IN[p] * C,
                       .n = n,
                       .ldy = n,
                       .R = s->R,
                       .scale = s->lscale};
}

/* y += scale (x A^T) B^T, x A^T into t (kept for backward, or decode's scratch). */
static fsdp_status lora_fwd(const gpt2_state *s, const fsdp_kctx *kc, const void *const *w, int p, int C,
                            const float *x, float *t, float *y, float *u, int N, fsdp_dtype pdt) {
    const fsdp_lora l = gpt_lora(s, kc, w, p, C);
    if (!l.A) return FSDP_OK;
    FSDP_TRY(fsdp_lora_xa(&l, x, t, N, pdt));
    return fsdp_lora_add(&l, t, y, u, N, pdt);
}

static fsdp_status lora_bwd(const gpt2_state *s, const fsdp_kctx *kc, fsdp_unit_t *u, const void *const *w,
                            int p, int C, const float *dy, const float *x, const float *t, float *dx, int N,
                            fsdp_dtype pdt) {
    fsdp_lora l = gpt_lora(s, kc, w, p, C);
    if (!l.A) return FSDP_OK;
    FSDP_TRY(fsdp_unit_main_grad(u, s->lb[p], &l.gB, &l.aB));
    FSDP_TRY(fsdp_unit_main_grad(u, s->la[p], &l.gA, &l.aA));
    return fsdp_lora_backward(&l, dy, x, t, dx, s->lu, s->ldt, N, pdt);
}

static fsdp_status embed_forward(fsdp_decoder *d, float *out) {
    const fsdp_model_config *c = &d->cfg;
    return FSDP_K(d, encoder_forward_pos, out, d->tokens, d->has_doc ? d->pos : NULL, d->root_w[GPT_WTE],
                  d->root_w[GPT_WPE], d->pdt, d->B, d->T, c->n_embd, c->padded_vocab_size, c->max_seq_len);
}

/* Block l's forward from x (N, C) into the activations a. out (N, C) receives the block output, or
 * NULL during recompute: the backward needs nothing after the GELU, so the last GEMM is skipped. */
static fsdp_status block_forward(fsdp_decoder *d, int l, const float *x, void *acts, float *out) {
    const int B = d->act_B, T = d->act_T, N = B * T, C = d->cfg.n_embd, NH = d->cfg.n_head;
    const fsdp_dtype pdt = d->pdt;
    block_acts *a = acts;
    const gpt2_state *s = d->fam;
    const void *w[GPT_BLOCK_NTENSORS + 8];
    FSDP_TRY(fsdp_decoder_views(d->blocks[l], fsdp_unit_num_tensors(d->blocks[l]), w));
    FSDP_TRY(FSDP_K(d, layernorm_forward, a->ln1, a->ln1_mean, a->ln1_rstd, x, w[GPT_LN1_W], w[GPT_LN1_B],
                    pdt, N, C));
    FSDP_TRY(FSDP_K(d, matmul_forward, a->qkv, a->ln1, w[GPT_QKV_W], w[GPT_QKV_B], pdt, N, C, 3 * C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 0, C, a->ln1, a->lt[0], a->qkv, s->lu, N, pdt));
    fsdp_decoder_progress(d);
    /* with document ids the same kernel masks other documents' keys (its backward reads only att) */
    FSDP_TRY(d->has_doc ? FSDP_K(d, attention_forward_doc, a->atty, NULL, a->att, a->qkv, d->doc, B, T, C, NH)
                        : FSDP_K(d, attention_forward_doc, a->atty, NULL, a->att, a->qkv, NULL, B, T, C, NH));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, matmul_forward, d->tmpC, a->atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], pdt, N, C, C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 1, C, a->atty, a->lt[1], d->tmpC, s->lu, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, residual_forward, a->res2, x, d->tmpC, (size_t)N * C));
    FSDP_TRY(FSDP_K(d, layernorm_forward, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w[GPT_LN2_W],
                    w[GPT_LN2_B], pdt, N, C));
    FSDP_TRY(FSDP_K(d, matmul_forward, a->fch, a->ln2, w[GPT_FC_W], w[GPT_FC_B], pdt, N, C, 4 * C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 2, C, a->ln2, a->lt[2], a->fch, s->lu, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, gelu_forward, a->fch_gelu, a->fch, (size_t)N * 4 * C));
    const fsdp_lora lp = gpt_lora(s, &d->kc, w, 3, C);
    if (lp.A) FSDP_TRY(fsdp_lora_xa(&lp, a->fch_gelu, a->lt[3], N, pdt)); /* saved: recompute too */
    if (out == NULL) return FSDP_OK;
    FSDP_TRY(
        FSDP_K(d, matmul_forward, d->tmpC, a->fch_gelu, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], pdt, N, 4 * C, C));
    if (lp.A) FSDP_TRY(fsdp_lora_add(&lp, a->lt[3], d->tmpC, s->lu, N, pdt));
    fsdp_decoder_progress(d);
    return FSDP_K(d, residual_forward, out, a->res2, d->tmpC, (size_t)N * C);
}

/* Block l's backward. On entry d->dres holds dL/d(block output); on exit dL/d(block input) x. */
static fsdp_status block_backward(fsdp_decoder *d, int l, const float *x, void *acts) {
    const int B = d->act_B, T = d->act_T, N = B * T, C = d->cfg.n_embd, NH = d->cfg.n_head;
    const fsdp_dtype pdt = d->pdt;
    const block_acts *a = acts;
    gpt2_state *s = d->fam;
    fsdp_unit_t *u = d->blocks[l];
    const void *w[GPT_BLOCK_NTENSORS + 8];
    FSDP_TRY(fsdp_decoder_views(u, fsdp_unit_num_tensors(u), w));
    float *gw, *gb;
    int aw, ab, acc;

    /* MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); the residual passes dres through unchanged. */
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FCPROJ_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FCPROJ_B, &gb, &ab));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, matmul_backward, s->d4C, 0, gw, aw, gb, ab, d->dres, a->fch_gelu, w[GPT_FCPROJ_W], pdt,
                    N, 4 * C, C));
    FSDP_TRY(lora_bwd(s, &d->kc, u, w, 3, C, d->dres, a->fch_gelu, a->lt[3], s->d4C, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, gelu_backward, s->d4C, a->fch, s->d4C, (size_t)N * 4 * C));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FC_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FC_B, &gb, &ab));
    FSDP_TRY(FSDP_K(d, matmul_backward, d->dtmpC, 0, gw, aw, gb, ab, s->d4C, a->ln2, w[GPT_FC_W], pdt, N, C,
                    4 * C));
    FSDP_TRY(lora_bwd(s, &d->kc, u, w, 2, C, s->d4C, a->ln2, a->lt[2], d->dtmpC, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(grad_pair(u, GPT_LN2_W, GPT_LN2_B, &gw, &gb, &acc));
    FSDP_TRY(FSDP_K(d, layernorm_backward, d->dres, 1, gw, gb, acc, d->dtmpC, a->res2, w[GPT_LN2_W], pdt,
                    a->ln2_mean, a->ln2_rstd, N, C));
    /* Attention: res2 = x + attproj(attention(qkv(ln1(x)))). */
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_ATTPROJ_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_ATTPROJ_B, &gb, &ab));
    FSDP_TRY(FSDP_K(d, matmul_backward, d->dtmpC, 0, gw, aw, gb, ab, d->dres, a->atty, w[GPT_ATTPROJ_W], pdt,
                    N, C, C));
    FSDP_TRY(lora_bwd(s, &d->kc, u, w, 1, C, d->dres, a->atty, a->lt[1], d->dtmpC, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(FSDP_K(d, attention_backward, s->dqkv, d->dtmpC, a->qkv, a->att, B, T, C, NH));
    fsdp_decoder_progress(d);
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_QKV_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_QKV_B, &gb, &ab));
    FSDP_TRY(FSDP_K(d, matmul_backward, d->dtmpC, 0, gw, aw, gb, ab, s->dqkv, a->ln1, w[GPT_QKV_W], pdt, N, C,
                    3 * C));
    FSDP_TRY(lora_bwd(s, &d->kc, u, w, 0, C, s->dqkv, a->ln1, a->lt[0], d->dtmpC, N, pdt));
    fsdp_decoder_progress(d);
    FSDP_TRY(grad_pair(u, GPT_LN1_W, GPT_LN1_B, &gw, &gb, &acc));
    return FSDP_K(d, layernorm_backward, d->dres, 1, gw, gb, acc, d->dtmpC, x, w[GPT_LN1_W], pdt, a->ln1_mean,
                  a->ln1_rstd, N, C);
}

/* decode's scratch for R rows (after the driver's x): ln, tmp, atty (C each), qkv (3C), fch, fch_gelu
 * (4C each), mean, rstd (1 each). */
typedef struct {
    float *ln, *tmp, *atty, *qkv, *fch, *fcg, *mean, *rstd;
    float *lt, *lu; /* LoRA: (R, r) and (R, 4C); NULL without */
} dec_bufs;

static size_t decode_floats(const fsdp_model_config *c, size_t R) {
    const size_t lora = c->lora_rank > 0 ? (size_t)c->lora_rank + 4 * (size_t)c->n_embd : 0;
    return R * (14 * (size_t)c->n_embd + 2 + lora);
}

static dec_bufs dec_of(const fsdp_decoder *d) {
    const size_t R = (size_t)d->dec_rows, C = (size_t)d->cfg.n_embd;
    dec_bufs b;
    b.ln = d->dec_scratch, b.tmp = b.ln + R * C, b.atty = b.tmp + R * C, b.qkv = b.atty + R * C;
    b.fch = b.qkv + 3 * R * C, b.fcg = b.fch + 4 * R * C, b.mean = b.fcg + 4 * R * C, b.rstd = b.mean + R;
    const size_t r = d->cfg.lora_rank > 0 ? (size_t)d->cfg.lora_rank : 0;
    b.lt = r ? b.rstd + R : NULL;
    b.lu = r ? b.lt + R * r : NULL;
    return b;
}

static fsdp_status norm_forward(fsdp_decoder *d, const float *x, int n, float *xf, int decode) {
    const gpt2_state *s = d->fam;
    const dec_bufs b = decode ? dec_of(d) : (dec_bufs){0};
    return FSDP_K(d, layernorm_forward, xf, decode ? b.mean : s->lnf_mean, decode ? b.rstd : s->lnf_rstd, x,
                  d->root_w[GPT_LNF_W], d->root_w[GPT_LNF_B], d->pdt, n, d->cfg.n_embd);
}

static fsdp_status norm_backward(fsdp_decoder *d, const float *x) {
    const gpt2_state *s = d->fam;
    float *gw, *gb;
    int acc;
    FSDP_TRY(grad_pair(d->root, GPT_LNF_W, GPT_LNF_B, &gw, &gb, &acc));
    return FSDP_K(d, layernorm_backward, d->dres, 0, gw, gb, acc, d->dtmpC, x, d->root_w[GPT_LNF_W], d->pdt,
                  s->lnf_mean, s->lnf_rstd, d->B * d->T, d->cfg.n_embd);
}

/* wte's second use (the LM head's was first) accumulates by the first-touch flag. */
static fsdp_status embed_backward(fsdp_decoder *d) {
    const fsdp_model_config *c = &d->cfg;
    float *gwte, *gwpe;
    int awte, awpe;
    FSDP_TRY(fsdp_unit_main_grad(d->root, GPT_WTE, &gwte, &awte));
    FSDP_TRY(fsdp_unit_main_grad(d->root, GPT_WPE, &gwpe, &awpe));
    return FSDP_K(d, encoder_backward_pos, gwte, awte, gwpe, awpe, d->dres, d->tokens,
                  d->has_doc ? d->pos : NULL, d->B, d->T, c->n_embd, c->padded_vocab_size, c->max_seq_len);
}

/* GPT-2 decodes the whole prompt as one chunk (rows = max_seq_len); keys and values are C wide. */
static int decode_rows(const fsdp_model_config *c) { return c->max_seq_len; }
static size_t kv_width(const fsdp_model_config *c) { return (size_t)c->n_embd; }

/* Embeddings at positions pos..: the encoder over a position table starting at row pos. */
static fsdp_status embed_decode(fsdp_decoder *d, const int *tokens, int n, int pos, float *x) {
    const fsdp_model_config *c = &d->cfg;
    const size_t esz = d->pdt == FSDP_BF16 ? sizeof(fsdp_bf16) : sizeof(float);
    return FSDP_K(d, encoder_forward_pos, x, tokens, NULL, d->root_w[GPT_WTE],
                  (const char *)d->root_w[GPT_WPE] + (size_t)pos * (size_t)c->n_embd * esz, d->pdt, 1, n,
                  c->n_embd, c->padded_vocab_size, c->max_seq_len - pos);
}

static fsdp_status block_decode(fsdp_decoder *d, int l, float *x, int n, int pos, float *K, float *V,
                                float *att, int nthr) {
    const int C = d->cfg.n_embd, NH = d->cfg.n_head;
    const size_t Cz = (size_t)C;
    const fsdp_dtype pdt = d->pdt;
    const dec_bufs b = dec_of(d);
    const gpt2_state *s = d->fam;
    const void *w[GPT_BLOCK_NTENSORS + 8];
    FSDP_TRY(fsdp_decoder_views(d->blocks[l], fsdp_unit_num_tensors(d->blocks[l]), w));
    FSDP_TRY(FSDP_K(d, layernorm_forward, b.ln, b.mean, b.rstd, x, w[GPT_LN1_W], w[GPT_LN1_B], pdt, n, C));
    FSDP_TRY(FSDP_K(d, matmul_forward, b.qkv, b.ln, w[GPT_QKV_W], w[GPT_QKV_B], pdt, n, C, 3 * C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 0, C, b.ln, b.lt, b.qkv, b.lu, n, pdt));
    for (int i = 0; i < n; i++) {
        memcpy(K + (size_t)(pos + i) * Cz, b.qkv + (size_t)i * 3 * Cz + Cz, Cz * sizeof(float));
        memcpy(V + (size_t)(pos + i) * Cz, b.qkv + (size_t)i * 3 * Cz + 2 * Cz, Cz * sizeof(float));
    }
    const float scale = 1.0f / sqrtf((float)(C / NH));
    FSDP_TRY(FSDP_K(d, decode_attention, b.atty, C, b.qkv, 3 * C, K, V, C, att, nthr, n, pos, NH, NH, C / NH,
                    scale, d->cfg.max_seq_len));
    FSDP_TRY(FSDP_K(d, matmul_forward, b.tmp, b.atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], pdt, n, C, C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 1, C, b.atty, b.lt, b.tmp, b.lu, n, pdt));
    FSDP_TRY(FSDP_K(d, residual_forward, x, x, b.tmp, (size_t)n * Cz));
    FSDP_TRY(FSDP_K(d, layernorm_forward, b.ln, b.mean, b.rstd, x, w[GPT_LN2_W], w[GPT_LN2_B], pdt, n, C));
    FSDP_TRY(FSDP_K(d, matmul_forward, b.fch, b.ln, w[GPT_FC_W], w[GPT_FC_B], pdt, n, C, 4 * C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 2, C, b.ln, b.lt, b.fch, b.lu, n, pdt));
    FSDP_TRY(FSDP_K(d, gelu_forward, b.fcg, b.fch, (size_t)n * 4 * Cz));
    FSDP_TRY(FSDP_K(d, matmul_forward, b.tmp, b.fcg, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], pdt, n, 4 * C, C));
    FSDP_TRY(lora_fwd(s, &d->kc, w, 3, C, b.fcg, b.lt, b.tmp, b.lu, n, pdt));
    return FSDP_K(d, residual_forward, x, x, b.tmp, (size_t)n * Cz);
}

const fsdp_block_table fsdp_gpt2_blocks = {
    .name = "gpt2",
    .resolve = gpt2_resolve,
    .max_positions = (size_t)1 << 31,
    .n_root = GPT_ROOT_NTENSORS,
    .head = GPT_LM_HEAD,
    .acts_size = sizeof(block_acts),
    FSDP_BLOCK_TABLE_HOOKS,
};
