/* llama.c — the Llama family as a block table of the decoder driver (model/decoder.h): its config, units,
 * per-block activations and the kernels of its blocks (llama.h has the units; fsdp_model.h the contract).
 * Pre-norm blocks: x + o(attn(rope(norm_qk(qkv(rms(x)))))), then + down(swiglu(gate_up(rms))) with
 * grouped-query attention, one GEMM for q|k|v and one for gate|up. The driver runs forward, backward and
 * decode; with recompute it keeps only the residual stream and one set of block buffers. */
#include "model/llama/llama.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- config */

const char *const llama_hf_archs[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                      "MistralForCausalLM", NULL};

static int resolved_kv(const fsdp_model_config *c) { return c->n_kv_head ? c->n_kv_head : c->n_head; }
static int resolved_hd(const fsdp_model_config *c) {
    return c->head_dim ? c->head_dim : c->n_embd / (c->n_head > 0 ? c->n_head : 1);
}
/* intermediate 0: Llama's rule, 2/3 of 4C rounded up to a multiple of 256 */
static int resolved_inter(const fsdp_model_config *c) {
    if (c->intermediate) return c->intermediate;
    long i = (8L * c->n_embd + 2) / 3;
    return (int)((i + 255) / 256 * 256);
}

static int arch_index(const char *a) {
    for (int i = 0; llama_hf_archs[i]; i++)
        if (!strcmp(a, llama_hf_archs[i])) return i;
    return -1;
}

/* The LoRA fields: a rank in 0..4096, known target bits, a finite alpha; none of them without a rank. */
static fsdp_status lora_check(const fsdp_model_config *c) {
    if (c->lora_rank < 0 || c->lora_rank > 4096)
        return FSDP_ERR(FSDP_EINVAL, "llama config: lora_rank = %d: need 0 (no LoRA) or 1..4096",
                        c->lora_rank);
    if (c->lora_targets & ~FSDP_LORA_ALL)
        return FSDP_ERR(FSDP_EINVAL, "llama config: lora_targets = %#x: unknown bits",
                        (unsigned)c->lora_targets);
    if (!(c->lora_alpha >= 0 && isfinite(c->lora_alpha)))
        return FSDP_ERR(FSDP_EINVAL, "llama config: lora_alpha = %g: need a finite value >= 0 (0: 2 rank)",
                        c->lora_alpha);
    if (c->lora_rank == 0 && (c->lora_alpha != 0 || c->lora_targets != 0))
        return FSDP_ERR(FSDP_EINVAL, "llama config: lora_alpha and lora_targets need lora_rank > 0");
    return FSDP_OK;
}

fsdp_status llama_check(const fsdp_model_config *c) {
    if (c == NULL) return FSDP_ERR(FSDP_EINVAL, "config must not be NULL");
    if (c->version != FSDP_MODEL_CONFIG_VERSION)
        return FSDP_ERR(FSDP_EINVAL, "llama config: version is %d; this library knows %d", c->version,
                        FSDP_MODEL_CONFIG_VERSION);
    if (c->n_layer < 1 || c->n_layer > 100000)
        return FSDP_ERR(FSDP_EINVAL, "llama config: n_layer = %d: need 1..100000", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > (1 << 20))
        return FSDP_ERR(FSDP_EINVAL, "llama config: n_embd = %d: need 1..2^20", c->n_embd);
    if (c->n_head < 1 || c->n_head > 4096)
        return FSDP_ERR(FSDP_EINVAL, "llama config: n_head = %d: need 1..4096", c->n_head);
    if (c->n_kv_head < 0 || (c->n_kv_head > 0 && c->n_head % c->n_kv_head != 0))
        return FSDP_ERR(FSDP_EINVAL,
                        "llama config: n_kv_head = %d: need 0 (= n_head) or a divisor of n_head (%d)",
                        c->n_kv_head, c->n_head);
    if (c->head_dim == 0 && c->n_embd % c->n_head != 0)
        return FSDP_ERR(
            FSDP_EINVAL,
            "llama config: head_dim 0 (n_embd / n_head) needs n_embd (%d) divisible by n_head (%d)",
            c->n_embd, c->n_head);
    const int hd = resolved_hd(c);
    if (c->head_dim < 0 || hd < 2 || hd % 2 != 0 || hd > FSDP_ROPE_MAX_HD)
        return FSDP_ERR(FSDP_EINVAL, "llama config: head_dim = %d (resolved %d): need an even 2..%d (RoPE)",
                        c->head_dim, hd, FSDP_ROPE_MAX_HD);
    if ((long)c->n_head * hd > (1 << 20))
        return FSDP_ERR(FSDP_EINVAL, "llama config: n_head x head_dim = %ld: need <= 2^20",
                        (long)c->n_head * hd);
    if (c->intermediate < 0 || c->intermediate > (1 << 22))
        return FSDP_ERR(FSDP_EINVAL, "llama config: intermediate = %d: need 0 (the default) or 1..2^22",
                        c->intermediate);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 30))
        return FSDP_ERR(FSDP_EINVAL, "llama config: vocab_size = %d: need 1..2^30", c->vocab_size);
    if (c->padded_vocab_size != 0 &&
        (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 30)))
        return FSDP_ERR(FSDP_EINVAL,
                        "llama config: padded_vocab_size = %d: need 0 (auto) or >= vocab_size (%d), <= 2^30",
                        c->padded_vocab_size, c->vocab_size);
    if (c->max_seq_len < 1 || c->max_seq_len > (1 << 24))
        return FSDP_ERR(FSDP_EINVAL, "llama config: max_seq_len = %d: need 1..2^24", c->max_seq_len);
    if ((c->tie_embeddings | c->qkv_bias | c->qk_norm | c->recompute) & ~1)
        return FSDP_ERR(FSDP_EINVAL,
                        "llama config: tie_embeddings, qkv_bias, qk_norm and recompute must be 0 or 1 "
                        "(got %d, %d, %d, %d)",
                        c->tie_embeddings, c->qkv_bias, c->qk_norm, c->recompute);
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return FSDP_ERR(FSDP_EINVAL, "llama config: norm_eps = %g: need 0 < eps < 1", c->norm_eps);
    if (!(c->rope_theta > 0 && isfinite(c->rope_theta)))
        return FSDP_ERR(FSDP_EINVAL, "llama config: rope_theta = %g: need a finite value > 0", c->rope_theta);
    if (c->rope_scaling == FSDP_ROPE_SCALING_NONE) {
        if (c->rope_factor != 0 || c->rope_low_freq_factor != 0 || c->rope_high_freq_factor != 0 ||
            c->rope_original_max_pos != 0)
            return FSDP_ERR(FSDP_EINVAL, "llama config: rope_factor, rope_low_freq_factor, "
                                         "rope_high_freq_factor and rope_original_max_pos are for the llama3 "
                                         "rope_scaling only and must be 0 without it");
    } else if (c->rope_scaling == FSDP_ROPE_SCALING_LLAMA3) {
        if (!(c->rope_factor >= 1 && isfinite(c->rope_factor)) || !(c->rope_low_freq_factor > 0) ||
            !(c->rope_high_freq_factor > c->rope_low_freq_factor) || !isfinite(c->rope_high_freq_factor) ||
            c->rope_original_max_pos < 1)
            return FSDP_ERR(FSDP_EINVAL,
                            "llama config: llama3 rope_scaling needs rope_factor >= 1, 0 < "
                            "rope_low_freq_factor < rope_high_freq_factor and rope_original_max_pos >= 1 "
                            "(got %g, %g, %g, %d)",
                            c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                            c->rope_original_max_pos);
    } else {
        return FSDP_ERR(FSDP_EINVAL, "llama config: rope_scaling = %d: need 0 (none) or 1 (llama3)",
                        c->rope_scaling);
    }
    if (memchr(c->hf_architecture, '\0', sizeof c->hf_architecture) == NULL)
        return FSDP_ERR(FSDP_EINVAL, "llama config: hf_architecture is not NUL-terminated");
    if (c->qkv_bias && c->qk_norm)
        return FSDP_ERR(FSDP_EINVAL, "llama config: qkv_bias (Qwen2) and qk_norm (Qwen3) together are no "
                                     "Hugging Face architecture of this family");
    FSDP_TRY(lora_check(c));
    if (c->hf_architecture[0]) {
        int a = arch_index(c->hf_architecture);
        if (a < 0)
            return FSDP_ERR(FSDP_EINVAL,
                            "llama config: hf_architecture \"%s\" is not one of LlamaForCausalLM, "
                            "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM",
                            c->hf_architecture);
        if (c->qkv_bias != (a == 1))
            return FSDP_ERR(FSDP_EINVAL, "llama config: qkv_bias = %d with hf_architecture %s (%s)",
                            c->qkv_bias, c->hf_architecture,
                            a == 1 ? "Qwen2 always has q/k/v biases"
                                   : "only Qwen2 has q/k/v biases without an o_proj bias");
        if (c->qk_norm != (a == 2))
            return FSDP_ERR(FSDP_EINVAL, "llama config: qk_norm = %d with hf_architecture %s (%s)",
                            c->qk_norm, c->hf_architecture,
                            a == 2 ? "Qwen3 always normalises q and k" : "only Qwen3 normalises q and k");
    }
    return FSDP_OK;
}

fsdp_model_config llama_resolve(const fsdp_model_config *c) {
    fsdp_model_config r = *c;
    r.n_kv_head = resolved_kv(c);
    r.head_dim = resolved_hd(c);
    r.intermediate = resolved_inter(c);
    if (r.padded_vocab_size == 0) r.padded_vocab_size = (r.vocab_size + 127) / 128 * 128;
    if (r.lora_rank > 0 && r.lora_alpha == 0) r.lora_alpha = 2.0 * r.lora_rank;
    if (r.lora_rank > 0 && r.lora_targets == 0) r.lora_targets = FSDP_LORA_ALL;
    if (!r.hf_architecture[0])
        snprintf(r.hf_architecture, sizeof r.hf_architecture, "%s",
                 r.qkv_bias  ? "Qwen2ForCausalLM"
                 : r.qk_norm ? "Qwen3ForCausalLM"
                             : "LlamaForCausalLM");
    return r;
}

/* The shapes everything below is written in (N = B*T rows where it applies). */
typedef struct {
    size_t L, C, NH, NKV, hd, A, KV, QKV, I, V, Vp;
    size_t R, M; /* LoRA rank (0: none) and the widest projection output (max of A, C, I) */
    int targets; /* FSDP_LORA_* (resolved) */
} dims;

static dims dims_of(const fsdp_model_config *r) {
    dims d;
    d.L = (size_t)r->n_layer, d.C = (size_t)r->n_embd, d.NH = (size_t)r->n_head;
    d.NKV = (size_t)r->n_kv_head, d.hd = (size_t)r->head_dim;
    d.A = d.NH * d.hd, d.KV = d.NKV * d.hd, d.QKV = d.A + 2 * d.KV;
    d.I = (size_t)r->intermediate, d.V = (size_t)r->vocab_size, d.Vp = (size_t)r->padded_vocab_size;
    d.R = r->lora_rank > 0 ? (size_t)r->lora_rank : 0;
    d.targets = d.R ? (r->lora_targets ? r->lora_targets : FSDP_LORA_ALL) : 0;
    d.M = d.A > d.C ? d.A : d.C;
    if (d.I > d.M) d.M = d.I;
    return d;
}

/* ---- LoRA: projection p (q, k, v, o, gate, up, down) of input width `in` writes columns [off, off + n)
 * of rows with stride ldy; its adapter adds (alpha / r) (x A^T) B^T there. */
typedef struct {
    int in, n, off, ldy;
} lora_proj;

static lora_proj lora_shape(const dims *d, int p) {
    const int C = (int)d->C, A = (int)d->A, KV = (int)d->KV, I = (int)d->I, QKV = (int)d->QKV;
    static const int kind[LLAMA_LORA_PROJ] = {0, 0, 0, 1, 2, 2, 3};
    const lora_proj by_kind[4] = {{C, 0, 0, QKV}, {A, C, 0, C}, {C, I, 0, 2 * I}, {I, C, 0, C}};
    lora_proj r = by_kind[kind[p]];
    if (p == 0) r.n = A;
    if (p == 1) r.n = KV, r.off = A;
    if (p == 2) r.n = KV, r.off = A + KV;
    if (p == 5) r.off = I;
    return r;
}

int llama_block_tensor(const fsdp_model_config *c, int k) {
    if (k < 0 || k >= LLAMA_BLOCK_KINDS) return -1;
    if (k == LLAMA_QKV_B && !c->qkv_bias) return -1;
    if ((k == LLAMA_Q_NORM || k == LLAMA_K_NORM) && !c->qk_norm) return -1;
    if (k >= LLAMA_LORA_A0) {
        const int p = (k - LLAMA_LORA_A0) / 2;
        const int targets = c->lora_targets ? c->lora_targets : FSDP_LORA_ALL;
        if (c->lora_rank <= 0 || !(targets & (FSDP_LORA_Q << p))) return -1;
    }
    int i = 0;
    for (int j = 0; j < k; j++)
        i += llama_block_tensor(c, j) >= 0;
    return i;
}

size_t llama_num_params(const fsdp_model_config *cfg) {
    if (llama_check(cfg) != FSDP_OK) return 0;
    const fsdp_model_config r = llama_resolve(cfg);
    const dims d = dims_of(&r);
    size_t root = d.Vp * d.C * (r.tie_embeddings ? 1 : 2) + d.C;
    size_t block = 2 * d.C + d.QKV * d.C + (r.qkv_bias ? d.QKV : 0) + (r.qk_norm ? 2 * d.hd : 0) + d.C * d.A +
                   2 * d.I * d.C + d.C * d.I;
    for (int p = 0; p < LLAMA_LORA_PROJ; p++) /* LoRA adapters: A (r, in) and B (out, r) */
        if (d.targets & (FSDP_LORA_Q << p)) {
            const lora_proj q = lora_shape(&d, p);
            block += d.R * (size_t)(q.in + q.n);
        }
    return root + d.L * block;
}

/* 6 x the matmul weights a token passes (forward 2, backward 4 FLOPs per weight), plus attention's
 * q·k and p·v: 4 x hd x NH FLOPs per (query, key) pair forward and 8 backward, over the (T + 1) / 2 keys
 * a causal query sees on average. */
double llama_flops_per_token(const fsdp_model_config *cfg, int T) {
    if (llama_check(cfg) != FSDP_OK || T < 1) return 0;
    const fsdp_model_config r = llama_resolve(cfg);
    const dims d = dims_of(&r);
    double w = (double)d.L * (double)(d.QKV * d.C + d.C * d.A + 3 * d.I * d.C) + (double)(d.Vp * d.C);
    if (d.R == 0) return 6.0 * w + 12.0 * (double)d.L * (double)d.A * (T + 1) / 2.0;
    /* LoRA: the frozen base has no weight-gradient GEMM (forward 2, input gradient 2); each adapter's
     * two small GEMMs all three */
    double ad = 0;
    for (int p = 0; p < LLAMA_LORA_PROJ; p++)
        if (d.targets & (FSDP_LORA_Q << p)) {
            const lora_proj q = lora_shape(&d, p);
            ad += (double)d.R * (double)(q.in + q.n);
        }
    return 4.0 * w + 6.0 * (double)d.L * ad + 12.0 * (double)d.L * (double)d.A * (T + 1) / 2.0;
}

/* ---------------------------------------------------------------- activations */

/* Per-block saved activations (N = B*T rows). */
typedef struct {
    float *rstd1;   /* (N) input_layernorm's 1/rms */
    float *xn1;     /* (N, C) its output, the qkv GEMM's input */
    float *qkv_pre; /* (N, QKV) the qkv GEMM's output before the q/k norm (qk_norm only) */
    float *qk_rstd; /* (N, NH + NKV) q_norm's then k_norm's 1/rms per token and head (qk_norm only) */
    float *qkv;     /* (N, QKV) q, k after norm and RoPE, v: attention's input */
    float *lse;     /* (B, NH, T) attention's log-sum-exp per query row and head (fsdp_attention_gqa_*) */
    float *atty;    /* (N, A) attention output, the o GEMM's input */
    float *res2;    /* (N, C) residual after attention */
    float *rstd2;   /* (N) */
    float *xn2;     /* (N, C) post_attn_layernorm's output */
    float *gu;      /* (N, 2I) gate | up */
    float *act;     /* (N, I) silu(gate) * up, the down GEMM's input */
    float *lt[LLAMA_LORA_PROJ]; /* (N, r) x A^T of each targeted projection (LoRA), else NULL */
} block_acts;

/* ---------------------------------------------------------------- the family's state and arena */

/* The family's state: shapes, tensor indices and RoPE frequencies, and its buffers in the arena (the
 * final norm's 1/rms, backward's scratch). */
typedef struct {
    dims d;
    int bi[LLAMA_BLOCK_KINDS]; /* llama_block_tensor */
    float *inv_freq;           /* (hd/2) RoPE frequencies (plain heap: not an activation) */
    float scale;               /* 1/sqrt(hd) */
    float *rstdf;              /* (N) */
    float *datty;              /* (N, A) */
    float *dqkv;               /* (N, QKV) */
    float *dgu;                /* (N, 2I) */
    float *dact;               /* (N, I) */
    /* LoRA (d.R > 0): the scale alpha / r, and the scratch of one projection at a time: lu (N, M) its
     * B-side product or scaled output gradient, ldt (N, r) its A-side gradient (M: the widest output) */
    float lscale;
    float *lu, *ldt;
} llama_state;

static void carve_block(const fsdp_model_config *r, fsdp_carve *k, size_t B, size_t T, void *acts) {
    const dims d = dims_of(r);
    const size_t N = B * T;
    block_acts tmp, *a = acts ? acts : &tmp;
    a->rstd1 = fsdp_carve_take(k, N);
    a->xn1 = fsdp_carve_take(k, N * d.C);
    a->qkv_pre = r->qk_norm ? fsdp_carve_take(k, N * d.QKV) : NULL;
    a->qk_rstd = r->qk_norm ? fsdp_carve_take(k, N * (d.NH + d.NKV)) : NULL;
    a->qkv = fsdp_carve_take(k, N * d.QKV);
    a->lse = fsdp_carve_take(k, fsdp_attention_gqa_lse_floats((int)B, (int)T, (int)d.NH));
    a->atty = fsdp_carve_take(k, N * d.A);
    a->res2 = fsdp_carve_take(k, N * d.C);
    a->rstd2 = fsdp_carve_take(k, N);
    a->xn2 = fsdp_carve_take(k, N * d.C);
    a->gu = fsdp_carve_take(k, 2 * N * d.I);
    a->act = fsdp_carve_take(k, N * d.I);
    for (int p = 0; p < LLAMA_LORA_PROJ; p++)
        a->lt[p] = d.targets & (FSDP_LORA_Q << p) ? fsdp_carve_take(k, N * d.R) : NULL;
}

static void carve_head(const fsdp_model_config *r, fsdp_carve *k, size_t N, void *fam) {
    const dims d = dims_of(r);
    llama_state tmp, *s = fam ? fam : &tmp;
    s->rstdf = fsdp_carve_take(k, N);
    s->lu = d.R ? fsdp_carve_take(k, N * d.M) : NULL;
    s->ldt = d.R ? fsdp_carve_take(k, N * d.R) : NULL;
}

static void carve_grad(const fsdp_model_config *r, fsdp_carve *k, size_t N, void *fam) {
    const dims d = dims_of(r);
    llama_state tmp, *s = fam ? fam : &tmp;
    s->datty = fsdp_carve_take(k, N * d.A);
    s->dqkv = fsdp_carve_take(k, N * d.QKV);
    s->dgu = fsdp_carve_take(k, 2 * N * d.I);
    s->dact = fsdp_carve_take(k, N * d.I);
}

extern const fsdp_block_table fsdp_llama_blocks;

/* Category activation at its peak in a training step: the arena plus the largest buffer a kernel
 * allocates for one call (attention's forward or backward scratch, RMSNorm backward's partial sums). */
size_t llama_activation_bytes(const fsdp_model_config *cfg, int B, int T, int threads) {
    if (llama_check(cfg) != FSDP_OK || B < 1 || T < 1 || threads < 1) return 0;
    const fsdp_model_config r = llama_resolve(cfg);
    const dims d = dims_of(&r);
    const int N = B * T;
    size_t scratch = fsdp_attention_gqa_backward_scratch_bytes(B, T, (int)d.NKV, (int)d.hd, threads);
    size_t s = fsdp_attention_gqa_forward_scratch_bytes(T, (int)d.hd, threads);
    if (s > scratch) scratch = s;
    s = fsdp_rmsnorm_backward_scratch_bytes(N, (int)d.C);
    if (s > scratch) scratch = s;
    if (r.qk_norm) {
        s = fsdp_rmsnorm_backward_scratch_bytes(N * (int)d.NH, (int)d.hd);
        if (s > scratch) scratch = s;
    }
    return fsdp_decoder_arena_bytes(&fsdp_llama_blocks, &r, B, T) + scratch;
}

/* The GEMM workspace of this model's weights (fsdp_gemm_workspace_bytes): out[N,n] = in[N,k] W^T for
 * (k, n) in {(C, QKV), (A, C), (C, 2I), (I, C), (C, Vp)}, the first with a bias when qkv_bias; beside it
 * the softmax-CE row losses (N doubles). */
size_t llama_other_bytes(const fsdp_model_config *cfg, int B, int T, fsdp_dtype compute, const char *freeze) {
    if (llama_check(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    const fsdp_model_config r = llama_resolve(cfg);
    const dims d = dims_of(&r);
    const size_t N = (size_t)B * (size_t)T;
    const int L = r.n_layer;
    const int fz = d.R > 0; /* LoRA: the base is frozen, so no weight-gradient GEMM of its own */
    /* --freeze: a weight frozen in every block (the head: its storage) has none either */
    const char *head = r.tie_embeddings ? "embed_tokens" : "lm_head";
    fsdp_gemm_shape w[5 + 2 * LLAMA_LORA_PROJ] = {
        {(int)d.C, (int)d.QKV, r.qkv_bias, fz || fsdp_decoder_frozen_all(freeze, L, "qkv_w"), 0},
        {(int)d.A, (int)d.C, 0, fz || fsdp_decoder_frozen_all(freeze, L, "o_w"), 0},
        {(int)d.C, 2 * (int)d.I, 0, fz || fsdp_decoder_frozen_all(freeze, L, "gate_up_w"), 0},
        {(int)d.I, (int)d.C, 0, fz || fsdp_decoder_frozen_all(freeze, L, "down_w"), 0},
        {(int)d.C, (int)d.Vp, 0, fz || fsdp_decoder_frozen_all(freeze, 0, head), 0}};
    int n = 5;
    for (int p = 0; p < LLAMA_LORA_PROJ; p++) /* LoRA: x A^T (in -> r, dx accumulates), t B^T (r -> out) */
        if (d.targets & (FSDP_LORA_Q << p)) {
            const lora_proj q = lora_shape(&d, p);
            w[n++] = (fsdp_gemm_shape){q.in, (int)d.R, 0, 0, 1};
            w[n++] = (fsdp_gemm_shape){(int)d.R, q.n, 0, 0, 0};
        }
    return fsdp_gemm_workspace_bytes(N, w, n, compute) + N * sizeof(double);
}

/* ---------------------------------------------------------------- units */

/* fsdp_model_units.owner: one allocation (fsdp_model_units_free frees it and the unit array). */
typedef struct {
    fsdp_tensor_spec root[LLAMA_ROOT_NTENSORS];
    fsdp_tensor_spec block[LLAMA_BLOCK_KINDS];
    fsdp_unit_config root_cfg;
    char names[][16]; /* (L + 1) */
} units_owner;

fsdp_status llama_units(fsdp_model_units *out, const fsdp_model_config *cfg) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(llama_check(cfg));
    const fsdp_model_config r = llama_resolve(cfg);
    const int64_t L = r.n_layer, C = r.n_embd, Vp = r.padded_vocab_size, hd = r.head_dim;
    const int64_t QKV = (int64_t)(r.n_head + 2 * r.n_kv_head) * hd, A = (int64_t)r.n_head * hd,
                  I = r.intermediate;
    units_owner *o = calloc(1, sizeof *o + ((size_t)L + 1) * sizeof o->names[0]);
    fsdp_plan_unit *units = calloc((size_t)L + 1, sizeof *units);
    if (!o || !units) {
        free(o);
        free(units);
        return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the unit table of %lld layers", (long long)L);
    }
    o->root[LLAMA_EMBED] = (fsdp_tensor_spec){
        .name = "embed_tokens", .ndim = 2, .shape = {Vp, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    o->root[LLAMA_NORM] =
        (fsdp_tensor_spec){.name = "norm", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1};
    o->root[LLAMA_LM_HEAD] =
        r.tie_embeddings
            ? (fsdp_tensor_spec){.name = "lm_head", .ndim = 2, .shape = {Vp, C}, .alias_of = "embed_tokens"}
            : (fsdp_tensor_spec){
                  .name = "lm_head", .ndim = 2, .shape = {Vp, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f};
    o->root_cfg = fsdp_unit_config_default();
    o->root_cfg.reshard_after_forward = 0; /* the LM head runs last in forward and first in backward */

    const fsdp_tensor_spec all[LLAMA_BLOCK_KINDS] = {
        [LLAMA_IN_NORM] =
            {.name = "input_layernorm", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1},
        [LLAMA_QKV_W] =
            {.name = "qkv_w", .ndim = 2, .shape = {QKV, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
        [LLAMA_QKV_B] = {.name = "qkv_b", .ndim = 1, .shape = {QKV}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
        [LLAMA_Q_NORM] = {.name = "q_norm", .ndim = 1, .shape = {hd}, .init = FSDP_INIT_ONES, .no_decay = 1},
        [LLAMA_K_NORM] = {.name = "k_norm", .ndim = 1, .shape = {hd}, .init = FSDP_INIT_ONES, .no_decay = 1},
        [LLAMA_O_W] = {.name = "o_w", .ndim = 2, .shape = {C, A}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
        [LLAMA_POST_NORM] =
            {.name = "post_attn_layernorm", .ndim = 1, .shape = {C}, .init = FSDP_INIT_ONES, .no_decay = 1},
        [LLAMA_GATE_UP_W] =
            {.name = "gate_up_w", .ndim = 2, .shape = {2 * I, C}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
        [LLAMA_DOWN_W] =
            {.name = "down_w", .ndim = 2, .shape = {C, I}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    };
    int nb = 0;
    for (int k = 0; k < LLAMA_LORA_A0; k++)
        if (llama_block_tensor(&r, k) >= 0) o->block[nb++] = all[k];
    if (r.lora_rank > 0) { /* LoRA: the base frozen, an adapter pair per targeted projection */
        static const char *const names[LLAMA_LORA_PROJ][2] = {
            {"lora_a_q", "lora_b_q"},      {"lora_a_k", "lora_b_k"},       {"lora_a_v", "lora_b_v"},
            {"lora_a_o", "lora_b_o"},      {"lora_a_gate", "lora_b_gate"}, {"lora_a_up", "lora_b_up"},
            {"lora_a_down", "lora_b_down"}};
        const int64_t KVw = (int64_t)r.n_kv_head * hd, R = r.lora_rank;
        const int64_t pout[LLAMA_LORA_PROJ] = {A, KVw, KVw, C, I, I, C},
                      pin[LLAMA_LORA_PROJ] = {C, C, C, A, C, C, I};
        for (int k = 0; k < LLAMA_ROOT_NTENSORS; k++)
            o->root[k].frozen = 1;
        for (int k = 0; k < nb; k++)
            o->block[k].frozen = 1;
        for (int p = 0; p < LLAMA_LORA_PROJ; p++) {
            if (llama_block_tensor(&r, llama_lora_a(p)) < 0) continue;
            /* PEFT's A: kaiming_uniform_(a=sqrt(5)), i.e. uniform on +-1/sqrt(in); B: zeros */
            o->block[nb++] = (fsdp_tensor_spec){.name = names[p][0],
                                                .ndim = 2,
                                                .shape = {R, pin[p]},
                                                .init = FSDP_INIT_UNIFORM,
                                                .std = (float)(1.0 / sqrt((double)pin[p]))};
            o->block[nb++] = (fsdp_tensor_spec){
                .name = names[p][1], .ndim = 2, .shape = {pout[p], R}, .init = FSDP_INIT_ZEROS};
        }
    }

    snprintf(o->names[0], sizeof o->names[0], "root");
    units[0] = (fsdp_plan_unit){
        .name = o->names[0], .specs = o->root, .n_specs = LLAMA_ROOT_NTENSORS, .cfg = &o->root_cfg};
    for (int l = 0; l < L; l++) {
        snprintf(o->names[l + 1], sizeof o->names[l + 1], "h%d", l);
        units[l + 1] =
            (fsdp_plan_unit){.name = o->names[l + 1], .specs = o->block, .n_specs = nb, .cfg = NULL};
    }
    out->n_units = (int)L + 1;
    out->units = units;
    out->owner = o;
    out->release = free;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- the block table's hooks */

static fsdp_rope_scaling rope_scaling_of(const fsdp_model_config *c) {
    fsdp_rope_scaling sc = {0};
    if (c->rope_scaling == FSDP_ROPE_SCALING_LLAMA3) {
        sc.type = 1;
        sc.factor = (float)c->rope_factor;
        sc.low_freq_factor = (float)c->rope_low_freq_factor;
        sc.high_freq_factor = (float)c->rope_high_freq_factor;
        sc.original_max_position_embeddings = c->rope_original_max_pos;
    }
    return sc;
}

static void state_free(void *fam) {
    llama_state *s = fam;
    if (s == NULL) return;
    free(s->inv_freq);
    free(s);
}

static fsdp_status state_init(const fsdp_model_config *r, void **fam) {
    llama_state *s = calloc(1, sizeof *s);
    if (s == NULL) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model's state");
    s->d = dims_of(r);
    for (int k = 0; k < LLAMA_BLOCK_KINDS; k++)
        s->bi[k] = llama_block_tensor(r, k);
    s->scale = (float)(1.0 / sqrt((double)s->d.hd));
    if (s->d.R)
        s->lscale = (float)((r->lora_alpha > 0 ? r->lora_alpha : 2.0 * (double)s->d.R) / (double)s->d.R);
    s->inv_freq = calloc(s->d.hd / 2, sizeof *s->inv_freq);
    if (s->inv_freq == NULL) {
        const size_t hd = s->d.hd;
        state_free(s);
        return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the RoPE table (head_dim %zu)", hd);
    }
    const fsdp_rope_scaling sc = rope_scaling_of(r);
    fsdp_status st = fsdp_rope_inv_freq(s->inv_freq, (int)s->d.hd, r->rope_theta, &sc);
    if (st != FSDP_OK) {
        state_free(s);
        return st;
    }
    *fam = s;
    return FSDP_OK;
}

/* Block parameter views indexed by kind (NULL for a kind the config lacks). */
static fsdp_status block_views(const llama_state *s, fsdp_unit_t *u, const void **w) {
    for (int k = 0; k < LLAMA_BLOCK_KINDS; k++) {
        w[k] = NULL;
        if (s->bi[k] < 0) continue;
        void *v;
        FSDP_TRY(fsdp_unit_param(u, s->bi[k], &v));
        w[k] = v;
    }
    return FSDP_OK;
}

static fsdp_status grad_of(const llama_state *s, fsdp_unit_t *u, int kind, float **g, int *acc) {
    return fsdp_unit_main_grad(u, s->bi[kind], g, acc);
}

/* Projection p's adapter as the shared LoRA code takes it (views from w; gradients not fetched). */
static fsdp_lora lora_of(const llama_state *s, const fsdp_kctx *kc, const void *const *w, int p) {
    const lora_proj q = lora_shape(&s->d, p);
    return (fsdp_lora){.kc = kc,
                       .A = w[llama_lora_a(p)],
                       .B = w[llama_lora_b(p)],
                       .in = q.in,
                       .n = q.n,
                       .ldy = q.ldy,
                       .R = (int)s->d.R,
                       .scale = s->lscale};
}

/* Every targeted projection among ps (n_ps of them, all reading x) on N rows: x A^T into lt[p] (or one
 * scratch t1 when lt is NULL: decode), the product added to y at the projection's columns. */
static fsdp_status lora_forward(const llama_state *s, const fsdp_kctx *kc, const void *const *w,
                                const int *ps, int n_ps, const float *x, float *const *lt, float *t1,
                                float *y, float *u, int N, fsdp_dtype pdt) {
    for (int k = 0; k < n_ps; k++) {
        const int p = ps[k];
        if (!w[llama_lora_a(p)]) continue;
        const fsdp_lora l = lora_of(s, kc, w, p);
        float *t = lt ? lt[p] : t1;
        FSDP_TRY(fsdp_lora_xa(&l, x, t, N, pdt));
        FSDP_TRY(fsdp_lora_add(&l, t, y + lora_shape(&s->d, p).off, u, N, pdt));
    }
    return FSDP_OK;
}

/* Backward of projection p's adapter (fsdp_lora_backward) with its main_grad views. */
static fsdp_status lora_backward(const llama_state *s, const fsdp_kctx *kc, fsdp_unit_t *u,
                                 const void *const *w, int p, const float *dy, const float *x, const float *t,
                                 float *dx, int N, fsdp_dtype pdt) {
    if (!w[llama_lora_a(p)]) return FSDP_OK;
    fsdp_lora l = lora_of(s, kc, w, p);
    FSDP_TRY(grad_of(s, u, llama_lora_b(p), &l.gB, &l.aB));
    FSDP_TRY(grad_of(s, u, llama_lora_a(p), &l.gA, &l.aA));
    return fsdp_lora_backward(&l, dy + lora_shape(&s->d, p).off, x, t, dx, s->lu, s->ldt, N, pdt);
}

static const int LORA_QKV[3] = {0, 1, 2}, LORA_O[1] = {3}, LORA_GU[2] = {4, 5}, LORA_DOWN[1] = {6};

static fsdp_status embed_forward(fsdp_decoder *dr, float *out) {
    return FSDP_K(dr, encoder_forward_pos, out, dr->tokens, NULL, dr->root_w[LLAMA_EMBED], NULL, dr->pdt,
                  dr->B, dr->T, dr->cfg.n_embd, dr->cfg.padded_vocab_size, dr->T);
}

/* q (and k) of n rows of qkv [n, QKV] after the GEMM: Qwen3's per-head norm from src into dst (src ==
 * NULL: none), then RoPE in place at positions pos. */
static fsdp_status qk_transform(const fsdp_decoder *dr, const void *const *w, float *dst, const float *src,
                                float *qk_rstd, const int *pos, int n) {
    const llama_state *s = dr->fam;
    const dims d = s->d;
    const int ld = (int)d.QKV, NH = (int)d.NH, NKV = (int)d.NKV, hd = (int)d.hd;
    const float eps = (float)dr->cfg.norm_eps;
    if (src) {
        FSDP_TRY(FSDP_K(dr, head_rmsnorm_forward, dst, ld, qk_rstd, src, ld, w[LLAMA_Q_NORM], dr->pdt, n, NH,
                        hd, eps));
        FSDP_TRY(FSDP_K(dr, head_rmsnorm_forward, dst + d.A, ld, qk_rstd + (size_t)n * NH, src + d.A, ld,
                        w[LLAMA_K_NORM], dr->pdt, n, NKV, hd, eps));
        for (int i = 0; i < n; i++) /* v unchanged */
            memcpy(dst + (size_t)i * d.QKV + d.A + d.KV, src + (size_t)i * d.QKV + d.A + d.KV,
                   d.KV * sizeof(float));
    }
    FSDP_TRY(FSDP_K(dr, rope_forward, dst, ld, pos, s->inv_freq, n, NH, hd));
    return FSDP_K(dr, rope_forward, dst + d.A, ld, pos, s->inv_freq, n, NKV, hd);
}

/* Block l's forward from x (N, C) into a; out (N, C) gets the block output, or NULL during recompute
 * (nothing after the SwiGLU is needed by the backward). */
static fsdp_status block_forward(fsdp_decoder *dr, int l, const float *x, void *acts, float *out) {
    block_acts *a = acts;
    const llama_state *s = dr->fam;
    const dims d = s->d;
    const int B = dr->act_B, T = dr->act_T, N = B * T, C = (int)d.C;
    const fsdp_dtype pdt = dr->pdt;
    const float eps = (float)dr->cfg.norm_eps;
    const void *w[LLAMA_BLOCK_KINDS];
    FSDP_TRY(block_views(s, dr->blocks[l], w));
    FSDP_TRY(FSDP_K(dr, rmsnorm_forward, a->xn1, C, a->rstd1, x, C, w[LLAMA_IN_NORM], pdt, N, C, eps));
    float *g = dr->cfg.qk_norm ? a->qkv_pre : a->qkv;
    FSDP_TRY(FSDP_K(dr, matmul_forward, g, a->xn1, w[LLAMA_QKV_W], w[LLAMA_QKV_B], pdt, N, C, (int)d.QKV));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_QKV, 3, a->xn1, a->lt, NULL, g, s->lu, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(qk_transform(dr, w, a->qkv, dr->cfg.qk_norm ? a->qkv_pre : NULL, a->qk_rstd, dr->pos, N));
    /* Grouped-query causal attention, confined to each document when the batch has document ids */
    FSDP_TRY(FSDP_K(dr, attention_gqa_forward, a->atty, a->lse, a->qkv, dr->has_doc ? dr->doc : NULL, B, T,
                    (int)d.NH, (int)d.NKV, (int)d.hd));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, matmul_forward, dr->tmpC, a->atty, w[LLAMA_O_W], NULL, pdt, N, (int)d.A, C));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_O, 1, a->atty, a->lt, NULL, dr->tmpC, s->lu, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, residual_forward, a->res2, x, dr->tmpC, (size_t)N * d.C));
    FSDP_TRY(
        FSDP_K(dr, rmsnorm_forward, a->xn2, C, a->rstd2, a->res2, C, w[LLAMA_POST_NORM], pdt, N, C, eps));
    FSDP_TRY(FSDP_K(dr, matmul_forward, a->gu, a->xn2, w[LLAMA_GATE_UP_W], NULL, pdt, N, C, 2 * (int)d.I));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_GU, 2, a->xn2, a->lt, NULL, a->gu, s->lu, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, swiglu_forward, a->act, a->gu, N, (int)d.I));
    const fsdp_lora ldown = lora_of(s, &dr->kc, w, 6);
    if (ldown.A) /* the down adapter's input side: saved for backward, recompute too */
        FSDP_TRY(fsdp_lora_xa(&ldown, a->act, a->lt[6], N, pdt));
    if (out == NULL) return FSDP_OK;
    FSDP_TRY(FSDP_K(dr, matmul_forward, dr->tmpC, a->act, w[LLAMA_DOWN_W], NULL, pdt, N, (int)d.I, C));
    if (ldown.A) FSDP_TRY(fsdp_lora_add(&ldown, a->lt[6], dr->tmpC, s->lu, N, pdt));
    fsdp_decoder_progress(dr);
    return FSDP_K(dr, residual_forward, out, a->res2, dr->tmpC, (size_t)N * d.C);
}

/* Block l's backward. On entry dr->dres holds dL/d(block output); on exit dL/d(block input x). */
static fsdp_status block_backward(fsdp_decoder *dr, int l, const float *x, void *acts) {
    const block_acts *a = acts;
    const llama_state *s = dr->fam;
    const dims d = s->d;
    const int B = dr->act_B, T = dr->act_T, N = B * T, C = (int)d.C, I = (int)d.I;
    const int NH = (int)d.NH, NKV = (int)d.NKV, hd = (int)d.hd, QKV = (int)d.QKV, A = (int)d.A;
    const fsdp_dtype pdt = dr->pdt;
    fsdp_unit_t *u = dr->blocks[l];
    const void *w[LLAMA_BLOCK_KINDS];
    FSDP_TRY(block_views(s, u, w));
    float *gw, *gb;
    int aw, ab;

    /* MLP: out = res2 + down(swiglu(gate_up(rms(res2)))) */
    FSDP_TRY(grad_of(s, u, LLAMA_DOWN_W, &gw, &aw));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, matmul_backward, s->dact, 0, gw, aw, NULL, 0, dr->dres, a->act, w[LLAMA_DOWN_W], pdt,
                    N, I, C));
    FSDP_TRY(lora_backward(s, &dr->kc, u, w, 6, dr->dres, a->act, a->lt[6], s->dact, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, swiglu_backward, s->dgu, s->dact, a->gu, N, I));
    FSDP_TRY(grad_of(s, u, LLAMA_GATE_UP_W, &gw, &aw));
    FSDP_TRY(FSDP_K(dr, matmul_backward, dr->dtmpC, 0, gw, aw, NULL, 0, s->dgu, a->xn2, w[LLAMA_GATE_UP_W],
                    pdt, N, C, 2 * I));
    for (int p = 4; p <= 5; p++)
        FSDP_TRY(lora_backward(s, &dr->kc, u, w, p, s->dgu, a->xn2, a->lt[p], dr->dtmpC, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(grad_of(s, u, LLAMA_POST_NORM, &gw, &aw));
    FSDP_TRY(FSDP_K(dr, rmsnorm_backward, dr->dres, C, 1, gw, aw, dr->dtmpC, C, a->res2, C,
                    w[LLAMA_POST_NORM], pdt, a->rstd2, N, C));
    /* attention: res2 = x + o(attn(qkv(rms(x)))) */
    FSDP_TRY(grad_of(s, u, LLAMA_O_W, &gw, &aw));
    FSDP_TRY(FSDP_K(dr, matmul_backward, s->datty, 0, gw, aw, NULL, 0, dr->dres, a->atty, w[LLAMA_O_W], pdt,
                    N, A, C));
    FSDP_TRY(lora_backward(s, &dr->kc, u, w, 3, dr->dres, a->atty, a->lt[3], s->datty, N, pdt));
    fsdp_decoder_progress(dr);
    float *dq = s->dqkv, *dk = s->dqkv + d.A;
    /* dq per query head; dk, dv of each KV head summed over its group */
    FSDP_TRY(FSDP_K(dr, attention_gqa_backward, s->dqkv, s->datty, a->qkv, a->lse,
                    dr->has_doc ? dr->doc : NULL, B, T, NH, NKV, hd));
    fsdp_decoder_progress(dr);
    FSDP_TRY(FSDP_K(dr, rope_backward, dq, QKV, dr->pos, s->inv_freq, N, NH, hd));
    FSDP_TRY(FSDP_K(dr, rope_backward, dk, QKV, dr->pos, s->inv_freq, N, NKV, hd));
    if (dr->cfg.qk_norm) { /* in place: dinp may alias dout */
        FSDP_TRY(grad_of(s, u, LLAMA_Q_NORM, &gw, &aw));
        FSDP_TRY(FSDP_K(dr, head_rmsnorm_backward, dq, QKV, 0, gw, aw, dq, QKV, a->qkv_pre, QKV,
                        w[LLAMA_Q_NORM], pdt, a->qk_rstd, N, NH, hd));
        FSDP_TRY(grad_of(s, u, LLAMA_K_NORM, &gw, &aw));
        FSDP_TRY(FSDP_K(dr, head_rmsnorm_backward, dk, QKV, 0, gw, aw, dk, QKV, a->qkv_pre + d.A, QKV,
                        w[LLAMA_K_NORM], pdt, a->qk_rstd + (size_t)N * NH, N, NKV, hd));
    }
    FSDP_TRY(grad_of(s, u, LLAMA_QKV_W, &gw, &aw));
    gb = NULL, ab = 0;
    if (dr->cfg.qkv_bias) FSDP_TRY(grad_of(s, u, LLAMA_QKV_B, &gb, &ab));
    FSDP_TRY(FSDP_K(dr, matmul_backward, dr->dtmpC, 0, gw, aw, gb, ab, s->dqkv, a->xn1, w[LLAMA_QKV_W], pdt,
                    N, C, QKV));
    for (int p = 0; p <= 2; p++)
        FSDP_TRY(lora_backward(s, &dr->kc, u, w, p, s->dqkv, a->xn1, a->lt[p], dr->dtmpC, N, pdt));
    fsdp_decoder_progress(dr);
    FSDP_TRY(grad_of(s, u, LLAMA_IN_NORM, &gw, &aw));
    return FSDP_K(dr, rmsnorm_backward, dr->dres, C, 1, gw, aw, dr->dtmpC, C, x, C, w[LLAMA_IN_NORM], pdt,
                  a->rstd1, N, C);
}

static fsdp_status norm_backward(fsdp_decoder *dr, const float *x) {
    const llama_state *s = dr->fam;
    const int C = dr->cfg.n_embd;
    float *gw;
    int aw;
    FSDP_TRY(fsdp_unit_main_grad(dr->root, LLAMA_NORM, &gw, &aw));
    return FSDP_K(dr, rmsnorm_backward, dr->dres, C, 0, gw, aw, dr->dtmpC, C, x, C, dr->root_w[LLAMA_NORM],
                  dr->pdt, s->rstdf, dr->B * dr->T, C);
}

/* With a tied head the LM head's gradient (first) and the embedding's land in one main_grad slice. */
static fsdp_status embed_backward(fsdp_decoder *dr) {
    float *gw;
    int aw;
    FSDP_TRY(fsdp_unit_main_grad(dr->root, LLAMA_EMBED, &gw, &aw));
    return FSDP_K(dr, encoder_backward_pos, gw, aw, NULL, 0, dr->dres, dr->tokens, NULL, dr->B, dr->T,
                  dr->cfg.n_embd, dr->cfg.padded_vocab_size, dr->T);
}

/* ---------------------------------------------------------------- decode (KV cache, K after RoPE) */

enum { DEC_ROWS = 64 }; /* decode works on the new tokens in chunks of this many rows */

/* decode's scratch for R rows (after the driver's x): xn, tmp (C each), qkv, qkv_pre (QKV each), atty
 * (A), gu (2I), act (I), rstd (NH + NKV), pos (1, int32). */
typedef struct {
    float *xn, *tmp, *qkv, *qkv_pre, *atty, *gu, *act, *rstd;
    float *lt, *lu; /* LoRA: (R, r) and (R, M); NULL without */
    int *pos;
} dec_bufs;

static int decode_rows(const fsdp_model_config *r) {
    (void)r;
    return DEC_ROWS;
}

static size_t decode_floats(const fsdp_model_config *r, size_t R) {
    const dims d = dims_of(r);
    return R * (2 * d.C + 2 * d.QKV + d.A + 3 * d.I + d.NH + d.NKV + 1 + (d.R ? d.R + d.M : 0));
}

static size_t kv_width(const fsdp_model_config *r) {
    const dims d = dims_of(r);
    return d.KV;
}

static dec_bufs dec_of(const fsdp_decoder *dr) {
    const llama_state *s = dr->fam;
    const dims d = s->d;
    const size_t R = (size_t)dr->dec_rows;
    dec_bufs b;
    b.xn = dr->dec_scratch, b.tmp = b.xn + R * d.C, b.qkv = b.tmp + R * d.C, b.qkv_pre = b.qkv + R * d.QKV;
    b.atty = b.qkv_pre + R * d.QKV, b.gu = b.atty + R * d.A, b.act = b.gu + 2 * R * d.I,
    b.rstd = b.act + R * d.I;
    b.lt = d.R ? b.rstd + R * (d.NH + d.NKV) : NULL;
    b.lu = d.R ? b.lt + R * d.R : NULL;
    b.pos = (int *)(b.rstd + R * (d.NH + d.NKV) + (d.R ? R * (d.R + d.M) : 0));
    return b;
}

/* The final norm of n rows of x into xf; its 1/rms in the arena, or in decode's scratch. */
static fsdp_status norm_forward(fsdp_decoder *dr, const float *x, int n, float *xf, int decode) {
    const llama_state *s = dr->fam;
    const int C = dr->cfg.n_embd;
    float *rstd = decode ? dec_of(dr).rstd : s->rstdf;
    return FSDP_K(dr, rmsnorm_forward, xf, C, rstd, x, C, dr->root_w[LLAMA_NORM], dr->pdt, n, C,
                  (float)dr->cfg.norm_eps);
}

static fsdp_status embed_decode(fsdp_decoder *dr, const int *tokens, int n, int pos, float *x) {
    (void)pos; /* RoPE places the positions */
    return FSDP_K(dr, encoder_forward_pos, x, tokens, NULL, dr->root_w[LLAMA_EMBED], NULL, dr->pdt, 1, n,
                  dr->cfg.n_embd, dr->cfg.padded_vocab_size, n);
}

static fsdp_status block_decode(fsdp_decoder *dr, int l, float *x, int n, int pos, float *K, float *Vc,
                                float *att, int nthr) {
    const llama_state *s = dr->fam;
    const fsdp_model_config *c = &dr->cfg;
    const dims d = s->d;
    const int C = (int)d.C, I = (int)d.I;
    const fsdp_dtype pdt = dr->pdt;
    const float eps = (float)c->norm_eps;
    const dec_bufs b = dec_of(dr);
    for (int i = 0; i < n; i++)
        b.pos[i] = pos + i;
    const void *w[LLAMA_BLOCK_KINDS];
    FSDP_TRY(block_views(s, dr->blocks[l], w));
    FSDP_TRY(FSDP_K(dr, rmsnorm_forward, b.xn, C, b.rstd, x, C, w[LLAMA_IN_NORM], pdt, n, C, eps));
    float *g = c->qk_norm ? b.qkv_pre : b.qkv;
    FSDP_TRY(FSDP_K(dr, matmul_forward, g, b.xn, w[LLAMA_QKV_W], w[LLAMA_QKV_B], pdt, n, C, (int)d.QKV));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_QKV, 3, b.xn, NULL, b.lt, g, b.lu, n, pdt));
    FSDP_TRY(qk_transform(dr, w, b.qkv, c->qk_norm ? b.qkv_pre : NULL, b.rstd, b.pos, n));
    for (int i = 0; i < n; i++) {
        memcpy(K + (size_t)(pos + i) * d.KV, b.qkv + (size_t)i * d.QKV + d.A, d.KV * sizeof(float));
        memcpy(Vc + (size_t)(pos + i) * d.KV, b.qkv + (size_t)i * d.QKV + d.A + d.KV, d.KV * sizeof(float));
    }
    FSDP_TRY(FSDP_K(dr, decode_attention, b.atty, (int)d.A, b.qkv, (int)d.QKV, K, Vc, (int)d.KV, att, nthr, n,
                    pos, (int)d.NH, (int)d.NKV, (int)d.hd, s->scale, c->max_seq_len));
    FSDP_TRY(FSDP_K(dr, matmul_forward, b.tmp, b.atty, w[LLAMA_O_W], NULL, pdt, n, (int)d.A, C));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_O, 1, b.atty, NULL, b.lt, b.tmp, b.lu, n, pdt));
    FSDP_TRY(FSDP_K(dr, residual_forward, x, x, b.tmp, (size_t)n * d.C));
    FSDP_TRY(FSDP_K(dr, rmsnorm_forward, b.xn, C, b.rstd, x, C, w[LLAMA_POST_NORM], pdt, n, C, eps));
    FSDP_TRY(FSDP_K(dr, matmul_forward, b.gu, b.xn, w[LLAMA_GATE_UP_W], NULL, pdt, n, C, 2 * I));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_GU, 2, b.xn, NULL, b.lt, b.gu, b.lu, n, pdt));
    FSDP_TRY(FSDP_K(dr, swiglu_forward, b.act, b.gu, n, I));
    FSDP_TRY(FSDP_K(dr, matmul_forward, b.tmp, b.act, w[LLAMA_DOWN_W], NULL, pdt, n, I, C));
    FSDP_TRY(lora_forward(s, &dr->kc, w, LORA_DOWN, 1, b.act, NULL, b.lt, b.tmp, b.lu, n, pdt));
    return FSDP_K(dr, residual_forward, x, x, b.tmp, (size_t)n * d.C);
}

const fsdp_block_table fsdp_llama_blocks = {
    .name = "llama",
    .resolve = llama_resolve,
    .max_positions = (size_t)1 << 30,
    .n_root = LLAMA_ROOT_NTENSORS,
    .head = LLAMA_LM_HEAD,
    .acts_size = sizeof(block_acts),
    FSDP_BLOCK_TABLE_HOOKS,
};

fsdp_status llama_init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *cfg) {
    return fsdp_decoder_init(impl, eng, cfg, &fsdp_llama_blocks);
}
