/* gpt.c — GPT-2 forward and backward on FSDP units (see gpt.h for the contract and hook order).
 * Activations live in one tracked allocation (category activation) carved into named buffers, like
 * llm.c's activation table; with recompute only the residual stream per layer is kept and one set of
 * per-block buffers is reused, recomputed bit for bit in each block's backward. */
#include "model/gpt2/gpt.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
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
} block_acts;

struct gpt_model {
    gpt_config cfg; /* resolved (padded vocab set) */
    fsdp_engine_t *eng;
    fsdp_dtype pdt;       /* the engine's compute dtype: parameter views are float* or fsdp_bf16* */
    fsdp_unit_t *root;    /* "root": wte, wpe, lnf_w, lnf_b, lm_head (alias of wte) */
    fsdp_unit_t **blocks; /* (L) "h<l>" */
    int recompute;        /* what the next forward does */

    /* Activation arena, sized for cap_rows = B*T rows and the (B, T) it was carved for. */
    void *arena;
    size_t arena_bytes;
    int act_B, act_T, act_recompute;
    block_acts *acts; /* (L) or (1) with recompute: all alias the same buffers */
    float *res;       /* (L+1, N, C) residual stream: res[0] = embeddings, res[l+1] = block l out */
    float *lnf;       /* (N, C) */
    float *lnf_mean;  /* (N) */
    float *lnf_rstd;  /* (N) */
    float *logits;    /* (N, Vp); becomes dlogits in backward */
    float *tmpC;      /* (N, C) GEMM outputs before a residual add */
    float *dres;      /* (N, C) gradient of the residual stream */
    float *dtmpC;     /* (N, C) */
    float *dqkv;      /* (N, 3C) */
    float *d4C;       /* (N, 4C) */
    int *tokens;      /* (N) copy of the last forward's tokens */
    int *targets;     /* (N) copy of its targets */
    int *pos;         /* (N) positions when the batch has document ids (restarting per document) */
    int *doc;         /* (N) copy of its document ids */
    int has_doc;      /* the last forward had document ids: attention masked, positions from pos */
    int n_counted;    /* targets of the last forward that count (not FSDP_IGNORE_INDEX) */

    /* gpt_decode: the key/value cache and its per-call buffers, allocated on first use */
    float *kv;  /* (L, 2, T_max, C): keys then values of every cached position */
    float *dec; /* scratch for up to T_max rows (see decode_buffers) */
    int kv_len; /* positions cached */

    int B, T;             /* of the last forward */
    int have_targets;     /* the last forward had targets */
    int pending_backward; /* a training forward ran and its backward has not */
    int logits_valid;
};

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
    return FSDP_OK;
}

static gpt_config resolve(const gpt_config *c) {
    gpt_config r = *c;
    if (r.padded_vocab_size == 0) r.padded_vocab_size = (r.vocab_size + 127) / 128 * 128;
    return r;
}

size_t gpt_num_params(const gpt_config *cfg) {
    if (gpt_config_validate(cfg) != FSDP_OK) return 0;
    gpt_config c = resolve(cfg);
    size_t C = (size_t)c.n_embd, L = (size_t)c.n_layer;
    size_t root = (size_t)c.padded_vocab_size * C + (size_t)c.max_seq_len * C + 2 * C;
    size_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    return root + L * block;
}

/* Arena layout: every buffer's element count for N = B*T rows, in carving order. Each buffer is
 * rounded up to 16 floats (64 bytes) so every pointer stays 64-byte aligned. */
#define ALIGN_F 16
static size_t align_f(size_t n) { return (n + ALIGN_F - 1) / ALIGN_F * ALIGN_F; }

static size_t block_acts_floats(const gpt_config *c, size_t B, size_t T) {
    size_t N = B * T, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
    return align_f(N * C) * 4 + align_f(N) * 4 + align_f(3 * N * C) + align_f(B * NH * T * T) +
           align_f(4 * N * C) * 2;
}

static size_t arena_floats(const gpt_config *c, int B, int T, int recompute) {
    size_t N = (size_t)B * T, C = (size_t)c->n_embd, L = (size_t)c->n_layer;
    size_t n = (recompute ? 1 : L) * block_acts_floats(c, (size_t)B, (size_t)T);
    n += (L + 1) * align_f(N * C);                                     /* res */
    n += align_f(N * C) + 2 * align_f(N);                              /* lnf, mean, rstd */
    n += align_f(N * (size_t)c->padded_vocab_size);                    /* logits */
    n += 3 * align_f(N * C) + align_f(3 * N * C) + align_f(4 * N * C); /* tmpC dres dtmpC dqkv d4C */
    n += 4 * align_f(N); /* tokens, targets, pos, doc (int32, same size) */
    return n;
}

size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T) {
    if (gpt_config_validate(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    gpt_config c = resolve(cfg);
    return arena_floats(&c, B, T, c.recompute) * sizeof(float);
}

/* Mirrors gemm.c's workspace slots for this model's GEMM shapes (N = B*T rows):
 *   forward  out[N,n] = in[N,k] W[n,k]^T  with (k, n) in {(C,3C), (C,C), (C,4C), (4C,C), (C,Vp)};
 *   backward dinp = dout[N,n] W, dW = dout^T in, for the same shapes.
 * The bf16 GEMM paths keep bf16 copies of the activation operands: slot A holds in (forward) or dout
 * (backward), at most N*max(4C, Vp) elements; slot B holds in (backward), at most N*4C. The
 * bf16-via-f32 fallback also widens both GEMM operands and the bias to fp32: A32 up to N*max(4C, Vp)
 * (dout; forward's in is smaller), B32 up to max(N*4C, Vp*C, 4C*C) (an activation or a weight), bias
 * up to 4C. The f32-compute path widens the weight, rows = fsdp_gemm_widen_rows(k, n) at a time (W32:
 * the largest rows*k), with a dense [N, rows] buffer for a weight widened in several blocks where the
 * f32 kernel needs dense operands (C32: the LM head at GPT-2 widths on AVX-512), and the bias (up to
 * 4C); fsdp_gemm_widen_workspace gives the first two per shape. Short-lived buffers beside them: softmax-CE
 * row losses (N doubles) and LayerNorm forward's fp32 weight and bias (2C floats). */
size_t gpt_other_bytes(const gpt_config *cfg, int B, int T, fsdp_dtype compute) {
    if (gpt_config_validate(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    gpt_config c = resolve(cfg);
    size_t N = (size_t)B * (size_t)T, C = (size_t)c.n_embd, Vp = (size_t)c.padded_vocab_size;
    size_t wide = 4 * C > Vp ? 4 * C : Vp; /* widest activation operand's columns */
    size_t bytes = 0;
    fsdp_gemm_path path = compute == FSDP_BF16 ? fsdp_gemm_path_for(FSDP_BF16) : FSDP_GEMM_F32;
    if (path == FSDP_GEMM_BF16 || path == FSDP_GEMM_BF16_VIA_F32) {
        bytes += N * wide * sizeof(fsdp_bf16) + N * 4 * C * sizeof(fsdp_bf16);
        if (path == FSDP_GEMM_BF16_VIA_F32) {
            size_t b32 = N * 4 * C;
            if (Vp * C > b32) b32 = Vp * C;
            bytes += (N * wide + b32 + 4 * C) * sizeof(float);
        }
    } else if (path == FSDP_GEMM_F32_COMPUTE) {
        const size_t kn[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, Vp}};
        size_t w32 = 0, c32 = 0;
        for (int i = 0; i < 5; i++) {
            size_t wb, cb;
            fsdp_gemm_widen_workspace((int)N, (int)kn[i][0], (int)kn[i][1], &wb, &cb);
            if (wb > w32) w32 = wb;
            if (cb > c32) c32 = cb;
        }
        bytes += w32 + c32 + 4 * C * sizeof(float);
    }
    size_t transient = N * sizeof(double);
    if (2 * C * sizeof(float) > transient) transient = 2 * C * sizeof(float);
    return bytes + transient;
}

/* Carves the arena for (B, T) and the current recompute setting; reallocates only when it must grow. */
static fsdp_status ensure_arena(gpt_model_t *m, int B, int T) {
    const gpt_config *c = &m->cfg;
    if (m->arena && m->act_B == B && m->act_T == T && m->act_recompute == m->recompute) return FSDP_OK;
    size_t nf = arena_floats(c, B, T, m->recompute), bytes;
    if (!fsdp_mul_ok(nf, sizeof(float), &bytes))
        return FSDP_ERR(FSDP_EINVAL, "activations for B=%d T=%d overflow size_t", B, T);
    if (bytes > m->arena_bytes) {
        fsdp_mem_free(m->arena);
        m->arena = NULL;
        m->arena_bytes = 0;
        FSDP_TRY(fsdp_mem_alloc(&m->arena, bytes, FSDP_MEM_ACTIVATION));
        m->arena_bytes = bytes;
    }
    size_t N = (size_t)B * T, C = (size_t)c->n_embd, NH = (size_t)c->n_head, L = (size_t)c->n_layer;
    float *p = m->arena;
#define TAKE(n) (p += align_f(n), p - align_f(n))
    int nsets = m->recompute ? 1 : c->n_layer;
    for (int s = 0; s < nsets; s++) {
        block_acts *a = &m->acts[s];
        a->ln1 = TAKE(N * C);
        a->ln1_mean = TAKE(N);
        a->ln1_rstd = TAKE(N);
        a->qkv = TAKE(3 * N * C);
        a->atty = TAKE(N * C);
        a->att = TAKE((size_t)B * NH * T * T);
        a->res2 = TAKE(N * C);
        a->ln2 = TAKE(N * C);
        a->ln2_mean = TAKE(N);
        a->ln2_rstd = TAKE(N);
        a->fch = TAKE(4 * N * C);
        a->fch_gelu = TAKE(4 * N * C);
    }
    for (int s = nsets; s < c->n_layer; s++)
        m->acts[s] = m->acts[0]; /* recompute: one shared set */
    m->res = p;                  /* (L+1) slices at an aligned stride of align_f(N*C): see res_at */
    p += (L + 1) * align_f(N * C);
    m->lnf = TAKE(N * C);
    m->lnf_mean = TAKE(N);
    m->lnf_rstd = TAKE(N);
    m->logits = TAKE(N * (size_t)c->padded_vocab_size);
    m->tmpC = TAKE(N * C);
    m->dres = TAKE(N * C);
    m->dtmpC = TAKE(N * C);
    m->dqkv = TAKE(3 * N * C);
    m->d4C = TAKE(4 * N * C);
    m->tokens = (int *)TAKE(N);
    m->targets = (int *)TAKE(N);
    m->pos = (int *)TAKE(N);
    m->doc = (int *)TAKE(N);
#undef TAKE
    FSDP_INVARIANT((size_t)(p - (float *)m->arena) <= nf);
    m->act_B = B, m->act_T = T, m->act_recompute = m->recompute;
    return FSDP_OK;
}

/* Residual stream slice l (0..L): (N, C) at a 64-byte aligned stride. */
static float *res_at(const gpt_model_t *m, int l) {
    return m->res + (size_t)l * align_f((size_t)m->act_B * m->act_T * m->cfg.n_embd);
}

/* ---------------------------------------------------------------- init / free */

/* The one description of the model's units (gpt_init registers exactly these; the memory plan reads
 * them). Every block has the same specs, so one table serves all L blocks. */
fsdp_status gpt_units_init(gpt_units *out, const gpt_config *cfg) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(gpt_config_validate(cfg));
    const gpt_config c = resolve(cfg);
    const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size;
    out->units = calloc((size_t)L + 1, sizeof *out->units);
    out->names = calloc((size_t)L + 1, sizeof *out->names);
    out->root = calloc(GPT_ROOT_NTENSORS, sizeof *out->root);
    out->block = calloc(GPT_BLOCK_NTENSORS, sizeof *out->block);
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

    snprintf(out->names[0], sizeof out->names[0], "root");
    out->units[0] = (fsdp_plan_unit){
        .name = out->names[0], .specs = r, .n_specs = GPT_ROOT_NTENSORS, .cfg = out->root_cfg};
    for (int l = 0; l < L; l++) {
        snprintf(out->names[l + 1], sizeof out->names[l + 1], "h%d", l);
        out->units[l + 1] = (fsdp_plan_unit){
            .name = out->names[l + 1], .specs = b, .n_specs = GPT_BLOCK_NTENSORS, .cfg = NULL};
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

fsdp_status gpt_init(gpt_model_t **out, fsdp_engine_t *eng, const gpt_config *cfg) {
    if (out == NULL || eng == NULL) return FSDP_ERR(FSDP_EINVAL, "out and eng must not be NULL");
    *out = NULL;
    FSDP_TRY(gpt_config_validate(cfg));
    gpt_units us;
    FSDP_TRY(gpt_units_init(&us, cfg));
    gpt_model_t *m = calloc(1, sizeof *m);
    fsdp_status st;
    if (m == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model struct");
        goto fail;
    }
    m->cfg = resolve(cfg);
    m->eng = eng;
    m->pdt = fsdp_engine_get_config(eng)->compute_dtype;
    m->recompute = m->cfg.recompute;
    const int64_t L = m->cfg.n_layer;
    m->blocks = calloc((size_t)L, sizeof *m->blocks);
    m->acts = calloc((size_t)L, sizeof *m->acts);
    if (m->blocks == NULL || m->acts == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model's unit table (%lld layers)", (long long)L);
        goto fail;
    }
    /* Exactly the units gpt_units_init describes: root, then h0..h<L-1>. */
    for (int i = 0; i < us.n_units; i++) {
        const fsdp_plan_unit *pu = &us.units[i];
        st = fsdp_engine_add_unit(eng, pu->name, pu->specs, pu->n_specs, pu->cfg,
                                  i ? &m->blocks[i - 1] : &m->root);
        if (st != FSDP_OK) goto fail;
    }
    gpt_units_free(&us);
    *out = m;
    return FSDP_OK;
fail: /* units already added belong to the engine (freed with it) */
    if (m) {
        free(m->acts);
        free(m->blocks);
        free(m);
    }
    gpt_units_free(&us);
    return st;
}

void gpt_free(gpt_model_t *m) {
    if (m == NULL) return;
    fsdp_mem_free(m->kv);
    fsdp_mem_free(m->dec);
    fsdp_mem_free(m->arena);
    free(m->acts);
    free(m->blocks);
    free(m);
}

const gpt_config *gpt_get_config(const gpt_model_t *m) { return m ? &m->cfg : NULL; }
fsdp_unit_t *gpt_root_unit(gpt_model_t *m) { return m ? m->root : NULL; }
fsdp_unit_t *gpt_block_unit(gpt_model_t *m, int layer) {
    return (m && layer >= 0 && layer < m->cfg.n_layer) ? m->blocks[layer] : NULL;
}

fsdp_status gpt_set_recompute(gpt_model_t *m, int on) {
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (on != 0 && on != 1) return FSDP_ERR(FSDP_EINVAL, "recompute must be 0 or 1, got %d", on);
    if (m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        "cannot switch recompute between a forward and its backward; run gpt_backward first");
    m->recompute = on;
    m->cfg.recompute = on;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- parameter views */

static fsdp_status views(fsdp_unit_t *u, int n, const void **p) {
    for (int t = 0; t < n; t++) {
        void *v;
        FSDP_TRY(fsdp_unit_param(u, t, &v));
        p[t] = v;
    }
    return FSDP_OK;
}

/* main_grad views of tensors t0 and t1 that one kernel writes with one accumulate flag (LayerNorm
 * weight and bias); their flags always agree in this model because both are first touched together. */
static fsdp_status grad_pair(fsdp_unit_t *u, int t0, int t1, float **g0, float **g1, int *acc) {
    int a0, a1;
    FSDP_TRY(fsdp_unit_main_grad(u, t0, g0, &a0));
    FSDP_TRY(fsdp_unit_main_grad(u, t1, g1, &a1));
    if (a0 != a1)
        return FSDP_ERR(FSDP_EINTERNAL, "unit '%s': tensors %d and %d disagree on first touch (%d vs %d)",
                        fsdp_unit_name(u), t0, t1, a0, a1);
    *acc = a0;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- block forward / backward */

/* Block l's forward from x (N, C) into the activations a. out (N, C) receives the block output, or
 * NULL during recompute: the backward needs nothing after the GELU, so the last GEMM is skipped. */
/* Gives the collectives started by the hooks (prefetched gathers, the previous unit's reduction) a
 * turn between kernels, so that they move while this unit computes (fsdp_engine_progress). */
static void progress(gpt_model_t *m) { fsdp_engine_progress(m->eng); }

static fsdp_status block_forward(gpt_model_t *m, int l, const float *x, block_acts *a, float *out) {
    const int B = m->act_B, T = m->act_T, N = B * T, C = m->cfg.n_embd, NH = m->cfg.n_head;
    const fsdp_dtype pdt = m->pdt;
    const void *w[GPT_BLOCK_NTENSORS];
    FSDP_TRY(views(m->blocks[l], GPT_BLOCK_NTENSORS, w));
    FSDP_TRY(
        fsdp_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w[GPT_LN1_W], w[GPT_LN1_B], pdt, N, C));
    FSDP_TRY(fsdp_matmul_forward(a->qkv, a->ln1, w[GPT_QKV_W], w[GPT_QKV_B], pdt, N, C, 3 * C));
    progress(m);
    /* with document ids the same kernel masks other documents' keys (its backward reads only att) */
    FSDP_TRY(m->has_doc ? fsdp_attention_forward_doc(a->atty, NULL, a->att, a->qkv, m->doc, B, T, C, NH)
                        : fsdp_attention_forward(a->atty, NULL, a->att, a->qkv, B, T, C, NH));
    progress(m);
    FSDP_TRY(fsdp_matmul_forward(m->tmpC, a->atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], pdt, N, C, C));
    progress(m);
    FSDP_TRY(fsdp_residual_forward(a->res2, x, m->tmpC, (size_t)N * C));
    FSDP_TRY(fsdp_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w[GPT_LN2_W], w[GPT_LN2_B],
                                    pdt, N, C));
    FSDP_TRY(fsdp_matmul_forward(a->fch, a->ln2, w[GPT_FC_W], w[GPT_FC_B], pdt, N, C, 4 * C));
    progress(m);
    FSDP_TRY(fsdp_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C));
    if (out == NULL) return FSDP_OK;
    FSDP_TRY(fsdp_matmul_forward(m->tmpC, a->fch_gelu, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], pdt, N, 4 * C, C));
    progress(m);
    return fsdp_residual_forward(out, a->res2, m->tmpC, (size_t)N * C);
}

/* Block l's backward. On entry m->dres holds dL/d(block output); on exit dL/d(block input) x. */
static fsdp_status block_backward(gpt_model_t *m, int l, const float *x, const block_acts *a) {
    const int B = m->act_B, T = m->act_T, N = B * T, C = m->cfg.n_embd, NH = m->cfg.n_head;
    const fsdp_dtype pdt = m->pdt;
    fsdp_unit_t *u = m->blocks[l];
    const void *w[GPT_BLOCK_NTENSORS];
    FSDP_TRY(views(u, GPT_BLOCK_NTENSORS, w));
    float *gw, *gb;
    int aw, ab, acc;

    /* MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); the residual passes dres through unchanged. */
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FCPROJ_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FCPROJ_B, &gb, &ab));
    progress(m);
    FSDP_TRY(fsdp_matmul_backward(m->d4C, 0, gw, aw, gb, ab, m->dres, a->fch_gelu, w[GPT_FCPROJ_W], pdt, N,
                                  4 * C, C));
    progress(m);
    FSDP_TRY(fsdp_gelu_backward(m->d4C, a->fch, m->d4C, (size_t)N * 4 * C));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FC_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_FC_B, &gb, &ab));
    FSDP_TRY(
        fsdp_matmul_backward(m->dtmpC, 0, gw, aw, gb, ab, m->d4C, a->ln2, w[GPT_FC_W], pdt, N, C, 4 * C));
    progress(m);
    FSDP_TRY(grad_pair(u, GPT_LN2_W, GPT_LN2_B, &gw, &gb, &acc));
    FSDP_TRY(fsdp_layernorm_backward(m->dres, 1, gw, gb, acc, m->dtmpC, a->res2, w[GPT_LN2_W], pdt,
                                     a->ln2_mean, a->ln2_rstd, N, C));
    /* Attention: res2 = x + attproj(attention(qkv(ln1(x)))). */
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_ATTPROJ_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_ATTPROJ_B, &gb, &ab));
    FSDP_TRY(
        fsdp_matmul_backward(m->dtmpC, 0, gw, aw, gb, ab, m->dres, a->atty, w[GPT_ATTPROJ_W], pdt, N, C, C));
    progress(m);
    FSDP_TRY(fsdp_attention_backward(m->dqkv, m->dtmpC, a->qkv, a->att, B, T, C, NH));
    progress(m);
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_QKV_W, &gw, &aw));
    FSDP_TRY(fsdp_unit_main_grad(u, GPT_QKV_B, &gb, &ab));
    FSDP_TRY(
        fsdp_matmul_backward(m->dtmpC, 0, gw, aw, gb, ab, m->dqkv, a->ln1, w[GPT_QKV_W], pdt, N, C, 3 * C));
    progress(m);
    FSDP_TRY(grad_pair(u, GPT_LN1_W, GPT_LN1_B, &gw, &gb, &acc));
    return fsdp_layernorm_backward(m->dres, 1, gw, gb, acc, m->dtmpC, x, w[GPT_LN1_W], pdt, a->ln1_mean,
                                   a->ln1_rstd, N, C);
}

/* ---------------------------------------------------------------- forward */

static fsdp_status forward(gpt_model_t *m, const int *tokens, const int *targets, const int *doc, int B,
                           int T, float *loss);

fsdp_status gpt_forward(gpt_model_t *m, const int *tokens, const int *targets, int B, int T, float *loss) {
    return gpt_forward_doc(m, tokens, targets, NULL, B, T, loss);
}

/* A forward without targets has no backward: the engine reshards it as such (nothing kept for a
 * backward that cannot come), whatever the caller set before, which is restored after. */
fsdp_status gpt_forward_doc(gpt_model_t *m, const int *tokens, const int *targets, const int *doc, int B,
                            int T, float *loss) {
    if (m == NULL || tokens == NULL) return FSDP_ERR(FSDP_EINVAL, "model and tokens must not be NULL");
    if (targets) return forward(m, tokens, targets, doc, B, T, loss);
    const int was = fsdp_engine_no_backward(m->eng);
    FSDP_TRY(fsdp_engine_set_no_backward(m->eng, 1));
    fsdp_status s = forward(m, tokens, targets, doc, B, T, loss);
    fsdp_engine_set_no_backward(m->eng, was);
    return s;
}

static fsdp_status forward(gpt_model_t *m, const int *tokens, const int *targets, const int *doc, int B,
                           int T, float *loss) {
    const gpt_config *c = &m->cfg;
    if (B < 1 || T < 1 || T > c->max_seq_len)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: need B >= 1 and 1 <= T <= max_seq_len (%d)", B, T,
                        c->max_seq_len);
    if ((size_t)B * (size_t)T > (size_t)1 << 31)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: more than 2^31 positions", B, T);
    const int N = B * T, C = c->n_embd, L = c->n_layer, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, tokens[i],
                            V);
        if (targets && targets[i] != FSDP_IGNORE_INDEX && (targets[i] < 0 || targets[i] >= V))
            return FSDP_ERR(FSDP_EINVAL, "targets[%d] = %d is neither in [0, %d) nor FSDP_IGNORE_INDEX (%d)",
                            i, targets[i], V, FSDP_IGNORE_INDEX);
    }
    m->logits_valid = 0;
    m->pending_backward = 0;
    FSDP_TRY(ensure_arena(m, B, T));
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int));
    if (targets) memcpy(m->targets, targets, (size_t)N * sizeof(int));
    m->has_doc = doc != NULL;
    if (doc) {
        memcpy(m->doc, doc, (size_t)N * sizeof(int));
        for (int i = 0; i < N; i++) /* learned positions restart where the document id changes */
            m->pos[i] = (i % T == 0 || doc[i] != doc[i - 1]) ? 0 : m->pos[i - 1] + 1;
    }
    m->B = B, m->T = T;
    const fsdp_dtype pdt = m->pdt;

    FSDP_TRY(fsdp_unit_pre_forward(m->root));
    const void *r[GPT_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, GPT_ROOT_NTENSORS, r));
    FSDP_TRY(fsdp_encoder_forward_pos(res_at(m, 0), m->tokens, m->has_doc ? m->pos : NULL, r[GPT_WTE],
                                      r[GPT_WPE], pdt, B, T, C, Vp, c->max_seq_len));
    for (int l = 0; l < L; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(m->blocks[l]));
        FSDP_TRY(block_forward(m, l, res_at(m, l), &m->acts[l], res_at(m, l + 1)));
        FSDP_TRY(fsdp_unit_post_forward(m->blocks[l]));
    }
    FSDP_TRY(fsdp_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, res_at(m, L), r[GPT_LNF_W],
                                    r[GPT_LNF_B], pdt, N, C));
    FSDP_TRY(fsdp_matmul_forward(m->logits, m->lnf, r[GPT_WTE], NULL, pdt, N, C, Vp));
    if (targets) {
        float mean;
        FSDP_TRY(fsdp_softmax_crossentropy_count(NULL, &mean, &m->n_counted, NULL, m->logits, m->targets, N,
                                                 V, Vp, 1.0f));
        if (loss) *loss = mean;
    } else if (loss) {
        *loss = NAN;
    }
    FSDP_TRY(fsdp_unit_post_forward(m->root));
    m->have_targets = targets != NULL;
    m->pending_backward = targets != NULL;
    m->logits_valid = 1;
    return FSDP_OK;
}

fsdp_status gpt_logits(const gpt_model_t *m, const float **logits, int *B, int *T, int *Vp) {
    if (m == NULL || logits == NULL) return FSDP_ERR(FSDP_EINVAL, "model and logits must not be NULL");
    if (!m->logits_valid)
        return FSDP_ERR(FSDP_ESTATE,
                        "no logits: run gpt_forward first (gpt_backward turns them into gradients)");
    *logits = m->logits;
    if (B) *B = m->B;
    if (T) *T = m->T;
    if (Vp) *Vp = m->cfg.padded_vocab_size;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- backward */

fsdp_status gpt_backward(gpt_model_t *m, float loss_scale) {
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (!m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE, m->have_targets
                                         ? "backward already ran for the last forward; run gpt_forward again"
                                         : "the last forward had no targets (inference); "
                                           "run gpt_forward with targets before gpt_backward");
    if (!isfinite(loss_scale))
        return FSDP_ERR(FSDP_EINVAL, "loss_scale must be finite, got %g", (double)loss_scale);
    const gpt_config *c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, C = c->n_embd, L = c->n_layer, V = c->vocab_size;
    const int Vp = c->padded_vocab_size;
    const fsdp_dtype pdt = m->pdt;
    m->pending_backward = 0;
    m->logits_valid = 0;

    /* Loss and LM head: dlogits (in place of the logits), then the gradient of the LM head's input.
     * The LM head's weight gradient (the tied weight's first use) waits until the blocks are done:
     * nothing in between needs it, its inputs (dlogits, the final LN's output) stay in the arena, and
     * the root unit's main_grad is held until the root's post_backward anyway. Across hosts the links
     * idle during the LM head (there is no gradient to send before the first block's), so its GEMM
     * belongs where the blocks' reduce-scatters keep them busy. The same GEMM as before, on the same
     * operands, before the embeddings add into the same rows: bit-identical. */
    FSDP_TRY(fsdp_unit_pre_backward(m->root));
    const void *r[GPT_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, GPT_ROOT_NTENSORS, r));
    /* the mean over the counted targets (all N of them unless some are FSDP_IGNORE_INDEX) */
    const float dloss = m->n_counted > 0 ? loss_scale / (float)m->n_counted : 0.0f;
    FSDP_TRY(fsdp_softmax_crossentropy(NULL, NULL, m->logits, m->logits, m->targets, N, V, Vp, dloss));
    float *gw, *gb;
    int aw, acc;
    FSDP_TRY(
        fsdp_matmul_backward(m->dtmpC, 0, NULL, 0, NULL, 0, m->logits, m->lnf, r[GPT_WTE], pdt, N, C, Vp));
    progress(m);
    FSDP_TRY(grad_pair(m->root, GPT_LNF_W, GPT_LNF_B, &gw, &gb, &acc));
    FSDP_TRY(fsdp_layernorm_backward(m->dres, 0, gw, gb, acc, m->dtmpC, res_at(m, L), r[GPT_LNF_W], pdt,
                                     m->lnf_mean, m->lnf_rstd, N, C));

    for (int l = L - 1; l >= 0; l--) {
        fsdp_unit_t *u = m->blocks[l];
        FSDP_TRY(fsdp_unit_pre_backward(u));
        if (m->act_recompute) { /* same kernels on the same input: bitwise the forward's activations */
            FSDP_TRY(fsdp_unit_pre_forward(u));
            FSDP_TRY(block_forward(m, l, res_at(m, l), &m->acts[l], NULL));
            FSDP_TRY(fsdp_unit_post_forward(u));
        }
        FSDP_TRY(block_backward(m, l, res_at(m, l), &m->acts[l]));
        FSDP_TRY(fsdp_unit_post_backward(u));
    }

    /* The LM head's weight gradient (deferred, above), then the embeddings: wte's second use
     * accumulates by the first-touch flag. */
    FSDP_TRY(fsdp_unit_main_grad(m->root, GPT_LM_HEAD, &gw, &aw));
    FSDP_TRY(fsdp_matmul_backward(NULL, 0, gw, aw, NULL, 0, m->logits, m->lnf, NULL, pdt, N, C, Vp));
    progress(m);
    float *gwte, *gwpe;
    int awte, awpe;
    FSDP_TRY(fsdp_unit_main_grad(m->root, GPT_WTE, &gwte, &awte));
    FSDP_TRY(fsdp_unit_main_grad(m->root, GPT_WPE, &gwpe, &awpe));
    FSDP_TRY(fsdp_encoder_backward_pos(gwte, awte, gwpe, awpe, m->dres, m->tokens, m->has_doc ? m->pos : NULL,
                                       B, T, C, Vp, c->max_seq_len));
    return fsdp_unit_post_backward(m->root);
}

fsdp_status gpt_end_eval(gpt_model_t *m) {
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        "a training forward is waiting for its backward; run gpt_backward first");
    return fsdp_engine_reshard_all(m->eng);
}

/* ---------------------------------------------------------------- incremental inference (KV cache) */

static fsdp_status decode_layers(gpt_model_t *m, const int *tokens, int n, int pos, float *x, float *ln,
                                 float *tmp, float *atty, float *qkv, float *fch, float *fcg, float *mean,
                                 float *rstd, float *att, int nthr, float *out);

/* Attention of n new queries (rows of qkv [n, 3C], positions pos..pos+n-1) over the cached keys and
 * values K, V [T_max, C] of positions 0..pos+i (causal), into out [n, C]. att: scratch of T_max floats
 * per thread (nthr threads). */
static void decode_attention(float *out, const float *qkv, const float *K, const float *V, float *att,
                             int nthr, int n, int pos, int C, int NH, int Tmax) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) collapse(2) num_threads(nthr)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)i * 3 * C + (size_t)h * hs;
            float *a = att + (size_t)omp_get_thread_num() * (size_t)Tmax;
            const int ctx = pos + i + 1;
            float mx = -INFINITY;
            for (int t = 0; t < ctx; t++) {
                const float *k = K + (size_t)t * C + (size_t)h * hs;
                float d = 0.0f;
                for (int e = 0; e < hs; e++)
                    d += q[e] * k[e];
                a[t] = d * scale;
                if (a[t] > mx) mx = a[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < ctx; t++) {
                a[t] = expf(a[t] - mx);
                sum += a[t];
            }
            const float inv = 1.0f / sum;
            float *o = out + (size_t)i * C + (size_t)h * hs;
            for (int e = 0; e < hs; e++)
                o[e] = 0.0f;
            for (int t = 0; t < ctx; t++) {
                const float w = a[t] * inv, *v = V + (size_t)t * C + (size_t)h * hs;
                for (int e = 0; e < hs; e++)
                    o[e] += w * v[e];
            }
        }
}

static fsdp_status decode(gpt_model_t *m, const int *tokens, int n, int pos, const float **logits);

fsdp_status gpt_decode(gpt_model_t *m, const int *tokens, int n, int pos, const float **logits) {
    if (m == NULL || tokens == NULL || logits == NULL)
        return FSDP_ERR(FSDP_EINVAL, "model, tokens and logits must not be NULL");
    const int was = fsdp_engine_no_backward(m->eng); /* as gpt_forward without targets */
    FSDP_TRY(fsdp_engine_set_no_backward(m->eng, 1));
    fsdp_status s = decode(m, tokens, n, pos, logits);
    fsdp_engine_set_no_backward(m->eng, was);
    return s;
}

static fsdp_status decode(gpt_model_t *m, const int *tokens, int n, int pos, const float **logits) {
    const gpt_config *c = &m->cfg;
    const int L = c->n_layer, C = c->n_embd, Tmax = c->max_seq_len, Vp = c->padded_vocab_size;
    if (n < 1 || pos < 0 || pos + n > Tmax)
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_decode: %d tokens at position %d: need n >= 1 and pos + n <= max_seq_len (%d)",
                        n, pos, Tmax);
    if (pos != 0 && pos != m->kv_len)
        return FSDP_ERR(FSDP_EINVAL,
                        "gpt_decode: position %d but %d positions are cached (pass 0 to start over)", pos,
                        m->kv_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, tokens[i],
                            c->vocab_size);
    m->pending_backward = 0; /* as a new gpt_forward does: a forward left without backward is abandoned */
    /* Buffers for up to T_max rows: x, ln, tmpC, atty (C each), qkv (3C), fch, fch_gelu (4C each),
     * mean, rstd (1 each), logits (Vp for one row); attention's scratch is per call (T_max per thread). */
    const size_t R = (size_t)Tmax, Cz = (size_t)C;
    const size_t dec_floats = R * (4 * Cz + 3 * Cz + 8 * Cz + 2) + (size_t)Vp;
    if (!m->kv) {
        size_t kvb, decb;
        if (!fsdp_mul_ok((size_t)L * 2 * R * Cz, sizeof(float), &kvb) ||
            !fsdp_mul_ok(dec_floats, sizeof(float), &decb))
            return FSDP_ERR(FSDP_EINVAL, "the KV cache for T_max %d overflows size_t", Tmax);
        FSDP_TRY(fsdp_mem_alloc((void **)&m->kv, kvb, FSDP_MEM_ACTIVATION));
        fsdp_status st = fsdp_mem_alloc((void **)&m->dec, decb, FSDP_MEM_ACTIVATION);
        if (st != FSDP_OK) {
            fsdp_mem_free(m->kv);
            m->kv = NULL;
            return st;
        }
    }
    float *x = m->dec, *ln = x + R * Cz, *tmp = ln + R * Cz, *atty = tmp + R * Cz, *qkv = atty + R * Cz;
    float *fch = qkv + 3 * R * Cz, *fcg = fch + 4 * R * Cz, *mean = fcg + 4 * R * Cz, *rstd = mean + R;
    float *out = rstd + R, *att = NULL;
    const int nthr = omp_get_max_threads();
    FSDP_TRY(fsdp_mem_alloc((void **)&att, (size_t)nthr * R * sizeof(float), FSDP_MEM_ACTIVATION));
    fsdp_status st =
        decode_layers(m, tokens, n, pos, x, ln, tmp, atty, qkv, fch, fcg, mean, rstd, att, nthr, out);
    fsdp_mem_free(att);
    FSDP_TRY(st);
    m->kv_len = pos + n;
    *logits = out;
    return FSDP_OK;
}

/* gpt_decode's work on its buffers (see there). */
static fsdp_status decode_layers(gpt_model_t *m, const int *tokens, int n, int pos, float *x, float *ln,
                                 float *tmp, float *atty, float *qkv, float *fch, float *fcg, float *mean,
                                 float *rstd, float *att, int nthr, float *out) {
    const gpt_config *c = &m->cfg;
    const int L = c->n_layer, C = c->n_embd, NH = c->n_head, Tmax = c->max_seq_len, Vp = c->padded_vocab_size;
    const size_t R = (size_t)Tmax, Cz = (size_t)C;
    m->logits_valid = 0;
    m->kv_len = pos; /* a failure below leaves the cache at the positions that were complete */
    const fsdp_dtype pdt = m->pdt;
    const size_t esz = pdt == FSDP_BF16 ? sizeof(fsdp_bf16) : sizeof(float);

    FSDP_TRY(fsdp_unit_pre_forward(m->root));
    const void *r[GPT_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, GPT_ROOT_NTENSORS, r));
    /* Embeddings at positions pos..: the encoder over a position table starting at row pos. */
    FSDP_TRY(fsdp_encoder_forward(x, tokens, r[GPT_WTE], (const char *)r[GPT_WPE] + (size_t)pos * Cz * esz,
                                  pdt, 1, n, C, Vp, Tmax - pos));
    for (int l = 0; l < L; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(m->blocks[l]));
        const void *w[GPT_BLOCK_NTENSORS];
        FSDP_TRY(views(m->blocks[l], GPT_BLOCK_NTENSORS, w));
        float *K = m->kv + (size_t)l * 2 * R * Cz, *V = K + R * Cz;
        FSDP_TRY(fsdp_layernorm_forward(ln, mean, rstd, x, w[GPT_LN1_W], w[GPT_LN1_B], pdt, n, C));
        FSDP_TRY(fsdp_matmul_forward(qkv, ln, w[GPT_QKV_W], w[GPT_QKV_B], pdt, n, C, 3 * C));
        for (int i = 0; i < n; i++) {
            memcpy(K + (size_t)(pos + i) * Cz, qkv + (size_t)i * 3 * Cz + Cz, Cz * sizeof(float));
            memcpy(V + (size_t)(pos + i) * Cz, qkv + (size_t)i * 3 * Cz + 2 * Cz, Cz * sizeof(float));
        }
        decode_attention(atty, qkv, K, V, att, nthr, n, pos, C, NH, Tmax);
        FSDP_TRY(fsdp_matmul_forward(tmp, atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], pdt, n, C, C));
        FSDP_TRY(fsdp_residual_forward(x, x, tmp, (size_t)n * Cz));
        FSDP_TRY(fsdp_layernorm_forward(ln, mean, rstd, x, w[GPT_LN2_W], w[GPT_LN2_B], pdt, n, C));
        FSDP_TRY(fsdp_matmul_forward(fch, ln, w[GPT_FC_W], w[GPT_FC_B], pdt, n, C, 4 * C));
        FSDP_TRY(fsdp_gelu_forward(fcg, fch, (size_t)n * 4 * Cz));
        FSDP_TRY(fsdp_matmul_forward(tmp, fcg, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], pdt, n, 4 * C, C));
        FSDP_TRY(fsdp_residual_forward(x, x, tmp, (size_t)n * Cz));
        FSDP_TRY(fsdp_unit_post_forward(m->blocks[l]));
    }
    /* Only the last position's logits are needed. */
    const float *last = x + (size_t)(n - 1) * Cz;
    FSDP_TRY(fsdp_layernorm_forward(ln, mean, rstd, last, r[GPT_LNF_W], r[GPT_LNF_B], pdt, 1, C));
    FSDP_TRY(fsdp_matmul_forward(out, ln, r[GPT_WTE], NULL, pdt, 1, C, Vp));
    return fsdp_unit_post_forward(m->root);
}
