/* hf.c — `--init-from DIR`: a Hugging Face GPT-2 folder's config.json checked against what this model
 * can represent, and its safetensors weights read straight into each rank's master shards (hf.h). */
#include "train/hf.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gpt2/gpt.h"
#include "checkpoint/checkpoint.h"
#include "io/io.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- config.json */

static fsdp_status read_json(const char *path, cJSON **out) {
    char *text = NULL;
    size_t len = 0;
    FSDP_TRY(fsdp_io_read_file(path, &text, &len));
    cJSON *j = cJSON_ParseWithLength(text, len);
    fsdp_mem_free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fsdp_set_error(FSDP_EFORMAT, "%s is not a JSON object", path);
    }
    *out = j;
    return FSDP_OK;
}

/* A required whole number in [lo, hi]. */
static fsdp_status cfg_int(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is missing", path, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" must be a whole number in %d..%d", path, key, lo, hi);
    *out = (int)v->valuedouble;
    return FSDP_OK;
}

/* An optional boolean that must equal want when present. */
static fsdp_status cfg_bool_is(const cJSON *j, const char *path, const char *key, int want, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return FSDP_OK;
    if (!cJSON_IsBool(v)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not true or false", path, key);
    if (cJSON_IsTrue(v) != want)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is %s: this model cannot represent that (%s)", path,
                              key, want ? "false" : "true", why);
    return FSDP_OK;
}

fsdp_status fsdp_hf_read_config(const char *dir, fsdp_train_config *cfg) {
    char *path = fsdp_strdupf("%s/config.json", dir);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    cJSON *j = NULL;
    fsdp_status s = read_json(path, &j);
    if (s != FSDP_OK) goto done;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "gpt2"))) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: \"model_type\" is not \"gpt2\": only GPT-2 models load here",
                           path);
        goto done;
    }
    int L, C, NH, V, P;
    if ((s = cfg_int(j, path, "n_layer", 1, 1024, &L)) != FSDP_OK) goto done;
    if ((s = cfg_int(j, path, "n_embd", 1, 65536, &C)) != FSDP_OK) goto done;
    if ((s = cfg_int(j, path, "n_head", 1, 1024, &NH)) != FSDP_OK) goto done;
    if ((s = cfg_int(j, path, "vocab_size", 2, 65536, &V)) != FSDP_OK) {
        char msg[512]; /* the message is rewritten from a copy (the error buffer is the destination) */
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        s = fsdp_set_error(FSDP_EFORMAT, "%s (token files hold 16-bit ids, so at most 65536)", msg);
        goto done;
    }
    if ((s = cfg_int(j, path, "n_positions", 1, 1 << 20, &P)) != FSDP_OK) goto done;
    if (C % NH != 0) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: \"n_embd\" %d is not divisible by \"n_head\" %d", path, C, NH);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "n_ctx");
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == P)) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: \"n_ctx\" differs from \"n_positions\" %d", path, P);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 4.0 * C)) {
        s = fsdp_set_error(
            FSDP_EFORMAT,
            "%s: \"n_inner\" is not null or 4 x n_embd (%d): this model's MLP is 4 x n_embd wide", path,
            4 * C);
        goto done;
    }
    /* The tanh-form GELU, under each of the names transformers gives it. */
    v = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (v && !(cJSON_IsString(v) &&
               (!strcmp(v->valuestring, "gelu_new") || !strcmp(v->valuestring, "gelu_pytorch_tanh") ||
                !strcmp(v->valuestring, "gelu_fast")))) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: \"activation_function\" is %s%.40s%s: this model has only the tanh GELU "
                           "(gelu_new)",
                           path, cJSON_IsString(v) ? "\"" : "",
                           cJSON_IsString(v) ? v->valuestring : "not a string",
                           cJSON_IsString(v) ? "\"" : "");
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (v && !(cJSON_IsNumber(v) && fabs(v->valuedouble - (double)FSDP_LAYERNORM_EPS) <= 1e-12)) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: \"layer_norm_epsilon\" is not %g (this model's LayerNorm)",
                           path, (double)FSDP_LAYERNORM_EPS);
        goto done;
    }
    if ((s = cfg_bool_is(j, path, "scale_attn_weights", 1,
                         "attention scores are always scaled by 1/sqrt(head size)")) ||
        (s = cfg_bool_is(j, path, "scale_attn_by_inverse_layer_idx", 0, "no per-layer attention scale")) ||
        (s = cfg_bool_is(j, path, "add_cross_attention", 0, "no cross-attention")) ||
        (s = cfg_bool_is(j, path, "tie_word_embeddings", 1, "the LM head is tied to wte")))
        goto done;
    cfg->layers = L;
    cfg->width = C;
    cfg->heads = NH;
    cfg->vocab = V;
    cfg->max_seq_len = P;
done:
    cJSON_Delete(j);
    free(path);
    return s;
}

/* ---------------------------------------------------------------- weights */

/* fsdp.c tensor -> GPT-2 name suffix, and whether GPT-2 stores it transposed (Conv1D: [in, out]). */
typedef struct {
    int tensor;
    const char *gpt2;
    int transpose;
} hf_name;
static const hf_name root_names[] = {{GPT_WTE, "wte.weight", 0},
                                     {GPT_WPE, "wpe.weight", 0},
                                     {GPT_LNF_W, "ln_f.weight", 0},
                                     {GPT_LNF_B, "ln_f.bias", 0}};
static const hf_name block_names[] = {{GPT_LN1_W, "ln_1.weight", 0},
                                      {GPT_LN1_B, "ln_1.bias", 0},
                                      {GPT_QKV_W, "attn.c_attn.weight", 1},
                                      {GPT_QKV_B, "attn.c_attn.bias", 0},
                                      {GPT_ATTPROJ_W, "attn.c_proj.weight", 1},
                                      {GPT_ATTPROJ_B, "attn.c_proj.bias", 0},
                                      {GPT_LN2_W, "ln_2.weight", 0},
                                      {GPT_LN2_B, "ln_2.bias", 0},
                                      {GPT_FC_W, "mlp.c_fc.weight", 1},
                                      {GPT_FC_B, "mlp.c_fc.bias", 0},
                                      {GPT_FCPROJ_W, "mlp.c_proj.weight", 1},
                                      {GPT_FCPROJ_B, "mlp.c_proj.bias", 0}};
#define N_BLOCK_NAMES ((int)(sizeof block_names / sizeof block_names[0]))

typedef struct {
    const char *dir;
    const char *prefix; /* "" or "transformer." */
    cJSON *weight_map;  /* sharded: the index's name -> file object; NULL: one model.safetensors */
    cJSON *index;
    int n_files;
    char **files;         /* (n_files) file names in dir */
    fsdp_safetensors *st; /* (n_files) opened on first use */
    int *opened;
} hf_src;

static void src_free(hf_src *h) {
    for (int i = 0; i < h->n_files; i++) {
        if (h->opened && h->opened[i]) fsdp_st_close(&h->st[i]);
        if (h->files) free(h->files[i]);
    }
    free(h->files);
    free(h->st);
    free(h->opened);
    cJSON_Delete(h->index);
    memset(h, 0, sizeof *h);
}

static fsdp_status src_open_file(hf_src *h, int f) {
    if (h->opened[f]) return FSDP_OK;
    char *p = fsdp_strdupf("%s/%s", h->dir, h->files[f]);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = fsdp_st_open(&h->st[f], p);
    free(p);
    if (s == FSDP_OK) h->opened[f] = 1;
    return s;
}

/* A file name the index may name: a plain name in dir (no folders, nothing hidden). */
static int plain_name(const char *s) {
    return s[0] != '\0' && s[0] != '.' && strchr(s, '/') == NULL && strlen(s) < 256;
}

static fsdp_status src_open(hf_src *h, const char *dir) {
    memset(h, 0, sizeof *h);
    h->dir = dir;
    h->prefix = "";
    char *ipath = fsdp_strdupf("%s/model.safetensors.index.json", dir);
    char *spath = fsdp_strdupf("%s/model.safetensors", dir);
    fsdp_status s = FSDP_OK;
    if (!ipath || !spath) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        goto done;
    }
    if (access(spath, F_OK) == 0) {
        h->n_files = 1;
        h->files = calloc(1, sizeof *h->files);
        if (h->files) h->files[0] = strdup("model.safetensors");
        if (!h->files || !h->files[0]) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a file name");
    } else if (access(ipath, F_OK) == 0) {
        s = read_json(ipath, &h->index);
        if (s != FSDP_OK) goto done;
        h->weight_map = cJSON_GetObjectItemCaseSensitive(h->index, "weight_map");
        if (!cJSON_IsObject(h->weight_map) || !h->weight_map->child) {
            s = fsdp_set_error(FSDP_EFORMAT, "%s: \"weight_map\" is missing, empty or not an object", ipath);
            goto done;
        }
        int n = cJSON_GetArraySize(h->weight_map);
        h->files = calloc((size_t)n, sizeof *h->files);
        if (!h->files) {
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d file names", n);
            goto done;
        }
        for (const cJSON *e = h->weight_map->child; e; e = e->next) {
            if (!cJSON_IsString(e) || !plain_name(e->valuestring)) {
                s = fsdp_set_error(
                    FSDP_EFORMAT, "%s: \"weight_map\".\"%s\" is not a file name in the folder (a plain name)",
                    ipath, e->string);
                goto done;
            }
            int found = 0;
            for (int f = 0; f < h->n_files && !found; f++)
                found = !strcmp(h->files[f], e->valuestring);
            if (!found) {
                h->files[h->n_files] = strdup(e->valuestring);
                if (!h->files[h->n_files]) {
                    s = FSDP_ERR(FSDP_ENOMEM, "no memory for a file name");
                    goto done;
                }
                h->n_files++;
            }
        }
    } else {
        s = fsdp_set_error(FSDP_EIO, "%s holds neither model.safetensors nor model.safetensors.index.json",
                           dir);
        goto done;
    }
    if (s != FSDP_OK) goto done;
    h->st = calloc((size_t)h->n_files, sizeof *h->st);
    h->opened = calloc((size_t)h->n_files, sizeof *h->opened);
    if (!h->st || !h->opened) s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d files", h->n_files);
done:
    free(ipath);
    free(spath);
    if (s != FSDP_OK) src_free(h);
    return s;
}

/* Is `name` (prefix stripped) a tensor of this GPT-2 with L layers, or a buffer we may ignore? 1: a
 * parameter, 2: ignorable, 0: unknown. */
static int known_name(const char *name, int L) {
    if (!strcmp(name, "lm_head.weight")) return 1;
    for (size_t k = 0; k < sizeof root_names / sizeof root_names[0]; k++)
        if (!strcmp(name, root_names[k].gpt2)) return 1;
    if (strncmp(name, "h.", 2) != 0) return 0;
    char *end = NULL;
    long l = strtol(name + 2, &end, 10);
    if (end == name + 2 || *end != '.' || l < 0 || l >= L || (name[2] == '0' && end != name + 3)) return 0;
    const char *rest = end + 1;
    if (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias")) return 2;
    for (int k = 0; k < N_BLOCK_NAMES; k++)
        if (!strcmp(rest, block_names[k].gpt2)) return 1;
    return 0;
}

/* Every name the folder holds (the index's keys, or the single file's header) must be known; sets the
 * prefix from wte's spelling. Reads headers only. */
static fsdp_status src_check_names(hf_src *h, int L) {
    const char *what = NULL;
    int n = 0;
    const char **names = NULL;
    fsdp_status s = FSDP_OK;
    if (h->weight_map) {
        n = cJSON_GetArraySize(h->weight_map);
        what = "model.safetensors.index.json";
    } else {
        FSDP_TRY(src_open_file(h, 0));
        n = h->st[0].n;
        what = "model.safetensors";
    }
    names = calloc((size_t)n + 1, sizeof *names);
    if (!names) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d names", n);
    int k = 0;
    if (h->weight_map)
        for (const cJSON *e = h->weight_map->child; e; e = e->next)
            names[k++] = e->string;
    else
        for (int i = 0; i < n; i++)
            names[k++] = h->st[0].t[i].name;
    int with = 0, without = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "transformer.wte.weight")) with = 1;
        if (!strcmp(names[i], "wte.weight")) without = 1;
    }
    if (with == without) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s/%s: %s \"wte.weight\" (or \"transformer.wte.weight\")", h->dir,
                           what, with ? "holds both" : "lacks the tensor");
        goto done;
    }
    h->prefix = with ? "transformer." : "";
    size_t pl = strlen(h->prefix);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i];
        if (!strcmp(nm, "lm_head.weight")) continue; /* never prefixed */
        if (strncmp(nm, h->prefix, pl) != 0 || !known_name(nm + pl, L)) {
            s = fsdp_set_error(FSDP_EFORMAT,
                               "%s/%s: tensor \"%s\" is not part of a %d-layer GPT2LMHeadModel (config.json)",
                               h->dir, what, nm, L);
            goto done;
        }
    }
done:
    free(names);
    return s;
}

/* Finds the full name's tensor: *f = file, *i = index in it. FSDP_EFORMAT naming it when missing. */
static fsdp_status src_find(hf_src *h, const char *full, int *f, int *i) {
    int file = 0;
    if (h->weight_map) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->weight_map, full);
        if (!v)
            return fsdp_set_error(FSDP_EFORMAT, "%s/model.safetensors.index.json: tensor \"%s\" is missing",
                                  h->dir, full);
        for (file = 0; file < h->n_files; file++)
            if (!strcmp(h->files[file], v->valuestring)) break;
    }
    FSDP_TRY(src_open_file(h, file));
    int idx = fsdp_st_find(&h->st[file], full);
    if (idx < 0) return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" is missing", h->st[file].path, full);
    *f = file;
    *i = idx;
    return FSDP_OK;
}

/* Reads elements [e0, e1) of our tensor (shape rows x cols, flat row-major) from the file's tensor into
 * dst. transpose: the file holds it as (cols, rows). limit: elements beyond it are padding (left 0). */
static fsdp_status read_part(const fsdp_safetensors *st, int i, int transpose, uint64_t rows, uint64_t cols,
                             uint64_t e0, uint64_t e1, uint64_t limit, float *dst) {
    if (!transpose) {
        uint64_t hi = e1 < limit ? e1 : limit;
        if (e0 < hi) FSDP_TRY(fsdp_st_read_f32(st, i, e0, (size_t)(hi - e0), dst));
        return FSDP_OK;
    }
    for (uint64_t e = e0; e < e1;) {
        uint64_t r = e / cols, c0 = e % cols, c1 = cols;
        if (c1 - c0 > e1 - e) c1 = c0 + (e1 - e);
        FSDP_TRY(fsdp_st_read_strided_f32(st, i, c0 * rows + r, rows, (size_t)(c1 - c0), dst + (e - e0)));
        e += c1 - c0;
    }
    return FSDP_OK;
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *sh) {
    size_t u = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && u < cap; d++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", d ? ", " : "", (long long)sh[d]);
    if (u < cap) snprintf(buf + u, cap - u, "]");
}

/* This rank's part of one unit; adds the elements read and the unit's model elements to stats. */
static fsdp_status load_unit(hf_src *h, fsdp_unit_t *u, int layer, int vocab, fsdp_hf_stats *stats) {
    fsdp_shard_view sv;
    FSDP_TRY(fsdp_unit_shard(u, &sv));
    memset(sv.master, 0, sv.numel * sizeof(float)); /* alignment gaps and padding are zero */
    const hf_name *map = layer < 0 ? root_names : block_names;
    int nmap = layer < 0 ? (int)(sizeof root_names / sizeof root_names[0]) : N_BLOCK_NAMES;
    for (int k = 0; k < nmap; k++) {
        fsdp_tensor_info ti;
        FSDP_TRY(fsdp_unit_tensor_info(u, map[k].tensor, &ti));
        size_t lo = ti.offset > sv.offset ? ti.offset : sv.offset;
        size_t hi = ti.offset + ti.numel < sv.offset + sv.numel ? ti.offset + ti.numel : sv.offset + sv.numel;
        const int is_wte = map[k].tensor == GPT_WTE && layer < 0;
        const uint64_t cols_all = ti.ndim == 2 ? (uint64_t)ti.shape[1] : 1;
        const uint64_t real = is_wte ? (uint64_t)vocab * cols_all : ti.numel; /* no padded rows */
        stats->model_elems += real;
        if (lo >= hi) continue; /* not on this rank */
        {
            uint64_t a = lo - ti.offset, b = hi - ti.offset;
            if (b > real) b = real;
            if (a < b) stats->read_elems += b - a;
        }
        char full[128];
        if (layer < 0)
            snprintf(full, sizeof full, "%s%s", h->prefix, map[k].gpt2);
        else
            snprintf(full, sizeof full, "%sh.%d.%s", h->prefix, layer, map[k].gpt2);
        int f, i;
        FSDP_TRY(src_find(h, full, &f, &i));
        const fsdp_safetensors *st = &h->st[f];
        const fsdp_st_tensor *t = &st->t[i];
        /* The GPT-2 shape config.json implies: ours, transposed for Conv1D, wte cut to the vocabulary. */
        int64_t want[2] = {ti.shape[0], ti.ndim == 2 ? ti.shape[1] : 0};
        if (map[k].tensor == GPT_WTE && layer < 0) want[0] = vocab;
        if (map[k].transpose) {
            int64_t x = want[0];
            want[0] = want[1];
            want[1] = x;
        }
        if (t->ndim != ti.ndim || t->shape[0] != want[0] || (ti.ndim == 2 && t->shape[1] != want[1])) {
            char got[96], need[96];
            fmt_shape(got, sizeof got, t->ndim, t->shape);
            fmt_shape(need, sizeof need, ti.ndim, want);
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: tensor \"%s\" has shape %s but config.json implies %s (vocab_size, "
                                  "n_positions, n_embd)",
                                  st->path, full, got, need);
        }
        if (t->dtype == FSDP_ST_OTHER)
            return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" has dtype %s: only F32, BF16 and F16 load",
                                  st->path, full, t->dtype_name);
        uint64_t rows = (uint64_t)ti.shape[0], cols = ti.ndim == 2 ? (uint64_t)ti.shape[1] : 1;
        uint64_t limit = map[k].tensor == GPT_WTE && layer < 0 ? (uint64_t)vocab * cols : ti.numel;
        FSDP_TRY(read_part(st, i, map[k].transpose, rows, cols, lo - ti.offset, hi - ti.offset, limit,
                           sv.master + (lo - sv.offset)));
    }
    return FSDP_OK;
}

/* lm_head.weight, when the folder has it, must equal wte: each rank compares the rows it loaded. */
static fsdp_status check_lm_head(hf_src *h, fsdp_unit_t *root, int vocab) {
    int present = 0;
    if (h->weight_map)
        present = cJSON_GetObjectItemCaseSensitive(h->weight_map, "lm_head.weight") != NULL;
    else
        present = fsdp_st_find(&h->st[0], "lm_head.weight") >= 0;
    if (!present) return FSDP_OK;
    fsdp_shard_view sv;
    fsdp_tensor_info ti;
    FSDP_TRY(fsdp_unit_shard(root, &sv));
    FSDP_TRY(fsdp_unit_tensor_info(root, GPT_WTE, &ti));
    int f, i;
    FSDP_TRY(src_find(h, "lm_head.weight", &f, &i));
    const fsdp_st_tensor *t = &h->st[f].t[i];
    if (t->ndim != 2 || t->shape[0] != vocab || t->shape[1] != ti.shape[1] || t->dtype == FSDP_ST_OTHER)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: tensor \"lm_head.weight\" does not match wte's shape and dtype",
                              h->st[f].path);
    size_t lo = ti.offset > sv.offset ? ti.offset : sv.offset;
    size_t hi = ti.offset + (size_t)vocab * (size_t)ti.shape[1];
    if (sv.offset + sv.numel < hi) hi = sv.offset + sv.numel;
    float buf[1024];
    for (size_t e = lo; e < hi;) {
        size_t n = hi - e < 1024 ? hi - e : 1024;
        FSDP_TRY(fsdp_st_read_f32(&h->st[f], i, e - ti.offset, n, buf));
        if (memcmp(buf, sv.master + (e - sv.offset), n * sizeof(float)) != 0)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: tensor \"lm_head.weight\" differs from wte: this model ties the LM head "
                "to the token embedding (tie_word_embeddings)",
                h->st[f].path);
        e += n;
    }
    return FSDP_OK;
}

fsdp_status fsdp_hf_load(fsdp_engine_t *eng, const char *dir, fsdp_hf_stats *stats) {
    int n_units = fsdp_engine_num_units(eng);
    if (n_units < 2) return FSDP_ERR(FSDP_EINVAL, "the engine holds no GPT model");
    fsdp_unit_t *root = fsdp_engine_unit(eng, 0);
    fsdp_tensor_info wpe;
    FSDP_TRY(fsdp_unit_tensor_info(root, GPT_WPE, &wpe));
    hf_src h;
    fsdp_hf_stats st = {0, 0};
    fsdp_status s = src_open(&h, dir);
    fsdp_train_config c = fsdp_train_config_default();
    if (s == FSDP_OK) s = fsdp_hf_read_config(dir, &c);
    if (s == FSDP_OK && (c.layers != n_units - 1 || c.max_seq_len != wpe.shape[0]))
        s = fsdp_set_error(FSDP_EINVAL, "%s/config.json describes another model than the one built", dir);
    if (s == FSDP_OK) s = src_check_names(&h, c.layers);
    for (int k = 0; k < n_units && s == FSDP_OK; k++)
        s = load_unit(&h, fsdp_engine_unit(eng, k), k - 1, c.vocab, &st);
    if (s == FSDP_OK) s = check_lm_head(&h, root, c.vocab);
    if (h.files) src_free(&h);
    if (stats) *stats = st;
    return fsdp_comm_agree(fsdp_engine_comm(eng), s, "loading --init-from");
}

fsdp_status fsdp_hf_fingerprint(const char *dir, uint32_t *crc) {
    uint32_t c = 0;
    hf_src h;
    FSDP_TRY(src_open(&h, dir));
    const char *names[2] = {"config.json", h.weight_map ? "model.safetensors.index.json" : NULL};
    fsdp_status s = FSDP_OK;
    for (int i = 0; i < 2 && s == FSDP_OK && names[i]; i++) {
        char *p = fsdp_strdupf("%s/%s", dir, names[i]), *text = NULL;
        size_t len = 0;
        s = p ? fsdp_io_read_file(p, &text, &len) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        if (s == FSDP_OK) c = fsdp_crc32c(c, text, len);
        fsdp_mem_free(text);
        free(p);
    }
    for (int f = 0; f < h.n_files && s == FSDP_OK; f++) {
        s = src_open_file(&h, f);
        if (s == FSDP_OK) c = fsdp_crc32c(c, h.st[f].base, (size_t)h.st[f].data_off);
    }
    src_free(&h);
    if (s == FSDP_OK) *crc = c;
    return s;
}
