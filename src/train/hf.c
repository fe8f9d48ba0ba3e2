/* hf.c — `--init-from DIR`: a Hugging Face model folder's config.json read by the model family that
 * claims its architecture (include/fsdp_model.h), and its safetensors weights read straight into each
 * rank's master shards through the family's tensor map (hf.h). */
#include "train/hf.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "io/io.h"
#include "io/safetensors.h"

#include "io/json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- config.json */

static fsdp_status read_json(const char *path, cJSON **out) {
    cJSON *j = NULL;
    FSDP_TRY(fsdp_json_read_file(path, 0, &j));
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fsdp_set_error(FSDP_EFORMAT, "%s is not a JSON object", path);
    }
    *out = j;
    return FSDP_OK;
}

/* The index of name in a NULL-terminated list, or -1. */
static int name_index(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

/* config.json alone (fsdp_hf_model_config also checks it against the weights). */
static fsdp_status read_model_config(const char *dir, fsdp_model_config *mc) {
    char *path = fsdp_strdupf("%s/config.json", dir);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    cJSON *j = NULL;
    fsdp_status s = read_json(path, &j);
    if (s != FSDP_OK) goto done;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char *arch = NULL, *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
    if (archs && !cJSON_IsNull(archs)) {
        if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) != 1 || !cJSON_IsString(archs->child)) {
            s = fsdp_set_error(FSDP_EFORMAT, "%s: \"architectures\" is not a list of one class name", path);
            goto done;
        }
        arch = archs->child->valuestring;
    }
    if (!arch && !type) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: neither \"architectures\" nor \"model_type\" says what model it is", path);
        goto done;
    }
    const fsdp_model_family *f = fsdp_model_family_for_hf(arch, type);
    if (!f) {
        s = fsdp_set_error(
            FSDP_EFORMAT, "%s: \"%s\" is \"%.60s\": no model family of this build loads it (families: %s)",
            path, arch ? "architectures" : "model_type", arch ? arch : type, fsdp_model_family_names());
        goto done;
    }
    memset(mc, 0, sizeof *mc);
    mc->version = FSDP_MODEL_CONFIG_VERSION;
    mc->family = f;
    s = f->hf_read_config(j, path, mc);
    if (s == FSDP_OK && arch && !mc->hf_architecture[0])
        snprintf(mc->hf_architecture, sizeof mc->hf_architecture, "%s", arch);
    if (s == FSDP_OK) s = fsdp_model_config_validate(mc);
done:
    cJSON_Delete(j);
    free(path);
    return s;
}

fsdp_status fsdp_hf_read_config(const char *dir, fsdp_train_config *cfg) {
    fsdp_model_config mc;
    FSDP_TRY(fsdp_hf_model_config(dir, &mc));
    int fam = name_index(fsdp_train_model_names, mc.family->name);
    int arch = mc.hf_architecture[0] ? name_index(fsdp_train_hf_arch_names, mc.hf_architecture) : 0;
    if (fam < 0 || arch < 0)
        return fsdp_set_error(FSDP_EFORMAT, "%s/config.json: model %s (%s) has no trainer setting", dir,
                              mc.family->name, mc.hf_architecture);
    cfg->model = fam;
    cfg->hf_architecture = arch;
    int n; /* every model field the trainer has a flag for (fsdp_model_fields) */
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++)
        if (f[i].identity && f[i].flag && strncmp(f[i].name, "lora_", 5) != 0 && /* LoRA: the flags' */
            fsdp_train_config_set_number(cfg, f[i].flag, fsdp_model_field_get(&mc, &f[i])) != 0)
            return FSDP_ERR(FSDP_EINTERNAL, "model field %s: no numeric flag --%s", f[i].name, f[i].flag);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- weights */

typedef struct {
    const char *dir;
    const char *prefix; /* "" or the map's alt_prefix */
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

/* Is `name` (prefix stripped) one of the map's tensors (1), a buffer we may ignore (2), or unknown (0)? */
static int known_name(const fsdp_hf_map *m, const char *name) {
    for (int k = 0; k < m->n; k++)
        if (!strcmp(name, m->t[k].hf_name)) return 1;
    size_t n = strlen(name);
    for (const char *const *s = m->skip; s && *s; s++) {
        size_t k = strlen(*s);
        if (n > k && name[n - k - 1] == '.' && !strcmp(name + n - k, *s)) return 2;
    }
    return 0;
}

static int folder_has(hf_src *h, const char *const *names, int n, const char *a, const char *b) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], a) && (!b || !strcmp(names[i] + strlen(a), b))) return 1;
    return 0;
}

/* Every name the folder holds (the index's keys, or the single file's header) must be the map's; sets
 * the prefix from the first tensor's spelling. Reads headers only. */
static fsdp_status src_check_names(hf_src *h, const fsdp_hf_map *m, const fsdp_model_config *mc) {
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
    const char *first = m->t[0].hf_name;
    if (m->alt_prefix) {
        char with_name[160];
        snprintf(with_name, sizeof with_name, "%s%s", m->alt_prefix, first);
        int with = folder_has(h, names, n, with_name, NULL), without = folder_has(h, names, n, first, NULL);
        if (with == without) {
            s = fsdp_set_error(FSDP_EFORMAT, "%s/%s: %s \"%s\" (or \"%s\")", h->dir, what,
                               with ? "holds both" : "lacks the tensor", first, with_name);
            goto done;
        }
        h->prefix = with ? m->alt_prefix : "";
    }
    size_t pl = strlen(h->prefix);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i];
        int tied = 0;
        for (int e = 0; e < m->n && !tied; e++)
            tied = m->t[e].tied && !strcmp(nm, m->t[e].hf_name); /* a tied copy is never prefixed */
        if (tied) continue;
        if (strncmp(nm, h->prefix, pl) != 0 || !known_name(m, nm + pl)) {
            s = fsdp_set_error(
                FSDP_EFORMAT, "%s/%s: tensor \"%s\" is not part of a %d-layer %s (config.json)", h->dir, what,
                nm, mc->n_layer, mc->hf_architecture[0] ? mc->hf_architecture : mc->family->name);
            goto done;
        }
    }
done:
    free(names);
    return s;
}

/* Is the full name in the folder (without opening a file where an index says)? */
static int src_present(hf_src *h, const char *full) {
    if (h->weight_map) return cJSON_GetObjectItemCaseSensitive(h->weight_map, full) != NULL;
    return src_open_file(h, 0) == FSDP_OK && fsdp_st_find(&h->st[0], full) >= 0;
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

#define HF_STAGE ((size_t)1 << 20) /* elements per host chunk of a load onto device memory */

/* Reads elements [e0, e1) of our tensor (flat row-major) from the file's tensor into dst. transpose:
 * the file holds it transposed (its shape checked by the caller). limit: elements beyond it are
 * padding (left 0). */
static fsdp_status read_part(const fsdp_safetensors *st, int i, int transpose, uint64_t e0, uint64_t e1,
                             uint64_t limit, float *dst) {
    if (transpose) return fsdp_st_read_transposed_f32(st, i, e0, e1, dst);
    uint64_t hi = e1 < limit ? e1 : limit;
    if (e0 < hi) FSDP_TRY(fsdp_st_read_f32(st, i, e0, (size_t)(hi - e0), dst));
    return FSDP_OK;
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *sh) {
    size_t u = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && u < cap; d++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", d ? ", " : "", (long long)sh[d]);
    if (u < cap) snprintf(buf + u, cap - u, "]");
}

/* Where a map entry lies in the engine: unit u, and elements [lo, hi) of its flat buffer; frozen: in
 * the unit's frozen region (fsdp_tensor_spec.frozen), else in the trainable one. */
typedef struct {
    fsdp_unit_t *u;
    size_t lo, hi;
    int frozen;
} entry_place;

/* This rank's shard of the region p lies in: elements [*off, *off + *len) of the flat buffer, the
 * array that holds them, and their fp32 host address (NULL: reached through copies; always for the
 * frozen region, held in the compute dtype). */
typedef struct {
    size_t off, len;
    fsdp_shard_array arr;
    float *host;
} shard_region;

static fsdp_status region_of(fsdp_unit_t *u, int frozen, shard_region *r) {
    fsdp_shard_view sv;
    FSDP_TRY(fsdp_unit_shard_info(u, &sv));
    if (frozen)
        *r = (shard_region){sv.frozen_offset, sv.frozen_numel, FSDP_SHARD_FROZEN, NULL};
    else
        *r = (shard_region){sv.offset, sv.numel, FSDP_SHARD_MASTER, sv.master};
    return FSDP_OK;
}

static fsdp_status place(fsdp_engine_t *eng, const fsdp_hf_tensor *e, entry_place *p) {
    p->u = NULL;
    for (int k = 0; k < fsdp_engine_num_units(eng) && !p->u; k++)
        if (!strcmp(fsdp_unit_name(fsdp_engine_unit(eng, k)), e->unit)) p->u = fsdp_engine_unit(eng, k);
    int t = p->u ? fsdp_unit_find(p->u, e->tensor) : -1;
    fsdp_tensor_info ti;
    if (t < 0 || fsdp_unit_tensor_info(p->u, t, &ti) != FSDP_OK)
        return fsdp_set_error(FSDP_EINVAL, "the model has no tensor %s.%s for \"%s\"", e->unit, e->tensor,
                              e->hf_name);
    const int64_t cols = ti.ndim == 2 ? ti.shape[1] : 1;
    if ((e->cols ? e->cols : 1) != cols || e->row0 < 0 || e->row0 + e->rows > ti.shape[0])
        return fsdp_set_error(FSDP_EINVAL, "the tensor map's \"%s\" does not fit %s.%s", e->hf_name, e->unit,
                              e->tensor);
    p->lo = ti.offset + (size_t)e->row0 * (size_t)cols;
    p->hi = p->lo + (size_t)e->rows * (size_t)cols;
    p->frozen = ti.frozen;
    return FSDP_OK;
}

/* This rank's part of one map entry; adds the elements read and the entry's elements to stats. */
static fsdp_status load_entry(hf_src *h, fsdp_engine_t *eng, const fsdp_hf_tensor *e, fsdp_hf_stats *stats) {
    entry_place p;
    FSDP_TRY(place(eng, e, &p));
    shard_region sv;
    FSDP_TRY(region_of(p.u, p.frozen, &sv));
    stats->model_elems += p.hi - p.lo;
    size_t lo = p.lo > sv.off ? p.lo : sv.off, hi = p.hi < sv.off + sv.len ? p.hi : sv.off + sv.len;
    if (lo >= hi) return FSDP_OK; /* not on this rank */
    stats->read_elems += hi - lo;
    char full[160];
    snprintf(full, sizeof full, "%s%s", h->prefix, e->hf_name);
    int f, i;
    FSDP_TRY(src_find(h, full, &f, &i));
    const fsdp_safetensors *st = &h->st[f];
    const fsdp_st_tensor *t = &st->t[i];
    const int ndim = e->cols ? 2 : 1;
    int64_t want[2] = {e->transpose ? e->cols : e->rows, e->transpose ? e->rows : e->cols};
    if (t->ndim != ndim || t->shape[0] != want[0] || (ndim == 2 && t->shape[1] != want[1])) {
        char got[96], need[96];
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        fmt_shape(need, sizeof need, ndim, want);
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" has shape %s but config.json implies %s",
                              st->path, full, got, need);
    }
    if (t->dtype == FSDP_ST_OTHER)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" has dtype %s: only F32, BF16 and F16 load",
                              st->path, full, t->dtype_name);
    const uint64_t rows = (uint64_t)e->rows, cols = e->cols ? (uint64_t)e->cols : 1;
    if (sv.host) /* host memory: read in place */
        return read_part(st, i, e->transpose, lo - p.lo, hi - p.lo, rows * cols, sv.host + (lo - sv.off));
    /* device memory or the frozen region: through a host chunk (elements past the file's, padding
     * rows, are zero) */
    size_t chunk = hi - lo < HF_STAGE ? hi - lo : HF_STAGE;
    float *stage = malloc(chunk * sizeof(float));
    if (!stage) return FSDP_ERR(FSDP_ENOMEM, "no memory for a staging chunk of %zu elements", chunk);
    fsdp_status s = FSDP_OK;
    for (size_t x = lo; x < hi && s == FSDP_OK; x += chunk) {
        size_t n = hi - x < chunk ? hi - x : chunk;
        memset(stage, 0, n * sizeof(float));
        s = read_part(st, i, e->transpose, x - p.lo, x + n - p.lo, rows * cols, stage);
        if (s == FSDP_OK) s = fsdp_unit_shard_write(p.u, sv.arr, x, n, stage);
    }
    free(stage);
    return s;
}

/* A tied entry the folder holds must equal the tensor it is tied to: each rank compares the rows it
 * loaded. */
static fsdp_status check_tied(hf_src *h, fsdp_engine_t *eng, const fsdp_hf_tensor *e) {
    if (!src_present(h, e->hf_name)) return FSDP_OK;
    entry_place p;
    FSDP_TRY(place(eng, e, &p));
    shard_region sv;
    FSDP_TRY(region_of(p.u, p.frozen, &sv));
    int f, i;
    FSDP_TRY(src_find(h, e->hf_name, &f, &i));
    const fsdp_st_tensor *t = &h->st[f].t[i];
    if (t->ndim != 2 || t->shape[0] != e->rows || t->shape[1] != e->cols || t->dtype == FSDP_ST_OTHER)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" does not match %s's shape and dtype",
                              h->st[f].path, e->hf_name, e->tensor);
    size_t lo = p.lo > sv.off ? p.lo : sv.off, hi = p.hi < sv.off + sv.len ? p.hi : sv.off + sv.len;
    float buf[1024], mine[1024];
    for (size_t x = lo; x < hi;) {
        size_t n = hi - x < 1024 ? hi - x : 1024;
        FSDP_TRY(fsdp_st_read_f32(&h->st[f], i, x - p.lo, n, buf));
        if (sv.host)
            memcpy(mine, sv.host + (x - sv.off), n * sizeof(float));
        else
            FSDP_TRY(fsdp_unit_shard_read(p.u, sv.arr, x, n, mine));
        if (p.frozen && fsdp_engine_get_config(eng)->compute_dtype == FSDP_BF16)
            for (size_t k = 0; k < n; k++) /* held in bf16: compare with what the model holds of it */
                buf[k] = fsdp_bf16_to_f32(fsdp_f32_to_bf16(buf[k]));
        if (memcmp(buf, mine, n * sizeof(float)) != 0)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: tensor \"%s\" differs from %s: this model ties the LM head to the token "
                "embedding (tie_word_embeddings)",
                h->st[f].path, e->hf_name, e->tensor);
        x += n;
    }
    return FSDP_OK;
}

/* ---------------------------------------------------------------- config.json against the weights */

/* The config.json keys (as the family writes them) whose value is v: '"n_embd" 4096', or several
 * joined by " or "; "" when none (a derived size such as 3 x n_embd). */
static void keys_with_value(const cJSON *j, long long v, char *buf, size_t cap) {
    size_t u = 0;
    buf[0] = '\0';
    for (const cJSON *k = j ? j->child : NULL; k && u < cap; k = k->next)
        if (cJSON_IsNumber(k) && k->valuedouble == (double)v && strcmp(k->string, "n_ctx") != 0)
            u += (size_t)snprintf(buf + u, cap - u, "%s\"%s\"", u ? " or " : "", k->string);
    if (buf[0] && u < cap) snprintf(buf + u, cap - u, " %lld", v);
}

/* Issue 28 item 5: every tensor config.json implies must be in the folder with that shape, checked on
 * the safetensors headers alone, before a byte of the model is allocated (a config.json that says
 * vocab_size 10^9 over a small file is refused at once, naming the field, instead of allocating the
 * model it describes). The family's limits on each field keep every size below 2^62, so the shape
 * arithmetic cannot overflow. */
static fsdp_status check_weights(const char *dir, const fsdp_model_config *mc) {
    hf_src h;
    fsdp_hf_map map = {0};
    cJSON *j = cJSON_CreateObject();
    fsdp_status s = j ? src_open(&h, dir) : FSDP_ERR(FSDP_ENOMEM, "no memory for a JSON object");
    if (s != FSDP_OK) {
        cJSON_Delete(j);
        return s;
    }
    if (mc->family->hf_write_config) s = mc->family->hf_write_config(mc, j);
    if (s == FSDP_OK) s = fsdp_model_hf_map(mc, &map);
    if (s == FSDP_OK) s = src_check_names(&h, &map, mc);
    const char *model = mc->hf_architecture[0] ? mc->hf_architecture : mc->family->name;
    for (int k = 0; k < map.n && s == FSDP_OK; k++) {
        const fsdp_hf_tensor *e = &map.t[k];
        char full[160];
        snprintf(full, sizeof full, "%s%s", e->tied ? "" : h.prefix, e->hf_name);
        if (!src_present(&h, full)) {
            if (e->optional || e->tied) continue;
            /* a layer of which the folder holds nothing: config.json's layer count is the suspect */
            int layer_absent = strcmp(e->unit, "root") != 0;
            for (int q = 0; q < map.n && layer_absent; q++) {
                char other[160];
                snprintf(other, sizeof other, "%s%s", h.prefix, map.t[q].hf_name);
                if (!strcmp(map.t[q].unit, e->unit) && src_present(&h, other)) layer_absent = 0;
            }
            char layers[160] = "";
            if (layer_absent) keys_with_value(j, mc->n_layer, layers, sizeof layers);
            s = fsdp_set_error(FSDP_EFORMAT,
                               "%s/%s: tensor \"%s\" is missing, though config.json implies it (a %d-layer "
                               "%s%s%s%s); refused before the model is built",
                               dir, h.weight_map ? "model.safetensors.index.json" : "model.safetensors", full,
                               mc->n_layer, model, layers[0] ? ": is " : "", layers,
                               layers[0] ? " right?" : "");
            break;
        }
        int f, i;
        s = src_find(&h, full, &f, &i);
        if (s != FSDP_OK) break;
        const fsdp_st_tensor *t = &h.st[f].t[i];
        const int ndim = e->cols ? 2 : 1;
        const int64_t want[2] = {e->transpose ? e->cols : e->rows, e->transpose ? e->rows : e->cols};
        int d = t->ndim != ndim                       ? -1
                : t->shape[0] != want[0]              ? 0
                : ndim == 2 && t->shape[1] != want[1] ? 1
                                                      : 2;
        if (d == 2) continue;
        char got[96], need[96], keys[200] = "";
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        fmt_shape(need, sizeof need, ndim, want);
        if (d >= 0) keys_with_value(j, (long long)want[d], keys, sizeof keys);
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s/config.json does not fit the weights%s%s: tensor \"%s\" is %s in %s, "
                           "config.json implies %s; refused before the model is built",
                           dir, keys[0] ? ": " : "", keys, full, got, h.st[f].path, need);
    }
    fsdp_hf_map_free(&map);
    src_free(&h);
    cJSON_Delete(j);
    return s;
}

fsdp_status fsdp_hf_model_config(const char *dir, fsdp_model_config *mc) {
    FSDP_TRY(read_model_config(dir, mc));
    return check_weights(dir, mc);
}

fsdp_status fsdp_hf_load(fsdp_engine_t *eng, const char *dir, const fsdp_model_config *mc,
                         fsdp_hf_stats *stats) {
    if (!eng || !dir || !mc)
        return FSDP_ERR(FSDP_EINVAL, "fsdp_hf_load needs an engine, a folder and a model");
    hf_src h;
    fsdp_hf_map map = {0};
    fsdp_hf_stats st = {0, 0};
    fsdp_model_config file_mc;
    fsdp_status s = src_open(&h, dir);
    if (s == FSDP_OK) s = read_model_config(dir, &file_mc); /* checked against the weights below */
    /* LoRA adapters are no part of a Hugging Face folder: the built model's, initialised below */
    file_mc.lora_rank = mc->lora_rank, file_mc.lora_alpha = mc->lora_alpha;
    file_mc.lora_targets = mc->lora_targets;
    /* a model built from a checkpoint's manifest got its real-valued fields through JSON text (15
     * significant digits): within a relative 1e-9 of the file's is the same (as a resume judges them) */
    int nf;
    const fsdp_model_field *f = fsdp_model_fields(&nf);
    for (int i = 0; i < nf && s == FSDP_OK; i++) {
        if (f[i].type != FSDP_FIELD_DOUBLE) continue;
        const double a = fsdp_model_field_get(mc, &f[i]), b = fsdp_model_field_get(&file_mc, &f[i]);
        if (fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b))) fsdp_model_field_set(&file_mc, &f[i], a);
    }
    if (s == FSDP_OK && fsdp_model_config_diff(mc, &file_mc))
        s = fsdp_set_error(FSDP_EINVAL, "%s/config.json describes another model than the one built (%s)", dir,
                           fsdp_model_config_diff(mc, &file_mc));
    if (s == FSDP_OK) s = fsdp_model_hf_map(mc, &map);
    if (s == FSDP_OK) s = src_check_names(&h, &map, mc);
    /* Alignment gaps and padding (e.g. the embedding's padded rows) are zero. */
    for (int k = 0; k < 2 * fsdp_engine_num_units(eng) && s == FSDP_OK; k++) {
        shard_region sv;
        fsdp_unit_t *u = fsdp_engine_unit(eng, k / 2);
        s = region_of(u, k % 2, &sv); /* the trainable region, then the frozen one */
        if (s == FSDP_OK && sv.host) memset(sv.host, 0, sv.len * sizeof(float));
        static const float zeros[4096];
        for (size_t x = 0; s == FSDP_OK && !sv.host && x < sv.len; x += 4096)
            s = fsdp_unit_shard_write(u, sv.arr, sv.off + x, sv.len - x < 4096 ? sv.len - x : 4096, zeros);
    }
    /* tensors no entry names (LoRA's adapters) start where initialisation puts them */
    for (int k = 0; k < fsdp_engine_num_units(eng) && s == FSDP_OK; k++) {
        fsdp_unit_t *u = fsdp_engine_unit(eng, k);
        for (int t = 0; t < fsdp_unit_num_tensors(u) && s == FSDP_OK; t++) {
            fsdp_tensor_info ti;
            s = fsdp_unit_tensor_info(u, t, &ti);
            int named = 0;
            for (int e = 0; e < map.n && !named && s == FSDP_OK; e++)
                named = !strcmp(map.t[e].unit, fsdp_unit_name(u)) && !strcmp(map.t[e].tensor, ti.name);
            if (s == FSDP_OK && !named && ti.alias_of < 0) s = fsdp_unit_init_tensor(u, t);
        }
    }
    for (int k = 0; k < map.n && s == FSDP_OK; k++)
        if (!map.t[k].tied && !(map.t[k].optional && !src_present(&h, map.t[k].hf_name)))
            s = load_entry(&h, eng, &map.t[k], &st);
    for (int k = 0; k < map.n && s == FSDP_OK; k++)
        if (map.t[k].tied) s = check_tied(&h, eng, &map.t[k]);
    fsdp_hf_map_free(&map);
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
        if (s == FSDP_OK) c = fsdp_crc32c(c, h.st[f].head, (size_t)h.st[f].data_off);
    }
    src_free(&h);
    if (s == FSDP_OK) *crc = c;
    return s;
}

/* ---------------------------------------------------------------- PEFT adapters (--init-adapter) */

static const fsdp_hf_lora_module LLAMA_MODS[] = {
    {"self_attn.q_proj", "q_proj", "q", FSDP_LORA_Q},       {"self_attn.k_proj", "k_proj", "k", FSDP_LORA_K},
    {"self_attn.v_proj", "v_proj", "v", FSDP_LORA_V},       {"self_attn.o_proj", "o_proj", "o", FSDP_LORA_O},
    {"mlp.gate_proj", "gate_proj", "gate", FSDP_LORA_GATE}, {"mlp.up_proj", "up_proj", "up", FSDP_LORA_UP},
    {"mlp.down_proj", "down_proj", "down", FSDP_LORA_DOWN}, {NULL, NULL, NULL, 0}};
static const fsdp_hf_lora_module GPT2_MODS[] = {
    {"attn.c_attn", "c_attn", "c_attn", FSDP_LORA_C_ATTN},
    {"attn.c_proj", "attn.c_proj", "attn_proj", FSDP_LORA_ATTN_PROJ},
    {"mlp.c_fc", "c_fc", "c_fc", FSDP_LORA_C_FC},
    {"mlp.c_proj", "mlp.c_proj", "mlp_proj", FSDP_LORA_MLP_PROJ},
    {NULL, NULL, NULL, 0}};

static int is_gpt2(const fsdp_model_config *mc) { return !strcmp(mc->family->name, "gpt2"); }

const fsdp_hf_lora_module *fsdp_hf_lora_modules(const fsdp_model_config *mc) {
    return is_gpt2(mc) ? GPT2_MODS : LLAMA_MODS;
}

const char *fsdp_hf_lora_prefix(const fsdp_model_config *mc) {
    return is_gpt2(mc) ? "base_model.model.transformer.h." : "base_model.model.model.layers.";
}

int fsdp_hf_lora_targets(const fsdp_model_config *mc) {
    if (mc->lora_rank <= 0) return 0;
    return mc->lora_targets ? mc->lora_targets : is_gpt2(mc) ? FSDP_LORA_GPT2_ALL : FSDP_LORA_ALL;
}

/* adapter_config.json against mc: FSDP_EFORMAT naming the file and the field. */
static fsdp_status check_adapter_config(const char *path, const fsdp_model_config *mc) {
    char *text = NULL;
    size_t len = 0;
    FSDP_TRY(fsdp_io_read_file(path, &text, &len));
    cJSON *j = cJSON_ParseWithLength(text, len);
    fsdp_mem_free(text);
    if (!j) return fsdp_set_error(FSDP_EFORMAT, "%s: not valid JSON", path);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "peft_type"),
                *r = cJSON_GetObjectItemCaseSensitive(j, "r"),
                *al = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha"),
                *tm = cJSON_GetObjectItemCaseSensitive(j, "target_modules"),
                *bias = cJSON_GetObjectItemCaseSensitive(j, "bias"),
                *ff = cJSON_GetObjectItemCaseSensitive(j, "fan_in_fan_out");
    const double alpha = mc->lora_alpha > 0 ? mc->lora_alpha : 2.0 * mc->lora_rank;
    const int targets = fsdp_hf_lora_targets(mc);
    const fsdp_hf_lora_module *mods = fsdp_hf_lora_modules(mc);
    int want = 0;
    fsdp_status s = FSDP_OK;
    if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA"))
        s = fsdp_set_error(FSDP_EFORMAT, "%s: peft_type is not \"LORA\"", path);
    else if (!cJSON_IsNumber(r) || r->valuedouble != mc->lora_rank)
        s = fsdp_set_error(FSDP_EINVAL, "%s: r is %g, this run's --lora-rank %d", path,
                           cJSON_IsNumber(r) ? r->valuedouble : -1.0, mc->lora_rank);
    else if (!cJSON_IsNumber(al) || fabs(al->valuedouble - alpha) > 1e-9 * alpha)
        s = fsdp_set_error(FSDP_EINVAL, "%s: lora_alpha is %g, this run's --lora-alpha %g", path,
                           cJSON_IsNumber(al) ? al->valuedouble : -1.0, alpha);
    else if (bias && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none")))
        s = fsdp_set_error(FSDP_EUNSUPPORTED, "%s: bias adapters (bias != \"none\") are not supported", path);
    else if (ff && !cJSON_IsNull(ff) && cJSON_IsTrue(ff) != is_gpt2(mc)) /* GPT-2's Conv1D: true */
        s = fsdp_set_error(FSDP_EUNSUPPORTED, "%s: fan_in_fan_out is %s; this model's is %s", path,
                           cJSON_IsTrue(ff) ? "true" : "false", is_gpt2(mc) ? "true" : "false");
    /* what would change the adapters' meaning: absent, false, null or empty, else refused by name */
    static const char *const off[7] = {"use_dora",         "use_rslora",    "modules_to_save",
                                       "rank_pattern",     "alpha_pattern", "layers_to_transform",
                                       "layer_replication"};
    for (int k = 0; k < 7 && s == FSDP_OK; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, off[k]);
        if (v && !cJSON_IsFalse(v) && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && !v->child))
            s = fsdp_set_error(FSDP_EUNSUPPORTED, "%s: %s is set; only plain LoRA adapters load", path,
                               off[k]);
    }
    if (s == FSDP_OK && !cJSON_IsArray(tm))
        s = fsdp_set_error(FSDP_EFORMAT, "%s: target_modules is not a list of module names", path);
    const cJSON *e;
    const cJSON *list = s == FSDP_OK ? tm : (const cJSON *)NULL;
    cJSON_ArrayForEach(e, list) {
        int bits = 0;
        for (int p = 0; mods[p].hf && cJSON_IsString(e); p++) /* PEFT's name, or the module's last part */
            if (!strcmp(e->valuestring, mods[p].peft) ||
                !strcmp(e->valuestring, strrchr(mods[p].hf, '.') + 1))
                bits |= mods[p].bit;
        if (!bits) {
            s = fsdp_set_error(FSDP_EUNSUPPORTED,
                               "%s: target_modules has %s, not one of this model's projections", path,
                               cJSON_IsString(e) ? e->valuestring : "a non-string");
            break;
        }
        want |= bits;
    }
    if (s == FSDP_OK && want != targets)
        s = fsdp_set_error(FSDP_EINVAL,
                           "%s: target_modules name other projections than this run's --lora-targets", path);
    cJSON_Delete(j);
    return s;
}

fsdp_status fsdp_hf_load_adapter(fsdp_engine_t *eng, const char *dir, const fsdp_model_config *mc) {
    if (!eng || !dir || !mc || mc->lora_rank <= 0)
        return FSDP_ERR(FSDP_EINVAL, "fsdp_hf_load_adapter needs an engine, a folder and a LoRA model");
    char *cpath = fsdp_strdupf("%s/adapter_config.json", dir),
         *mpath = fsdp_strdupf("%s/adapter_model.safetensors", dir);
    fsdp_safetensors st = {0};
    const int targets = fsdp_hf_lora_targets(mc);
    const fsdp_hf_lora_module *mods = fsdp_hf_lora_modules(mc);
    fsdp_status s =
        cpath && mpath ? check_adapter_config(cpath, mc) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_st_open(&st, mpath);
    /* pass 0: every tensor's name and shape, and nothing left over; pass 1: every rank loads them (each
     * reads the whole small file) */
    int found = 0;
    float *buf = NULL;
    for (int pass = 0; pass < 2 && (pass == 0 || s == FSDP_OK); pass++) { /* pass 0 always agrees */
        for (int k = 0; s == FSDP_OK && k < fsdp_engine_num_units(eng); k++) {
            fsdp_unit_t *u = fsdp_engine_unit(eng, k);
            int l;
            if (sscanf(fsdp_unit_name(u), "h%d", &l) != 1) continue;
            for (int p = 0; mods[p].hf && s == FSDP_OK; p++)
                for (int ab = 0; ab < 2 && s == FSDP_OK && (targets & mods[p].bit); ab++) {
                    char name[192], tn[40];
                    snprintf(name, sizeof name, "%s%d.%s.lora_%c.weight", fsdp_hf_lora_prefix(mc), l,
                             mods[p].hf, ab ? 'B' : 'A');
                    snprintf(tn, sizeof tn, "lora_%c_%s", ab ? 'b' : 'a', mods[p].ours);
                    const int i = fsdp_st_find(&st, name), t = fsdp_unit_find(u, tn);
                    fsdp_tensor_info ti;
                    if (pass == 1) {
                        const size_t n = (size_t)(st.t[i].shape[0] * st.t[i].shape[1]);
                        float *nb = realloc(buf, n * sizeof *buf);
                        s = nb ? fsdp_st_read_f32(&st, i, 0, n, nb)
                               : FSDP_ERR(FSDP_ENOMEM, "no memory for %s", name);
                        if (nb) buf = nb;
                        s = fsdp_comm_agree(fsdp_engine_comm(eng), s, "reading --init-adapter");
                        if (s == FSDP_OK) s = fsdp_unit_load_tensor(u, t, buf, -1);
                    } else if (t < 0 || fsdp_unit_tensor_info(u, t, &ti) != FSDP_OK) {
                        s = FSDP_ERR(FSDP_EINTERNAL, "unit %s has no %s", fsdp_unit_name(u), tn);
                    } else if (i < 0) {
                        s = fsdp_set_error(FSDP_EFORMAT, "%s: no tensor %s", mpath, name);
                    } else if (st.t[i].ndim != 2 || st.t[i].shape[0] != ti.shape[0] ||
                               st.t[i].shape[1] != ti.shape[1] || st.t[i].dtype == FSDP_ST_OTHER) {
                        s = fsdp_set_error(FSDP_EFORMAT, "%s: tensor %s is not %lld x %lld F32/BF16/F16",
                                           mpath, name, (long long)ti.shape[0], (long long)ti.shape[1]);
                    }
                    found += pass == 0;
                }
        }
        if (pass == 0 && s == FSDP_OK && found != st.n)
            s = fsdp_set_error(FSDP_EFORMAT,
                               "%s holds %d tensors, this run's adapters are %d: other modules or layers",
                               mpath, st.n, found);
        if (pass == 0) s = fsdp_comm_agree(fsdp_engine_comm(eng), s, "checking --init-adapter");
    }
    free(buf);
    fsdp_st_close(&st);
    free(cpath);
    free(mpath);
    return s;
}
