/* llama_test_util.h — helpers of the Llama-family tests: the config a tools/llama_reference.py fixture
 * describes, loading its "w.<unit>.<tensor>" weights into the engine's units, and the model through
 * the family table (src/model/llama/llama.h). */
#ifndef FSDP_TEST_MODEL_LLAMA_TEST_UTIL_H
#define FSDP_TEST_MODEL_LLAMA_TEST_UTIL_H

#include "fixture.h"
#include "model/llama/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the fixture is a GPT-2 one (its "gpt2" record: tools/llama_reference.py's gpt2_lora). */
static inline int lt_fixture_gpt2(const gpt_fixture *fx) {
    for (int k = 0; k < fx->n_records; k++)
        if (!strcmp(fx->recs[k].name, "gpt2")) return 1;
    return 0;
}

/* The fixture's LoRA records (rank and targets, then alpha), where it has them. */
static inline fsdp_status lt_fixture_lora(const gpt_fixture *fx, fsdp_model_config *c) {
    for (int k = 0; k < fx->n_records; k++)
        if (!strcmp(fx->recs[k].name, "lora")) {
            int li[2];
            double lf;
            fsdp_status s = gpt_fixture_get_i32(fx, "lora", 2, li);
            if (s == FSDP_OK) s = gpt_fixture_get_f64(fx, "loraf", 1, &lf);
            if (s != FSDP_OK) return s;
            c->lora_rank = li[0], c->lora_targets = li[1], c->lora_alpha = lf;
        }
    return FSDP_OK;
}

/* The model config of a fixture (header slots plus its "config" / "configf" records; a GPT-2 one: the
 * header's shape on GPT-2's defaults). */
static inline fsdp_status lt_fixture_config(const gpt_fixture *fx, fsdp_model_config *c) {
    if (lt_fixture_gpt2(fx)) {
        fsdp_status s = fsdp_model_config_init(c, "gpt2");
        if (s != FSDP_OK) return s;
        c->n_layer = fx->L, c->n_embd = fx->C, c->n_head = fx->NH, c->vocab_size = fx->V;
        c->padded_vocab_size = fx->Vp, c->max_seq_len = fx->T_max;
        if ((s = lt_fixture_lora(fx, c)) != FSDP_OK) return s;
        return fsdp_model_family_find("gpt2")->validate(c);
    }
    fsdp_status s = fsdp_llama_family.config_default(c);
    if (s != FSDP_OK) return s;
    int ci[8];
    double cf[5];
    if ((s = gpt_fixture_get_i32(fx, "config", 8, ci)) != FSDP_OK) return s;
    if ((s = gpt_fixture_get_f64(fx, "configf", 5, cf)) != FSDP_OK) return s;
    c->n_layer = fx->L, c->n_embd = fx->C, c->n_head = fx->NH, c->vocab_size = fx->V;
    c->padded_vocab_size = fx->Vp, c->max_seq_len = fx->T_max;
    c->n_kv_head = ci[0], c->head_dim = ci[1], c->intermediate = ci[2], c->tie_embeddings = ci[3];
    c->qkv_bias = ci[4], c->qk_norm = ci[5], c->rope_scaling = ci[6], c->rope_original_max_pos = ci[7];
    c->norm_eps = cf[0], c->rope_theta = cf[1], c->rope_factor = cf[2], c->rope_low_freq_factor = cf[3];
    c->rope_high_freq_factor = cf[4];
    if ((s = lt_fixture_lora(fx, c)) != FSDP_OK) return s; /* LoRA (PEFT's) */
    return fsdp_llama_family.validate(c);
}

/* Loads every non-alias tensor of every unit of e from the fixture's "w.<unit>.<tensor>" records. */
static inline fsdp_status lt_load_weights(fsdp_engine_t *e, const gpt_fixture *fx) {
    for (int ui = 0; ui < fsdp_engine_num_units(e); ui++) {
        fsdp_status s = gpt_fixture_load_unit(fx, fsdp_engine_unit(e, ui), "lt_load_weights");
        if (s != FSDP_OK) return s;
    }
    return FSDP_OK;
}

/* Counted targets (not FSDP_IGNORE_INDEX) among n. */
static inline int lt_counted(const int *targets, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += targets[i] != FSDP_IGNORE_INDEX;
    return k;
}

#endif
