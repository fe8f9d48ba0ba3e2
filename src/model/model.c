/* model.c — the model-family registry and the dispatch of include/fsdp_model.h: every call checks its
 * arguments once here and hands the family's own function the rest. A new family is a folder under
 * src/model/ and one line in `families` below. */
#include "fsdp_model.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const fsdp_model_family fsdp_gpt2_family;
extern const fsdp_model_family fsdp_llama_family;

static const fsdp_model_family *const families[] = {&fsdp_gpt2_family, &fsdp_llama_family};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

const fsdp_model_family *fsdp_model_family_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(families[i]->name, name)) return families[i];
    return NULL;
}

const fsdp_model_family *fsdp_model_family_for_hf(const char *architecture, const char *model_type) {
    for (int i = 0; i < N_FAMILIES; i++) {
        const fsdp_model_family *f = families[i];
        for (const char *const *a = f->hf_architectures; architecture && a && *a; a++)
            if (!strcmp(*a, architecture)) return f;
    }
    return architecture ? NULL : fsdp_model_family_find(model_type);
}

const char *fsdp_model_family_names(void) {
    static char buf[256];
    if (buf[0]) return buf;
    size_t u = 0;
    for (int i = 0; i < N_FAMILIES && u < sizeof buf; i++)
        u += (size_t)snprintf(buf + u, sizeof buf - u, "%s%s", i ? ", " : "", families[i]->name);
    return buf;
}

static const char *family_list[N_FAMILIES + 1];
static const char *arch_list[64];
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

static void build_lists(void) {
    int n = 0;
    arch_list[n++] = "auto";
    for (int i = 0; i < N_FAMILIES; i++) {
        family_list[i] = families[i]->name;
        for (const char *const *a = families[i]->hf_architectures; a && *a && n < 63; a++)
            arch_list[n++] = *a;
    }
}

const char *const *fsdp_model_family_list(void) {
    pthread_once(&lists_once, build_lists);
    return family_list;
}

const char *const *fsdp_model_hf_architecture_list(void) {
    pthread_once(&lists_once, build_lists);
    return arch_list;
}

/* ---------------------------------------------------------------- configs */

fsdp_status fsdp_model_config_init(fsdp_model_config *c, const char *family) {
    if (!c) return FSDP_ERR(FSDP_EINVAL, "config must not be NULL");
    const fsdp_model_family *f = fsdp_model_family_find(family);
    if (!f)
        return fsdp_set_error(FSDP_EINVAL, "model family \"%s\" is unknown (known: %s)",
                              family ? family : "(null)", fsdp_model_family_names());
    memset(c, 0, sizeof *c);
    c->version = FSDP_MODEL_CONFIG_VERSION;
    c->family = f;
    return f->config_default(c);
}

static fsdp_status check_family(const fsdp_model_config *c) {
    if (!c) return FSDP_ERR(FSDP_EINVAL, "model config must not be NULL");
    if (c->version != FSDP_MODEL_CONFIG_VERSION)
        return fsdp_set_error(FSDP_EINVAL,
                              "fsdp_model_config.version is %d; this library knows %d (start from "
                              "fsdp_model_config_init)",
                              c->version, FSDP_MODEL_CONFIG_VERSION);
    int known = 0;
    for (int i = 0; i < N_FAMILIES; i++)
        known |= c->family == families[i];
    if (!known) return FSDP_ERR(FSDP_EINVAL, "fsdp_model_config.family is not a registered family");
    return FSDP_OK;
}

/* A field the family does not use (fields.c) keeps the family's default. */
static fsdp_status check_unused(const fsdp_model_config *c) {
    fsdp_model_config d = {.version = FSDP_MODEL_CONFIG_VERSION, .family = c->family};
    FSDP_TRY(c->family->config_default(&d));
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++) {
        if (fsdp_model_field_used_by(&f[i], c->family->name)) continue;
        const double v = fsdp_model_field_get(c, &f[i]), dv = fsdp_model_field_get(&d, &f[i]);
        if (v != dv)
            return fsdp_set_error(
                FSDP_EINVAL, "model %s: %s = %g: this family does not use it (leave it at %g%s%s)",
                c->family->name, f[i].name, v, dv, f[i].flag ? "; flag --" : "", f[i].flag ? f[i].flag : "");
    }
    return FSDP_OK;
}

fsdp_status fsdp_model_config_validate(const fsdp_model_config *c) {
    FSDP_TRY(check_family(c));
    if (c->recompute != 0 && c->recompute != 1)
        return fsdp_set_error(FSDP_EINVAL, "fsdp_model_config.recompute = %d: need 0 or 1", c->recompute);
    FSDP_TRY(check_unused(c));
    return c->family->validate(c);
}

size_t fsdp_model_num_params(const fsdp_model_config *c) {
    return fsdp_model_config_validate(c) == FSDP_OK ? c->family->num_params(c) : 0;
}

double fsdp_model_flops_per_token(const fsdp_model_config *c, int T) {
    return fsdp_model_config_validate(c) == FSDP_OK && T >= 1 ? c->family->flops_per_token(c, T) : 0.0;
}

const char *fsdp_model_config_diff(const fsdp_model_config *a, const fsdp_model_config *b) {
    if (!a || !b) return "config";
    if (a->family != b->family) return "model";
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++)
        if (f[i].identity && fsdp_model_field_get(a, &f[i]) != fsdp_model_field_get(b, &f[i]))
            return f[i].name;
    return NULL;
}

fsdp_status fsdp_model_units_init(fsdp_model_units *out, const fsdp_model_config *c) {
    if (!out) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(fsdp_model_config_validate(c));
    return c->family->units(out, c);
}

void fsdp_model_units_free(fsdp_model_units *u) {
    if (!u) return;
    if (u->release) u->release(u->owner);
    free(u->units);
    memset(u, 0, sizeof *u);
}

size_t fsdp_model_activation_bytes(const fsdp_model_config *c, int B, int T, int threads) {
    if (fsdp_model_config_validate(c) != FSDP_OK || B < 1 || T < 1 || threads < 1) return 0;
    return c->family->activation_bytes(c, B, T, threads);
}

size_t fsdp_model_other_bytes(const fsdp_model_config *c, int B, int T, fsdp_dtype compute,
                              const char *freeze) {
    if (fsdp_model_config_validate(c) != FSDP_OK || B < 1 || T < 1) return 0;
    return c->family->other_bytes(c, B, T, compute, freeze);
}

fsdp_status fsdp_model_hf_map(const fsdp_model_config *c, fsdp_hf_map *out) {
    if (!out) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    FSDP_TRY(fsdp_model_config_validate(c));
    return c->family->hf_map(c, out);
}

void fsdp_hf_map_free(fsdp_hf_map *m) {
    if (!m) return;
    free(m->t);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- a model on an engine */

struct fsdp_model {
    fsdp_model_config cfg;
    void *impl;
};

fsdp_status fsdp_model_init(fsdp_model_t **out, fsdp_engine_t *eng, const fsdp_model_config *c) {
    if (!out || !eng) return FSDP_ERR(FSDP_EINVAL, "out and eng must not be NULL");
    *out = NULL;
    FSDP_TRY(fsdp_model_config_validate(c));
    fsdp_model_t *m = calloc(1, sizeof *m);
    if (!m) return FSDP_ERR(FSDP_ENOMEM, "no memory for a model");
    m->cfg = *c;
    fsdp_status s = c->family->init(&m->impl, eng, c);
    if (s != FSDP_OK) {
        free(m);
        return s;
    }
    *out = m;
    return FSDP_OK;
}

void fsdp_model_free(fsdp_model_t *m) {
    if (!m) return;
    m->cfg.family->free(m->impl);
    free(m);
}

const fsdp_model_config *fsdp_model_get_config(const fsdp_model_t *m) { return m ? &m->cfg : NULL; }

#define NEED_MODEL(m)                                                                                        \
    if (!(m)) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL")

fsdp_status fsdp_model_forward(fsdp_model_t *m, const fsdp_model_batch *b, float *loss) {
    NEED_MODEL(m);
    if (!b || !b->tokens) return FSDP_ERR(FSDP_EINVAL, "the batch and its tokens must not be NULL");
    return m->cfg.family->forward(m->impl, b, loss);
}

fsdp_status fsdp_model_backward(fsdp_model_t *m, float loss_scale) {
    NEED_MODEL(m);
    if (!isfinite(loss_scale))
        return FSDP_ERR(FSDP_EINVAL, "loss_scale %g is not finite", (double)loss_scale);
    return m->cfg.family->backward(m->impl, loss_scale);
}

fsdp_status fsdp_model_logits(const fsdp_model_t *m, const float **logits, int *B, int *T, int *Vp) {
    NEED_MODEL(m);
    return m->cfg.family->logits(m->impl, logits, B, T, Vp);
}

fsdp_status fsdp_model_end_eval(fsdp_model_t *m) {
    NEED_MODEL(m);
    return m->cfg.family->end_eval(m->impl);
}

fsdp_status fsdp_model_decode(fsdp_model_t *m, const int *tokens, int n, int pos, const float **logits) {
    NEED_MODEL(m);
    return m->cfg.family->decode(m->impl, tokens, n, pos, logits);
}

fsdp_status fsdp_model_set_recompute(fsdp_model_t *m, int on) {
    NEED_MODEL(m);
    FSDP_TRY(m->cfg.family->set_recompute(m->impl, on));
    m->cfg.recompute = on ? 1 : 0;
    return FSDP_OK;
}

fsdp_unit_t *fsdp_model_unit(fsdp_model_t *m, int i) { return m ? m->cfg.family->unit(m->impl, i) : NULL; }

/* ---------------------------------------------------------------- the model config as JSON */

fsdp_status fsdp_model_config_to_json(const fsdp_model_config *c, cJSON *obj) {
    if (!c || !obj || !c->family)
        return FSDP_ERR(FSDP_EINVAL, "config, family and JSON object must not be NULL");
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    int ok = cJSON_AddStringToObject(obj, "family", c->family->name) != NULL;
    for (int i = 0; ok && i < n; i++)
        if (f[i].identity)
            ok = cJSON_AddNumberToObject(obj, f[i].name, fsdp_model_field_get(c, &f[i])) != NULL;
    ok = ok && cJSON_AddStringToObject(obj, "hf_architecture", c->hf_architecture) != NULL;
    return ok ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for the model config's JSON");
}

fsdp_status fsdp_model_config_from_json(const cJSON *obj, const char *what, fsdp_model_config *c) {
    if (!obj || !c) return FSDP_ERR(FSDP_EINVAL, "JSON object and config must not be NULL");
    if (!what) what = "model config";
    if (!cJSON_IsObject(obj))
        return fsdp_set_error(FSDP_EFORMAT, "%s: the model config is not a JSON object", what);
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(obj, "family");
    if (!cJSON_IsString(fam))
        return fsdp_set_error(FSDP_EFORMAT, "%s: the model config has no \"family\" string", what);
    fsdp_model_config r;
    if (fsdp_model_config_init(&r, fam->valuestring) != FSDP_OK)
        return fsdp_set_error(FSDP_EFORMAT, "%s: model family \"%.40s\" is unknown (known: %s)", what,
                              fam->valuestring, fsdp_model_family_names());
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++) {
        if (!f[i].identity) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f[i].name);
        if (!v) continue; /* the family's default */
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
            (f[i].type == FSDP_FIELD_INT &&
             (v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0)))
            return fsdp_set_error(FSDP_EFORMAT, "%s: model config \"%s\" is not %s", what, f[i].name,
                                  f[i].type == FSDP_FIELD_INT ? "a whole number" : "a finite number");
        fsdp_model_field_set(&r, &f[i], v->valuedouble);
    }
    const cJSON *ha = cJSON_GetObjectItemCaseSensitive(obj, "hf_architecture");
    if (ha && (!cJSON_IsString(ha) || strlen(ha->valuestring) >= sizeof r.hf_architecture))
        return fsdp_set_error(FSDP_EFORMAT, "%s: model config \"hf_architecture\" is not a short string",
                              what);
    if (ha) snprintf(r.hf_architecture, sizeof r.hf_architecture, "%s", ha->valuestring);
    if (fsdp_model_config_validate(&r) != FSDP_OK)
        return FSDP_WRAP(FSDP_EFORMAT, "%s: the model config", what);
    *c = r;
    return FSDP_OK;
}
