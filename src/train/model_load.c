/* model_load.c — the trainer's model from settings, a checkpoint or a Hugging Face folder, a Hugging Face
 * folder saved as a checkpoint (export --init-from), and a run's tokenizer (model_load.h). Used by the
 * training loop, sampling and export; calls neither of them. */
#define _GNU_SOURCE
#include "train/model_load.h"
#include "core/device.h"

#include "core/core.h"
#include "data/data.h"
#include "io/io.h"
#include "train/hf.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <fnmatch.h>
#include <string.h>
#include <unistd.h>

/* The model of cfg: its family's defaults, then every shape setting cfg gives (0 / -1: the default). */
fsdp_status fsdp_train_model_config(const fsdp_train_config *cfg, fsdp_model_config *mc) {
    FSDP_TRY(fsdp_model_config_init(mc, fsdp_train_model_names[cfg->model]));
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++) {
        double v;
        if (!f[i].flag) continue; /* padded_vocab_size: the family's rounding */
        if (fsdp_train_config_get_number(cfg, f[i].flag, &v) != 0)
            return FSDP_ERR(FSDP_EINTERNAL, "model field %s: no numeric flag --%s", f[i].name, f[i].flag);
        if ((f[i].unset == FSDP_FIELD_ZERO_DEFAULT && v <= 0) ||
            (f[i].unset == FSDP_FIELD_NEG_DEFAULT && v < 0))
            continue; /* the family's default */
        fsdp_model_field_set(mc, &f[i], v);
    }
    mc->padded_vocab_size = 0; /* the family's rounding of --vocab, whatever its default shape pads to */
    if (cfg->lora_targets) {   /* --lora-targets: the family's projections by PEFT's module names */
        static const struct {
            const char *name;
            int bits;
        } llama[] = {{"q", FSDP_LORA_Q},       {"k", FSDP_LORA_K},
                     {"v", FSDP_LORA_V},       {"o", FSDP_LORA_O},
                     {"gate", FSDP_LORA_GATE}, {"up", FSDP_LORA_UP},
                     {"down", FSDP_LORA_DOWN}, {NULL, 0}},
          gpt2[] = {{"c_attn", FSDP_LORA_C_ATTN},
                    {"attn.c_proj", FSDP_LORA_ATTN_PROJ},
                    {"c_fc", FSDP_LORA_C_FC},
                    {"mlp.c_proj", FSDP_LORA_MLP_PROJ},
                    {"c_proj", FSDP_LORA_ATTN_PROJ | FSDP_LORA_MLP_PROJ},
                    {NULL, 0}};
        const int is_gpt2 = !strcmp(mc->family->name, "gpt2");
        const __typeof__(llama[0]) *names = is_gpt2 ? gpt2 : llama;
        const char *p = cfg->lora_targets;
        mc->lora_targets = 0;
        while (*p) {
            size_t len = strcspn(p, ",");
            int hit = -1;
            for (int k = 0; names[k].name; k++)
                if (strlen(names[k].name) == len && !strncmp(p, names[k].name, len)) hit = k;
            if (hit < 0)
                return fsdp_set_error(FSDP_EINVAL, "--lora-targets: \"%.*s\" is none of %s", (int)len, p,
                                      is_gpt2 ? "c_attn, attn.c_proj, c_fc, mlp.c_proj, c_proj (GPT-2)"
                                              : "q, k, v, o, gate, up, down");
            mc->lora_targets |= names[hit].bits;
            p += len;
            if (*p == ',') p++;
        }
        if (cfg->lora_rank <= 0) return fsdp_set_error(FSDP_EINVAL, "--lora-targets needs --lora-rank");
    }
    if (cfg->lora_alpha > 0 && cfg->lora_rank <= 0)
        return fsdp_set_error(FSDP_EINVAL, "--lora-alpha needs --lora-rank");
    if (cfg->hf_architecture > 0)
        snprintf(mc->hf_architecture, sizeof mc->hf_architecture, "%s",
                 fsdp_train_hf_arch_names[cfg->hf_architecture]);
    return fsdp_model_config_validate(mc);
}

void fsdp_train_model_free(run_model *rm) {
    fsdp_model_free(rm->model);
    fsdp_engine_free(rm->eng);
    fsdp_device_sim_destroy(rm->dev);
    rm->model = NULL;
    rm->eng = NULL;
    rm->dev = NULL;
}

/* FSDP_TEST_DEVICE=sim:SEED | sim-nohost:SEED: the simulated device (tests/train/sim_train.sh). */
static fsdp_status test_device(fsdp_comm_t *comm, fsdp_device_t **out) {
    *out = NULL;
    const char *v = fsdp_env_value("FSDP_TEST_DEVICE");
    if (v == NULL || v[0] == '\0') return FSDP_OK;
    unsigned flags = 0;
    const char *seed = NULL;
    if (strncmp(v, "sim:", 4) == 0)
        seed = v + 4;
    else if (strncmp(v, "sim-nohost:", 11) == 0)
        seed = v + 11, flags = FSDP_SIM_NO_HOST_ACCESS;
    char *end = NULL;
    unsigned long long s = seed ? strtoull(seed, &end, 10) : 0;
    if (seed == NULL || end == seed || *end != '\0')
        return fsdp_set_error(FSDP_EINVAL, "FSDP_TEST_DEVICE=\"%s\": want sim:SEED or sim-nohost:SEED", v);
    return fsdp_device_sim_create((uint64_t)s + (uint64_t)fsdp_comm_rank(comm), flags, out);
}

/* The engine and model settings of cfg: one place, used by the run and by its memory plan. */
fsdp_engine_config fsdp_train_engine_config(const fsdp_train_config *cfg) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.strategy = (fsdp_strategy)cfg->strategy;
    ec.compute_dtype = cfg->precision == FSDP_PRECISION_MIXED ? FSDP_BF16 : FSDP_F32;
    ec.reduce_dtype = (fsdp_dtype)cfg->reduce_dtype;
    ec.main_grad = (fsdp_main_grad_policy)cfg->main_grad;
    ec.accum = (fsdp_accum_mode)cfg->accum;
    ec.seed = (uint64_t)cfg->seed;
    ec.max_inflight = cfg->max_inflight;
    ec.shard_group = cfg->shard_group;
    ec.freeze = cfg->freeze;
    return ec;
}

fsdp_status fsdp_train_freeze_report(fsdp_engine_t *eng, const char *freeze, size_t *n_frozen,
                                     size_t *n_params) {
    *n_frozen = *n_params = 0;
    size_t listed = 0;
    char names[1024] = "";
    for (int u = 0; u < fsdp_engine_num_units(eng); u++) {
        const fsdp_unit_t *U = fsdp_engine_unit(eng, u);
        for (int t = 0; t < fsdp_unit_num_tensors(U); t++) {
            fsdp_tensor_info ti;
            FSDP_TRY(fsdp_unit_tensor_info(U, t, &ti));
            if (ti.alias_of >= 0) continue;
            *n_params += ti.numel;
            if (ti.frozen) *n_frozen += ti.numel;
            if (u < 2 || strncmp(fsdp_unit_name(U), "h", 1) != 0) /* the root's and the first block's */
                listed += (size_t)snprintf(names + listed, listed < sizeof names ? sizeof names - listed : 0,
                                           "%s%s.%s", listed ? " " : "", fsdp_unit_name(U), ti.name);
        }
    }
    if (!freeze || !*freeze) return FSDP_OK;
    /* every glob must name something: a misspelt one would silently train what the user froze */
    const char *p = freeze;
    while (*p) {
        size_t n = strcspn(p, ",");
        char glob[256];
        snprintf(glob, sizeof glob, "%.*s", (int)(n < sizeof glob ? n : sizeof glob - 1), p);
        int hit = 0;
        for (int u = 0; u < fsdp_engine_num_units(eng) && !hit; u++) {
            const fsdp_unit_t *U = fsdp_engine_unit(eng, u);
            for (int t = 0; t < fsdp_unit_num_tensors(U) && !hit; t++) {
                fsdp_tensor_info ti;
                FSDP_TRY(fsdp_unit_tensor_info(U, t, &ti));
                char full[192];
                snprintf(full, sizeof full, "%s.%s", fsdp_unit_name(U), ti.name);
                hit = fnmatch(glob, full, 0) == 0;
            }
        }
        if (!hit)
            return fsdp_set_error(
                FSDP_EINVAL,
                "--freeze: \"%s\" matches no tensor of this model; its names are unit.tensor "
                "with units root and h0..h%d, e.g. %s",
                glob, fsdp_engine_num_units(eng) - 2, names);
        p += n;
        if (*p == ',') p++;
    }
    return FSDP_OK;
}

fsdp_status fsdp_train_model_build(const fsdp_train_config *cfg, fsdp_comm_t *comm, run_model *rm) {
    memset(rm, 0, sizeof *rm);
    fsdp_engine_config ec = fsdp_train_engine_config(cfg);
    FSDP_TRY(test_device(comm, &rm->dev));
    ec.device = rm->dev;
    fsdp_status es = fsdp_engine_init(&rm->eng, comm, &ec);
    if (es != FSDP_OK) {
        fsdp_train_model_free(rm);
        return es;
    }
    fsdp_model_config mc;
    fsdp_status s = fsdp_train_model_config(cfg, &mc);
    if (s == FSDP_OK) s = fsdp_model_init(&rm->model, rm->eng, &mc);
    if (s != FSDP_OK) fsdp_train_model_free(rm);
    return s;
}

/* The tokenizer.json of a run, if it has one: --tokenizer, else the one in the --init-from folder, else
 * the data folder's (prepare --tokenizer copies it there). *path NULL when there is none. */
fsdp_status fsdp_train_find_tokenizer(const char *flag, const char *init_from, const char *data,
                                      char **path) {
    *path = NULL;
    const char *dirs[2] = {init_from, data};
    if (flag) *path = strdup(flag);
    for (int i = 0; i < 2 && !flag && !*path; i++) {
        if (!dirs[i]) continue;
        char *dir = i == 1 ? fsdp_data_dir(dirs[i]) : strdup(dirs[i]); /* --data may be a glob */
        char *p = dir ? fsdp_strdupf("%s/tokenizer.json", dir) : NULL;
        free(dir);
        if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        if (access(p, F_OK) == 0)
            *path = p;
        else
            free(p);
    }
    if (flag && !*path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    return FSDP_OK;
}

fsdp_status fsdp_train_ckpt_tokenizer(const char *flag, const char *ckpt, char **path) {
    *path = NULL;
    if (flag) return fsdp_train_find_tokenizer(flag, NULL, NULL, path);
    char *step_dir = NULL;
    fsdp_ckpt_reader *r = NULL;
    fsdp_status s = fsdp_ckpt_resolve(ckpt, &step_dir);
    if (s == FSDP_OK) s = fsdp_ckpt_open(&r, step_dir);
    if (s == FSDP_OK) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), "data");
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), "init-from");
        s = fsdp_train_find_tokenizer(NULL, cJSON_IsString(i) ? i->valuestring : NULL,
                                      cJSON_IsString(d) ? d->valuestring : NULL, path);
    }
    fsdp_ckpt_close(r);
    free(step_dir);
    return s;
}

/* Loads the tokenizer at path (NULL: none) for a model of vocabulary V. */
fsdp_status fsdp_train_load_tokenizer(const char *path, int V, fsdp_bpe **bpe) {
    *bpe = NULL;
    if (!path) return FSDP_OK;
    FSDP_TRY(fsdp_bpe_load(bpe, path));
    if (fsdp_bpe_vocab_size(*bpe) > V || fsdp_bpe_eot(*bpe) < 0) {
        fsdp_status s = fsdp_set_error(
            FSDP_EINVAL, "%s: %s (the model's vocabulary is %d)", path,
            fsdp_bpe_eot(*bpe) < 0 ? "no <|endoftext|> token" : "more tokens than the model has", V);
        fsdp_bpe_free(*bpe);
        *bpe = NULL;
        return s;
    }
    return FSDP_OK;
}

/* Builds the model a checkpoint was saved from (its manifest's config) and loads it on comm. */
/* The model a checkpoint or a Hugging Face folder loads into, once every rank has read its config (s:
 * this rank's status so far, agreed as `reading`). Loading needs no particular engine policy: the
 * defaults (full shard, lazy main_grad, sharded accumulation, no recompute), whatever the flags said;
 * none of them changes a forward pass. */
static fsdp_status build_for_load(fsdp_status s, fsdp_train_config *c, fsdp_comm_t *comm, run_model *rm,
                                  const char *reading, const char *building) {
    c->strategy = FSDP_FULL_SHARD;
    c->main_grad = FSDP_MAIN_GRAD_LAZY;
    c->accum = FSDP_ACCUM_SHARDED;
    c->recompute = 0;
    s = fsdp_comm_agree(comm, s, reading);
    if (s == FSDP_OK) s = fsdp_train_model_build(c, comm, rm);
    return fsdp_comm_agree(comm, s, building);
}

fsdp_status fsdp_train_ckpt_load(run_model *rm, const char *step_dir, fsdp_ckpt_state *st) {
    size_t n_frozen = 0, n_all = 0;
    fsdp_status s = fsdp_train_freeze_report(rm->eng, NULL, &n_frozen, &n_all); /* local: no collective */
    if (s != FSDP_OK || n_frozen == 0) return s == FSDP_OK ? fsdp_ckpt_load(rm->eng, step_dir, st) : s;
    /* The frozen tensors are not in the checkpoint: first put back where the run started. */
    fsdp_ckpt_reader *r = NULL;
    char *from = NULL;
    double seed = -1;
    s = fsdp_ckpt_open(&r, step_dir);
    if (s == FSDP_OK) {
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), "init-from");
        const cJSON *sd = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), "seed");
        if (cJSON_IsString(i) && !(from = strdup(i->valuestring))) s = FSDP_ERR(FSDP_ENOMEM, "no memory");
        if (cJSON_IsNumber(sd)) seed = sd->valuedouble;
        const uint64_t mine = fsdp_engine_get_config(rm->eng)->seed;
        if (s == FSDP_OK && !from && seed != (double)mine)
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s was trained with frozen tensors initialised by --seed %.0f, which a load "
                               "initialises again (a checkpoint holds only the trainable tensors); this "
                               "run's --seed is %llu: pass --seed %.0f",
                               step_dir, seed, (unsigned long long)mine, seed);
    }
    fsdp_ckpt_close(r);
    s = fsdp_comm_agree(fsdp_engine_comm(rm->eng), s, "reading where the frozen tensors come from");
    if (s == FSDP_OK)
        s = from ? fsdp_hf_load(rm->eng, from, fsdp_model_get_config(rm->model), NULL)
                 : fsdp_engine_init_params(rm->eng);
    if (s != FSDP_OK && from) {
        char why[512];
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        s = fsdp_set_error(s, "%s: its frozen tensors come from --init-from %s, which did not load: %s",
                           step_dir, from, why);
    }
    if (s == FSDP_OK) s = fsdp_ckpt_load(rm->eng, step_dir, st);
    if (s == FSDP_EINVAL && strstr(fsdp_last_error(), "frozen weights are not those")) {
        char why[1024]; /* name where they were read from */
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        s = fsdp_set_error(s, "%s (read from %s)", why, from ? from : "--seed's initialisation");
    }
    free(from);
    return s;
}

fsdp_status fsdp_train_load_checkpoint_model(const char *dir, fsdp_comm_t *comm, fsdp_train_config *c,
                                             run_model *rm, fsdp_ckpt_state *st) {
    char *step_dir = NULL;
    fsdp_ckpt_reader *r = NULL;
    fsdp_status s = fsdp_ckpt_resolve(dir, &step_dir);
    if (s == FSDP_OK) s = fsdp_ckpt_open(&r, step_dir);
    if (s == FSDP_OK) {
        char *what = fsdp_strdupf("%s/manifest.json", step_dir);
        s = fsdp_train_config_from_json(c, fsdp_ckpt_config(r), what ? what : step_dir);
        free(what);
    }
    fsdp_ckpt_close(r);
    s = build_for_load(s, c, comm, rm, "reading the checkpoint's manifest",
                       "building the checkpoint's model");
    if (s == FSDP_OK) s = fsdp_train_ckpt_load(rm, step_dir, st);
    free(step_dir);
    return s;
}

/* Builds the model of a Hugging Face folder (fp32, the reference mode) and loads it on comm. */
fsdp_status fsdp_train_load_hf_model(const char *dir, fsdp_comm_t *comm, fsdp_train_config *c,
                                     run_model *rm) {
    fsdp_status s = fsdp_hf_read_config(dir, c);
    c->seq_len = c->max_seq_len;
    c->precision = FSDP_PRECISION_FP32;
    s = build_for_load(s, c, comm, rm, "reading --init-from's config.json", "building --init-from's model");
    if (s == FSDP_OK) s = fsdp_hf_load(rm->eng, dir, fsdp_model_get_config(rm->model), NULL);
    return s;
}

/* A world of one (this process alone): export's conversions run without a launcher. */
static fsdp_status self_comm(fsdp_comm_t **comm) {
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    return fsdp_comm_init(comm, &cc, NULL, NULL);
}

fsdp_status fsdp_train_hf_to_checkpoint(const char *hf_dir, const char *ckpt_dir, char **step_dir) {
    fsdp_comm_t *comm = NULL;
    FSDP_TRY(self_comm(&comm));
    fsdp_train_config c = fsdp_train_config_default();
    run_model rm = {0};
    cJSON *cj = NULL;
    char abs[PATH_MAX];
    fsdp_status s = fsdp_train_load_hf_model(hf_dir, comm, &c, &rm);
    c.init_from = realpath(hf_dir, abs) ? abs : hf_dir;
    c.data = NULL; /* no data folder: the tokenizer, if any, is the --init-from folder's */
    if (s == FSDP_OK && !(cj = fsdp_train_config_to_json(&c)))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a config");
    fsdp_ckpt_state st = {0, 0, 0, {0, 0}};
    if (s == FSDP_OK) s = fsdp_ckpt_save(rm.eng, ckpt_dir, cj, &st, step_dir);
    cJSON_Delete(cj);
    fsdp_train_model_free(&rm);
    fsdp_comm_free(comm);
    return s;
}

/* ---------------------------------------------------------------- logits for the export check */

fsdp_status fsdp_train_write_logits(const char *ckpt, const char *path) {
    fsdp_comm_t *comm = NULL;
    FSDP_TRY(self_comm(&comm));
    fsdp_train_config c = fsdp_train_config_default();
    run_model rm = {0};
    fsdp_ckpt_state st;
    char *sd = NULL;
    fsdp_status s = fsdp_ckpt_resolve(ckpt, &sd);
    if (s == FSDP_OK) s = fsdp_train_load_checkpoint_model(sd, comm, &c, &rm, &st);
    /* The reference mode: rebuild in fp32 so the check compares against an fp32 PyTorch forward. */
    if (s == FSDP_OK && c.precision != FSDP_PRECISION_FP32) {
        fsdp_train_model_free(&rm);
        c.precision = FSDP_PRECISION_FP32;
        s = fsdp_train_model_build(&c, comm, &rm);
        if (s == FSDP_OK) s = fsdp_train_ckpt_load(&rm, sd, &st);
    }
    free(sd);
    if (s == FSDP_OK) s = fsdp_train_model_write_logits(&rm, &c, comm, path);
    fsdp_train_model_free(&rm);
    fsdp_comm_free(comm);
    return s;
}

/* The fixed input's logits of a loaded model on comm (every rank runs the forward, rank 0 writes). */
fsdp_status fsdp_train_model_write_logits(run_model *rm, const fsdp_train_config *cfg, fsdp_comm_t *comm,
                                          const char *path) {
    fsdp_train_config c = *cfg;
    int *toks = NULL;
    fsdp_out o = {.fd = -1};
    fsdp_status s = FSDP_OK;
    const int rank0 = fsdp_comm_rank(comm) == 0;
    const int B = 2, T = c.seq_len < 16 ? c.seq_len : 16, V = c.vocab;
    toks = malloc(sizeof(int) * (size_t)(B * T));
    if (!toks) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for tokens");
        goto done;
    }
    for (int i = 0; i < B * T; i++)
        toks[i] = (int)(((unsigned)i * 2654435761u) % (unsigned)V);
    fsdp_model_batch mb = {.tokens = toks, .B = B, .T = T};
    s = fsdp_model_forward(rm->model, &mb, NULL);
    const float *logits = NULL;
    int Vp = 0;
    if (s == FSDP_OK) s = fsdp_model_logits(rm->model, &logits, NULL, NULL, &Vp);
    if (s == FSDP_OK) s = fsdp_model_end_eval(rm->model);
    if (s != FSDP_OK || !rank0) goto done;
    s = fsdp_out_begin(&o, path, "--logits", 0);
    if (s != FSDP_OK) goto done;
    int32_t hdr[3] = {B, T, V};
    s = fsdp_io_write_all(o.fd, hdr, sizeof hdr, o.tmp);
    for (int i = 0; i < B * T && s == FSDP_OK; i++) {
        int32_t t = toks[i];
        s = fsdp_io_write_all(o.fd, &t, 4, o.tmp);
    }
    for (int i = 0; i < B * T && s == FSDP_OK; i++)
        s = fsdp_io_write_all(o.fd, logits + (size_t)i * (size_t)Vp, 4 * (size_t)V, o.tmp);
    if (s == FSDP_OK) s = fsdp_out_commit(&o);
done:
    fsdp_out_abort(&o);
    free(toks);
    return fsdp_comm_agree(comm, s, "writing --logits");
}
/* --init-from: the model shape from DIR/config.json, and data whose vocabulary the model covers: at
 * most the model's (Qwen2.5/3's vocab_size, 151936, pads their tokenizer's 151665 ids; the padded rows
 * stay the model's and export keeps them). */
static fsdp_status apply_init_from(fsdp_train_config *c) {
    if (!c->init_from) return FSDP_OK;
    FSDP_TRY(fsdp_hf_read_config(c->init_from, c));
    int v = 0;
    FSDP_TRY(fsdp_data_meta_vocab(c->data, &v));
    if (v > c->vocab) {
        char *dir = fsdp_data_dir(c->data);
        fsdp_status s = fsdp_set_error(
            FSDP_EINVAL,
            "%s/meta.json: the data's vocabulary (%d ids) is larger than --init-from %s's (vocab_size %d): "
            "the data holds ids the model has no row for; it was prepared with another tokenizer than the "
            "model's (prepare the text with `fsdp-train prepare --tokenizer %s/tokenizer.json`)",
            dir ? dir : c->data, v, c->init_from, c->vocab, c->init_from);
        free(dir);
        return s;
    }
    return FSDP_OK;
}

/* Resolves vocab 0 (meta.json's, else GPT-2's) and checks cfg against the world size. */
fsdp_status fsdp_train_resolve_config(fsdp_train_config *c, int world) {
    FSDP_TRY(apply_init_from(c));
    if (c->vocab == 0) {
        int v = 0;
        FSDP_TRY(fsdp_data_meta_vocab(c->data, &v));
        c->vocab = v > 0 ? v : FSDP_GPT2_VOCAB;
    }
    return fsdp_train_config_check(c, world);
}
