/* resume.c — what --resume checks before it loads anything: the checkpoint's model, vocabulary, data
 * shards and tokenizer against this run's, each difference named by its flag; the starting point a
 * resumed run carries on. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A resumed run keeps the starting point its first run recorded (the manifest's "init-from"). */
fsdp_status fsdp_train_carry_init_from(const char *step_dir, cJSON *cj) {
    fsdp_ckpt_reader *r = NULL;
    FSDP_TRY(fsdp_ckpt_open(&r, step_dir));
    static const char *const keys[] = {"init-from", "init-from-fingerprint"};
    fsdp_status s = FSDP_OK;
    for (int k = 0; k < 2 && s == FSDP_OK; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(fsdp_ckpt_config(r), keys[k]);
        cJSON *copy = cJSON_IsString(v) ? cJSON_CreateString(v->valuestring) : cJSON_CreateNull();
        cJSON_DeleteItemFromObjectCaseSensitive(cj, keys[k]);
        if (!copy || !cJSON_AddItemToObject(cj, keys[k], copy)) {
            cJSON_Delete(copy);
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        }
    }
    fsdp_ckpt_close(r);
    return s;
}

/* The training shards as the manifest records them: [[file name, tokens], ...] in their order (the
 * names without their folder: the data may move). */
cJSON *fsdp_train_data_shards_json(const fsdp_loader *L) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < L->n_shards; i++) {
        const char *name = strrchr(L->shards[i].file.path, '/');
        cJSON *e = cJSON_CreateArray();
        if (!e || !cJSON_AddItemToArray(a, e) ||
            !cJSON_AddItemToArray(e, cJSON_CreateString(name ? name + 1 : L->shards[i].file.path)) ||
            !cJSON_AddItemToArray(e, cJSON_CreateNumber((double)L->shards[i].file.ntok))) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* --resume continues the checkpoint's order of the data: the same --shuffle, with shuffling the same
 * --seed and --seq-len, the same --pack, and the same training shards (names and token counts, in order; a
 * manifest without the record, written before shards existed, is not checked). A manifest without "shuffle"
 * was written before shuffling existed: file order. Errors name the field, both values and the manifest. */
static fsdp_status check_data_drift(const train_run *r, const cJSON *mj, const char *what) {
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(mj, "shuffle");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(mj, "seed");
    int their_shuffle = cJSON_IsNumber(sh) ? sh->valueint : 0;
    if (their_shuffle != r->cfg.shuffle)
        return fsdp_set_error(FSDP_EINVAL,
                              "--resume: --shuffle %d in %s, %d in this run: the run would not continue the "
                              "checkpoint's order of the data; resume with --shuffle %d (nothing was loaded "
                              "or trained)",
                              their_shuffle, what, r->cfg.shuffle, their_shuffle);
    if (r->cfg.shuffle && cJSON_IsNumber(sd) && sd->valuedouble != (double)r->cfg.seed)
        return fsdp_set_error(
            FSDP_EINVAL,
            "--resume: --seed %.0f in %s, %lld in this run: --seed orders the shuffled data; "
            "resume with --seed %.0f (nothing was loaded or trained)",
            sd->valuedouble, what, (long long)r->cfg.seed, sd->valuedouble);
    /* Shuffled, the saved position counts the permuted sequences of --seq-len tokens: with another
     * length the permutation and the sequences are others, so the position means nothing there. (In
     * file order it is a token offset, which any length continues.) */
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(mj, "seq-len");
    if (r->cfg.shuffle && cJSON_IsNumber(sl) && sl->valuedouble != (double)r->cfg.seq_len)
        return fsdp_set_error(
            FSDP_EINVAL,
            "--resume: --seq-len %.0f in %s, %d in this run: the saved data position counts "
            "shuffled sequences of %.0f tokens; resume with --seq-len %.0f (or --shuffle 0 "
            "runs, whose position is a token offset) (nothing was loaded or trained)",
            sl->valuedouble, what, r->cfg.seq_len, sl->valuedouble, sl->valuedouble);
    /* --pack (resolved: auto is recorded as what it became); a manifest without it is concat's */
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(mj, "pack");
    const char *their_pack = cJSON_IsString(pk) ? pk->valuestring : "concat";
    if (strcmp(their_pack, fsdp_pack_names[r->cfg.pack]) != 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "--resume: --pack %s in %s, %s in this run: the sequences would not be the "
                              "checkpoint's; resume with --pack %s (nothing was loaded or trained)",
                              their_pack, what, fsdp_pack_names[r->cfg.pack], their_pack);
    const cJSON *theirs = cJSON_GetObjectItemCaseSensitive(mj, "data-shards");
    if (!theirs) return FSDP_OK;
    cJSON *mine = fsdp_train_data_shards_json(&r->train);
    if (!mine) return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of shards");
    fsdp_status s = FSDP_OK;
    if (!cJSON_Compare(theirs, mine, 1)) {
        int n = cJSON_GetArraySize(theirs), m = cJSON_GetArraySize(mine), i = 0;
        while (i < n && i < m && cJSON_Compare(cJSON_GetArrayItem(theirs, i), cJSON_GetArrayItem(mine, i), 1))
            i++;
        char *a = i < n ? cJSON_PrintUnformatted(cJSON_GetArrayItem(theirs, i)) : NULL;
        char *b = i < m ? cJSON_PrintUnformatted(cJSON_GetArrayItem(mine, i)) : NULL;
        s = fsdp_set_error(
            FSDP_EINVAL,
            "--resume: the training shards (data-shards) differ from the checkpoint's: shard %d "
            "is %s in %s (of %d shards) and %s in --data %s (of %d) ([file, tokens]): resume "
            "on the data the run started with (nothing was loaded or trained)",
            i + 1, a ? a : "missing", what, n, b ? b : "missing", r->cfg.data, m);
        free(a);
        free(b);
    }
    cJSON_Delete(mine);
    return s;
}

/* The data folder's tokenizer.json as the manifest records it: "crc32c:XXXXXXXX" of the whole file,
 * or "none" (byte-level data). */
fsdp_status fsdp_train_data_tokenizer_id(const char *data, char *out, size_t cap) {
    char *dir = fsdp_data_dir(data);
    char *p = dir ? fsdp_strdupf("%s/tokenizer.json", dir) : NULL;
    free(dir);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fsdp_status s =
            errno == ENOENT ? FSDP_OK : fsdp_set_error(FSDP_EIO, "cannot open %s: %s", p, strerror(errno));
        snprintf(out, cap, "none");
        free(p);
        return s;
    }
    struct stat st;
    fsdp_status s = fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                        ? FSDP_OK
                        : fsdp_set_error(FSDP_EIO, "%s is not a regular file", p);
    uint32_t crc = 0;
    unsigned char buf[65536];
    ssize_t got;
    while (s == FSDP_OK && (got = read(fd, buf, sizeof buf)) > 0)
        crc = fsdp_crc32c(crc, buf, (size_t)got);
    if (s == FSDP_OK && got < 0) s = fsdp_set_error(FSDP_EIO, "cannot read %s: %s", p, strerror(errno));
    close(fd);
    free(p);
    snprintf(out, cap, "crc32c:%08x", (unsigned)crc);
    return s;
}

/* The flag that sets a field fsdp_model_config_diff names (padded_vocab_size follows --vocab). */
static const char *model_field_flag(const char *field) {
    if (!strcmp(field, "model")) return "model";
    if (!strcmp(field, "padded_vocab_size")) return "vocab";
    const fsdp_model_field *f = fsdp_model_field_find(field);
    return f ? f->flag : NULL;
}

/* --resume continues the checkpoint's model on the checkpoint's vocabulary and tokenizer: a different
 * shape (--heads, --layers, ...), vocabulary (--vocab, meta.json's) or data tokenizer.json than the
 * manifest records is refused naming the field, before anything is loaded. */
fsdp_status fsdp_train_check_resume_drift(train_run *r, const char *step_dir) {
    fsdp_ckpt_reader *rd = NULL;
    FSDP_TRY(fsdp_ckpt_open(&rd, step_dir));
    const cJSON *mj = fsdp_ckpt_config(rd);
    char *what = fsdp_strdupf("%s/manifest.json", step_dir);
    fsdp_train_config theirs = r->cfg;
    fsdp_model_config mine_mc, their_mc;
    fsdp_status s = what ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_train_config_from_json(&theirs, mj, what);
    /* the model's own record where the manifest has one (fsdp_model_config_to_json), else its flags */
    const cJSON *mcj = cJSON_GetObjectItemCaseSensitive(mj, "model-config");
    if (s == FSDP_OK)
        s = mcj ? fsdp_model_config_from_json(mcj, what, &their_mc)
                : fsdp_train_model_config(&theirs, &their_mc);
    if (s == FSDP_OK) s = fsdp_train_model_config(&r->cfg, &mine_mc);
    /* The manifest's numbers went through JSON text (15 significant digits): a real-valued field
     * within a relative 1e-9 of the checkpoint's is the same. */
    double *pairs[][2] = {{&their_mc.norm_eps, &mine_mc.norm_eps},
                          {&their_mc.rope_theta, &mine_mc.rope_theta},
                          {&their_mc.rope_factor, &mine_mc.rope_factor},
                          {&their_mc.rope_low_freq_factor, &mine_mc.rope_low_freq_factor},
                          {&their_mc.rope_high_freq_factor, &mine_mc.rope_high_freq_factor}};
    for (size_t k = 0; s == FSDP_OK && k < sizeof pairs / sizeof pairs[0]; k++)
        if (fabs(*pairs[k][0] - *pairs[k][1]) <= 1e-9 * fmax(fabs(*pairs[k][0]), fabs(*pairs[k][1])))
            *pairs[k][1] = *pairs[k][0];
    const char *field = s == FSDP_OK ? fsdp_model_config_diff(&their_mc, &mine_mc) : NULL;
    if (field) {
        const char *flag = model_field_flag(field);
        cJSON *ours = fsdp_train_config_to_json(&r->cfg);
        const cJSON *a = flag ? cJSON_GetObjectItemCaseSensitive(mj, flag) : NULL;
        const cJSON *b = flag && ours ? cJSON_GetObjectItemCaseSensitive(ours, flag) : NULL;
        char *av = a ? cJSON_PrintUnformatted(a) : NULL, *bv = b ? cJSON_PrintUnformatted(b) : NULL;
        s = fsdp_set_error(
            FSDP_EINVAL,
            "--resume: the checkpoint is of another model shape: this run's model differs from the "
            "checkpoint's in %s (--%s: %s in %s, %s "
            "in this run): resume with the checkpoint's settings%s; nothing was loaded or "
            "trained",
            field, flag ? flag : field, av ? av : "its default", what, bv ? bv : "the default",
            !strcmp(flag ? flag : "", "vocab") ? " and the data it was trained on" : "");
        free(av);
        free(bv);
        cJSON_Delete(ours);
    }
    const cJSON *tk = s == FSDP_OK ? cJSON_GetObjectItemCaseSensitive(mj, "data-tokenizer") : NULL;
    char now[32];
    if (cJSON_IsString(tk)) s = fsdp_train_data_tokenizer_id(r->cfg.data, now, sizeof now);
    if (cJSON_IsString(tk) && s == FSDP_OK && strcmp(tk->valuestring, now) != 0)
        s = fsdp_set_error(
            FSDP_EINVAL,
            "--resume: --data %s's tokenizer.json (%s) is not the one the checkpoint was trained "
            "with (%s records %s): resume on the data the run started with; nothing was loaded "
            "or trained",
            r->cfg.data, now, what, tk->valuestring);
    if (s == FSDP_OK) s = check_data_drift(r, mj, what);
    free(what);
    fsdp_ckpt_close(rd);
    return s;
}
