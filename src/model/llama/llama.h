/* llama.h — the Llama family (LlamaForCausalLM and its near relatives Qwen2, Qwen3, Mistral, SmolLM2)
 * as a table of include/fsdp_model.h; code above the model layer reaches it through the registry.
 *
 * Units: "root" holds embed_tokens (Vp, C), norm (C) and lm_head (Vp, C), an alias of embed_tokens when
 * tie_embeddings; "h<l>" holds, in this order, input_layernorm (C), qkv_w (QKV, C) with rows q | k | v
 * (QKV = (NH + 2 NKV) hd), qkv_b (QKV, qkv_bias only), q_norm, k_norm (hd, qk_norm only), o_w (C, NH hd),
 * post_attn_layernorm (C), gate_up_w (2I, C) with rows gate | up, down_w (C, I). Linear weights are
 * (out, in), as Hugging Face stores them. llama_block_tensor gives a tensor's index in a block unit.
 */
#ifndef FSDP_MODEL_LLAMA_H
#define FSDP_MODEL_LLAMA_H

#include "fsdp_model.h"

extern const fsdp_model_family fsdp_llama_family;

enum { LLAMA_EMBED = 0, LLAMA_NORM, LLAMA_LM_HEAD, LLAMA_ROOT_NTENSORS };
enum {
    LLAMA_IN_NORM = 0, /* "input_layernorm" */
    LLAMA_QKV_W,       /* "qkv_w" */
    LLAMA_QKV_B,       /* "qkv_b" */
    LLAMA_Q_NORM,      /* "q_norm" */
    LLAMA_K_NORM,      /* "k_norm" */
    LLAMA_O_W,         /* "o_w" */
    LLAMA_POST_NORM,   /* "post_attn_layernorm" */
    LLAMA_GATE_UP_W,   /* "gate_up_w" */
    LLAMA_DOWN_W,      /* "down_w" */
    /* LoRA adapters (lora_rank > 0, the targeted projections only): A then B of q, k, v, o, gate, up,
     * down, named "lora_a_q", "lora_b_q", ... */
    LLAMA_LORA_A0,
    LLAMA_BLOCK_KINDS = LLAMA_LORA_A0 + 14
};
#define LLAMA_LORA_PROJ 7 /* q, k, v, o, gate, up, down: FSDP_LORA_Q << p */
static inline int llama_lora_a(int p) { return LLAMA_LORA_A0 + 2 * p; }
static inline int llama_lora_b(int p) { return LLAMA_LORA_A0 + 2 * p + 1; }

/* Index of tensor kind k (LLAMA_IN_NORM...) in a block unit of config c, or -1 when c has no such
 * tensor (qkv_b without qkv_bias, q_norm/k_norm without qk_norm). */
int llama_block_tensor(const fsdp_model_config *c, int k);

/* The config with every 0 ("the default") resolved: n_kv_head, head_dim, intermediate,
 * padded_vocab_size, hf_architecture. c must be valid. */
fsdp_model_config llama_resolve(const fsdp_model_config *c);

/* The Hugging Face architectures of the family, NULL-terminated: LlamaForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM, MistralForCausalLM, in that order (llama_family.c indexes them). */
extern const char *const llama_hf_archs[];

/* The checks of the family's validate (llama_family.c) apart from the family pointer: version, shapes,
 * RoPE settings, and the architecture's fixed features. */
fsdp_status llama_check(const fsdp_model_config *c);

/* llama.c's side of the table (include/fsdp_model.h documents each entry); llama_family.c holds the
 * table, the defaults and the Hugging Face side, so that llama.c calls nothing there. */
size_t llama_num_params(const fsdp_model_config *cfg);
double llama_flops_per_token(const fsdp_model_config *cfg, int T);
size_t llama_activation_bytes(const fsdp_model_config *cfg, int B, int T, int threads);
size_t llama_other_bytes(const fsdp_model_config *cfg, int B, int T, fsdp_dtype compute, const char *freeze);
fsdp_status llama_units(fsdp_model_units *out, const fsdp_model_config *cfg);
fsdp_status llama_init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *cfg);

#endif
