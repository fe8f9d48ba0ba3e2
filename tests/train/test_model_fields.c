/* test_model_fields.c — the model config's field table (src/model/fields.c) against the struct and the
 * trainer: every numeric member of fsdp_model_config has exactly one row (offsets cover the struct's
 * numeric members, none twice), fsdp_model_config_diff names each identity field and ignores recompute,
 * every row's flag is a numeric trainer setting that round-trips, the trainer's settings reach a config
 * through the table (fsdp_train_model_config) with the family's defaults kept for unset values, and a
 * field a family does not use is refused naming it. */
#include "test_util.h"

#include "fsdp_model.h"
#include "train/config.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>

/* The numeric members of fsdp_model_config, written out here from the struct (not from the table). */
static const struct {
    const char *name;
    size_t off;
} members[] = {
#define M(m)                                                                                                 \
    { #m, offsetof(fsdp_model_config, m) }
    M(n_layer),
    M(n_embd),
    M(n_head),
    M(n_kv_head),
    M(head_dim),
    M(intermediate),
    M(vocab_size),
    M(padded_vocab_size),
    M(max_seq_len),
    M(tie_embeddings),
    M(qkv_bias),
    M(qk_norm),
    M(norm_eps),
    M(rope_theta),
    M(rope_scaling),
    M(rope_factor),
    M(rope_low_freq_factor),
    M(rope_high_freq_factor),
    M(rope_original_max_pos),
    M(recompute),
    M(lora_rank),
    M(lora_alpha),
    M(lora_targets),
#undef M
};
#define N_MEMBERS ((int)(sizeof members / sizeof members[0]))

static void test_table_covers_struct(void) {
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    CHECKF(n == N_MEMBERS, "%d rows for %d numeric members", n, N_MEMBERS);
    for (int k = 0; k < N_MEMBERS; k++) {
        const fsdp_model_field *r = fsdp_model_field_find(members[k].name);
        CHECKF(r != NULL, "member %s has no row", members[k].name);
        if (r)
            CHECKF(r->offset == members[k].off, "row %s: offset %zu, member at %zu", r->name, r->offset,
                   members[k].off);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            CHECKF(f[i].offset != f[j].offset, "rows %s and %s share an offset", f[i].name, f[j].name);
    CHECK(fsdp_model_field_find("no_such_field") == NULL);
}

static void test_diff(void) {
    fsdp_model_config a, b;
    CHECK_OK(fsdp_model_config_init(&a, "llama"));
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++) {
        b = a;
        fsdp_model_field_set(&b, &f[i], fsdp_model_field_get(&a, &f[i]) + 1);
        CHECKF(fsdp_model_field_get(&b, &f[i]) == fsdp_model_field_get(&a, &f[i]) + 1, "set/get of %s",
               f[i].name);
        const char *d = fsdp_model_config_diff(&a, &b);
        if (f[i].identity)
            CHECKF(d && !strcmp(d, f[i].name), "a change of %s: diff says %s", f[i].name, d ? d : "(same)");
        else
            CHECKF(d == NULL, "recompute-like %s is not part of the model, diff says %s", f[i].name, d);
    }
}

static void test_flags(void) {
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    fsdp_train_config c = fsdp_train_config_default();
    for (int i = 0; i < n; i++) {
        if (!f[i].flag) continue;
        double v;
        CHECKF(fsdp_train_config_get_number(&c, f[i].flag, &v) == 0, "--%s (%s) is no numeric setting",
               f[i].flag, f[i].name);
        CHECK(fsdp_train_config_set_number(&c, f[i].flag, 3) == 0);
        CHECK(fsdp_train_config_get_number(&c, f[i].flag, &v) == 0 && v == 3);
    }
    double v;
    CHECK(fsdp_train_config_get_number(&c, "no-such-flag", &v) == -1);
    CHECK(fsdp_train_config_get_number(&c, "data", &v) == -1); /* a string */
}

/* The trainer's settings through the table: set values arrive, unset ones keep the family's default. */
static void test_train_to_model(void) {
    fsdp_train_config c = fsdp_train_config_default();
    c.model = 1; /* llama */
    c.layers = 3, c.width = 64, c.heads = 4, c.vocab = 300, c.seq_len = c.max_seq_len = 32;
    c.kv_heads = 2, c.qk_norm = 1, c.tie_embeddings = -1, c.norm_eps = 0, c.rope_theta = 5e5;
    fsdp_model_config mc, def;
    CHECK_OK(fsdp_train_model_config(&c, &mc));
    CHECK_OK(fsdp_model_config_init(&def, "llama"));
    CHECK(mc.n_layer == 3 && mc.n_embd == 64 && mc.n_head == 4 && mc.vocab_size == 300 &&
          mc.max_seq_len == 32);
    CHECK(mc.n_kv_head == 2 && mc.qk_norm == 1 && mc.rope_theta == 5e5);
    CHECK(mc.tie_embeddings == def.tie_embeddings); /* -1: the family's */
    CHECK(mc.norm_eps == def.norm_eps);             /* 0: the family's */
    CHECK(mc.padded_vocab_size == 0);               /* the family rounds --vocab */
}

static void test_unused_refused(void) {
    fsdp_model_config g;
    CHECK_OK(fsdp_model_config_init(&g, "gpt2"));
    CHECK_OK(fsdp_model_config_validate(&g));
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    int unused = 0;
    for (int i = 0; i < n; i++) {
        if (fsdp_model_field_used_by(&f[i], "gpt2")) continue;
        unused++;
        fsdp_model_config b = g;
        fsdp_model_field_set(&b, &f[i], fsdp_model_field_get(&g, &f[i]) + 1);
        CHECK_ERR(fsdp_model_config_validate(&b), FSDP_EINVAL, f[i].name);
    }
    CHECK(unused >= 2); /* qkv_bias, qk_norm, the rope_* fields */
}

/* The trainer's --model and --hf-architecture choices are the registry's lists, in its order. */
static void test_registry_lists(void) {
    const char *const *f = fsdp_model_family_list(), *const *a = fsdp_model_hf_architecture_list();
    int nf = 0, na = 0;
    for (; f[nf]; nf++) {
        CHECKF(fsdp_train_model_names[nf] && !strcmp(fsdp_train_model_names[nf], f[nf]), "family %d", nf);
        CHECK(fsdp_model_family_find(f[nf]) != NULL);
    }
    CHECK(nf >= 2 && fsdp_train_model_names[nf] == NULL);
    CHECK(!strcmp(a[0], "auto"));
    for (; a[na]; na++)
        CHECKF(fsdp_train_hf_arch_names[na] && !strcmp(fsdp_train_hf_arch_names[na], a[na]),
               "architecture %d", na);
    CHECK(fsdp_train_hf_arch_names[na] == NULL);
    /* every family's architectures, each mapping back to its family */
    for (int i = 1; i < na; i++)
        CHECKF(fsdp_model_family_for_hf(a[i], NULL) != NULL, "%s has no family", a[i]);
    CHECK(fsdp_model_family_for_hf("Qwen3ForCausalLM", NULL) == fsdp_model_family_find("llama"));
}

/* The library's JSON of a config reads back as the same model; bad records are refused by name. */
static void test_json(void) {
    fsdp_model_config c, r;
    CHECK_OK(fsdp_model_config_init(&c, "llama"));
    c.n_kv_head = 3, c.n_head = 9, c.n_embd = 144, c.qkv_bias = 1, c.rope_theta = 1e6 / 3;
    c.rope_scaling = FSDP_ROPE_SCALING_LLAMA3, c.rope_factor = 8, c.rope_low_freq_factor = 1,
    c.rope_high_freq_factor = 4, c.rope_original_max_pos = 8192;
    snprintf(c.hf_architecture, sizeof c.hf_architecture, "Qwen2ForCausalLM");
    CHECK_OK(fsdp_model_config_validate(&c));
    cJSON *j = cJSON_CreateObject();
    CHECK_OK(fsdp_model_config_to_json(&c, j));
    char *text = cJSON_PrintUnformatted(j);
    cJSON *k = cJSON_Parse(text);
    CHECK_OK(fsdp_model_config_from_json(k, "m.json", &r));
    CHECKF(fsdp_model_config_diff(&c, &r) == NULL, "round trip differs in %s: %s",
           fsdp_model_config_diff(&c, &r), text);
    CHECK(!strcmp(r.hf_architecture, "Qwen2ForCausalLM") && r.family == c.family);
    cJSON_ReplaceItemInObject(k, "family", cJSON_CreateString("gemma"));
    CHECK_ERR(fsdp_model_config_from_json(k, "m.json", &r), FSDP_EFORMAT,
              "model family \"gemma\" is unknown");
    cJSON_ReplaceItemInObject(k, "family", cJSON_CreateString("llama"));
    cJSON_ReplaceItemInObject(k, "n_head", cJSON_CreateNumber(2.5));
    CHECK_ERR(fsdp_model_config_from_json(k, "m.json", &r), FSDP_EFORMAT, "\"n_head\" is not a whole number");
    cJSON_ReplaceItemInObject(k, "n_head", cJSON_CreateNumber(7)); /* 7 does not divide 144: invalid */
    CHECK_ERR(fsdp_model_config_from_json(k, "m.json", &r), FSDP_EFORMAT, "m.json");
    cJSON_Delete(k);
    cJSON_Delete(j);
    free(text);
}

int main(void) {
    test_json();
    test_registry_lists();
    test_table_covers_struct();
    test_diff();
    test_flags();
    test_train_to_model();
    test_unused_refused();
    return TEST_MAIN_END();
}
