/* llama.c — the Llama family's forward and backward on FSDP units (llama.h has the units; fsdp_model.h the
 * contract). Pre-norm blocks: x + o(attn(rope(norm_qk(qkv(rms(x)))))), then + down(swiglu(gate_up(rms)))
 * with grouped-query attention, one GEMM for q|k|v and one for gate|up. Activations live in one tracked
 * allocation (category activation) carved into named buffers; with recompute only the residual stream
 * is kept and one set of block buffers is reused, recomputed bit for bit in each block's backward. */
#include "model/llama/llama.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
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
} dims;

static dims dims_of(const fsdp_model_config *r) {
    dims d;
    d.L = (size_t)r->n_layer, d.C = (size_t)r->n_embd, d.NH = (size_t)r->n_head;
    d.NKV = (size_t)r->n_kv_head, d.hd = (size_t)r->head_dim;
    d.A = d.NH * d.hd, d.KV = d.NKV * d.hd, d.QKV = d.A + 2 * d.KV;
    d.I = (size_t)r->intermediate, d.V = (size_t)r->vocab_size, d.Vp = (size_t)r->padded_vocab_size;
    return d;
}

int llama_block_tensor(const fsdp_model_config *c, int k) {
    if (k < 0 || k >= LLAMA_BLOCK_KINDS) return -1;
    if (k == LLAMA_QKV_B && !c->qkv_bias) return -1;
    if ((k == LLAMA_Q_NORM || k == LLAMA_K_NORM) && !c->qk_norm) return -1;
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
    return 6.0 * w + 12.0 * (double)d.L * (double)d.A * (T + 1) / 2.0;
}

/* ---------------------------------------------------------------- activation arena */

#define ALIGN_F 16 /* every buffer starts 64-byte aligned */
static size_t align_f(size_t n) { return (n + ALIGN_F - 1) / ALIGN_F * ALIGN_F; }

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
} block_acts;

static size_t block_acts_floats(const fsdp_model_config *r, size_t B, size_t T) {
    const dims d = dims_of(r);
    const size_t N = B * T;
    size_t n = align_f(N) * 2 + align_f(N * d.C) * 3 + align_f(N * d.QKV) + align_f(N * d.A) +
               align_f(fsdp_attention_gqa_lse_floats((int)B, (int)T, (int)d.NH)) + align_f(2 * N * d.I) +
               align_f(N * d.I);
    if (r->qk_norm) n += align_f(N * d.QKV) + align_f(N * (d.NH + d.NKV));
    return n;
}

static size_t arena_floats(const fsdp_model_config *r, int B, int T, int recompute) {
    const dims d = dims_of(r);
    const size_t N = (size_t)B * (size_t)T;
    size_t n = (recompute ? 1 : d.L) * block_acts_floats(r, (size_t)B, (size_t)T);
    n += (d.L + 1) * align_f(N * d.C);            /* res */
    n += align_f(N * d.C) + align_f(N);           /* final norm's output, rstd */
    n += align_f(N * d.Vp);                       /* logits */
    n += 3 * align_f(N * d.C);                    /* tmpC dres dtmpC */
    n += align_f(N * d.A) + align_f(N * d.QKV);   /* datty dqkv */
    n += align_f(2 * N * d.I) + align_f(N * d.I); /* dgu dact */
    n += 4 * align_f(N);                          /* tokens, targets, pos, doc (int32) */
    return n;
}

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
    return arena_floats(&r, B, T, r.recompute) * sizeof(float) + scratch;
}

/* Mirrors gemm.c's workspace slots for this model's GEMM shapes (N = B*T rows): out[N,n] = in[N,k] W^T
 * for (k, n) in {(C, QKV), (A, C), (C, 2I), (I, C), (C, Vp)}, and their backward (dinp and dW). bf16
 * GEMMs: slot A holds a bf16 copy of in (forward) or dout (backward), slot B of in (backward); the
 * bf16-via-f32 fallback also widens both operands (A32: in or dout; B32: a weight or in) and the bias.
 * The f32-compute path widens weight rows (fsdp_gemm_widen_workspace per shape), the bias (QKV floats
 * when qkv_bias). Beside them the softmax-CE row losses (N doubles). oneDNN's scratchpad is not
 * included, so the figure is a lower bound of the measured peak (see fsdp_gpt.h). */
size_t llama_other_bytes(const fsdp_model_config *cfg, int B, int T, fsdp_dtype compute) {
    if (llama_check(cfg) != FSDP_OK || B < 1 || T < 1) return 0;
    const fsdp_model_config r = llama_resolve(cfg);
    const dims d = dims_of(&r);
    const size_t N = (size_t)B * (size_t)T;
    const size_t kn[5][2] = {{d.C, d.QKV}, {d.A, d.C}, {d.C, 2 * d.I}, {d.I, d.C}, {d.C, d.Vp}};
    size_t bytes = 0;
    fsdp_gemm_path path = compute == FSDP_BF16 ? fsdp_gemm_path_for(FSDP_BF16) : FSDP_GEMM_F32;
    if (path == FSDP_GEMM_BF16 || path == FSDP_GEMM_BF16_VIA_F32) {
        size_t a = 0, b = 0, a32 = 0, b32 = 0;
        for (int i = 0; i < 5; i++) {
            size_t k = kn[i][0], n = kn[i][1];
            if (N * k > a) a = N * k;     /* forward in */
            if (N * n > a) a = N * n;     /* backward dout */
            if (N * k > b) b = N * k;     /* backward in (dW) */
            if (N * k > a32) a32 = N * k; /* widened A operands */
            if (N * n > a32) a32 = N * n;
            if (k * n > b32) b32 = k * n; /* widened weights and the dW's in */
            if (N * k > b32) b32 = N * k;
        }
        bytes += (a + b) * sizeof(fsdp_bf16);
        if (path == FSDP_GEMM_BF16_VIA_F32) bytes += (a32 + b32 + (r.qkv_bias ? d.QKV : 0)) * sizeof(float);
    } else if (path == FSDP_GEMM_F32_COMPUTE) {
        size_t w32 = 0, c32 = 0;
        for (int i = 0; i < 5; i++) {
            size_t wb, cb;
            fsdp_gemm_widen_workspace((int)N, (int)kn[i][0], (int)kn[i][1], &wb, &cb);
            if (wb > w32) w32 = wb;
            if (cb > c32) c32 = cb;
        }
        bytes += w32 + c32 + (r.qkv_bias ? d.QKV * sizeof(float) : 0);
    }
    return bytes + N * sizeof(double);
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
    for (int k = 0; k < LLAMA_BLOCK_KINDS; k++)
        if (llama_block_tensor(&r, k) >= 0) o->block[nb++] = all[k];

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

static void units_release(fsdp_model_units *u) {
    free(u->owner);
    free(u->units);
    memset(u, 0, sizeof *u);
}

/* ---------------------------------------------------------------- the model */

typedef struct {
    fsdp_model_config cfg; /* resolved */
    dims d;
    int bi[LLAMA_BLOCK_KINDS]; /* llama_block_tensor */
    fsdp_engine_t *eng;
    fsdp_dtype pdt;       /* the engine's compute dtype: parameter views are float* or fsdp_bf16* */
    fsdp_unit_t *root;    /* "root" */
    fsdp_unit_t **blocks; /* (L) "h<l>" */
    int recompute;        /* what the next forward does */
    float *inv_freq;      /* (hd/2) RoPE frequencies (plain heap: not an activation) */
    float scale;          /* 1/sqrt(hd) */

    void *arena;
    size_t arena_bytes;
    int act_B, act_T, act_recompute;
    block_acts *acts; /* (L), or (L) copies of one set with recompute */
    float *res;       /* (L+1, N, C) residual stream: res[0] = embeddings, res[l+1] = block l's output */
    float *xnf;       /* (N, C) final norm's output */
    float *rstdf;     /* (N) */
    float *logits;    /* (N, Vp); dlogits after backward */
    float *tmpC, *dres, *dtmpC;        /* (N, C) */
    float *datty;                      /* (N, A) */
    float *dqkv;                       /* (N, QKV) */
    float *dgu;                        /* (N, 2I) */
    float *dact;                       /* (N, I) */
    int *tokens, *targets, *pos, *doc; /* (N) copies of the batch; pos: RoPE positions */
    int has_doc;
    int n_counted; /* targets of the last forward that count */

    /* decode: the key/value cache (K after RoPE) and per-call buffers */
    float *kv;  /* (L, 2, T_max, KV) */
    float *dec; /* DEC_ROWS rows of scratch (decode_floats) */
    int kv_len;

    int B, T;
    int have_targets, pending_backward, logits_valid;
} llama_model;

static fsdp_status ensure_arena(llama_model *m, int B, int T) {
    const fsdp_model_config *c = &m->cfg;
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
    const dims d = m->d;
    const size_t N = (size_t)B * (size_t)T;
    float *p = m->arena;
#define TAKE(n) (p += align_f(n), p - align_f(n))
    const int nsets = m->recompute ? 1 : c->n_layer;
    for (int s = 0; s < nsets; s++) {
        block_acts *a = &m->acts[s];
        a->rstd1 = TAKE(N);
        a->xn1 = TAKE(N * d.C);
        a->qkv_pre = c->qk_norm ? TAKE(N * d.QKV) : NULL;
        a->qk_rstd = c->qk_norm ? TAKE(N * (d.NH + d.NKV)) : NULL;
        a->qkv = TAKE(N * d.QKV);
        a->lse = TAKE(fsdp_attention_gqa_lse_floats(B, T, (int)d.NH));
        a->atty = TAKE(N * d.A);
        a->res2 = TAKE(N * d.C);
        a->rstd2 = TAKE(N);
        a->xn2 = TAKE(N * d.C);
        a->gu = TAKE(2 * N * d.I);
        a->act = TAKE(N * d.I);
    }
    for (int s = nsets; s < c->n_layer; s++)
        m->acts[s] = m->acts[0];
    m->res = p; /* (L+1) slices at the aligned stride align_f(N*C): res_at */
    p += (d.L + 1) * align_f(N * d.C);
    m->xnf = TAKE(N * d.C);
    m->rstdf = TAKE(N);
    m->logits = TAKE(N * d.Vp);
    m->tmpC = TAKE(N * d.C);
    m->dres = TAKE(N * d.C);
    m->dtmpC = TAKE(N * d.C);
    m->datty = TAKE(N * d.A);
    m->dqkv = TAKE(N * d.QKV);
    m->dgu = TAKE(2 * N * d.I);
    m->dact = TAKE(N * d.I);
    m->tokens = (int *)TAKE(N);
    m->targets = (int *)TAKE(N);
    m->pos = (int *)TAKE(N);
    m->doc = (int *)TAKE(N);
#undef TAKE
    FSDP_INVARIANT((size_t)(p - (float *)m->arena) == nf);
    m->act_B = B, m->act_T = T, m->act_recompute = m->recompute;
    return FSDP_OK;
}

static float *res_at(const llama_model *m, int l) {
    return m->res + (size_t)l * align_f((size_t)m->act_B * (size_t)m->act_T * m->d.C);
}

void llama_free(void *impl) {
    llama_model *m = impl;
    if (m == NULL) return;
    fsdp_mem_free(m->kv);
    fsdp_mem_free(m->dec);
    fsdp_mem_free(m->arena);
    free(m->inv_freq);
    free(m->acts);
    free(m->blocks);
    free(m);
}

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

fsdp_status llama_init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *cfg) {
    if (impl == NULL || eng == NULL) return FSDP_ERR(FSDP_EINVAL, "impl and eng must not be NULL");
    *impl = NULL;
    fsdp_model_units us;
    FSDP_TRY(llama_units(&us, cfg));
    fsdp_status st;
    llama_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model struct");
        goto fail;
    }
    m->cfg = llama_resolve(cfg);
    m->d = dims_of(&m->cfg);
    for (int k = 0; k < LLAMA_BLOCK_KINDS; k++)
        m->bi[k] = llama_block_tensor(&m->cfg, k);
    m->eng = eng;
    m->pdt = fsdp_engine_get_config(eng)->compute_dtype;
    m->recompute = m->cfg.recompute;
    m->scale = (float)(1.0 / sqrt((double)m->d.hd));
    m->blocks = calloc(m->d.L, sizeof *m->blocks);
    m->acts = calloc(m->d.L, sizeof *m->acts);
    m->inv_freq = calloc(m->d.hd / 2, sizeof *m->inv_freq);
    if (!m->blocks || !m->acts || !m->inv_freq) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model's tables (%zu layers)", m->d.L);
        goto fail;
    }
    const fsdp_rope_scaling sc = rope_scaling_of(&m->cfg);
    st = fsdp_rope_inv_freq(m->inv_freq, (int)m->d.hd, m->cfg.rope_theta, &sc);
    if (st != FSDP_OK) goto fail;
    for (int i = 0; i < us.n_units; i++) {
        const fsdp_plan_unit *pu = &us.units[i];
        st = fsdp_engine_add_unit(eng, pu->name, pu->specs, pu->n_specs, pu->cfg,
                                  i ? &m->blocks[i - 1] : &m->root);
        if (st != FSDP_OK) goto fail;
    }
    units_release(&us);
    *impl = m;
    return FSDP_OK;
fail: /* units already added belong to the engine */
    llama_free(m);
    units_release(&us);
    return st;
}

fsdp_status llama_set_recompute(void *impl, int on) {
    llama_model *m = impl;
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (on != 0 && on != 1) return FSDP_ERR(FSDP_EINVAL, "recompute must be 0 or 1, got %d", on);
    if (m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE, "cannot switch recompute between a forward and its backward");
    m->recompute = on;
    m->cfg.recompute = on;
    return FSDP_OK;
}

static fsdp_status views(fsdp_unit_t *u, int n, const void **p) {
    for (int t = 0; t < n; t++) {
        void *v;
        FSDP_TRY(fsdp_unit_param(u, t, &v));
        p[t] = v;
    }
    return FSDP_OK;
}

/* Block parameter views indexed by kind (NULL for a kind the config lacks). */
static fsdp_status block_views(const llama_model *m, fsdp_unit_t *u, const void **w) {
    for (int k = 0; k < LLAMA_BLOCK_KINDS; k++) {
        w[k] = NULL;
        if (m->bi[k] < 0) continue;
        void *v;
        FSDP_TRY(fsdp_unit_param(u, m->bi[k], &v));
        w[k] = v;
    }
    return FSDP_OK;
}

static fsdp_status grad_of(const llama_model *m, fsdp_unit_t *u, int kind, float **g, int *acc) {
    return fsdp_unit_main_grad(u, m->bi[kind], g, acc);
}

static void progress(llama_model *m) { fsdp_engine_progress(m->eng); }

/* ---------------------------------------------------------------- block forward / backward */

/* q (and k) of n rows of qkv [n, QKV] after the GEMM: Qwen3's per-head norm from src into dst (src ==
 * NULL: none), then RoPE in place at positions pos. */
static fsdp_status qk_transform(const llama_model *m, const void *const *w, float *dst, const float *src,
                                float *qk_rstd, const int *pos, int n) {
    const dims d = m->d;
    const int ld = (int)d.QKV, NH = (int)d.NH, NKV = (int)d.NKV, hd = (int)d.hd;
    const float eps = (float)m->cfg.norm_eps;
    if (src) {
        FSDP_TRY(
            fsdp_head_rmsnorm_forward(dst, ld, qk_rstd, src, ld, w[LLAMA_Q_NORM], m->pdt, n, NH, hd, eps));
        FSDP_TRY(fsdp_head_rmsnorm_forward(dst + d.A, ld, qk_rstd + (size_t)n * NH, src + d.A, ld,
                                           w[LLAMA_K_NORM], m->pdt, n, NKV, hd, eps));
        for (int i = 0; i < n; i++) /* v unchanged */
            memcpy(dst + (size_t)i * d.QKV + d.A + d.KV, src + (size_t)i * d.QKV + d.A + d.KV,
                   d.KV * sizeof(float));
    }
    FSDP_TRY(fsdp_rope_forward(dst, ld, pos, m->inv_freq, n, NH, hd));
    return fsdp_rope_forward(dst + d.A, ld, pos, m->inv_freq, n, NKV, hd);
}

/* Block l's forward from x (N, C) into a; out (N, C) gets the block output, or NULL during recompute
 * (nothing after the SwiGLU is needed by the backward). */
static fsdp_status block_forward(llama_model *m, int l, const float *x, block_acts *a, float *out) {
    const dims d = m->d;
    const int B = m->act_B, T = m->act_T, N = B * T, C = (int)d.C;
    const fsdp_dtype pdt = m->pdt;
    const float eps = (float)m->cfg.norm_eps;
    const void *w[LLAMA_BLOCK_KINDS];
    FSDP_TRY(block_views(m, m->blocks[l], w));
    FSDP_TRY(fsdp_rmsnorm_forward(a->xn1, C, a->rstd1, x, C, w[LLAMA_IN_NORM], pdt, N, C, eps));
    float *g = m->cfg.qk_norm ? a->qkv_pre : a->qkv;
    FSDP_TRY(fsdp_matmul_forward(g, a->xn1, w[LLAMA_QKV_W], w[LLAMA_QKV_B], pdt, N, C, (int)d.QKV));
    progress(m);
    FSDP_TRY(qk_transform(m, w, a->qkv, m->cfg.qk_norm ? a->qkv_pre : NULL, a->qk_rstd, m->pos, N));
    /* Grouped-query causal attention, confined to each document when the batch has document ids */
    FSDP_TRY(fsdp_attention_gqa_forward(a->atty, a->lse, a->qkv, m->has_doc ? m->doc : NULL, B, T, (int)d.NH,
                                        (int)d.NKV, (int)d.hd));
    progress(m);
    FSDP_TRY(fsdp_matmul_forward(m->tmpC, a->atty, w[LLAMA_O_W], NULL, pdt, N, (int)d.A, C));
    progress(m);
    FSDP_TRY(fsdp_residual_forward(a->res2, x, m->tmpC, (size_t)N * d.C));
    FSDP_TRY(fsdp_rmsnorm_forward(a->xn2, C, a->rstd2, a->res2, C, w[LLAMA_POST_NORM], pdt, N, C, eps));
    FSDP_TRY(fsdp_matmul_forward(a->gu, a->xn2, w[LLAMA_GATE_UP_W], NULL, pdt, N, C, 2 * (int)d.I));
    progress(m);
    FSDP_TRY(fsdp_swiglu_forward(a->act, a->gu, N, (int)d.I));
    if (out == NULL) return FSDP_OK;
    FSDP_TRY(fsdp_matmul_forward(m->tmpC, a->act, w[LLAMA_DOWN_W], NULL, pdt, N, (int)d.I, C));
    progress(m);
    return fsdp_residual_forward(out, a->res2, m->tmpC, (size_t)N * d.C);
}

/* Block l's backward. On entry m->dres holds dL/d(block output); on exit dL/d(block input x). */
static fsdp_status block_backward(llama_model *m, int l, const float *x, const block_acts *a) {
    const dims d = m->d;
    const int B = m->act_B, T = m->act_T, N = B * T, C = (int)d.C, I = (int)d.I;
    const int NH = (int)d.NH, NKV = (int)d.NKV, hd = (int)d.hd, QKV = (int)d.QKV, A = (int)d.A;
    const fsdp_dtype pdt = m->pdt;
    fsdp_unit_t *u = m->blocks[l];
    const void *w[LLAMA_BLOCK_KINDS];
    FSDP_TRY(block_views(m, u, w));
    float *gw, *gb;
    int aw, ab;

    /* MLP: out = res2 + down(swiglu(gate_up(rms(res2)))) */
    FSDP_TRY(grad_of(m, u, LLAMA_DOWN_W, &gw, &aw));
    progress(m);
    FSDP_TRY(
        fsdp_matmul_backward(m->dact, 0, gw, aw, NULL, 0, m->dres, a->act, w[LLAMA_DOWN_W], pdt, N, I, C));
    progress(m);
    FSDP_TRY(fsdp_swiglu_backward(m->dgu, m->dact, a->gu, N, I));
    FSDP_TRY(grad_of(m, u, LLAMA_GATE_UP_W, &gw, &aw));
    FSDP_TRY(fsdp_matmul_backward(m->dtmpC, 0, gw, aw, NULL, 0, m->dgu, a->xn2, w[LLAMA_GATE_UP_W], pdt, N, C,
                                  2 * I));
    progress(m);
    FSDP_TRY(grad_of(m, u, LLAMA_POST_NORM, &gw, &aw));
    FSDP_TRY(fsdp_rmsnorm_backward(m->dres, C, 1, gw, aw, m->dtmpC, C, a->res2, C, w[LLAMA_POST_NORM], pdt,
                                   a->rstd2, N, C));
    /* attention: res2 = x + o(attn(qkv(rms(x)))) */
    FSDP_TRY(grad_of(m, u, LLAMA_O_W, &gw, &aw));
    FSDP_TRY(
        fsdp_matmul_backward(m->datty, 0, gw, aw, NULL, 0, m->dres, a->atty, w[LLAMA_O_W], pdt, N, A, C));
    progress(m);
    float *dq = m->dqkv, *dk = m->dqkv + d.A;
    /* dq per query head; dk, dv of each KV head summed over its group */
    FSDP_TRY(fsdp_attention_gqa_backward(m->dqkv, m->datty, a->qkv, a->lse, m->has_doc ? m->doc : NULL, B, T,
                                         NH, NKV, hd));
    progress(m);
    FSDP_TRY(fsdp_rope_backward(dq, QKV, m->pos, m->inv_freq, N, NH, hd));
    FSDP_TRY(fsdp_rope_backward(dk, QKV, m->pos, m->inv_freq, N, NKV, hd));
    if (m->cfg.qk_norm) { /* in place: dinp may alias dout */
        FSDP_TRY(grad_of(m, u, LLAMA_Q_NORM, &gw, &aw));
        FSDP_TRY(fsdp_head_rmsnorm_backward(dq, QKV, 0, gw, aw, dq, QKV, a->qkv_pre, QKV, w[LLAMA_Q_NORM],
                                            pdt, a->qk_rstd, N, NH, hd));
        FSDP_TRY(grad_of(m, u, LLAMA_K_NORM, &gw, &aw));
        FSDP_TRY(fsdp_head_rmsnorm_backward(dk, QKV, 0, gw, aw, dk, QKV, a->qkv_pre + d.A, QKV,
                                            w[LLAMA_K_NORM], pdt, a->qk_rstd + (size_t)N * NH, N, NKV, hd));
    }
    FSDP_TRY(grad_of(m, u, LLAMA_QKV_W, &gw, &aw));
    gb = NULL, ab = 0;
    if (m->cfg.qkv_bias) FSDP_TRY(grad_of(m, u, LLAMA_QKV_B, &gb, &ab));
    FSDP_TRY(
        fsdp_matmul_backward(m->dtmpC, 0, gw, aw, gb, ab, m->dqkv, a->xn1, w[LLAMA_QKV_W], pdt, N, C, QKV));
    progress(m);
    FSDP_TRY(grad_of(m, u, LLAMA_IN_NORM, &gw, &aw));
    return fsdp_rmsnorm_backward(m->dres, C, 1, gw, aw, m->dtmpC, C, x, C, w[LLAMA_IN_NORM], pdt, a->rstd1, N,
                                 C);
}

/* ---------------------------------------------------------------- forward / backward */

static fsdp_status forward(llama_model *m, const fsdp_model_batch *b, float *loss);

/* A forward without targets has no backward: the engine reshards it as such (as gpt_forward does),
 * whatever the caller set before, which is restored after. */
fsdp_status llama_forward(void *impl, const fsdp_model_batch *b, float *loss) {
    llama_model *m = impl;
    if (m == NULL || b == NULL || b->tokens == NULL)
        return FSDP_ERR(FSDP_EINVAL, "model, batch and tokens must not be NULL");
    if (b->targets) return forward(m, b, loss);
    const int was = fsdp_engine_no_backward(m->eng);
    FSDP_TRY(fsdp_engine_set_no_backward(m->eng, 1));
    fsdp_status s = forward(m, b, loss);
    fsdp_engine_set_no_backward(m->eng, was);
    return s;
}

static fsdp_status forward(llama_model *m, const fsdp_model_batch *b, float *loss) {
    const fsdp_model_config *c = &m->cfg;
    const int B = b->B, T = b->T;
    if (B < 1 || T < 1 || T > c->max_seq_len)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: need B >= 1 and 1 <= T <= max_seq_len (%d)", B, T,
                        c->max_seq_len);
    if ((size_t)B * (size_t)T > (size_t)1 << 30)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: more than 2^30 positions", B, T);
    const int N = B * T, C = (int)m->d.C, L = c->n_layer, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < N; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= V)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, b->tokens[i],
                            V);
        if (b->targets && b->targets[i] != FSDP_IGNORE_INDEX && (b->targets[i] < 0 || b->targets[i] >= V))
            return FSDP_ERR(FSDP_EINVAL, "targets[%d] = %d is neither in [0, %d) nor FSDP_IGNORE_INDEX (%d)",
                            i, b->targets[i], V, FSDP_IGNORE_INDEX);
    }
    m->logits_valid = 0;
    m->pending_backward = 0;
    FSDP_TRY(ensure_arena(m, B, T));
    memcpy(m->tokens, b->tokens, (size_t)N * sizeof(int));
    if (b->targets) memcpy(m->targets, b->targets, (size_t)N * sizeof(int));
    m->has_doc = b->doc != NULL;
    if (b->doc) memcpy(m->doc, b->doc, (size_t)N * sizeof(int));
    for (int r = 0; r < B; r++) /* RoPE positions: restart where the document id changes */
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)r * T + t;
            m->pos[i] = (t == 0 || (b->doc && b->doc[i] != b->doc[i - 1])) ? 0 : m->pos[i - 1] + 1;
        }
    m->B = B, m->T = T;
    const fsdp_dtype pdt = m->pdt;

    FSDP_TRY(fsdp_unit_pre_forward(m->root));
    const void *r[LLAMA_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, LLAMA_ROOT_NTENSORS, r));
    FSDP_TRY(fsdp_encoder_forward(res_at(m, 0), m->tokens, r[LLAMA_EMBED], NULL, pdt, B, T, C, Vp, T));
    for (int l = 0; l < L; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(m->blocks[l]));
        FSDP_TRY(block_forward(m, l, res_at(m, l), &m->acts[l], res_at(m, l + 1)));
        FSDP_TRY(fsdp_unit_post_forward(m->blocks[l]));
    }
    FSDP_TRY(fsdp_rmsnorm_forward(m->xnf, C, m->rstdf, res_at(m, L), C, r[LLAMA_NORM], pdt, N, C,
                                  (float)c->norm_eps));
    FSDP_TRY(fsdp_matmul_forward(m->logits, m->xnf, r[LLAMA_LM_HEAD], NULL, pdt, N, C, Vp));
    if (b->targets) {
        float mean;
        FSDP_TRY(fsdp_softmax_crossentropy_count(NULL, &mean, &m->n_counted, NULL, m->logits, m->targets, N,
                                                 V, Vp, 1.0f));
        if (loss) *loss = mean;
    } else if (loss) {
        *loss = NAN;
    }
    FSDP_TRY(fsdp_unit_post_forward(m->root));
    m->have_targets = b->targets != NULL;
    m->pending_backward = b->targets != NULL;
    m->logits_valid = 1;
    return FSDP_OK;
}

fsdp_status llama_logits(const void *impl, const float **logits, int *B, int *T, int *Vp) {
    const llama_model *m = impl;
    if (m == NULL || logits == NULL) return FSDP_ERR(FSDP_EINVAL, "model and logits must not be NULL");
    if (!m->logits_valid)
        return FSDP_ERR(FSDP_ESTATE, "no logits: run a forward first (backward turns them into gradients)");
    *logits = m->logits;
    if (B) *B = m->B;
    if (T) *T = m->T;
    if (Vp) *Vp = m->cfg.padded_vocab_size;
    return FSDP_OK;
}

fsdp_status llama_backward(void *impl, float loss_scale) {
    llama_model *m = impl;
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (!m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        m->have_targets
                            ? "backward already ran for the last forward; run a forward again"
                            : "the last forward had no targets (inference); run one with targets");
    if (!isfinite(loss_scale))
        return FSDP_ERR(FSDP_EINVAL, "loss_scale must be finite, got %g", (double)loss_scale);
    const fsdp_model_config *c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, C = (int)m->d.C, L = c->n_layer, V = c->vocab_size;
    const int Vp = c->padded_vocab_size;
    const fsdp_dtype pdt = m->pdt;
    m->pending_backward = 0;
    m->logits_valid = 0;

    /* dlogits in place, the LM head's input gradient, the final norm; the LM head's weight gradient
     * waits until the blocks are done (as gpt.c's: the links have nothing to carry before the first
     * block's gradient). */
    FSDP_TRY(fsdp_unit_pre_backward(m->root));
    const void *r[LLAMA_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, LLAMA_ROOT_NTENSORS, r));
    const float dloss = m->n_counted > 0 ? loss_scale / (float)m->n_counted : 0.0f;
    FSDP_TRY(
        fsdp_softmax_crossentropy_count(NULL, NULL, NULL, m->logits, m->logits, m->targets, N, V, Vp, dloss));
    FSDP_TRY(fsdp_matmul_backward(m->dtmpC, 0, NULL, 0, NULL, 0, m->logits, m->xnf, r[LLAMA_LM_HEAD], pdt, N,
                                  C, Vp));
    progress(m);
    float *gw;
    int aw;
    FSDP_TRY(fsdp_unit_main_grad(m->root, LLAMA_NORM, &gw, &aw));
    FSDP_TRY(fsdp_rmsnorm_backward(m->dres, C, 0, gw, aw, m->dtmpC, C, res_at(m, L), C, r[LLAMA_NORM], pdt,
                                   m->rstdf, N, C));
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
    /* The LM head's weight gradient, then the embedding's: with a tied head both land in one main_grad
     * slice and the second use accumulates by the first-touch flag. */
    FSDP_TRY(fsdp_unit_main_grad(m->root, LLAMA_LM_HEAD, &gw, &aw));
    FSDP_TRY(fsdp_matmul_backward(NULL, 0, gw, aw, NULL, 0, m->logits, m->xnf, NULL, pdt, N, C, Vp));
    progress(m);
    FSDP_TRY(fsdp_unit_main_grad(m->root, LLAMA_EMBED, &gw, &aw));
    FSDP_TRY(fsdp_encoder_backward(gw, aw, NULL, 0, m->dres, m->tokens, B, T, C, Vp, T));
    return fsdp_unit_post_backward(m->root);
}

fsdp_status llama_end_eval(void *impl) {
    llama_model *m = impl;
    if (m == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (m->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        "a training forward is waiting for its backward; run the backward first");
    return fsdp_engine_reshard_all(m->eng);
}

/* ---------------------------------------------------------------- incremental inference (KV cache) */

enum { DEC_ROWS = 64 }; /* decode works on the new tokens in chunks of this many rows */

/* decode's scratch for DEC_ROWS rows: x, xn, tmp (C each), qkv, qkv_pre (QKV), atty (A), gu (2I),
 * act (I), rstd (NH + NKV), pos (1, int32), plus one row of logits (Vp). */
static size_t decode_floats(const dims *d) {
    return (size_t)DEC_ROWS * (3 * d->C + 2 * d->QKV + d->A + 3 * d->I + d->NH + d->NKV + 1) + d->Vp;
}

/* Attention of n new queries (rows of qkv [n, QKV], positions pos..pos+n-1) over the cached keys and
 * values K, V [T_max, KV] of positions 0..pos+i (causal), into out [n, A]. att: T_max floats per
 * thread. */
static void decode_attention(float *out, const float *qkv, const float *K, const float *Vc, float *att,
                             int nthr, int n, int pos, const dims *d, float scale, int Tmax) {
    const int NH = (int)d->NH, hd = (int)d->hd, group = (int)(d->NH / d->NKV);
#pragma omp parallel for schedule(static) collapse(2) num_threads(nthr)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)i * d->QKV + (size_t)h * hd;
            const size_t kh = (size_t)(h / group) * hd;
            float *a = att + (size_t)omp_get_thread_num() * (size_t)Tmax;
            const int ctx = pos + i + 1;
            float mx = -INFINITY;
            for (int t = 0; t < ctx; t++) {
                const float *k = K + (size_t)t * d->KV + kh;
                float s = 0.0f;
                for (int e = 0; e < hd; e++)
                    s += q[e] * k[e];
                a[t] = s * scale;
                if (a[t] > mx) mx = a[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < ctx; t++) {
                a[t] = expf(a[t] - mx);
                sum += a[t];
            }
            const float inv = 1.0f / sum;
            float *o = out + (size_t)i * d->A + (size_t)h * hd;
            for (int e = 0; e < hd; e++)
                o[e] = 0.0f;
            for (int t = 0; t < ctx; t++) {
                const float wt = a[t] * inv, *v = Vc + (size_t)t * d->KV + kh;
                for (int e = 0; e < hd; e++)
                    o[e] += wt * v[e];
            }
        }
}

/* One chunk of n <= DEC_ROWS new tokens at positions pos.. through every layer; the last row's logits
 * into out when want_logits. */
static fsdp_status decode_chunk(llama_model *m, const int *tokens, int n, int pos, float *att, int nthr,
                                int want_logits, float *out) {
    const fsdp_model_config *c = &m->cfg;
    const dims d = m->d;
    const int C = (int)d.C, Tmax = c->max_seq_len, Vp = c->padded_vocab_size, I = (int)d.I;
    const size_t R = DEC_ROWS;
    const fsdp_dtype pdt = m->pdt;
    const float eps = (float)c->norm_eps;
    float *x = m->dec, *xn = x + R * d.C, *tmp = xn + R * d.C, *qkv = tmp + R * d.C,
          *qkv_pre = qkv + R * d.QKV;
    float *atty = qkv_pre + R * d.QKV, *gu = atty + R * d.A, *act = gu + 2 * R * d.I, *rstd = act + R * d.I;
    int *pp = (int *)(rstd + R * (d.NH + d.NKV));
    for (int i = 0; i < n; i++)
        pp[i] = pos + i;

    FSDP_TRY(fsdp_unit_pre_forward(m->root));
    const void *r[LLAMA_ROOT_NTENSORS];
    FSDP_TRY(views(m->root, LLAMA_ROOT_NTENSORS, r));
    FSDP_TRY(fsdp_encoder_forward(x, tokens, r[LLAMA_EMBED], NULL, pdt, 1, n, C, Vp, n));
    for (int l = 0; l < c->n_layer; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(m->blocks[l]));
        const void *w[LLAMA_BLOCK_KINDS];
        FSDP_TRY(block_views(m, m->blocks[l], w));
        float *K = m->kv + (size_t)l * 2 * (size_t)Tmax * d.KV, *Vc = K + (size_t)Tmax * d.KV;
        FSDP_TRY(fsdp_rmsnorm_forward(xn, C, rstd, x, C, w[LLAMA_IN_NORM], pdt, n, C, eps));
        float *g = c->qk_norm ? qkv_pre : qkv;
        FSDP_TRY(fsdp_matmul_forward(g, xn, w[LLAMA_QKV_W], w[LLAMA_QKV_B], pdt, n, C, (int)d.QKV));
        FSDP_TRY(qk_transform(m, w, qkv, c->qk_norm ? qkv_pre : NULL, rstd, pp, n));
        for (int i = 0; i < n; i++) {
            memcpy(K + (size_t)(pos + i) * d.KV, qkv + (size_t)i * d.QKV + d.A, d.KV * sizeof(float));
            memcpy(Vc + (size_t)(pos + i) * d.KV, qkv + (size_t)i * d.QKV + d.A + d.KV, d.KV * sizeof(float));
        }
        decode_attention(atty, qkv, K, Vc, att, nthr, n, pos, &d, m->scale, Tmax);
        FSDP_TRY(fsdp_matmul_forward(tmp, atty, w[LLAMA_O_W], NULL, pdt, n, (int)d.A, C));
        FSDP_TRY(fsdp_residual_forward(x, x, tmp, (size_t)n * d.C));
        FSDP_TRY(fsdp_rmsnorm_forward(xn, C, rstd, x, C, w[LLAMA_POST_NORM], pdt, n, C, eps));
        FSDP_TRY(fsdp_matmul_forward(gu, xn, w[LLAMA_GATE_UP_W], NULL, pdt, n, C, 2 * I));
        FSDP_TRY(fsdp_swiglu_forward(act, gu, n, I));
        FSDP_TRY(fsdp_matmul_forward(tmp, act, w[LLAMA_DOWN_W], NULL, pdt, n, I, C));
        FSDP_TRY(fsdp_residual_forward(x, x, tmp, (size_t)n * d.C));
        FSDP_TRY(fsdp_unit_post_forward(m->blocks[l]));
    }
    if (want_logits) {
        const float *last = x + (size_t)(n - 1) * d.C;
        FSDP_TRY(fsdp_rmsnorm_forward(xn, C, rstd, last, C, r[LLAMA_NORM], pdt, 1, C, eps));
        FSDP_TRY(fsdp_matmul_forward(out, xn, r[LLAMA_LM_HEAD], NULL, pdt, 1, C, Vp));
    }
    return fsdp_unit_post_forward(m->root);
}

static fsdp_status decode(llama_model *m, const int *tokens, int n, int pos, const float **logits);

fsdp_status llama_decode(void *impl, const int *tokens, int n, int pos, const float **logits) {
    llama_model *m = impl;
    if (m == NULL || tokens == NULL || logits == NULL)
        return FSDP_ERR(FSDP_EINVAL, "model, tokens and logits must not be NULL");
    const int was = fsdp_engine_no_backward(m->eng); /* as a forward without targets */
    FSDP_TRY(fsdp_engine_set_no_backward(m->eng, 1));
    fsdp_status s = decode(m, tokens, n, pos, logits);
    fsdp_engine_set_no_backward(m->eng, was);
    return s;
}

static fsdp_status decode(llama_model *m, const int *tokens, int n, int pos, const float **logits) {
    const fsdp_model_config *c = &m->cfg;
    const int Tmax = c->max_seq_len;
    if (n < 1 || pos < 0 || pos > Tmax - n)
        return FSDP_ERR(FSDP_EINVAL,
                        "decode: %d tokens at position %d: need n >= 1 and pos + n <= max_seq_len (%d)", n,
                        pos, Tmax);
    if (pos != 0 && pos != m->kv_len)
        return FSDP_ERR(FSDP_EINVAL, "decode: position %d but %d positions are cached (pass 0 to start over)",
                        pos, m->kv_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, tokens[i],
                            c->vocab_size);
    m->pending_backward = 0; /* as a new forward does */
    if (!m->kv) {
        size_t kvb, decb;
        if (!fsdp_mul_ok(m->d.L * 2 * (size_t)Tmax * m->d.KV, sizeof(float), &kvb) ||
            !fsdp_mul_ok(decode_floats(&m->d), sizeof(float), &decb))
            return FSDP_ERR(FSDP_EINVAL, "the KV cache for max_seq_len %d overflows size_t", Tmax);
        FSDP_TRY(fsdp_mem_alloc((void **)&m->kv, kvb, FSDP_MEM_ACTIVATION));
        fsdp_status st = fsdp_mem_alloc((void **)&m->dec, decb, FSDP_MEM_ACTIVATION);
        if (st != FSDP_OK) {
            fsdp_mem_free(m->kv);
            m->kv = NULL;
            return st;
        }
    }
    m->logits_valid = 0;
    m->kv_len = pos; /* a failure below leaves the cache at the positions that were complete */
    const int nthr = omp_get_max_threads();
    float *att = NULL, *out = m->dec + (decode_floats(&m->d) - m->d.Vp);
    FSDP_TRY(fsdp_mem_alloc((void **)&att, (size_t)nthr * (size_t)Tmax * sizeof(float), FSDP_MEM_ACTIVATION));
    fsdp_status st = FSDP_OK;
    for (int i0 = 0; i0 < n && st == FSDP_OK; i0 += DEC_ROWS) {
        const int k = n - i0 < DEC_ROWS ? n - i0 : DEC_ROWS;
        st = decode_chunk(m, tokens + i0, k, pos + i0, att, nthr, i0 + k == n, out);
        if (st == FSDP_OK) m->kv_len = pos + i0 + k;
    }
    fsdp_mem_free(att);
    FSDP_TRY(st);
    *logits = out;
    return FSDP_OK;
}
