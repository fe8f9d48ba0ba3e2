/* llama_family.c — the Llama family's table (include/fsdp_model.h) over llama.c's model, its defaults
 * (SmolLM2-135M's shape), and its Hugging Face side: config.json to a config and back (refusing by name
 * what the model does not represent), and the tensor map from the checkpoint's names (model.layers.{i}...,
 * [out, in]) to the fused units of llama.h (q|k|v and gate|up rows). */
#include "model/decoder.h"
#include "model/llama/llama.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fsdp_status llama_validate(const fsdp_model_config *c);

enum { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3, ARCH_MISTRAL };
/* model_type of each of llama_hf_archs, in its order */
static const char *const model_types[] = {"llama", "qwen2", "qwen3", "mistral"};

static const cJSON *item(const cJSON *j, const char *key) { return cJSON_GetObjectItemCaseSensitive(j, key); }
static int is_null(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

static fsdp_status get_int(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out) {
    const cJSON *v = item(j, key);
    if (!v) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is missing", path, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not an integer in [%d, %d]", path, key, lo, hi);
    *out = (int)v->valuedouble;
    return FSDP_OK;
}
/* An optional integer: absent or null leaves *out as it is. */
static fsdp_status opt_int(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out) {
    return is_null(item(j, key)) ? FSDP_OK : get_int(j, path, key, lo, hi, out);
}
static fsdp_status opt_num(const cJSON *j, const char *path, const char *key, double *out) {
    const cJSON *v = item(j, key);
    if (is_null(v)) return FSDP_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not a finite number", path, key);
    *out = v->valuedouble;
    return FSDP_OK;
}
static fsdp_status opt_bool(const cJSON *j, const char *path, const char *key, int *out) {
    const cJSON *v = item(j, key);
    if (is_null(v)) return FSDP_OK;
    if (!cJSON_IsBool(v)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not true or false", path, key);
    *out = cJSON_IsTrue(v);
    return FSDP_OK;
}
/* A field that must be absent, null, false or 0 (a feature this model does not have). */
static fsdp_status refuse_set(const cJSON *j, const char *path, const char *key, const char *why) {
    const cJSON *v = item(j, key);
    if (is_null(v) || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)) return FSDP_OK;
    return fsdp_set_error(FSDP_EUNSUPPORTED, "%s: \"%s\" is set: %s", path, key, why);
}

/* The architecture index (llama_hf_archs) of config.json: "architectures"[0] and "model_type", which
 * must agree where both are given. */
static fsdp_status hf_arch(const cJSON *j, const char *path, int *out) {
    int arch = -1;
    const cJSON *a = item(j, "architectures");
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) >= 1) {
        const cJSON *a0 = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsString(a0))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"architectures\"[0] is not a string", path);
        for (int i = 0; llama_hf_archs[i]; i++)
            if (!strcmp(a0->valuestring, llama_hf_archs[i])) arch = i;
        if (arch < 0)
            return fsdp_set_error(
                FSDP_EUNSUPPORTED,
                "%s: \"architectures\" is \"%.60s\": the llama family loads LlamaForCausalLM, "
                "Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM",
                path, a0->valuestring);
    }
    const cJSON *mt = item(j, "model_type");
    if (!is_null(mt)) {
        int t = -1;
        if (cJSON_IsString(mt))
            for (int i = 0; llama_hf_archs[i]; i++)
                if (!strcmp(mt->valuestring, model_types[i])) t = i;
        if (t < 0)
            return fsdp_set_error(
                FSDP_EUNSUPPORTED,
                "%s: \"model_type\" is %s%.40s%s: the llama family loads llama, qwen2, qwen3 "
                "and mistral",
                path, cJSON_IsString(mt) ? "\"" : "", cJSON_IsString(mt) ? mt->valuestring : "not a string",
                cJSON_IsString(mt) ? "\"" : "");
        if (arch >= 0 && t != arch)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: \"model_type\" \"%s\" does not match \"architectures\" %s", path,
                                  model_types[t], llama_hf_archs[arch]);
        arch = t;
    }
    if (arch < 0)
        return fsdp_set_error(FSDP_EFORMAT, "%s: neither \"architectures\" nor \"model_type\" is set", path);
    *out = arch;
    return FSDP_OK;
}

/* The shape: layers, widths, heads (GQA, head_dim), vocabulary, positions, norm epsilon, the tied head. */
static fsdp_status hf_shape(const cJSON *j, const char *path, int arch, fsdp_model_config *r) {
    fsdp_status s;
    int C, NH;
    if ((s = get_int(j, path, "num_hidden_layers", 1, 100000, &r->n_layer)) ||
        (s = get_int(j, path, "hidden_size", 1, 1 << 20, &C)) ||
        (s = get_int(j, path, "num_attention_heads", 1, 4096, &NH)) ||
        (s = get_int(j, path, "intermediate_size", 1, 1 << 22, &r->intermediate)) ||
        (s = get_int(j, path, "vocab_size", 1, 1 << 30, &r->vocab_size)) ||
        (s = get_int(j, path, "max_position_embeddings", 1, 1 << 24, &r->max_seq_len)))
        return s;
    r->n_embd = C, r->n_head = NH, r->n_kv_head = NH;
    if ((s = opt_int(j, path, "num_key_value_heads", 1, NH, &r->n_kv_head))) return s;
    if (NH % r->n_kv_head)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: \"num_key_value_heads\" %d does not divide \"num_attention_heads\" %d",
                              path, r->n_kv_head, NH);
    r->head_dim = C % NH == 0 ? C / NH : 0;
    if ((s = opt_int(j, path, "head_dim", 2, FSDP_ROPE_MAX_HD, &r->head_dim))) return s;
    if (r->head_dim == 0)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: \"hidden_size\" %d is not divisible by \"num_attention_heads\" %d "
                              "and \"head_dim\" is not given",
                              path, C, NH);
    if (arch == ARCH_QWEN2 && r->head_dim * NH != C)
        return fsdp_set_error(FSDP_EUNSUPPORTED,
                              "%s: \"head_dim\" %d: Qwen2's head size is hidden_size / "
                              "num_attention_heads (%d)",
                              path, r->head_dim, C / NH);
    r->padded_vocab_size = 0; /* the trainer's: V rounded up to 128 (padded rows are 0 and never sampled) */
    r->norm_eps = 1e-6;
    if ((s = opt_num(j, path, "rms_norm_eps", &r->norm_eps)) ||
        (s = opt_bool(j, path, "tie_word_embeddings", &r->tie_embeddings)))
        return s;
    return FSDP_OK;
}

/* What the architecture's config.json may ask for that this model does not represent, refused by name:
 * another activation, biases beyond Qwen2's q/k/v, mixture-of-experts, sliding windows. */
static fsdp_status hf_refusals(const cJSON *j, const char *path, int arch) {
    fsdp_status s;
    const cJSON *act = item(j, "hidden_act");
    if (!is_null(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return fsdp_set_error(
            FSDP_EUNSUPPORTED, "%s: \"hidden_act\" is %s%.40s%s: this model's MLP is SwiGLU (silu)", path,
            cJSON_IsString(act) ? "\"" : "", cJSON_IsString(act) ? act->valuestring : "not a string",
            cJSON_IsString(act) ? "\"" : "");
    if (arch != ARCH_QWEN2 &&
        (s = refuse_set(j, path, "attention_bias",
                        arch == ARCH_QWEN3
                            ? "Qwen3's attention_bias also biases o_proj, which this model does not have"
                            : "it biases q, k, v and o_proj; only Qwen2's q/k/v biases are represented")))
        return s;
    static const char *const moe[] = {"num_experts", "num_local_experts", "num_experts_per_tok",
                                      "moe_intermediate_size", "n_routed_experts"};
    if ((s = refuse_set(j, path, "mlp_bias", "the MLP has no biases"))) return s;
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if ((s = refuse_set(j, path, moe[i], "mixture-of-experts layers are not represented"))) return s;
    if ((s = refuse_set(j, path, "use_sliding_window", "sliding-window attention is not represented")))
        return s;
    /* Qwen2/Qwen3 keep a sliding_window value that applies only with use_sliding_window (refused above). */
    if (arch != ARCH_QWEN2 && arch != ARCH_QWEN3 &&
        (s = refuse_set(j, path, "sliding_window",
                        "sliding-window attention is not represented (null only)")))
        return s;
    return FSDP_OK;
}

/* A RoPE description: its base and its scaling (type and llama3's factors). */
typedef struct {
    double theta;
    int scaling;
    double factor, low, high;
    int orig;
} rope_desc;

/* The scaling of object o (transformers 4's "rope_scaling", or transformers 5's "rope_parameters",
 * which holds the same keys): "default" or llama3's factors; any other type is refused by name. */
static fsdp_status rope_type_of(const cJSON *o, const char *path, const char *key, rope_desc *r) {
    fsdp_status s;
    const cJSON *t = item(o, "rope_type");
    if (is_null(t)) t = item(o, "type");
    if (!cJSON_IsString(t))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" has no \"rope_type\" string", path, key);
    if (!strcmp(t->valuestring, "llama3")) {
        r->scaling = FSDP_ROPE_SCALING_LLAMA3;
        if ((s = opt_num(o, path, "factor", &r->factor)) ||
            (s = opt_num(o, path, "low_freq_factor", &r->low)) ||
            (s = opt_num(o, path, "high_freq_factor", &r->high)) ||
            (s = get_int(o, path, "original_max_position_embeddings", 1, 1 << 24, &r->orig)))
            return s;
    } else if (strcmp(t->valuestring, "default") != 0) {
        return fsdp_set_error(FSDP_EUNSUPPORTED,
                              "%s: \"%s\" type \"%.40s\" is not represented (only llama3, or none)", path,
                              key, t->valuestring);
    }
    return FSDP_OK;
}

static int rope_same(const rope_desc *a, const rope_desc *b) {
    return a->theta == b->theta && a->scaling == b->scaling && a->factor == b->factor && a->low == b->low &&
           a->high == b->high && a->orig == b->orig;
}

/* RoPE in either spelling: transformers 4's top-level "rope_theta" and "rope_scaling", or transformers
 * 5's "rope_parameters" {rope_theta, rope_type, factor, ...}. A file with both must say the same in
 * both (else it is refused, naming them); neither: theta 10000, no scaling. */
static fsdp_status hf_rope(const cJSON *j, const char *path, fsdp_model_config *r) {
    fsdp_status s;
    rope_desc v4 = {.theta = 10000.0}, v5 = {.theta = 10000.0};
    const cJSON *rs = item(j, "rope_scaling"), *rp = item(j, "rope_parameters");
    const int has4 = !is_null(item(j, "rope_theta")) || !is_null(rs), has5 = !is_null(rp);
    if ((s = opt_num(j, path, "rope_theta", &v4.theta))) return s;
    if (!is_null(rs)) {
        if (!cJSON_IsObject(rs))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"rope_scaling\" is not an object or null", path);
        if ((s = rope_type_of(rs, path, "rope_scaling", &v4))) return s;
    }
    if (has5) {
        if (!cJSON_IsObject(rp))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"rope_parameters\" is not an object or null", path);
        if ((s = opt_num(rp, path, "rope_theta", &v5.theta))) return s;
        if (!is_null(item(rp, "rope_type")) || !is_null(item(rp, "type")))
            if ((s = rope_type_of(rp, path, "rope_parameters", &v5))) return s;
    }
    if (has4 && has5 && !rope_same(&v4, &v5))
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: \"rope_parameters\" (theta %g, %s) and the top-level \"rope_theta\" / "
                              "\"rope_scaling\" (theta %g, %s) describe different RoPE: which one is meant?",
                              path, v5.theta, v5.scaling ? "llama3 scaling" : "no scaling", v4.theta,
                              v4.scaling ? "llama3 scaling" : "no scaling");
    const rope_desc *d = has5 ? &v5 : &v4;
    r->rope_theta = d->theta;
    r->rope_scaling = d->scaling;
    r->rope_factor = d->factor, r->rope_low_freq_factor = d->low, r->rope_high_freq_factor = d->high;
    r->rope_original_max_pos = d->orig;
    return FSDP_OK;
}

static fsdp_status llama_hf_read_config(const cJSON *j, const char *path, fsdp_model_config *c) {
    if (j == NULL || c == NULL) return FSDP_ERR(FSDP_EINVAL, "config JSON and output must not be NULL");
    if (path == NULL) path = "config.json";
    int arch = 0;
    FSDP_TRY(hf_arch(j, path, &arch));
    fsdp_model_config r = {.version = FSDP_MODEL_CONFIG_VERSION, .family = &fsdp_llama_family};
    FSDP_TRY(hf_shape(j, path, arch, &r));
    FSDP_TRY(hf_refusals(j, path, arch));
    r.qkv_bias = arch == ARCH_QWEN2;
    r.qk_norm = arch == ARCH_QWEN3;
    FSDP_TRY(hf_rope(j, path, &r));
    snprintf(r.hf_architecture, sizeof r.hf_architecture, "%s", llama_hf_archs[arch]);
    fsdp_status s = llama_validate(&r);
    if (s != FSDP_OK) return FSDP_WRAP(FSDP_EFORMAT, "%s", path);
    *c = r;
    return FSDP_OK;
}

/* A number that transformers checks to be a float (rope_scaling's factors): a whole value is written
 * as 8.0, not 8 (cJSON's shortest form), since transformers refuses an int there. */
static int add_float(cJSON *j, const char *name, double v) {
    char buf[64];
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%.1f", v);
        return cJSON_AddRawToObject(j, name, buf) != NULL;
    }
    return cJSON_AddNumberToObject(j, name, v) != NULL;
}

static fsdp_status llama_hf_write_config(const fsdp_model_config *cfg, cJSON *j) {
    if (cfg == NULL || j == NULL) return FSDP_ERR(FSDP_EINVAL, "config and JSON must not be NULL");
    FSDP_TRY(llama_validate(cfg));
    const fsdp_model_config c = llama_resolve(cfg);
    int arch = 0;
    for (int i = 0; llama_hf_archs[i]; i++)
        if (!strcmp(c.hf_architecture, llama_hf_archs[i])) arch = i;
    cJSON *archs = cJSON_CreateArray();
    int ok = archs != NULL && cJSON_AddItemToArray(archs, cJSON_CreateString(llama_hf_archs[arch])) &&
             cJSON_AddItemToObject(j, "architectures", archs);
    if (!ok) cJSON_Delete(archs);
    ok = ok && cJSON_AddStringToObject(j, "model_type", model_types[arch]) &&
         cJSON_AddNumberToObject(j, "hidden_size", c.n_embd) &&
         cJSON_AddNumberToObject(j, "intermediate_size", c.intermediate) &&
         cJSON_AddNumberToObject(j, "num_hidden_layers", c.n_layer) &&
         cJSON_AddNumberToObject(j, "num_attention_heads", c.n_head) &&
         cJSON_AddNumberToObject(j, "num_key_value_heads", c.n_kv_head) &&
         cJSON_AddNumberToObject(j, "vocab_size", c.vocab_size) &&
         cJSON_AddNumberToObject(j, "max_position_embeddings", c.max_seq_len) &&
         cJSON_AddNumberToObject(j, "rms_norm_eps", c.norm_eps) &&
         cJSON_AddNumberToObject(j, "rope_theta", c.rope_theta) &&
         cJSON_AddBoolToObject(j, "tie_word_embeddings", c.tie_embeddings) &&
         cJSON_AddStringToObject(j, "hidden_act", "silu") &&
         cJSON_AddNumberToObject(j, "attention_dropout", 0) &&
         cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    if (ok && arch != ARCH_QWEN2) ok = cJSON_AddNumberToObject(j, "head_dim", c.head_dim) != NULL;
    if (ok && (arch == ARCH_LLAMA || arch == ARCH_QWEN3))
        ok = cJSON_AddFalseToObject(j, "attention_bias") != NULL;
    if (ok && arch == ARCH_LLAMA) ok = cJSON_AddFalseToObject(j, "mlp_bias") != NULL;
    if (ok && arch == ARCH_MISTRAL) ok = cJSON_AddNullToObject(j, "sliding_window") != NULL;
    if (ok && (arch == ARCH_QWEN2 || arch == ARCH_QWEN3))
        ok = cJSON_AddFalseToObject(j, "use_sliding_window") != NULL;
    if (ok && c.rope_scaling == FSDP_ROPE_SCALING_LLAMA3) {
        cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
        ok = rs && cJSON_AddStringToObject(rs, "rope_type", "llama3") &&
             add_float(rs, "factor", c.rope_factor) &&
             add_float(rs, "low_freq_factor", c.rope_low_freq_factor) &&
             add_float(rs, "high_freq_factor", c.rope_high_freq_factor) &&
             cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c.rope_original_max_pos);
    } else if (ok) {
        ok = cJSON_AddNullToObject(j, "rope_scaling") != NULL;
    }
    return ok ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "cannot build config.json");
}

static const char *const llama_skip[] = {"rotary_emb.inv_freq", NULL};

static fsdp_status llama_hf_map(const fsdp_model_config *cfg, fsdp_hf_map *out) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(llama_validate(cfg));
    const fsdp_model_config c = llama_resolve(cfg);
    const int64_t C = c.n_embd, hd = c.head_dim, A = (int64_t)c.n_head * hd, KV = (int64_t)c.n_kv_head * hd,
                  I = c.intermediate, V = c.vocab_size;
    const int per_layer = 9 + (c.qkv_bias ? 3 : 0) + (c.qk_norm ? 2 : 0);
    const int n = 3 + c.n_layer * per_layer;
    fsdp_hf_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the tensor map (%d entries)", n);
    int k = 0;
#define ADD(unit_, tensor_, r0, nr, nc, ...)                                                                 \
    do {                                                                                                     \
        fsdp_hf_tensor *e_ = &t[k++];                                                                        \
        snprintf(e_->hf_name, sizeof e_->hf_name, __VA_ARGS__);                                              \
        snprintf(e_->unit, sizeof e_->unit, "%s", unit_);                                                    \
        snprintf(e_->tensor, sizeof e_->tensor, "%s", tensor_);                                              \
        e_->row0 = (r0), e_->rows = (nr), e_->cols = (nc);                                                   \
    } while (0)
    ADD("root", "embed_tokens", 0, V, C, "model.embed_tokens.weight");
    ADD("root", "norm", 0, C, 0, "model.norm.weight");
    ADD("root", "lm_head", 0, V, C, "lm_head.weight");
    if (c.tie_embeddings) t[k - 1].optional = t[k - 1].tied = 1;
    for (int l = 0; l < c.n_layer; l++) {
        char u[16];
        snprintf(u, sizeof u, "h%d", l);
        const char *p = "model.layers";
        ADD(u, "input_layernorm", 0, C, 0, "%s.%d.input_layernorm.weight", p, l);
        ADD(u, "qkv_w", 0, A, C, "%s.%d.self_attn.q_proj.weight", p, l);
        ADD(u, "qkv_w", A, KV, C, "%s.%d.self_attn.k_proj.weight", p, l);
        ADD(u, "qkv_w", A + KV, KV, C, "%s.%d.self_attn.v_proj.weight", p, l);
        if (c.qkv_bias) {
            ADD(u, "qkv_b", 0, A, 0, "%s.%d.self_attn.q_proj.bias", p, l);
            ADD(u, "qkv_b", A, KV, 0, "%s.%d.self_attn.k_proj.bias", p, l);
            ADD(u, "qkv_b", A + KV, KV, 0, "%s.%d.self_attn.v_proj.bias", p, l);
        }
        if (c.qk_norm) {
            ADD(u, "q_norm", 0, hd, 0, "%s.%d.self_attn.q_norm.weight", p, l);
            ADD(u, "k_norm", 0, hd, 0, "%s.%d.self_attn.k_norm.weight", p, l);
        }
        ADD(u, "o_w", 0, C, A, "%s.%d.self_attn.o_proj.weight", p, l);
        ADD(u, "post_attn_layernorm", 0, C, 0, "%s.%d.post_attention_layernorm.weight", p, l);
        ADD(u, "gate_up_w", 0, I, C, "%s.%d.mlp.gate_proj.weight", p, l);
        ADD(u, "gate_up_w", I, I, C, "%s.%d.mlp.up_proj.weight", p, l);
        ADD(u, "down_w", 0, C, I, "%s.%d.mlp.down_proj.weight", p, l);
    }
#undef ADD
    FSDP_INVARIANT(k == n);
    out->n = n;
    out->t = t;
    out->skip = llama_skip;
    out->alt_prefix = NULL;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- the family */

static fsdp_status llama_config_default(fsdp_model_config *c) {
    if (c == NULL) return FSDP_ERR(FSDP_EINVAL, "config must not be NULL");
    /* SmolLM2-135M's shape */
    *c = (fsdp_model_config){.version = FSDP_MODEL_CONFIG_VERSION,
                             .family = &fsdp_llama_family,
                             .n_layer = 30,
                             .n_embd = 576,
                             .n_head = 9,
                             .n_kv_head = 3,
                             .head_dim = 64,
                             .intermediate = 1536,
                             .vocab_size = 49152,
                             .padded_vocab_size = 49152,
                             .max_seq_len = 8192,
                             .tie_embeddings = 1,
                             .norm_eps = 1e-5,
                             .rope_theta = 100000.0};
    return FSDP_OK;
}

static fsdp_status llama_validate(const fsdp_model_config *c) {
    if (c != NULL && c->version == FSDP_MODEL_CONFIG_VERSION && c->family != &fsdp_llama_family)
        return FSDP_ERR(FSDP_EINVAL, "llama config: family is %s, not llama",
                        c->family ? c->family->name : "NULL");
    return llama_check(c);
}

const fsdp_model_family fsdp_llama_family = {
    .name = "llama",
    .hf_architectures = llama_hf_archs,
    .config_default = llama_config_default,
    .validate = llama_validate,
    .num_params = llama_num_params,
    .flops_per_token = llama_flops_per_token,
    .units = llama_units,
    .activation_bytes = llama_activation_bytes,
    .other_bytes = llama_other_bytes,
    .init = llama_init,
    FSDP_DECODER_ENTRIES,
    .hf_read_config = llama_hf_read_config,
    .hf_write_config = llama_hf_write_config,
    .hf_map = llama_hf_map,
};
