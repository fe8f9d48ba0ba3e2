/* export.c — `fsdp-train export`: a checkpoint's full model as .safetensors (fp32, or bf16 with
 * --export-dtype) with its family's Hugging Face tensor names and layout (the family's tensor map,
 * fsdp_model_hf_map: GPT-2's Conv1D weights transposed to [in, out], embeddings cut to the real vocabulary,
 * fused tensors split, tied tensors stored once), plus the family's config.json beside it. Reads shard files
 * directly, so it needs no engine and no particular world size; a checkpoint of a run with frozen
 * tensors (--freeze), which holds only the trainable ones, is loaded into a model of one process (fp32)
 * that restores the frozen ones from where the run started, and they are read from it. */
#include "train/train.h"
#include "train/model_load.h"
#include "train/hf.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "data/bpe.h"
#include "data/data.h"
#include "io/json.h"
#include "checkpoint/checkpoint.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char name[128];
    int unit, tensor, transpose, ndim;
    int64_t shape[2];  /* exported shape */
    size_t row0, rows; /* the model tensor's rows this file tensor holds */
    uint64_t begin, end;
    int lora;              /* --merge: the LoRA projection to fold in (fsdp_hf_lora_modules), or -1 */
    float lscale;          /* its alpha / r */
    const char *lora_ours; /* its adapters' suffix (lora_a_<ours>) */
} export_tensor;

/* The LoRA projection (an index into fsdp_hf_lora_modules) a map entry is: its Hugging Face name ends
 * in ".<module>.weight" ("model.layers.3.mlp.up_proj.weight", "h.0.attn.c_attn.weight"), or -1. */
static int lora_proj_of(const fsdp_model_config *mc, const char *hf_name) {
    const fsdp_hf_lora_module *mods = fsdp_hf_lora_modules(mc);
    for (int p = 0; mods[p].hf; p++) {
        char mod[64];
        snprintf(mod, sizeof mod, ".%s.weight", mods[p].hf);
        if (strlen(hf_name) >= strlen(mod) && !strcmp(hf_name + strlen(hf_name) - strlen(mod), mod)) return p;
    }
    return -1;
}

static float lora_scale_of(const fsdp_model_config *mc) {
    const double a = mc->lora_alpha > 0 ? mc->lora_alpha : 2.0 * mc->lora_rank;
    return mc->lora_rank > 0 ? (float)(a / mc->lora_rank) : 0.0f;
}

static int ckpt_unit(fsdp_ckpt_reader *r, const char *name) {
    for (int u = 0; u < fsdp_ckpt_num_units(r); u++)
        if (!strcmp(fsdp_ckpt_unit_desc(r, u)->name, name)) return u;
    return -1;
}

/* The file's tensors, in the family's map order (its tied entries left out: the tensor they are
 * tied to is stored once); every tensor of the checkpoint must be exported by some entry. */
static fsdp_status plan(fsdp_ckpt_reader *r, const fsdp_model_config *mc, size_t esize, int adapter,
                        export_tensor **out, int *n_out) {
    fsdp_hf_map map;
    FSDP_TRY(fsdp_model_hf_map(mc, &map));
    export_tensor *ts = calloc(2 * (size_t)map.n + 1, sizeof *ts);
    fsdp_status s = ts ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for %d tensors", map.n);
    int n = 0;
    uint64_t off = 0;
    const int targets = fsdp_hf_lora_targets(mc);
    const fsdp_hf_lora_module *mods = fsdp_hf_lora_modules(mc);
    for (int k = 0; k < map.n && s == FSDP_OK; k++) {
        const fsdp_hf_tensor *m = &map.t[k];
        if (m->tied) continue;
        const int lp = lora_proj_of(mc, m->hf_name);
        if (adapter) { /* PEFT's adapter file: A (r, in) and B (out, r) of each targeted projection */
            int layer;
            if (lp < 0 || !(targets & mods[lp].bit) || sscanf(m->unit, "h%d", &layer) != 1) continue;
            const int u = ckpt_unit(r, m->unit);
            const fsdp_ckpt_unit *U = u >= 0 ? fsdp_ckpt_unit_desc(r, u) : NULL;
            for (int ab = 0; ab < 2 && s == FSDP_OK; ab++) {
                char tn[32];
                snprintf(tn, sizeof tn, "lora_%c_%s", ab ? 'b' : 'a', mods[lp].ours);
                int t = -1;
                for (int i = 0; U && i < U->n_tensors && t < 0; i++)
                    if (!strcmp(U->tensors[i].name, tn)) t = i;
                if (t < 0 || U->tensors[t].ndim != 2) {
                    s = fsdp_set_error(FSDP_EFORMAT, "%s: the checkpoint has no adapter %s.%s",
                                       fsdp_ckpt_dir(r), m->unit, tn);
                    break;
                }
                export_tensor *e = &ts[n++];
                snprintf(e->name, sizeof e->name, "%s%d.%s.lora_%c.weight", fsdp_hf_lora_prefix(mc), layer,
                         mods[lp].hf, ab ? 'B' : 'A');
                e->unit = u, e->tensor = t, e->ndim = 2, e->lora = -1;
                e->rows = (size_t)U->tensors[t].shape[0];
                e->shape[0] = U->tensors[t].shape[0], e->shape[1] = U->tensors[t].shape[1];
                e->begin = off;
                off += esize * (uint64_t)e->shape[0] * (uint64_t)e->shape[1];
                e->end = off;
            }
            continue;
        }
        int u = ckpt_unit(r, m->unit), t = -1;
        const fsdp_ckpt_unit *U = u >= 0 ? fsdp_ckpt_unit_desc(r, u) : NULL;
        for (int i = 0; U && i < U->n_tensors && t < 0; i++)
            if (!strcmp(U->tensors[i].name, m->tensor)) t = i;
        const fsdp_ckpt_tensor *T = t >= 0 ? &U->tensors[t] : NULL;
        const int64_t cols = T && T->ndim == 2 ? T->shape[1] : 1;
        if (!T || T->alias_of >= 0 || T->ndim > 2 || (m->cols ? m->cols : 1) != cols ||
            m->row0 + m->rows > T->shape[0]) {
            s = fsdp_set_error(FSDP_EFORMAT, "%s: the checkpoint has no tensor %s.%s of the shape %s needs",
                               fsdp_ckpt_dir(r), m->unit, m->tensor, m->hf_name);
            break;
        }
        export_tensor *e = &ts[n++];
        snprintf(e->name, sizeof e->name, "%s", m->hf_name);
        e->unit = u;
        e->tensor = t;
        e->transpose = m->transpose && m->cols;
        e->ndim = m->cols ? 2 : 1;
        e->row0 = (size_t)m->row0;
        e->rows = (size_t)m->rows;
        e->shape[0] = e->transpose ? cols : m->rows;
        e->shape[1] = e->transpose ? m->rows : cols;
        e->begin = off;
        off += esize * (uint64_t)e->rows * (uint64_t)cols;
        e->end = off;
        e->lora = lp >= 0 && (targets & mods[lp].bit) ? lp : -1; /* folded in (--merge) */
        e->lscale = lora_scale_of(mc);
        e->lora_ours = e->lora >= 0 ? mods[lp].ours : NULL;
    }
    /* Nothing of the checkpoint may be left behind (a tensor no entry names; LoRA's adapters are folded
     * in, or are the adapter file). */
    for (int u = 0; u < fsdp_ckpt_num_units(r) && s == FSDP_OK && !adapter; u++) {
        const fsdp_ckpt_unit *U = fsdp_ckpt_unit_desc(r, u);
        for (int t = 0; t < U->n_tensors && s == FSDP_OK; t++) {
            int found = U->tensors[t].alias_of >= 0 || (targets && !strncmp(U->tensors[t].name, "lora_", 5));
            for (int i = 0; i < n && !found; i++)
                found = ts[i].unit == u && ts[i].tensor == t;
            if (!found)
                s = fsdp_set_error(FSDP_EFORMAT, "%s: tensor %s.%s has no %s name", fsdp_ckpt_dir(r), U->name,
                                   U->tensors[t].name, mc->family->name);
        }
    }
    fsdp_hf_map_free(&map);
    if (s != FSDP_OK) {
        free(ts);
        return s;
    }
    *out = ts;
    *n_out = n;
    return FSDP_OK;
}

static char *header_json(const export_tensor *ts, int n, int64_t step, const char *dtype) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *meta = cJSON_AddObjectToObject(j, "__metadata__");
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)step);
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "source", "fsdp.c");
    cJSON_AddStringToObject(meta, "step", buf);
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "dtype", dtype);
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < ts[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)ts[i].begin));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)ts[i].end));
        cJSON_AddItemToObject(j, ts[i].name, t);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* The token ids of the Hugging Face folder the tokenizer came from (tpath is DIR/tokenizer.json and
 * DIR/config.json exists): its bos/eos/pad_token_id, copied into j as they are (eos may be a list), so
 * the export keeps the model's own special tokens. *found = whether that folder gave any. */
static fsdp_status tokenizer_folder_ids(const char *tpath, cJSON *j, int *found) {
    *found = 0;
    const char *base = tpath ? strrchr(tpath, '/') : NULL;
    if (!tpath || strcmp(base ? base + 1 : tpath, "tokenizer.json") != 0) return FSDP_OK;
    char dir[4096];
    fsdp_path_dirname(tpath, dir, sizeof dir);
    char *path = fsdp_strdupf("%s/config.json", dir), *text = NULL;
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    cJSON *src = NULL;
    size_t n = 0;
    fsdp_status s = FSDP_OK;
    if (access(path, F_OK) == 0) {
        s = fsdp_io_read_file(path, &text, &n);
        if (s == FSDP_OK) s = fsdp_json_parse(text, n, path, &src);
    }
    static const char *const keys[] = {"bos_token_id", "eos_token_id", "pad_token_id", NULL};
    for (int k = 0; keys[k] && src && s == FSDP_OK; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, keys[k]);
        if (!v || cJSON_IsNull(v)) continue;
        cJSON *d = cJSON_Duplicate(v, 1);
        if (!d || !cJSON_AddItemToObject(j, keys[k], d)) {
            cJSON_Delete(d);
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for config.json");
        }
        *found = 1;
    }
    cJSON_Delete(src);
    fsdp_mem_free(text);
    free(path);
    return s;
}

/* config.json beside the model: the family's fields, then the token ids (the tokenizer's folder's, else
 * the trainer's end-of-text token) and what tokenizes the model. */
static fsdp_status write_config_json(const char *out, const fsdp_model_config *mc, int eot, const char *tpath,
                                     fsdp_dtype dt) {
    char dir[4096];
    fsdp_path_dirname(out, dir, sizeof dir);
    char *path = fsdp_strdupf("%s/config.json", dir);
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    fsdp_status s = FSDP_OK;
    int found = 0;
    if (!path || !j) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for config.json");
        goto done;
    }
    s = mc->family->hf_write_config(mc, j);
    if (s != FSDP_OK) goto done;
    const int V = mc->vocab_size;
    if (dt == FSDP_BF16) cJSON_AddStringToObject(j, "torch_dtype", "bfloat16"); /* the tensors' dtype */
    s = tokenizer_folder_ids(tpath, j, &found);
    if (s != FSDP_OK) goto done;
    if (!found) {
        cJSON_AddNumberToObject(j, "bos_token_id", eot >= 0 ? eot : V - 1);
        cJSON_AddNumberToObject(j, "eos_token_id", eot >= 0 ? eot : V - 1);
    }
    /* GPT-2 without a tokenizer of its own is GPT-2's (or the byte vocabulary); another family says nothing.
     */
    const int gpt2 = !strcmp(mc->family->name, "gpt2");
    if (tpath || V == 257 || gpt2)
        cJSON_AddStringToObject(j, "tokenizer",
                                tpath      ? "tokenizer.json"
                                : V == 257 ? "bytes (ids 0..255), 256 = end of text"
                                           : "gpt2");
    text = cJSON_Print(j);
    if (!text) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for config.json");
        goto done;
    }
    s = fsdp_io_write_file_atomic(path, text, strlen(text), 0);
done:
    free(text);
    cJSON_Delete(j);
    free(path);
    return s;
}

static fsdp_status export_checkpoint(const fsdp_train_config *cfg, fsdp_dir_stage *st, const char *scratch,
                                     FILE *out);

int fsdp_export_managed_name(const char *name) {
    static const char *const files[] = {"model.safetensors",       "config.json",
                                        "tokenizer.json",          "tokenizer_config.json",
                                        "special_tokens_map.json", "adapter_model.safetensors",
                                        "adapter_config.json",     NULL};
    for (int i = 0; files[i]; i++) {
        size_t n = strlen(files[i]);
        if (!strncmp(name, files[i], n) && (name[n] == '\0' || name[n] == '.'))
            return 1; /* or its temporary */
    }
    return 0;
}

/* The export's paths (fsdp_io_claim): --out, config.json beside it and --logits are outputs; the
 * checkpoint's step folder and --init-from are input folders no output may lie in, and the checkpoint
 * folder's own entries (latest, step_*, ...) are not outputs either. */
static fsdp_status export_claims(const fsdp_train_config *cfg, const char *step_dir, const char *odir) {
    const unsigned D = FSDP_CLAIM_DIR, I = FSDP_CLAIM_IN, O = FSDP_CLAIM_OUT;
    char parent[4096];
    fsdp_path_dirname(step_dir, parent, sizeof parent);
    FSDP_TRY(fsdp_io_claim(step_dir, "--checkpoint", D | I, NULL)); /* the specific one first */
    FSDP_TRY(fsdp_io_claim(parent, "the folder of --checkpoint", D | I, fsdp_ckpt_managed_name));
    FSDP_TRY(fsdp_io_claim(cfg->init_from, "--init-from", D | I, NULL));
    FSDP_TRY(fsdp_io_claim(cfg->tokenizer, "--tokenizer", I, NULL));
    FSDP_TRY(fsdp_io_claim(cfg->out, "--out", O, NULL));
    char *cj = fsdp_strdupf("%s/config.json", odir);
    fsdp_status s = cj ? fsdp_io_claim(cj, "config.json beside --out", O, NULL)
                       : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    free(cj);
    if (s == FSDP_OK) s = fsdp_io_claim(cfg->logits, "--logits", O, NULL);
    return s;
}

/* SIGINT / SIGTERM during an export: recorded, and the export stops at its next tensor (or stage) with
 * an error, so that its temporaries are removed on the way out (the default action would leave them). */
static volatile sig_atomic_t export_signal;
static void on_signal(int sig) { export_signal = sig; }

static fsdp_status interrupted(void) {
    return export_signal
               ? fsdp_set_error(FSDP_EIO, "export interrupted by %s: its temporary files are removed",
                                export_signal == SIGINT ? "SIGINT" : "SIGTERM")
               : FSDP_OK;
}

static fsdp_status export_run(const fsdp_train_config *cfg, FILE *out);

/* The number of trailing components of folder dir that do not exist yet (the export creates them). */
static int missing_levels(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    int n = 0;
    struct stat st;
    while (lstat(p, &st) != 0 && errno == ENOENT && strcmp(p, ".") && strcmp(p, "/")) {
        n++;
        char up[4096];
        fsdp_path_dirname(p, up, sizeof up);
        snprintf(p, sizeof p, "%s", up);
    }
    return n;
}

/* After a failed export: the folders it created above --out's folder, if they are empty (rmdir), innermost
 * first (the folder itself is made only by the commit's rename). */
static void remove_created(const char *dir, int levels) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (int i = 0; i < levels && (rmdir(p) == 0 || errno == ENOENT); i++) {
        char up[4096];
        fsdp_path_dirname(p, up, sizeof up);
        snprintf(p, sizeof p, "%s", up);
    }
}

fsdp_status fsdp_export_run(const fsdp_train_config *cfg, FILE *out) {
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    export_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    char odir[4096];
    fsdp_path_dirname(cfg->out ? cfg->out : ".", odir, sizeof odir);
    const int levels = missing_levels(odir);
    fsdp_status s = export_run(cfg, out);
    if (s != FSDP_OK) remove_created(odir, levels);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    int sig = export_signal;
    export_signal = 0;
    if (sig) { /* with the temporaries gone, end as the signal asked (under the old handler) */
        fprintf(stderr, "fsdp-train: error: %s\n", s != FSDP_OK ? fsdp_last_error() : "export interrupted");
        /* the process ends by the signal: what it printed before (a run's log, under --export-final) must
         * not die in stdio's buffers */
        fflush(NULL);
        raise(sig);
    }
    return s;
}

static fsdp_status export_stage(const fsdp_train_config *cfg, fsdp_dir_stage *st);

static fsdp_status export_run(const fsdp_train_config *cfg, FILE *out) {
    fsdp_dir_stage st = {0};
    if (!cfg->init_from) return export_checkpoint(cfg, &st, NULL, out);
    /* A Hugging Face folder: through a temporary one-rank checkpoint inside the new folder (removed before
     * it takes --out's folder's place). --out outside the folder it converts, before anything is written. */
    fsdp_io_inputs_reset();
    fsdp_status s = fsdp_io_claim(cfg->init_from, "--init-from", FSDP_CLAIM_DIR | FSDP_CLAIM_IN, NULL);
    if (s == FSDP_OK) s = fsdp_io_claim(cfg->out, "--out", FSDP_CLAIM_OUT, NULL);
    if (s == FSDP_OK) s = export_stage(cfg, &st);
    if (s != FSDP_OK) return s;
    char *tmp = fsdp_strdupf("%s/init-from.tmp", st.tmp), *step_dir = NULL;
    s = tmp ? fsdp_io_claim(tmp, "the temporary checkpoint of --init-from", FSDP_CLAIM_OUT, NULL)
            : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_train_hf_to_checkpoint(cfg->init_from, tmp, &step_dir);
    if (s == FSDP_OK) s = interrupted();
    if (s == FSDP_OK) {
        fsdp_train_config c = *cfg;
        c.checkpoint = step_dir;
        c.init_from = NULL;
        s = export_checkpoint(&c, &st, tmp, out); /* commits or aborts st */
    } else {
        fsdp_io_dir_abort(&st);
    }
    free(step_dir);
    free(tmp);
    return s;
}

/* The names export writes in --out's folder (the stage's own entries, fsdp_io_dir_stage): --out's own
 * (and what begins with it and a dot: temporaries of earlier versions), config.json, the tokenizer files
 * (which may be an input: --tokenizer DIR/tokenizer.json is copied before the swap) and --logits when it
 * lies in the folder. */
typedef struct {
    const char *out, *logits; /* last components; logits NULL unless in the folder */
} export_names;

static unsigned export_own(const char *name, void *arg) {
    const export_names *x = arg;
    size_t n = strlen(x->out);
    if (!strncmp(name, "tokenizer", 9) || !strncmp(name, "special_tokens_map.json", 23))
        return fsdp_export_managed_name(name) ? FSDP_STAGE_OWN | FSDP_STAGE_MAY_BE_INPUT : 0u;
    if (fsdp_export_managed_name(name) ||
        (!strncmp(name, x->out, n) && (name[n] == '\0' || name[n] == '.')) ||
        (x->logits && !strcmp(name, x->logits)))
        return FSDP_STAGE_OWN;
    return 0;
}

fsdp_status fsdp_export_check_folder(const char *dir, const char *what) {
    export_names x = {"model.safetensors", NULL};
    return fsdp_io_dir_check(dir, "export", what, export_own, &x);
}

static const char *last_component(const char *p) { return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; }

/* 1 if --logits lies in --out's folder (then it is written into the new folder with the rest). */
static int logits_in_folder(const fsdp_train_config *cfg) {
    if (!cfg->logits) return 0;
    char a[4096], b[4096];
    fsdp_path_dirname(cfg->out, a, sizeof a);
    fsdp_path_dirname(cfg->logits, b, sizeof b);
    char *na = fsdp_io_normalise(a), *nb = fsdp_io_normalise(b);
    int same = na && nb && !strcmp(na, nb);
    free(na);
    free(nb);
    return same;
}

/* Every destination is checked before the work: --logits (outside --out's folder: it takes a new file),
 * then --out, config.json and --logits inside the folder when it exists (their kind alone); then --out's
 * folder is staged (fsdp_io_dir_stage): the new folder beside it, .NAME.export.XXXXXX, that the commit swaps
 * into its place (beside the folder a symbolic link names, when the folder is one). */
static fsdp_status export_stage(const fsdp_train_config *cfg, fsdp_dir_stage *st) {
    char odir[4096];
    fsdp_path_dirname(cfg->out, odir, sizeof odir);
    struct stat sb;
    const int have = lstat(odir, &sb) == 0, in = logits_in_folder(cfg);
    if (cfg->logits && !in) FSDP_TRY(fsdp_out_check(cfg->logits, "--logits"));
    if (cfg->logits && in && have) FSDP_TRY(fsdp_out_check_dest(cfg->logits, "--logits"));
    if (have) { /* without writing there: a kill now leaves the old folder as it was */
        FSDP_TRY(fsdp_out_check_dest(cfg->out, "--out"));
        char *cj = fsdp_strdupf("%s/config.json", odir);
        fsdp_status s = cj ? fsdp_out_check_dest(cj, "config.json beside --out")
                           : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        free(cj);
        FSDP_TRY(s);
    }
    const char *ob = last_component(odir);
    if (!strcmp(ob, ".") || !strcmp(ob, "..") || !strcmp(odir, "/"))
        return fsdp_set_error(FSDP_EINVAL,
                              "export --out %s: export replaces the folder of --out as one unit (the model, "
                              "config.json, the tokenizer), which cannot be %s: give it a folder of its own "
                              "(--out DIR/%s)",
                              cfg->out, odir, last_component(cfg->out));
    /* a symbolic link as the folder (out -> /bigdisk/out) is followed: the folder it names is replaced */
    char *real = NULL;
    if (have && S_ISLNK(sb.st_mode) && !(real = realpath(odir, NULL)))
        return fsdp_set_error(FSDP_EIO,
                              "export --out %s: its folder %s is a symbolic link that does not resolve: %s",
                              cfg->out, odir, strerror(errno));
    export_names x = {last_component(cfg->out), in ? last_component(cfg->logits) : NULL};
    fsdp_status s =
        fsdp_io_dir_stage(st, real ? real : odir, "export", "--out's folder", "export", export_own, &x);
    free(real);
    return s;
}

/* The run's tokenizer (--tokenizer, or the checkpoint's), checked against the model's vocabulary
 * before anything is written: *tpath (NULL: bytes), *eot its end-of-text id (-1 without one). */
static fsdp_status export_tokenizer(const fsdp_train_config *cfg, int vocab, char **tpath, int *eot) {
    *eot = -1;
    FSDP_TRY(fsdp_train_ckpt_tokenizer(cfg->tokenizer, cfg->checkpoint, tpath));
    if (!*tpath) return FSDP_OK;
    fsdp_bpe *bpe = NULL;
    fsdp_status s = fsdp_bpe_load(&bpe, *tpath);
    *eot = fsdp_bpe_eot(bpe);
    if (s == FSDP_OK && fsdp_bpe_vocab_size(bpe) > vocab)
        s = fsdp_set_error(FSDP_EINVAL, "%s: more tokens (%d) than the model's vocabulary (%d)", *tpath,
                           fsdp_bpe_vocab_size(bpe), vocab);
    fsdp_bpe_free(bpe);
    return s;
}

/* --merge: *out (rows x cols, reallocated) = src + scale B A, B (rows, r) and A (r, cols) of projection
 * e->lora gathered from the model (fp32, one process) that loaded the checkpoint; sums in double. */
static fsdp_status merge_lora(fsdp_engine_t *feng, const export_tensor *e, const float *src, size_t cols,
                              float **out) {
    if (!feng) return FSDP_ERR(FSDP_EINTERNAL, "--merge without a model");
    fsdp_unit_t *U = fsdp_engine_unit(feng, e->unit);
    char na[32], nb[32];
    snprintf(na, sizeof na, "lora_a_%s", e->lora_ours);
    snprintf(nb, sizeof nb, "lora_b_%s", e->lora_ours);
    const int ta = fsdp_unit_find(U, na), tb = fsdp_unit_find(U, nb);
    fsdp_tensor_info ia, ib;
    if (ta < 0 || tb < 0)
        return fsdp_set_error(FSDP_EFORMAT, "unit %s has no %s / %s", fsdp_unit_name(U), na, nb);
    FSDP_TRY(fsdp_unit_tensor_info(U, ta, &ia));
    FSDP_TRY(fsdp_unit_tensor_info(U, tb, &ib));
    const size_t R = (size_t)ia.shape[0], rows = e->rows;
    if ((size_t)ia.shape[1] != cols || (size_t)ib.shape[0] != rows || (size_t)ib.shape[1] != R)
        return fsdp_set_error(FSDP_EFORMAT, "unit %s: adapters %s %s do not fit a (%zu, %zu) weight",
                              fsdp_unit_name(U), na, nb, rows, cols);
    float *A = NULL, *B = NULL;
    fsdp_mem_free(*out);
    *out = NULL;
    fsdp_status s = fsdp_mem_alloc((void **)&A, 4 * R * cols, FSDP_MEM_OTHER);
    if (s == FSDP_OK) s = fsdp_mem_alloc((void **)&B, 4 * rows * R, FSDP_MEM_OTHER);
    if (s == FSDP_OK) s = fsdp_mem_alloc((void **)out, 4 * rows * cols, FSDP_MEM_OTHER);
    if (s == FSDP_OK) s = fsdp_unit_gather_tensor(U, ta, A, 0);
    if (s == FSDP_OK) s = fsdp_unit_gather_tensor(U, tb, B, 0);
    for (size_t a = 0; s == FSDP_OK && a < rows; a++)
        for (size_t b = 0; b < cols; b++) {
            double d = 0;
            for (size_t k = 0; k < R; k++)
                d += (double)B[a * R + k] * (double)A[k * cols + b];
            (*out)[a * cols + b] = (float)((double)src[a * cols + b] + (double)e->lscale * d);
        }
    fsdp_mem_free(A);
    fsdp_mem_free(B);
    return s;
}

/* safetensors: u64 little-endian header length, JSON header (space-padded to 8 bytes), then every
 * tensor's data (fp32, or bf16 rounded to nearest even) in ts order, read one unit's flat buffer at a
 * time (transposed where asked). */
static fsdp_status export_write(fsdp_out *o, fsdp_ckpt_reader *r, fsdp_engine_t *feng,
                                const export_tensor *ts, int n, const char *hdr, fsdp_dtype dt) {
    const int fd = o->fd;
    const char *tmp = o->tmp;
    float *flat = NULL, *buf = NULL, *fz = NULL, *mbuf = NULL;
    fsdp_bf16 *b16 = NULL;
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    uint64_t hl = padded;
    fsdp_status s = fsdp_io_write_all(fd, &hl, 8, tmp);
    if (s == FSDP_OK) s = fsdp_io_write_all(fd, hdr, hlen, tmp);
    if (s == FSDP_OK && padded > hlen) s = fsdp_io_write_all(fd, "        ", padded - hlen, tmp);
    for (int i = 0; i < n && s == FSDP_OK; i++) {
        if ((s = interrupted()) != FSDP_OK) break;
        const fsdp_ckpt_unit *U = fsdp_ckpt_unit_desc(r, ts[i].unit);
        if (i == 0 || ts[i].unit != ts[i - 1].unit) { /* one unit's flat buffer at a time */
            fsdp_mem_free(flat);
            flat = NULL;
            s = fsdp_mem_alloc((void **)&flat, 4 * (U->numel ? U->numel : 1), FSDP_MEM_OTHER);
            if (s == FSDP_OK) s = fsdp_ckpt_read_range(r, ts[i].unit, 0, U->numel, flat, NULL, NULL);
            if (s != FSDP_OK) break;
        }
        const fsdp_ckpt_tensor *T = &U->tensors[ts[i].tensor];
        size_t rows = ts[i].rows, cols = T->ndim == 2 ? (size_t)T->shape[1] : 1;
        const float *src = flat + T->offset + ts[i].row0 * cols;
        if (T->frozen) { /* not in the checkpoint: from the model that restored it */
            fsdp_mem_free(fz);
            fz = NULL;
            s = feng ? fsdp_mem_alloc((void **)&fz, 4 * (T->numel ? T->numel : 1), FSDP_MEM_OTHER)
                     : FSDP_ERR(FSDP_EINTERNAL, "frozen tensor %s.%s without a model", U->name, T->name);
            if (s == FSDP_OK)
                s = fsdp_unit_gather_tensor(fsdp_engine_unit(feng, ts[i].unit), ts[i].tensor, fz, 0);
            if (s != FSDP_OK) break;
            src = fz + ts[i].row0 * cols;
        }
        if (ts[i].lora >= 0) { /* --merge: W + (alpha / r) B A, from the model that restored W */
            s = merge_lora(feng, &ts[i], src, cols, &mbuf);
            if (s != FSDP_OK) break;
            src = mbuf;
        }
        if (ts[i].transpose) {
            fsdp_mem_free(buf);
            buf = NULL;
            s = fsdp_mem_alloc((void **)&buf, 4 * rows * cols, FSDP_MEM_OTHER);
            if (s != FSDP_OK) break;
            for (size_t a = 0; a < rows; a++)
                for (size_t b = 0; b < cols; b++)
                    buf[b * rows + a] = src[a * cols + b];
            src = buf;
        }
        if (dt == FSDP_BF16) { /* rounded to nearest even, in one pass per tensor */
            fsdp_mem_free(b16);
            b16 = NULL;
            s = fsdp_mem_alloc((void **)&b16, 2 * rows * cols + 2, FSDP_MEM_OTHER);
            if (s != FSDP_OK) break;
            fsdp_f32_to_bf16_n(b16, src, rows * cols);
            s = fsdp_io_write_all(fd, b16, 2 * rows * cols, tmp);
        } else {
            s = fsdp_io_write_all(fd, src, 4 * rows * cols, tmp);
        }
    }
    fsdp_mem_free(b16);
    fsdp_mem_free(buf);
    fsdp_mem_free(fz);
    fsdp_mem_free(mbuf);
    fsdp_mem_free(flat);
    return s;
}

/* A LoRA checkpoint exports merged or as an adapter folder; anything else as it is. */
static fsdp_status lora_mode_check(const fsdp_train_config *cfg, const fsdp_model_config *mc,
                                   const char *step_dir) {
    const int lora = mc->lora_rank > 0;
    if (cfg->merge && cfg->adapter)
        return fsdp_set_error(FSDP_EINVAL, "--merge and --adapter are two exports: pass one");
    if (!lora && (cfg->merge || cfg->adapter))
        return fsdp_set_error(FSDP_EINVAL,
                              "%s has no LoRA adapters (trained without --lora-rank): export it "
                              "without --%s",
                              step_dir, cfg->merge ? "merge" : "adapter");
    if (lora && !cfg->merge && !cfg->adapter)
        return fsdp_set_error(FSDP_EINVAL,
                              "%s holds LoRA adapters (rank %d) on a frozen base: pass --merge (the "
                              "full model, adapters folded in) or --adapter (PEFT's adapter folder)",
                              step_dir, mc->lora_rank);
    const char *base = strrchr(cfg->out, '/');
    base = base ? base + 1 : cfg->out;
    if (cfg->adapter && strcmp(base, "adapter_model.safetensors") != 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "--adapter: --out must name DIR/adapter_model.safetensors (PEFT "
                              "loads that name), not %s",
                              cfg->out);
    return FSDP_OK;
}

/* adapter_config.json beside the adapter file: PEFT's LoraConfig of the run (dropout 0, no biases). */
static fsdp_status write_adapter_config(const char *out, const fsdp_model_config *mc, const char *base) {
    char dir[4096];
    fsdp_path_dirname(out, dir, sizeof dir);
    char *path = fsdp_strdupf("%s/adapter_config.json", dir), *text = NULL;
    cJSON *j = cJSON_CreateObject(), *tm = j ? cJSON_AddArrayToObject(j, "target_modules") : NULL;
    const int targets = fsdp_hf_lora_targets(mc), gpt2 = !strcmp(mc->family->name, "gpt2");
    const fsdp_hf_lora_module *mods = fsdp_hf_lora_modules(mc);
    for (int p = 0; tm && mods[p].hf; p++)
        if (targets & mods[p].bit) cJSON_AddItemToArray(tm, cJSON_CreateString(mods[p].peft));
    const double alpha = mc->lora_alpha > 0 ? mc->lora_alpha : 2.0 * mc->lora_rank;
    int ok = path && tm && cJSON_AddStringToObject(j, "peft_type", "LORA") &&
             cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM") &&
             cJSON_AddNumberToObject(j, "r", mc->lora_rank) &&
             cJSON_AddNumberToObject(j, "lora_alpha", alpha) &&
             cJSON_AddNumberToObject(j, "lora_dropout", 0) && cJSON_AddStringToObject(j, "bias", "none") &&
             cJSON_AddBoolToObject(j, "fan_in_fan_out", gpt2) /* GPT-2's Conv1D */ &&
             cJSON_AddTrueToObject(j, "inference_mode") && cJSON_AddFalseToObject(j, "use_rslora") &&
             cJSON_AddFalseToObject(j, "use_dora") &&
             (base ? cJSON_AddStringToObject(j, "base_model_name_or_path", base)
                   : cJSON_AddNullToObject(j, "base_model_name_or_path")) &&
             (text = cJSON_Print(j)) != NULL;
    fsdp_status s = ok ? fsdp_io_write_file_atomic(path, text, strlen(text), 0)
                       : FSDP_ERR(FSDP_ENOMEM, "no memory for adapter_config.json");
    free(text);
    cJSON_Delete(j);
    free(path);
    return s;
}

/* A checkpoint's model in fp32 on a world of one, its frozen tensors restored (fsdp_train_ckpt_load). */
static fsdp_status frozen_model(const char *step_dir, fsdp_comm_t **comm, run_model *rm) {
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    FSDP_TRY(fsdp_comm_init(comm, &cc, NULL, NULL));
    fsdp_train_config c = fsdp_train_config_default();
    fsdp_ckpt_state st;
    fsdp_status s = fsdp_train_load_checkpoint_model(step_dir, *comm, &c, rm, &st);
    if (s == FSDP_OK && c.precision != FSDP_PRECISION_FP32) { /* the frozen values as the source holds them */
        fsdp_train_model_free(rm);
        c.precision = FSDP_PRECISION_FP32;
        s = fsdp_train_model_build(&c, *comm, rm);
        if (s == FSDP_OK) s = fsdp_train_ckpt_load(rm, step_dir, &st);
    }
    return s;
}

/* The export of cfg->checkpoint into st's new folder (staged here when st->tmp is NULL), which then takes
 * the place of --out's folder (or, on failure, is removed); scratch (a folder inside it: --init-from's
 * temporary checkpoint) is removed before. */
static fsdp_status export_checkpoint(const fsdp_train_config *cfg, fsdp_dir_stage *st, const char *scratch,
                                     FILE *out) {
    char *step_dir = NULL, *hdr = NULL, *tpath = NULL, *sout = NULL, *slogits = NULL;
    fsdp_ckpt_reader *r = NULL;
    export_tensor *ts = NULL;
    int n = 0, eot = -1;
    fsdp_out o = {.fd = -1};
    fsdp_train_config c = fsdp_train_config_default();
    fsdp_model_config mc;
    fsdp_ckpt_state st_ck;
    char odir[4096];
    fsdp_io_inputs_reset();
    fsdp_status s = fsdp_ckpt_resolve(cfg->checkpoint, &step_dir);
    if (s == FSDP_OK) s = fsdp_ckpt_open(&r, step_dir);
    if (s == FSDP_OK) s = fsdp_train_config_from_json(&c, fsdp_ckpt_config(r), step_dir);
    if (s == FSDP_OK) s = fsdp_train_model_config(&c, &mc);
    if (s == FSDP_OK) s = fsdp_ckpt_state_get(r, &st_ck);
    const fsdp_dtype dt = (fsdp_dtype)cfg->export_dtype;
    if (s == FSDP_OK) s = lora_mode_check(cfg, &mc, step_dir);
    if (s == FSDP_OK) s = plan(r, &mc, fsdp_dtype_size(dt), cfg->adapter, &ts, &n);
    if (s == FSDP_OK) s = export_tokenizer(cfg, c.vocab, &tpath, &eot);
    if (s == FSDP_OK && (hdr = header_json(ts, n, st_ck.step, dt == FSDP_BF16 ? "BF16" : "F32")) == NULL)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for the safetensors header");
    fsdp_path_dirname(cfg->out, odir, sizeof odir);
    if (s == FSDP_OK) s = export_claims(cfg, step_dir, odir);
    if (s == FSDP_OK && !st->tmp) s = export_stage(cfg, st);
    /* every file into the new folder, --logits too when it lies in --out's */
    if (s == FSDP_OK && !(sout = fsdp_strdupf("%s/%s", st->tmp, last_component(cfg->out))))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK && cfg->logits &&
        !(slogits = logits_in_folder(cfg) ? fsdp_strdupf("%s/%s", st->tmp, last_component(cfg->logits))
                                          : fsdp_strdupf("%s", cfg->logits)))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_out_begin(&o, sout, "--out", 0);
    /* frozen tensors (not in the checkpoint): a model of one process restores them */
    int frozen = 0; /* some tensor written is frozen, or gets an adapter folded in */
    for (int i = 0; s == FSDP_OK && i < n; i++)
        frozen |= fsdp_ckpt_unit_desc(r, ts[i].unit)->tensors[ts[i].tensor].frozen || ts[i].lora >= 0;
    fsdp_comm_t *fcomm = NULL;
    run_model frm = {0};
    if (s == FSDP_OK && frozen) s = frozen_model(step_dir, &fcomm, &frm);
    if (s == FSDP_OK) s = export_write(&o, r, frm.eng, ts, n, hdr, dt);
    fsdp_train_model_free(&frm);
    fsdp_comm_free(fcomm);
    if (s == FSDP_OK) s = interrupted();
    if (s == FSDP_OK) s = fsdp_out_commit(&o);
    /* The run's tokenizer.json (and its Hugging Face companions) beside the model, so AutoTokenizer
     * loads the folder too. */
    int n_tok = 0;
    if (s == FSDP_OK && tpath) s = fsdp_data_copy_tokenizer(tpath, st->tmp, &n_tok);
    if (s == FSDP_OK && cfg->adapter) {
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), "init-from");
        s = write_adapter_config(sout, &mc, cJSON_IsString(from) ? from->valuestring : NULL);
    } else if (s == FSDP_OK) {
        s = write_config_json(sout, &mc, eot, tpath, dt);
    }
    if (s == FSDP_OK && slogits) s = fsdp_train_write_logits(step_dir, slogits);
    fsdp_out_abort(&o); /* a no-op once committed */
    fsdp_ckpt_close(r);
    if (scratch) fsdp_rm_tree1(scratch);
    if (s == FSDP_OK) s = interrupted();
    if (s == FSDP_OK) {
        s = fsdp_io_dir_commit(st);
    } else {
        fsdp_io_dir_abort(st);
    }
    if (s == FSDP_OK && out && tpath)
        fprintf(out, "copied %s beside it as tokenizer.json%s\n", tpath,
                n_tok > 1 ? " (with its tokenizer_config.json / special_tokens_map.json)" : "");
    if (s == FSDP_OK && out)
        fprintf(out, "exported %s (step %lld, %d tensors, %llu bytes of %s data%s) and %s beside it\n",
                cfg->out, (long long)st_ck.step, n, (unsigned long long)(n ? ts[n - 1].end : 0),
                dt == FSDP_BF16 ? "bf16" : "fp32", cfg->merge ? ", LoRA adapters folded in" : "",
                cfg->adapter ? "adapter_config.json" : "config.json");
    free(slogits);
    free(sout);
    free(tpath);
    free(hdr);
    free(ts);
    free(step_dir);
    return s;
}
