/* fsdp_model.h — the model-family interface: everything the trainer, the memory plan, checkpoints and
 * the Hugging Face import/export need from a model, as one table per family. GPT-2 (src/model/gpt2/)
 * is the first family; the Llama family (src/model/llama/) the second. Code above the model layer
 * reaches a model only through this header, so a new family is a folder plus one line in the
 * registry (src/model/model.c).
 *
 * Use (errors left out):
 *   fsdp_model_config mc = fsdp_model_config_default("gpt2");  // edit the shape, then
 *   fsdp_model_config_validate(&mc);                            // names the bad field
 *   fsdp_model_t *m; fsdp_model_init(&m, engine, &mc);          // registers the family's units
 *   fsdp_model_batch b = {tokens, targets, NULL, B, T};
 *   float loss; fsdp_model_forward(m, &b, &loss); fsdp_model_backward(m, 1.0f);
 *
 * One config struct serves every family: the fields a family does not use must be left at their
 * defaults (validate refuses anything else, naming the field), so a config read back from a
 * checkpoint manifest or a config.json means exactly one model.
 */
#ifndef FSDP_MODEL_H
#define FSDP_MODEL_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
typedef struct fsdp_model_family fsdp_model_family;

/* FSDP_IGNORE_INDEX (a target not counted in the loss) is defined in fsdp.h. */

#define FSDP_MODEL_CONFIG_VERSION 1

typedef enum { FSDP_ROPE_SCALING_NONE = 0, FSDP_ROPE_SCALING_LLAMA3 } fsdp_rope_scaling_type;

/* LoRA targets: the block projections of the llama family, by PEFT's module names (q_proj, ...). */
enum {
    FSDP_LORA_Q = 1 << 0,
    FSDP_LORA_K = 1 << 1,
    FSDP_LORA_V = 1 << 2,
    FSDP_LORA_O = 1 << 3,
    FSDP_LORA_GATE = 1 << 4,
    FSDP_LORA_UP = 1 << 5,
    FSDP_LORA_DOWN = 1 << 6,
    FSDP_LORA_ALL = (1 << 7) - 1,
    /* GPT-2's projections (PEFT's attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) */
    FSDP_LORA_C_ATTN = 1 << 7,
    FSDP_LORA_ATTN_PROJ = 1 << 8,
    FSDP_LORA_C_FC = 1 << 9,
    FSDP_LORA_MLP_PROJ = 1 << 10,
    FSDP_LORA_GPT2_ALL = 0xf << 7
};

typedef struct {
    int version;                     /* FSDP_MODEL_CONFIG_VERSION */
    const fsdp_model_family *family; /* never NULL in a valid config */
    int n_layer;                     /* L >= 1 */
    int n_embd;                      /* C: the residual stream's width */
    int n_head;                      /* query heads */
    int n_kv_head;                   /* key/value heads (grouped-query attention); 0: = n_head */
    int head_dim;                    /* 0: n_embd / n_head */
    int intermediate;                /* MLP hidden width; 0: the family's default (GPT-2: 4C) */
    int vocab_size;                  /* V: real tokens; the loss is over these logit columns only */
    int padded_vocab_size;           /* Vp >= V rows of the embedding; 0: V rounded up to 128 */
    int max_seq_len;                 /* longest sequence (GPT-2: rows of wpe) */
    int tie_embeddings;              /* 1: the LM head is the token embedding (one tensor) */
    int qkv_bias;                    /* 1: q, k, v projections have biases (Qwen2) */
    int qk_norm;                     /* 1: per-head RMSNorm of q and k before RoPE (Qwen3) */
    double norm_eps;                 /* LayerNorm / RMSNorm epsilon */
    double rope_theta;               /* RoPE base (0 for families without RoPE) */
    int rope_scaling;                /* fsdp_rope_scaling_type */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos; /* llama3 scaling: original_max_position_embeddings */
    int recompute;             /* 1: keep only block inputs, recompute each block in backward */
    /* LoRA: rank r of the adapters (0: none). With r > 0 every other tensor is frozen
     * and each targeted projection W (out, in) gets A (r, in), Kaiming-uniform as PEFT initialises it,
     * and B (out, r), zero: y = x W^T + (alpha / r) (x A^T) B^T. */
    int lora_rank;
    double lora_alpha;        /* 0: 2 r */
    int lora_targets;         /* FSDP_LORA_* bits; 0: every projection of the blocks */
    char hf_architecture[48]; /* the Hugging Face class this shape came from or exports as, e.g.
                                 "Qwen2ForCausalLM"; "" = the family's default */
} fsdp_model_config;

/* One forward's input. tokens int32 [B,T] in [0, V). targets int32 [B,T] in [0, V) or FSDP_IGNORE_INDEX,
 * or NULL (inference: no loss, no backward). doc int32 [B,T] document ids or NULL: a position attends
 * only to positions t2 <= t of its own row with the same id, and positions restart at 0 where the id
 * changes (packed sequences). The loss is the mean over this call's counted targets. */
typedef struct {
    const int32_t *tokens;
    const int32_t *targets;
    const int32_t *doc;
    int B, T;
} fsdp_model_batch;

/* The units a model registers, as data: the memory plan's input and init's own source. */
typedef struct {
    int n_units;
    fsdp_plan_unit *units;        /* (n_units) exactly what fsdp_engine_add_unit gets */
    void *owner;                  /* the family's storage behind the pointers */
    void (*release)(void *owner); /* frees owner (fsdp_model_units_free calls it) */
} fsdp_model_units;

/* One tensor of a Hugging Face checkpoint and where it lives in the model: rows [row0, row0 + rows) of
 * tensor `tensor` in unit `unit` (a fused tensor such as q|k|v or gate|up is filled by several
 * entries). The file's tensor is rows x cols (1-D when cols == 0), or cols x rows when transpose
 * (GPT-2's Conv1D). optional: may be absent. tied: the file may hold it (optional), and then it must
 * equal the model tensor's rows (GPT-2's lm_head.weight, a tied Llama head); export leaves it out. */
typedef struct {
    char hf_name[96];
    char unit[16];
    char tensor[24];
    int64_t row0, rows, cols;
    int transpose, optional, tied;
} fsdp_hf_tensor;

typedef struct {
    int n;
    fsdp_hf_tensor *t;       /* (n) */
    const char *const *skip; /* NULL-terminated name suffixes a file may hold that are not parameters */
    const char *alt_prefix;  /* a prefix the file's names may carry (GPT-2: "transformer."), or NULL */
} fsdp_hf_map;

struct fsdp_model_family {
    const char *name;                    /* "gpt2", "llama" */
    const char *const *hf_architectures; /* NULL-terminated config.json "architectures" it loads */
    fsdp_status (*config_default)(fsdp_model_config *c);
    fsdp_status (*validate)(const fsdp_model_config *c);
    size_t (*num_params)(const fsdp_model_config *c);
    /* Forward + backward FLOPs per token of a T-long sequence: 6 x (matmul weights) + attention. */
    double (*flops_per_token)(const fsdp_model_config *c, int T);
    fsdp_status (*units)(fsdp_model_units *out, const fsdp_model_config *c);
    /* Bytes in category activation for (B, T) batches, including attention backward's scratch on
     * `threads` OpenMP threads; and in category other (the GEMM workspace, see fsdp_gpt.h): freeze, the
     * engine's --freeze globs (or NULL), drops the weight-gradient GEMM of a weight frozen in every
     * block (as LoRA's base), which never runs. */
    size_t (*activation_bytes)(const fsdp_model_config *c, int B, int T, int threads);
    size_t (*other_bytes)(const fsdp_model_config *c, int B, int T, fsdp_dtype compute, const char *freeze);
    fsdp_status (*init)(void **impl, fsdp_engine_t *eng, const fsdp_model_config *c);
    void (*free)(void *impl);
    fsdp_status (*forward)(void *impl, const fsdp_model_batch *b, float *loss);
    fsdp_status (*backward)(void *impl, float loss_scale);
    fsdp_status (*logits)(const void *impl, const float **logits, int *B, int *T, int *Vp);
    fsdp_status (*end_eval)(void *impl);
    fsdp_status (*decode)(void *impl, const int *tokens, int n, int pos, const float **logits);
    fsdp_status (*set_recompute)(void *impl, int on);
    fsdp_unit_t *(*unit)(void *impl, int i); /* unit i: 0 the root, 1..L the blocks; NULL outside */
    /* Hugging Face: config.json (j, read from `path` for messages) to a config, refusing by name what
     * the family cannot represent; a config to config.json's fields (added to j); the tensor map. */
    fsdp_status (*hf_read_config)(const struct cJSON *j, const char *path, fsdp_model_config *c);
    fsdp_status (*hf_write_config)(const fsdp_model_config *c, struct cJSON *j);
    fsdp_status (*hf_map)(const fsdp_model_config *c, fsdp_hf_map *out);
};

/* ---- the registry */
const fsdp_model_family *fsdp_model_family_find(const char *name); /* NULL if unknown */
/* The family whose hf_architectures holds config.json's architecture (or whose name is its model_type). */
const fsdp_model_family *fsdp_model_family_for_hf(const char *architecture, const char *model_type);
/* "gpt2, llama": for messages and --help. */
const char *fsdp_model_family_names(void);
/* NULL-terminated lists from the registry: the families' names in registry order; and "auto" followed
 * by every family's Hugging Face architectures in registry order (what fsdp-train's --model and
 * --hf-architecture take). Static storage, built once. */
const char *const *fsdp_model_family_list(void);
const char *const *fsdp_model_hf_architecture_list(void);

/* ---- configs */
/* The family's default shape; FSDP_EINVAL for an unknown family name. */
fsdp_status fsdp_model_config_init(fsdp_model_config *c, const char *family);
fsdp_status fsdp_model_config_validate(const fsdp_model_config *c);
size_t fsdp_model_num_params(const fsdp_model_config *c);
double fsdp_model_flops_per_token(const fsdp_model_config *c, int T);
/* The first field in which a and b differ ("n_head"), or NULL when they describe the same model
 * (recompute is not part of the model). */
const char *fsdp_model_config_diff(const fsdp_model_config *a, const fsdp_model_config *b);

/* ---- the config's fields, as data (src/model/fields.c): one row per numeric field of
 * fsdp_model_config drives the diff, the families' "leave it at its default" checks, the trainer's flag
 * for it, the checkpoint manifest's key and the copies between the trainer's settings and a config.
 * Adding a field is its struct member, one row here, and the family code that uses it. */
typedef enum { FSDP_FIELD_INT = 0, FSDP_FIELD_DOUBLE } fsdp_model_field_type;
typedef enum {
    FSDP_FIELD_SET = 0,      /* always set by the trainer's flag */
    FSDP_FIELD_ZERO_DEFAULT, /* 0 (or a negative flag value) means the family's default */
    FSDP_FIELD_NEG_DEFAULT   /* a negative flag value means the family's default (0 is a value) */
} fsdp_model_field_unset;
typedef struct {
    const char *name;             /* the member ("qk_norm"), as the diff names it */
    fsdp_model_field_type type;   /* int or double member */
    size_t offset;                /* offsetof(fsdp_model_config, member) */
    const char *flag;             /* fsdp-train's flag and manifest key ("qk-norm"), NULL: none */
    int identity;                 /* part of the model (the diff); 0: a run setting (recompute) */
    fsdp_model_field_unset unset; /* which flag values leave the family's default */
    const char *const *families;  /* the families that use it (NULL-terminated); NULL: every family */
} fsdp_model_field;

/* The table (n rows into *n), and one row by member name (NULL if unknown). */
const fsdp_model_field *fsdp_model_fields(int *n);
const fsdp_model_field *fsdp_model_field_find(const char *name);
/* A field's value as a double (ints convert exactly), and set from one (rounded toward zero for ints). */
double fsdp_model_field_get(const fsdp_model_config *c, const fsdp_model_field *f);
void fsdp_model_field_set(fsdp_model_config *c, const fsdp_model_field *f, double v);
/* Whether family `family` uses field f (a field it does not use must keep the family's default). */
int fsdp_model_field_used_by(const fsdp_model_field *f, const char *family);
/* The model's identity as JSON, owned by the library (the checkpoint manifest's "model-config"):
 * to_json adds "family", every identity field of the table by name and "hf_architecture" to obj;
 * from_json reads them back (a field absent: the family's default), refusing an unknown family, a
 * member of the wrong type and an invalid config, naming `what` (the file) and the member. */
fsdp_status fsdp_model_config_to_json(const fsdp_model_config *c, struct cJSON *obj);
fsdp_status fsdp_model_config_from_json(const struct cJSON *obj, const char *what, fsdp_model_config *c);

fsdp_status fsdp_model_units_init(fsdp_model_units *out, const fsdp_model_config *c);
void fsdp_model_units_free(fsdp_model_units *u); /* zeroes; NULL or zeroed is a no-op */
size_t fsdp_model_activation_bytes(const fsdp_model_config *c, int B, int T, int threads);
size_t fsdp_model_other_bytes(const fsdp_model_config *c, int B, int T, fsdp_dtype compute,
                              const char *freeze);

fsdp_status fsdp_model_hf_map(const fsdp_model_config *c, fsdp_hf_map *out);
void fsdp_hf_map_free(fsdp_hf_map *m); /* zeroes; NULL or zeroed is a no-op */

/* ---- a model on an engine */
typedef struct fsdp_model fsdp_model_t;
fsdp_status fsdp_model_init(fsdp_model_t **out, fsdp_engine_t *eng, const fsdp_model_config *c);
void fsdp_model_free(fsdp_model_t *m); /* NULL is a no-op */
const fsdp_model_config *fsdp_model_get_config(const fsdp_model_t *m);
fsdp_status fsdp_model_forward(fsdp_model_t *m, const fsdp_model_batch *b, float *loss);
fsdp_status fsdp_model_backward(fsdp_model_t *m, float loss_scale);
fsdp_status fsdp_model_logits(const fsdp_model_t *m, const float **logits, int *B, int *T, int *Vp);
fsdp_status fsdp_model_end_eval(fsdp_model_t *m);
fsdp_status fsdp_model_decode(fsdp_model_t *m, const int *tokens, int n, int pos, const float **logits);
fsdp_status fsdp_model_set_recompute(fsdp_model_t *m, int on);
/* The model's unit i on its engine: 0 the root (embeddings, final norm, LM head), 1..n_layer the blocks
 * "h0".."h<L-1>"; NULL for a NULL model or i out of range. */
fsdp_unit_t *fsdp_model_unit(fsdp_model_t *m, int i);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_MODEL_H */
