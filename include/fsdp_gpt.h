/* fsdp_gpt.h — installed beside fsdp.h: a GPT-2 model on FSDP units, so a C program can train GPT-2
 * with libfsdp alone (no trainer): one unit per transformer block plus a root unit holding the token
 * and position embeddings and the final LayerNorm (the LM head is tied to the token embedding, so the
 * tie lives inside the root unit). Forward and backward are hand-written (llm.c style) around the unit
 * hooks; parameter gradients go straight into each unit's fp32 main_grad. docs/MODEL.md describes the
 * model; tests/core/install_gpt.c is a complete program built against the installed headers.
 *
 * Use (errors left out):
 *   gpt_config gc = gpt_config_default();            // GPT-2 124M shape; edit, then validate
 *   gpt_model_t *m; gpt_init(&m, engine, &gc);        // registers units "root", "h0".."h<L-1>"
 *   fsdp_engine_init_params(engine);                  // or fsdp_unit_load_tensor per tensor
 *   fsdp_engine_begin_step(engine, 1); fsdp_engine_begin_micro(engine, 0);
 *   float loss; gpt_forward(m, tokens, targets, B, T, &loss);   // this rank's mean loss
 *   gpt_backward(m, 1.0f);                            // grads reduced into the sharded gradients
 *   fsdp_engine_clip_grad_norm(...); fsdp_engine_adamw_step(...);
 *
 * Precision follows the engine: compute_dtype F32 is the reference mode (f32 parameters and GEMMs);
 * BF16 is mixed mode (bf16 parameters and GEMM inputs; fp32 master weights, main_grad, activations,
 * LayerNorm statistics, softmax and loss).
 *
 * Hook order per step (the shard layer checks it): root.pre_forward, then per block
 * pre_forward/post_forward, then the final LN and LM head, root.post_forward (the root keeps its
 * parameters: reshard_after_forward = 0). Backward: root.pre_backward (loss, the LM head's input
 * gradient, final-LN grads), blocks in reverse (pre_backward, [recompute: pre_forward/post_forward],
 * grads, post_backward), then the LM head's weight gradient (deferred to here: across hosts the
 * links have nothing to carry while the LM head computes) and the embedding backward into the root's
 * main_grad (wte's second use accumulates by the first-touch flag), and root.post_backward.
 */
#ifndef FSDP_GPT_H
#define FSDP_GPT_H

#include "fsdp.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int version;           /* = 1 */
    int n_layer;           /* L, >= 1 */
    int n_embd;            /* C, multiple of n_head */
    int n_head;            /* NH */
    int vocab_size;        /* V: real tokens; the loss is over these logit columns only */
    int padded_vocab_size; /* Vp >= V: rows of wte and logit columns (0: V rounded up to 128) */
    int max_seq_len;       /* T_max: rows of wpe; forward's T <= T_max */
    int recompute;         /* 1: keep only block inputs; recompute each block's forward in its backward */
    /* LoRA adapters (0: none; then every other tensor is frozen): rank, alpha (0: 2 x rank) and the
     * projections (FSDP_LORA_C_ATTN, _ATTN_PROJ, _C_FC, _MLP_PROJ of include/fsdp_model.h; 0: all four).
     * Each gets lora_a_<p> (rank, in) and lora_b_<p> (out, rank) after the block's other tensors, p one of
     * c_attn, attn_proj, c_fc, mlp_proj. */
    int lora_rank;
    double lora_alpha;
    int lora_targets;
} gpt_config;

/* GPT-2 124M: L 12, C 768, NH 12, V 50257, Vp 50304, T_max 1024, no recompute. */
gpt_config gpt_config_default(void);
/* FSDP_EINVAL naming the bad field and what it must be. padded_vocab_size 0 is valid and means V
 * rounded up to a multiple of 128 (gpt_init and the size functions resolve it; gpt_get_config shows it). */
fsdp_status gpt_config_validate(const gpt_config *cfg);
/* Number of distinct parameters (the tied LM head counted once, padded vocab rows included).
 * Both size functions expect a valid config (0 for an invalid one). */
size_t gpt_num_params(const gpt_config *cfg);
/* Activation bytes gpt_forward/gpt_backward allocate for a (B, T) batch: what the memory plan needs. */
size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T);

/* Bytes the kernels keep in category other during training steps on (B, T) batches with this compute
 * dtype: the GEMMs' grow-only operand copies (mixed mode on bf16 GEMMs: bf16 copies of the activation
 * operands, B*T*max(4C, Vp) + B*T*4C elements of 2 bytes, on the bf16-via-f32 fallback path also fp32
 * copies of both operands and the bias; mixed mode on the f32-compute path: the widened weight rows,
 * at most 32 MiB, a B*T x rows fp32 buffer when the LM head is widened in blocks, and a 4C-float bias)
 * plus the largest short-lived buffer that coexists with them (softmax-CE
 * row losses, B*T doubles; LayerNorm parameters widened to fp32, 2*C floats), and oneDNN's own
 * scratchpad, whose size oneDNN picks per GEMM shape and CPU ISA: each GEMM is set up dry on this
 * machine's path to learn it. Exact from the second step on (the workspace reaches its size in the
 * first backward). May initialise oneDNN and resolve the mixed-precision GEMM
 * path (a probe, under auto); allocates nothing tracked. 0 for an invalid config or B, T < 1. */
size_t gpt_other_bytes(const gpt_config *cfg, int B, int T, fsdp_dtype compute);

/* The units gpt_init registers, as data: the memory plan's input AND gpt_init's own source, so the
 * layout a plan predicts is by construction the layout the model builds. units[0] is "root" (its
 * config has reshard_after_forward 0), units[l+1] is "h<l>" (cfg NULL: the engine's default); every
 * entry holds exactly the name, specs, n_specs and cfg fsdp_engine_add_unit gets. Plain heap memory
 * (not tracked: it must not show in the figures it predicts); the struct may be copied, the pointers
 * stay valid until gpt_units_free. */
typedef struct {
    int n_units;             /* L + 1 */
    fsdp_plan_unit *units;   /* (L + 1) */
    fsdp_tensor_spec *root;  /* (GPT_ROOT_NTENSORS) root's specs, indexed by GPT_WTE... */
    fsdp_tensor_spec *block; /* (GPT_BLOCK_NTENSORS + LoRA's) every block's specs, indexed by GPT_LN1_W... */
    int n_block;             /* block specs: GPT_BLOCK_NTENSORS, plus two per LoRA-targeted projection */
    fsdp_unit_config *root_cfg;
    char (*names)[16]; /* (L + 1) unit names */
} gpt_units;

/* FSDP_EINVAL for an invalid cfg (gpt_config_validate), FSDP_ENOMEM; *out is zeroed on failure. */
fsdp_status gpt_units_init(gpt_units *out, const gpt_config *cfg);
void gpt_units_free(gpt_units *u); /* zeroes *u; NULL or a zeroed struct is a no-op */

/* Tensor indices inside the units (fsdp_unit_param / fsdp_unit_main_grad / load / gather). Names are
 * the ones in comments; tools/gpt2_reference.py writes the same names. Linear weights are (out, in). */
enum {
    GPT_WTE = 0, /* "wte"     (Vp, C)    token embedding, also the LM head */
    GPT_WPE,     /* "wpe"     (T_max, C) position embedding */
    GPT_LNF_W,   /* "lnf_w"   (C) */
    GPT_LNF_B,   /* "lnf_b"   (C) */
    GPT_LM_HEAD, /* "lm_head" alias of wte: the LM head's use of the tied weight */
    GPT_ROOT_NTENSORS
};
enum {
    GPT_LN1_W = 0, /* "ln1_w"     (C) */
    GPT_LN1_B,     /* "ln1_b"     (C) */
    GPT_QKV_W,     /* "qkv_w"     (3C, C): rows q | k | v */
    GPT_QKV_B,     /* "qkv_b"     (3C) */
    GPT_ATTPROJ_W, /* "attproj_w" (C, C) */
    GPT_ATTPROJ_B, /* "attproj_b" (C) */
    GPT_LN2_W,     /* "ln2_w"     (C) */
    GPT_LN2_B,     /* "ln2_b"     (C) */
    GPT_FC_W,      /* "fc_w"      (4C, C) */
    GPT_FC_B,      /* "fc_b"      (4C) */
    GPT_FCPROJ_W,  /* "fcproj_w"  (C, 4C) */
    GPT_FCPROJ_B,  /* "fcproj_b"  (C) */
    GPT_BLOCK_NTENSORS
};

typedef struct gpt_model gpt_model_t;

/* Validates cfg and registers the model's units on eng: "root" (unit config reshard_after_forward 0)
 * then "h0".."h<L-1>" (the engine's default unit config). Parameters are not initialised: call
 * fsdp_engine_init_params or load them. Init specs: normal(0.02) for wte, wpe, qkv_w, fc_w;
 * normal(0.02/sqrt(2L)) for the residual projections attproj_w, fcproj_w; LayerNorm weights 1;
 * biases 0. Biases and LayerNorm parameters are no_decay. Activations are allocated on first use. */
fsdp_status gpt_init(gpt_model_t **out, fsdp_engine_t *eng, const gpt_config *cfg);
/* Frees the model's activations; the units belong to the engine. NULL is a no-op. */
void gpt_free(gpt_model_t *m);

const gpt_config *gpt_get_config(const gpt_model_t *m);
fsdp_unit_t *gpt_root_unit(gpt_model_t *m);
fsdp_unit_t *gpt_block_unit(gpt_model_t *m, int layer); /* NULL if layer is out of range */
/* Switches activation recompute on or off for the next forward (not between forward and backward). */
fsdp_status gpt_set_recompute(gpt_model_t *m, int on);

/* Forward over tokens int32 [B,T] (each in [0, V)), 1 <= T <= T_max. targets int32 [B,T] in [0, V) or
 * -100 (FSDP_IGNORE_INDEX of fsdp_model.h: that position does not count), or NULL (inference: no loss,
 * and no backward may follow). *loss (may be NULL): mean cross-entropy over this call's counted
 * positions (0 when none count) — this rank's micro-batch only; average across ranks yourself if you
 * want the global figure. Packed documents (document ids) go through fsdp_model.h's batch. Tokens and targets
 * are copied. Activations grow to fit (category activation). Bad arguments are refused before any hook runs;
 * a failure after that (a collective, memory) leaves units mid-lifecycle, so the step is lost: free the model
 * and engine (or end the job). */
fsdp_status gpt_forward(gpt_model_t *m, const int *tokens, const int *targets, int B, int T, float *loss);

/* Logits float [B,T,Vp] of the last forward (columns >= V are the padded vocab: never sample them).
 * Valid until the next gpt_forward or gpt_backward (backward turns them into dlogits in place). */
fsdp_status gpt_logits(const gpt_model_t *m, const float **logits, int *B, int *T, int *Vp);

/* Backward of the last forward (which must have had targets). Parameter gradients of
 *   loss_scale * mean-over-this-call's-counted-positions loss
 * go into each unit's main_grad; each unit's post_backward reduces them (the engine averages over
 * ranks and micro-batches). loss_scale 1 is the usual; ranks with unequal numbers of positions n_r
 * pass world * n_r / sum(n) so the engine's average is the mean over all positions. */
fsdp_status gpt_backward(gpt_model_t *m, float loss_scale);

/* After inference-only forwards (targets NULL): frees the parameters the root keeps unsharded. */
fsdp_status gpt_end_eval(gpt_model_t *m);

/* Incremental inference with a key/value cache (one sequence): runs tokens[0..n) at positions
 * pos..pos+n-1 against the cached keys and values of positions 0..pos-1, appends theirs, and points
 * *logits at the last new position's logits (float [Vp], valid until the next call). pos 0 starts a new
 * sequence; otherwise pos must equal the number of positions cached. Per token the work is the GEMVs of
 * the weights plus attention over pos keys: linear in the context, where gpt_forward over the whole
 * context is quadratic. Same hooks as an inference gpt_forward (collective on every rank; finish with
 * gpt_end_eval); the cache (2 * L * T_max * C floats, category activation) lives until gpt_free. Like a
 * new gpt_forward, it abandons a training forward still waiting for its backward. The logits equal
 * gpt_forward's on the same context up to float rounding (other summation orders in attention). */
fsdp_status gpt_decode(gpt_model_t *m, const int *tokens, int n, int pos, const float **logits);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_GPT_H */
