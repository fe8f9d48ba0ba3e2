/* fields.c — the numeric fields of fsdp_model_config as data (include/fsdp_model.h): the one list the
 * diff, the families' default checks, the trainer's flags and manifest keys, and the copies between
 * the trainer's settings and a config are made from. */
#include "fsdp_model.h"

#include <stddef.h>
#include <string.h>

static const char *const llama_only[] = {"llama", NULL};

#define I(m) FSDP_FIELD_INT, offsetof(fsdp_model_config, m)
#define D(m) FSDP_FIELD_DOUBLE, offsetof(fsdp_model_config, m)
static const fsdp_model_field fields[] = {
    {"n_layer", I(n_layer), "layers", 1, FSDP_FIELD_SET, NULL},
    {"n_embd", I(n_embd), "width", 1, FSDP_FIELD_SET, NULL},
    {"n_head", I(n_head), "heads", 1, FSDP_FIELD_SET, NULL},
    {"n_kv_head", I(n_kv_head), "kv-heads", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"head_dim", I(head_dim), "head-dim", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"intermediate", I(intermediate), "intermediate", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"vocab_size", I(vocab_size), "vocab", 1, FSDP_FIELD_SET, NULL},
    {"padded_vocab_size", I(padded_vocab_size), NULL, 1, FSDP_FIELD_SET, NULL},
    {"max_seq_len", I(max_seq_len), "max-seq-len", 1, FSDP_FIELD_SET, NULL},
    {"tie_embeddings", I(tie_embeddings), "tie-embeddings", 1, FSDP_FIELD_NEG_DEFAULT, NULL},
    {"qkv_bias", I(qkv_bias), "qkv-bias", 1, FSDP_FIELD_ZERO_DEFAULT, llama_only},
    {"qk_norm", I(qk_norm), "qk-norm", 1, FSDP_FIELD_ZERO_DEFAULT, llama_only},
    {"norm_eps", D(norm_eps), "norm-eps", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"rope_theta", D(rope_theta), "rope-theta", 1, FSDP_FIELD_ZERO_DEFAULT, llama_only},
    {"rope_scaling", I(rope_scaling), "rope-scaling", 1, FSDP_FIELD_ZERO_DEFAULT, llama_only},
    {"rope_factor", D(rope_factor), "rope-factor", 1, FSDP_FIELD_ZERO_DEFAULT, llama_only},
    {"rope_low_freq_factor", D(rope_low_freq_factor), "rope-low-freq-factor", 1, FSDP_FIELD_ZERO_DEFAULT,
     llama_only},
    {"rope_high_freq_factor", D(rope_high_freq_factor), "rope-high-freq-factor", 1, FSDP_FIELD_ZERO_DEFAULT,
     llama_only},
    {"rope_original_max_pos", I(rope_original_max_pos), "rope-original-max-pos", 1, FSDP_FIELD_ZERO_DEFAULT,
     llama_only},
    {"recompute", I(recompute), "recompute", 0, FSDP_FIELD_SET, NULL},
    /* LoRA: not in a Hugging Face config.json (hf.c leaves the lora_ fields to the flags) */
    {"lora_rank", I(lora_rank), "lora-rank", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"lora_alpha", D(lora_alpha), "lora-alpha", 1, FSDP_FIELD_ZERO_DEFAULT, NULL},
    {"lora_targets", I(lora_targets), NULL, 1, FSDP_FIELD_ZERO_DEFAULT, NULL}, /* --lora-targets */
};
#undef I
#undef D
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

const fsdp_model_field *fsdp_model_fields(int *n) {
    if (n) *n = N_FIELDS;
    return fields;
}

const fsdp_model_field *fsdp_model_field_find(const char *name) {
    for (int i = 0; name && i < N_FIELDS; i++)
        if (!strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

double fsdp_model_field_get(const fsdp_model_config *c, const fsdp_model_field *f) {
    const char *p = (const char *)c + f->offset;
    if (f->type == FSDP_FIELD_DOUBLE) {
        double v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    int v;
    memcpy(&v, p, sizeof v);
    return v;
}

void fsdp_model_field_set(fsdp_model_config *c, const fsdp_model_field *f, double v) {
    char *p = (char *)c + f->offset;
    if (f->type == FSDP_FIELD_DOUBLE) {
        memcpy(p, &v, sizeof v);
    } else {
        int i = (int)v;
        memcpy(p, &i, sizeof i);
    }
}

int fsdp_model_field_used_by(const fsdp_model_field *f, const char *family) {
    if (!f->families) return 1;
    for (const char *const *s = f->families; *s; s++)
        if (family && !strcmp(*s, family)) return 1;
    return 0;
}
