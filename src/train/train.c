/* train.c — the training loop of `fsdp-train` and its sampling command: builds the engine and the model
 * (include/fsdp_model.h) from the settings (model_load.c), resumes from a checkpoint or initialises, then
 * runs steps (micro-batches, clipping, AdamW with warmup + cosine LR), evaluates, writes metrics, shows
 * progress, checkpoints, and generates a sample. Every rank runs the same code; only rank 0 writes output. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/hf.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Targets of (n) that count in the loss (not FSDP_IGNORE_INDEX). */
static int64_t count_targets(const int32_t *tg, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += tg[i] != FSDP_IGNORE_INDEX;
    return k;
}

/* Mean validation loss over eval_batches global batches from the start of val.bin (all ranks). */
static fsdp_status evaluate(run_model *rm, fsdp_loader *val, const fsdp_train_config *c, fsdp_comm_t *comm,
                            int32_t *in, int32_t *tg, int32_t *doc, float *out) {
    uint64_t nb = fsdp_loader_num_batches(val);
    int batches = (uint64_t)c->eval_batches < nb ? c->eval_batches : (int)nb;
    fsdp_loader_state st0 = {0, 0};
    FSDP_TRY(fsdp_loader_set_state(val, st0));
    /* the mean over every counted target of the batches (sum of per-target losses / their count, all
     * ranks); with unmasked data a mean of equal-count means, as before; no counted target: 0 */
    const size_t n_tg = (size_t)val->b * (size_t)val->T;
    double sum = 0;
    int64_t count = 0;
    FSDP_TRY(fsdp_engine_set_no_backward(rm->eng, 1)); /* targets, but no backward: nothing kept */
    for (int k = 0; k < batches; k++) {
        for (int m = 0; m < val->micro; m++) {
            float loss;
            FSDP_TRY(fsdp_loader_micro(val, m, in, tg, doc));
            const int64_t cnt = count_targets(tg, n_tg);
            fsdp_model_batch mb = {.tokens = in, .targets = tg, .doc = doc, .B = val->b, .T = val->T};
            FSDP_TRY(fsdp_model_forward(rm->model, &mb, &loss));
            if (cnt > 0) sum += (double)loss * (double)cnt;
            count += cnt;
        }
        fsdp_loader_advance(val);
    }
    FSDP_TRY(fsdp_engine_reshard_all(rm->eng));
    FSDP_TRY(fsdp_engine_set_no_backward(rm->eng, 0));
    int64_t gcount = count;
    if (fsdp_comm_size(comm) > 1) {
        fsdp_comm_set_label(comm, "train / eval target count");
        FSDP_TRY(fsdp_comm_all_reduce(comm, &count, &gcount, 1, FSDP_I64, FSDP_SUM));
    }
    /* scaled as the step's loss: each rank's share times the world, averaged across ranks */
    const double w = (double)fsdp_comm_size(comm);
    float mean = gcount > 0 ? (float)(sum * w / (double)gcount) : 0.0f, g = mean;
    if (fsdp_comm_size(comm) > 1) FSDP_TRY(fsdp_comm_all_reduce(comm, &mean, &g, 1, FSDP_F32, FSDP_AVG));
    *out = g;
    return FSDP_OK;
}

/* --data's shards (data/data.h): the training loader (shuffled with --shuffle, seeded by --seed) and,
 * with --eval-every, the validation loader in file order; validation data smaller than one batch only
 * turns evaluation off, a corrupt file is an error. Every file is validated before step 1. */
static fsdp_status open_data(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_status s = fsdp_data_files_find(c->data, &r->files);
    /* The data set's files are never outputs, read by this run or not. */
    for (int i = 0; s == FSDP_OK && i < r->files.n_val; i++)
        fsdp_io_note_input(r->files.val[i]);
    char *dir = s == FSDP_OK ? fsdp_data_dir(c->data) : NULL;
    if (s == FSDP_OK && !dir) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    char *meta_path = dir ? fsdp_strdupf("%s/meta.json", dir) : NULL;
    if (meta_path) fsdp_io_note_input(meta_path);
    free(meta_path);
    int32_t eot = -1; /* the end-of-text id that starts documents (--pack doc, pad) */
    if (s == FSDP_OK) s = fsdp_pack_meta_eot(dir, c->vocab, &eot);
    free(dir);
    fsdp_loader_args a = {.paths = (const char *const *)r->files.train,
                          .n_paths = r->files.n_train,
                          .vocab = c->vocab,
                          .batch = c->batch,
                          .T = c->seq_len,
                          .micro = c->micro_batches,
                          .rank = r->rank,
                          .world = r->world,
                          .shuffle = c->shuffle,
                          .seed = (uint64_t)c->seed,
                          .pack = c->pack,
                          .eot = eot};
    if (s == FSDP_OK) s = fsdp_loader_open(&r->train, &a);
    /* auto resolved (the same on every rank: the same files), for the printed line and the manifest */
    if (s == FSDP_OK) r->cfg.pack = a.pack = r->train.pack;
    if (s == FSDP_OK && c->eval_every > 0 && r->files.n_val > 0) {
        a.paths = (const char *const *)r->files.val;
        a.n_paths = r->files.n_val;
        a.shuffle = 0;
        a.allow_short = 1;
        s = fsdp_loader_open(&r->val, &a);
        r->have_val = s == FSDP_OK && fsdp_loader_num_batches(&r->val) > 0;
        if (s == FSDP_OK && !r->have_val) {
            fsdp_loader_free(&r->val);
            if (r->o)
                fprintf(r->o, "note: %s%s smaller than one batch: no validation\n", r->files.val[0],
                        r->files.n_val > 1 ? " and the other validation shards are" : " is");
        }
    } else if (s == FSDP_OK && c->eval_every > 0 && r->o) {
        fprintf(r->o, "note: no %s: no validation\n", r->files.val_desc);
    }
    FSDP_TRY(fsdp_comm_agree(r->comm, s, "opening the data"));
    if (r->o) {
        const fsdp_loader *L = &r->train;
        if (L->n_shards == 1)
            fprintf(r->o, "data: %s: %llu tokens", r->files.train[0], (unsigned long long)L->ntok);
        else
            fprintf(r->o, "data: %d shards %s ... %s: %llu tokens, %llu sequences", L->n_shards,
                    r->files.train[0], r->files.train[L->n_shards - 1], (unsigned long long)L->ntok,
                    (unsigned long long)L->nseq);
        const char *v = r->have_val ? strrchr(r->files.val[0], '/') : NULL;
        fprintf(r->o, " (%llu batches of %d x %d, %s)", (unsigned long long)fsdp_loader_num_batches(L),
                c->batch, c->seq_len, c->shuffle ? "shuffled every epoch" : "in file order");
        if (r->have_val && r->files.n_val == 1)
            fprintf(r->o, ", %s for validation", v ? v + 1 : r->files.val[0]);
        else if (r->have_val)
            fprintf(r->o, ", %d validation shards", r->files.n_val);
        fprintf(r->o, "; documents: --pack %s\n", fsdp_pack_names[L->pack]);
    }
    return FSDP_OK;
}

/* The config the checkpoints record (r->cj): the settings, the model's own record, the data's tokenizer
 * and shards, and where the run started (--init-from and its fingerprint): what a resume checks. */
static fsdp_status config_record(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_comm_t *comm = r->comm;
    fsdp_status s;
    r->cj = fsdp_train_config_to_json(c);
    if (!r->cj) return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
    { /* the model's identity in the library's own record (fsdp_model_config_to_json): resume reads it */
        cJSON *mcj = cJSON_CreateObject();
        s = mcj ? fsdp_model_config_to_json(fsdp_model_get_config(r->rm.model), mcj)
                : FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        if (s == FSDP_OK && !cJSON_AddItemToObject(r->cj, "model-config", mcj))
            s = FSDP_ERR(FSDP_ENOMEM, "no memory");
        if (s != FSDP_OK) {
            cJSON_Delete(mcj);
            return s;
        }
    }
    { /* the data's tokenizer, which a resume must find unchanged */
        char tk[32];
        s = fsdp_train_data_tokenizer_id(c->data, tk, sizeof tk);
        if (s == FSDP_OK && !cJSON_AddStringToObject(r->cj, "data-tokenizer", tk))
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        FSDP_TRY(fsdp_comm_agree(comm, s, "fingerprinting the data's tokenizer"));
    }
    { /* the training shards in their order, which a resume must find unchanged */
        cJSON *sh = fsdp_train_data_shards_json(&r->train);
        if (!sh || !cJSON_AddItemToObject(r->cj, "data-shards", sh)) {
            cJSON_Delete(sh);
            return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        }
    }
    char abs_from[PATH_MAX]; /* recorded as an absolute path: a load of a frozen run reads it again */
    if (c->init_from && !c->resume && realpath(c->init_from, abs_from)) {
        cJSON_DeleteItemFromObjectCaseSensitive(r->cj, "init-from");
        if (!cJSON_AddStringToObject(r->cj, "init-from", abs_from))
            return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
    }
    if (c->init_from && !c->resume) { /* where the run starts: the folder and its fingerprint */
        uint32_t crc = 0;
        char fp[32];
        s = fsdp_hf_fingerprint(c->init_from, &crc);
        snprintf(fp, sizeof fp, "crc32c:%08x", (unsigned)crc);
        if (s == FSDP_OK && !cJSON_AddStringToObject(r->cj, "init-from-fingerprint", fp))
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        FSDP_TRY(fsdp_comm_agree(comm, s, "fingerprinting --init-from"));
    }
    return FSDP_OK;
}

/* The settings every rank agrees on, the checkpoint folder (this run's alone, writable), the data, the
 * model and its memory plan, the config record. */
static fsdp_status run_setup(train_run *r) {
    fsdp_train_config *c = &r->cfg;
    fsdp_comm_t *comm = r->comm;
    fsdp_status s = fsdp_train_resolve_config(c, r->world);
    if (s == FSDP_OK && c->init_from && realpath(c->init_from, r->init_abs)) c->init_from = r->init_abs;
    FSDP_TRY(fsdp_comm_agree(comm, s, "checking the settings"));
    FSDP_TRY(fsdp_train_agree_settings(r));
    if (!c->resume && c->steps == 0) return FSDP_OK; /* run_start says so */
    /* The checkpoint folder first: it exists, this run alone uses it (every rank's lock, held to the
     * end), and every rank can write a file into it — found now, not at the first save. */
    s = r->rank == 0 ? fsdp_mkdirs(c->checkpoint_dir) : FSDP_OK;
    s = fsdp_comm_agree(comm, s, "creating the checkpoint folder");
    if (s == FSDP_OK) s = fsdp_ckpt_lock(c->checkpoint_dir, r->rank, &r->lock);
    if (s == FSDP_OK) s = fsdp_train_probe_folder(c->checkpoint_dir, r->rank);
    FSDP_TRY(fsdp_comm_agree(comm, s, "locking the checkpoint folder"));
    FSDP_TRY(fsdp_train_check_shared_folder(r));

    r->threads = fsdp_train_threads(c, comm);
    omp_set_num_threads(r->threads);
    fsdp_train_check_affinity(stderr, r->threads, comm);
    if (r->o) {
        const char *wait = getenv("OMP_WAIT_POLICY");
        fsdp_train_config_print(r->o, c);
        fprintf(r->o, "  world size %d (%s), %d OpenMP thread%s per rank (OMP_WAIT_POLICY %s)\n", r->world,
                fsdp_comm_backend_name(comm), r->threads, r->threads == 1 ? "" : "s",
                wait ? wait : "unset: libgomp's default, spin then sleep");
        /* the FSDP_* knobs that are set (docs/ENV.md): the checkpoint manifest records them too */
        int any = 0;
        for (int i = 0; i < fsdp_env_count(); i++) {
            const char *v = fsdp_env_value(fsdp_env_at(i)->name);
            if (v == NULL) continue;
            fprintf(r->o, "%s%s=%s", any ? " " : "  environment: ", fsdp_env_at(i)->name, v);
            any = 1;
        }
        char unknown[512];
        const int n_unknown = fsdp_env_unknown(unknown, sizeof unknown);
        fprintf(r->o, "%s", any ? "" : "  environment: no FSDP_* knob set (docs/ENV.md)");
        fprintf(r->o, n_unknown ? "; unknown, ignored: %s\n" : "\n", unknown);
    }
    FSDP_TRY(fsdp_train_agree_gemm_path(r));
    FSDP_TRY(open_data(r));
    if (c->sample_tokens >
        0) { /* the tokenizer the end-of-run sample uses: checked now, not after training */
        char *tpath = NULL;
        fsdp_bpe *bpe = NULL;
        s = fsdp_train_find_tokenizer(NULL, c->init_from, c->data, &tpath);
        if (s == FSDP_OK) s = fsdp_train_load_tokenizer(tpath, c->vocab, &bpe);
        fsdp_bpe_free(bpe);
        free(tpath);
        FSDP_TRY(fsdp_comm_agree(comm, s, "loading the tokenizer"));
    }
    FSDP_TRY(
        fsdp_comm_agree(comm, fsdp_train_check_mem_limit(r), "checking the memory plan against the memory"));
    size_t bt = (size_t)r->train.b * (size_t)c->seq_len;
    s = fsdp_mem_alloc((void **)&r->in, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK) s = fsdp_mem_alloc((void **)&r->tg, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK && c->pack == FSDP_PACK_DOC)
        s = fsdp_mem_alloc((void **)&r->doc, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK) s = fsdp_train_model_build(c, comm, &r->rm);
    size_t n_frozen = 0, n_all = 0;
    if (s == FSDP_OK) s = fsdp_train_freeze_report(r->rm.eng, c->freeze, &n_frozen, &n_all);
    /* The prediction the end-of-run report compares against (the same arithmetic as --plan). */
    if (s == FSDP_OK) s = fsdp_train_plan_compute(c, r->world, r->threads, r->have_val, r->rm.eng, &r->plan);
    FSDP_TRY(fsdp_comm_agree(comm, s, "building the model"));
    if (r->o) {
        const fsdp_model_config *gc = fsdp_model_get_config(r->rm.model);
        fprintf(r->o, "model: %s, %d layers, width %d, %d heads", gc->family->name, gc->n_layer, gc->n_embd,
                gc->n_head);
        if (gc->n_kv_head && gc->n_kv_head != gc->n_head) fprintf(r->o, " (%d key/value)", gc->n_kv_head);
        fprintf(r->o, ", vocab %d, %zu parameters\n", gc->vocab_size, fsdp_model_num_params(gc));
        if (n_frozen)
            fprintf(r->o, "frozen (%s%s%s): %zu of %zu parameters; trainable: %zu (%.2f%%)\n",
                    c->lora_rank > 0 ? "LoRA's base" : "", c->lora_rank > 0 && c->freeze ? ", " : "",
                    c->freeze ? "--freeze" : "", n_frozen, n_all, n_all - n_frozen,
                    100.0 * (double)(n_all - n_frozen) / (double)n_all);
    }
    FSDP_TRY(config_record(r));
    return fsdp_train_setup_perf(r);
}

/* A resume from an older step than the newest committed one (`latest` pointed back): the run would save
 * those steps again, and a committed checkpoint is never overwritten or moved, so it is refused before
 * anything is loaded, naming them (checkpoint.h, fsdp_ckpt_newer_committed). */
static fsdp_status refuse_newer_committed(const char *ckpt_dir, const char *step_dir) {
    char names[1024];
    const int n = fsdp_ckpt_newer_committed(ckpt_dir, step_dir, names, sizeof names);
    if (n == 0) return FSDP_OK;
    const char *base = strrchr(step_dir, '/');
    base = base ? base + 1 : step_dir;
    return fsdp_set_error(FSDP_EINVAL,
                          "--resume: %s/latest names %s, but %s also holds the newer committed "
                          "checkpoint%s %s: this run would save %s again, and a committed checkpoint is "
                          "never overwritten or moved; move %s out of %s (or point latest at the newest) "
                          "first (nothing was changed)",
                          ckpt_dir, base, ckpt_dir, n > 1 ? "s" : "", names,
                          n > 1 ? "those steps" : "that step", n > 1 ? "them" : "it", ckpt_dir);
}

/* Resume, or start fresh (never on top of an existing run's checkpoints); the steps to train; every
 * other output checked before the first step. *nothing: there is no step to train (said why). */
static fsdp_status run_start(train_run *r, int *nothing) {
    fsdp_train_config *c = &r->cfg;
    fsdp_comm_t *comm = r->comm;
    fsdp_status s = FSDP_OK;
    *nothing = 1;
    if (!c->resume && c->steps == 0) {
        if (r->o)
            fprintf(r->o,
                    "nothing to do: --steps 0 trains no step (no checkpoint, metrics, report or trace is "
                    "written)\n");
        return FSDP_OK;
    }
    if (c->resume) {
        char *step_dir = NULL;
        s = fsdp_ckpt_resolve(c->checkpoint_dir, &step_dir);
        if (s == FSDP_OK) s = refuse_newer_committed(c->checkpoint_dir, step_dir);
        if (s == FSDP_OK) s = fsdp_train_check_resume_drift(r, step_dir);
        if (s == FSDP_OK) s = fsdp_train_ckpt_load(&r->rm, step_dir, &r->st);
        if (s == FSDP_OK) s = fsdp_train_carry_init_from(step_dir, r->cj);
        if (s == FSDP_OK) {
            fsdp_loader_state ls = {r->st.data_pos, r->st.data_epoch};
            s = fsdp_loader_set_state(&r->train, ls);
        }
        s = fsdp_comm_agree(comm, s, "resuming");
        if (s == FSDP_OK && r->o)
            fprintf(r->o, "resumed from %s at step %lld (data position %llu, epoch %llu)\n", step_dir,
                    (long long)r->st.step, (unsigned long long)r->st.data_pos,
                    (unsigned long long)r->st.data_epoch);
        free(step_dir);
        if (s != FSDP_OK) return s;
    } else {
        if (fsdp_ckpt_has_latest(c->checkpoint_dir))
            s = fsdp_set_error(
                FSDP_EINVAL,
                "%s already holds checkpoints of a run: pass --resume to continue it, or choose "
                "another --checkpoint-dir (nothing was changed)",
                c->checkpoint_dir);
        s = fsdp_comm_agree(comm, s, "checking the checkpoint folder");
        fsdp_hf_stats hs = {0, 0};
        if (s == FSDP_OK)
            s = c->init_from ? fsdp_hf_load(r->rm.eng, c->init_from, fsdp_model_get_config(r->rm.model), &hs)
                             : fsdp_engine_init_params(r->rm.eng);
        if (s == FSDP_OK && c->init_adapter) /* LoRA's adapters from a PEFT folder */
            s = fsdp_hf_load_adapter(r->rm.eng, c->init_adapter, fsdp_model_get_config(r->rm.model));
        /* The share of the weights each rank read: its shard's, not the whole model. */
        float share = hs.model_elems ? (float)((double)hs.read_elems / (double)hs.model_elems) : 0,
              mx = share, sum = share;
        if (s == FSDP_OK && c->init_from && r->world > 1) {
            s = fsdp_comm_all_reduce(comm, &share, &mx, 1, FSDP_F32, FSDP_MAX);
            if (s == FSDP_OK) s = fsdp_comm_all_reduce(comm, &share, &sum, 1, FSDP_F32, FSDP_SUM);
        }
        if (s != FSDP_OK) return s;
        if (r->o && c->init_from)
            fprintf(r->o,
                    "initialised from %s: each rank read at most %.1f%% of the weights' elements (all ranks "
                    "together %.1f%%)\n",
                    c->init_from, 100.0 * mx, 100.0 * sum);
        fsdp_train_rng_seed(r->st.rng, (uint64_t)c->seed ^ 0x5A4D504C45ull);
    }
    r->first = (int)r->st.step + 1;
    r->last = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
    if (r->first > r->last) {
        if (r->o)
            fprintf(
                r->o,
                "nothing to do: the checkpoint is at step %lld and this run ends at step %d (--steps %d%s): "
                "nothing was trained or written; raise --steps to train on\n",
                (long long)r->st.step, r->last, c->steps, c->stop_at > 0 ? ", --stop-at" : "");
        return FSDP_OK;
    }
    /* Every other output, before the first step (rank 0 writes them): --metrics is opened now, and
     * --report and --trace must be creatable where they go. */
    if (r->rank == 0) s = fsdp_train_claim_paths(c);
    if (s == FSDP_OK && r->rank == 0 && c->metrics) s = fsdp_train_open_metrics(c->metrics, &r->metrics);
    if (s == FSDP_OK && r->rank == 0 && c->report) s = fsdp_out_check(c->report, "--report");
    if (s == FSDP_OK && r->rank == 0 && c->trace) s = fsdp_out_check(c->trace, "--trace");
    if (s == FSDP_OK && r->rank == 0 && c->export_final) {
        char *p = fsdp_strdupf("%s/model.safetensors", c->export_final);
        s = p ? fsdp_mkdirs(c->export_final) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        if (s == FSDP_OK) s = fsdp_out_check(p, "--export-final");
        if (s == FSDP_OK) s = fsdp_export_check_folder(c->export_final, "--export-final");
        free(p);
    }
    FSDP_TRY(fsdp_comm_agree(comm, s, "checking the output files"));
    if (c->trace) { /* after a barrier, so the ranks' time origins roughly agree */
        FSDP_TRY(fsdp_comm_barrier(comm));
        FSDP_TRY(fsdp_trace_enable(r->rank));
    }
    r->tty = r->o && isatty(fileno(r->o));
    r->t_loop = fsdp_time_s();
    r->rr.first_step = r->first;
    r->rr.last_step = r->first - 1;
    fsdp_mem_reset_peaks();
    *nothing = 0;
    return FSDP_OK;
}

/* --skip-update-z: rank 0 compares the step's global loss and pre-clip grad norm with the window and
 * decides for every rank (one broadcast: the ranks never disagree on whether the weights moved). */
static fsdp_status outlier_guard(train_run *r, step_record *rec) {
    rec->skipped = 0;
    rec->z_loss = rec->z_norm = NAN;
    if (r->guard == NULL) return FSDP_OK;
    rec->z_loss = fsdp_outlier_z(r->guard, 0, rec->loss);
    rec->z_norm = fsdp_outlier_z(r->guard, 1, rec->norm);
    int32_t skip = rec->z_loss > r->cfg.skip_update_z || rec->z_norm > r->cfg.skip_update_z;
    fsdp_outlier_push(r->guard, rec->loss, rec->norm);
    if (r->world > 1) {
        fsdp_comm_set_label(r->comm, "train / outlier guard: skip decision");
        FSDP_TRY(fsdp_comm_broadcast(r->comm, &skip, 1, FSDP_I32, 0));
    }
    rec->skipped = skip != 0;
    r->skipped += rec->skipped;
    return FSDP_OK;
}

/* FSDP_TEST_NONFINITE=<step>:loss|norm (tests only): that step's global loss or grad norm reads NaN on
 * every rank, as a diverged step would. */
static fsdp_status nonfinite_inject(int step, step_record *rec) {
    const char *v = fsdp_env_value("FSDP_TEST_NONFINITE");
    if (v == NULL || *v == '\0') return FSDP_OK;
    char *end = NULL;
    long at = strtol(v, &end, 10);
    if (end == v || *end != ':' || (strcmp(end + 1, "loss") != 0 && strcmp(end + 1, "norm") != 0))
        return FSDP_ERR(FSDP_EINVAL, "FSDP_TEST_NONFINITE='%s': expected <step>:loss or <step>:norm", v);
    if (at != step) return FSDP_OK;
    if (strcmp(end + 1, "loss") == 0)
        rec->loss = NAN;
    else
        rec->norm = NAN;
    return FSDP_OK;
}

/* The step's straggler: every rank's time waiting for collectives in the step (core/prof.h's comm
 * class), gathered; the rank that waited least arrived last, and the longest wait minus its own is
 * how long the others waited for it. One all-gather of a float per rank, after the step's timing. */
static fsdp_status step_straggler(train_run *r, step_record *rec) {
    rec->straggler = 0;
    rec->straggler_s = 0;
    if (r->world == 1) {
        r->waits[0] = (float)rec->prof.seconds[FSDP_PROF_COMM];
        return FSDP_OK;
    }
    float mine = (float)rec->prof.seconds[FSDP_PROF_COMM];
    fsdp_comm_set_label(r->comm, "train / step metrics: collective waits");
    FSDP_TRY(fsdp_comm_all_gather(r->comm, &mine, r->waits, 1, FSDP_F32));
    int lo = 0, hi = 0;
    for (int k = 1; k < r->world; k++) {
        if (r->waits[k] < r->waits[lo]) lo = k;
        if (r->waits[k] > r->waits[hi]) hi = k;
    }
    rec->straggler = lo;
    rec->straggler_s = (double)r->waits[hi] - (double)r->waits[lo];
    return FSDP_OK;
}

/* One optimizer step: the micro-batches' forward and backward (the engine reduces the gradients
 * into the shards), clipping, AdamW. The loss and its gradient are the mean over the counted targets
 * of the whole global batch: every rank counts its micro-batches' targets first and one all-reduce
 * sums the counts (C). Micro-batch m of this rank, with count_m targets, returns the mean over them
 * and the engine scales the reduced gradient by 1 / (world x micro), so its backward's loss_scale is
 * count_m x world x micro / C (exactly 1 when every micro-batch counts as many targets: unmasked data
 * give the same bits as a mean of means). A global batch with no counted target updates nothing and
 * counts as skipped (loss and grad norm 0). */
static fsdp_status train_step(train_run *r, int step, step_record *rec) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_engine_t *eng = r->rm.eng;
    fsdp_prof_reset();
    double t0 = fsdp_time_s();
    char span[32];
    snprintf(span, sizeof span, "step %d", step);
    fsdp_trace_begin(span, "step");
    rec->step = step;
    rec->lr = fsdp_train_lr(c, step);
    const size_t n_tg = (size_t)r->train.b * (size_t)c->seq_len;
    int64_t local = 0, global = 0;
    for (int m = 0; m < c->micro_batches; m++) {
        FSDP_TRY(fsdp_loader_micro(&r->train, m, r->in, r->tg, NULL));
        local += count_targets(r->tg, n_tg);
    }
    global = local;
    if (r->world > 1) {
        fsdp_comm_set_label(r->comm, "train / target count");
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &local, &global, 1, FSDP_I64, FSDP_SUM));
    }
    FSDP_TRY(fsdp_engine_begin_step(eng, c->micro_batches));
    double lsum = 0;
    const double wm = (double)r->world * (double)c->micro_batches;
    for (int m = 0; m < c->micro_batches; m++) {
        float loss = 0;
        FSDP_TRY(fsdp_engine_begin_micro(eng, m));
        FSDP_TRY(fsdp_loader_micro(&r->train, m, r->in, r->tg, r->doc));
        const int64_t cnt = count_targets(r->tg, n_tg);
        const float scale = global > 0 ? (float)((double)cnt * wm / (double)global) : 0.0f;
        fsdp_model_batch mb = {
            .tokens = r->in, .targets = r->tg, .doc = r->doc, .B = r->train.b, .T = c->seq_len};
        FSDP_TRY(fsdp_model_forward(r->rm.model, &mb, &loss));
        FSDP_TRY(fsdp_model_backward(r->rm.model, scale));
        if (cnt > 0) lsum += (double)loss * (double)scale;
    }
    FSDP_TRY(fsdp_engine_clip_grad_norm(eng, (float)c->clip, &rec->norm));
    float loss = (float)(lsum / c->micro_batches);
    rec->loss = loss;
    if (r->world > 1) FSDP_TRY(fsdp_comm_all_reduce(r->comm, &loss, &rec->loss, 1, FSDP_F32, FSDP_AVG));
    if (global == 0) { /* nothing to learn from: no update, no entry in the outlier window */
        rec->loss = 0;
        rec->norm = 0;
        rec->z_loss = rec->z_norm = NAN;
        rec->skipped = 1;
        r->skipped++;
        fsdp_trace_end(span, "step");
        fsdp_loader_advance(&r->train);
        rec->dt = fsdp_time_s() - t0;
        fsdp_prof_get(&rec->prof);
        return step_straggler(r, rec);
    }
    FSDP_TRY(nonfinite_inject(step, rec));
    if (!isfinite(rec->loss) || !isfinite(rec->norm)) {
        /* Both are global (the loss all-reduced, the norm over every shard): every rank takes the same
         * branch. The weights have not moved; the error comes before any checkpoint or export. */
        const char *which = !isfinite(rec->loss) ? "loss" : "grad norm";
        const double v = !isfinite(rec->loss) ? rec->loss : rec->norm;
        if (!c->skip_nonfinite)
            return fsdp_comm_agree(
                r->comm,
                FSDP_ERR(FSDP_ESTATE,
                         "step %d: the %s is %s (non-finite); stopped before the update, nothing saved "
                         "for this step (--skip-nonfinite skips such updates instead)",
                         step, which, isnan(v) ? "NaN" : "Inf"),
                "the non-finite check");
        rec->z_loss = rec->z_norm = NAN; /* kept out of the outlier guard's window */
        rec->skipped = 1;
        r->skipped++;
    } else {
        FSDP_TRY(outlier_guard(r, rec));
    }
    if (!rec->skipped) {
        fsdp_adamw_config ac = fsdp_adamw_config_default();
        ac.lr = (float)rec->lr;
        ac.beta1 = (float)c->beta1;
        ac.beta2 = (float)c->beta2;
        ac.eps = (float)c->eps;
        ac.weight_decay = (float)c->weight_decay;
        FSDP_TRY(fsdp_engine_adamw_step(eng, &ac));
    }
    fsdp_trace_end(span, "step");
    fsdp_loader_advance(&r->train);
    rec->dt = fsdp_time_s() - t0;
    fsdp_prof_get(&rec->prof);
    return step_straggler(r, rec);
}

/* A --metrics line from rank 0 (the others learn whether it was written). */
static fsdp_status metrics_line(train_run *r, const char *line, int n) {
    if (!r->cfg.metrics) return FSDP_OK;
    fsdp_status s = r->metrics >= 0 ? fsdp_train_write_metrics(r->metrics, r->cfg.metrics, line, n) : FSDP_OK;
    return fsdp_comm_agree(r->comm, s, "writing --metrics");
}

/* The step's --metrics line and progress output. */
static fsdp_status log_step(train_run *r, const step_record *rec) {
    const fsdp_train_config *c = &r->cfg;
    const double tokens_per_step = (double)c->batch * (double)c->seq_len;
    if (rec->step > r->first || r->last == r->first) { /* the first step warms caches: not averaged */
        r->t_steps += rec->dt;
        r->steps_timed++;
    }
    double avg = r->steps_timed ? r->t_steps / r->steps_timed : rec->dt, tps = tokens_per_step / rec->dt;
    r->rr.last_step = rec->step;
    r->rr.last_loss = rec->loss;
    r->rr.tokens_per_s = r->steps_timed ? tokens_per_step / avg : tps;
    /* model FLOPs of the global batch over the step's time; MFU against the ranks' summed GEMM peak */
    const double flops = fsdp_train_model_flops(r->flops_per_token, tokens_per_step, rec->dt);
    const double mfu =
        fsdp_train_mfu(r->flops_per_token, tokens_per_step, rec->dt, r->peak_total_gflops * 1e9);
    struct rusage ru;
    const size_t rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0; /* KiB on Linux */
    const size_t peak_b = fsdp_mem_total_peak();
    const double mem_pct = r->mem_total > 0 ? 100.0 * (double)rss / r->mem_total : 0;
    char zl[32], zn[32], ls[32], gn[32];
    snprintf(ls, sizeof ls, isfinite(rec->loss) ? "%.9g" : "null", rec->loss);
    snprintf(gn, sizeof gn, isfinite(rec->norm) ? "%.9g" : "null", rec->norm);
    snprintf(zl, sizeof zl, isfinite(rec->z_loss) ? "%.4g" : "null", rec->z_loss);
    snprintf(zn, sizeof zn, isfinite(rec->z_norm) ? "%.4g" : "null", rec->z_norm);
    char line[2048];
    int n = snprintf(line, sizeof line,
                     "{\"step\": %d, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
                     "\"tokens_per_s\": %.1f, \"tokens_per_s_per_rank\": %.1f, \"step_s\": %.6f, "
                     "\"peak_mem_bytes\": %zu, \"peak_rss_bytes\": %zu, \"mem_total_bytes\": %.0f, "
                     "\"mem_pct\": %.3f, \"tflops\": %.6g, \"peak_gflops\": %.6g, \"mfu\": %.6g, "
                     "\"skipped\": %d, \"skipped_total\": %d, \"z_loss\": %s, \"z_grad_norm\": %s, "
                     "\"straggler_rank\": %d, \"straggler_s\": %.6f, \"comm_wait_s\": [",
                     rec->step, ls, rec->lr, gn, tps, tps / r->world, rec->dt, peak_b, rss, r->mem_total,
                     mem_pct, flops / 1e12, r->peak_total_gflops, mfu, rec->skipped, r->skipped, zl, zn,
                     rec->straggler, rec->straggler_s);
    for (int k = 0; k < r->world && n > 0 && (size_t)n < sizeof line - 64; k++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%.6f", k ? ", " : "", (double)r->waits[k]);
    if (n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, "], \"gemm_path\": \"%s\", \"kernels_s\": {",
                      r->gemm_path);
    for (int k = 0; k < FSDP_PROF_NCLASS && n > 0 && (size_t)n < sizeof line; k++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s\"%s\": %.6f", k ? ", " : "",
                      fsdp_prof_class_name((fsdp_prof_class)k), rec->prof.seconds[k]);
    if (n > 0 && (size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "}}\n");
    if (n < 0 || (size_t)n >= sizeof line) n = -1; /* a world too large for the wait list: an error */
    FSDP_TRY(metrics_line(r, line, n));
    if (r->o) {
        char eta[32], peak[32], rssb[32], mfus[48] = "", strag[64] = "", skip[32] = "";
        fsdp_train_fmt_eta(eta, sizeof eta, avg * (r->last - rec->step));
        fsdp_train_fmt_bytes(peak, sizeof peak, peak_b);
        fsdp_train_fmt_bytes(rssb, sizeof rssb, rss);
        if (r->peak_total_gflops > 0) snprintf(mfus, sizeof mfus, " MFU %.1f%%", 100.0 * mfu);
        if (r->world > 1)
            snprintf(strag, sizeof strag, " | straggler rank %d +%.1f ms", rec->straggler,
                     1e3 * rec->straggler_s);
        if (r->guard || c->skip_nonfinite)
            snprintf(skip, sizeof skip, " | skipped %d%s", r->skipped, rec->skipped ? " (this)" : "");
        if (r->tty) {
            fprintf(r->o, "\rstep %d/%d | loss %.4f | %.0f tok/s | %.3g TFLOPS%s | ETA %s | peak %s%s   ",
                    rec->step, c->steps, rec->loss, r->rr.tokens_per_s, flops / 1e12, mfus, eta, peak, skip);
            fflush(r->o);
        } else if (rec->step == r->first || rec->step == r->last || rec->step % c->log_every == 0 ||
                   rec->skipped) {
            fprintf(r->o,
                    "step %d/%d loss %.4f lr %.3e grad_norm %.4f | %.1f ms | %.0f tok/s (%.0f per rank) | "
                    "%.3g TFLOPS%s | peak %s, RSS %s (%.1f%% of memory)%s%s | ETA %s\n",
                    rec->step, c->steps, rec->loss, rec->lr, rec->norm, 1e3 * rec->dt, tps, tps / r->world,
                    flops / 1e12, mfus, peak, rssb, mem_pct, skip, strag, eta);
            fflush(r->o);
        }
    }
    return FSDP_OK;
}

/* Validation every --eval-every steps and at the last. */
static fsdp_status maybe_evaluate(train_run *r, int step) {
    const fsdp_train_config *c = &r->cfg;
    if (!r->have_val || (step % c->eval_every != 0 && step != r->last)) return FSDP_OK;
    float vl;
    fsdp_trace_begin("eval", "eval");
    FSDP_TRY(evaluate(&r->rm, &r->val, c, r->comm, r->in, r->tg, r->doc, &vl));
    fsdp_trace_end("eval", "eval");
    r->rr.last_val_loss = vl;
    if (r->o) fprintf(r->o, "%sstep %d: val loss %.4f\n", r->tty ? "\n" : "", step, vl);
    char line[128];
    int n = snprintf(line, sizeof line, "{\"step\": %d, \"val_loss\": %.9g}\n", step, vl);
    return metrics_line(r, line, n);
}

/* SIGINT / SIGTERM (host.c): the run stops after the step in which it came, its checkpoint (if that
 * step saves one) complete, saying where a resume starts. */
static fsdp_status stop_on_signal(train_run *r, int step) {
    char where[4200];
    snprintf(where, sizeof where, "after step %d: %s%s%s", step,
             r->last_saved ? "the newest checkpoint is " : "no checkpoint of this run was saved",
             r->last_saved ? r->last_saved : "", r->last_saved ? " (continue with --resume)" : "");
    fsdp_status s = fsdp_train_signal_stop(r->comm, where);
    if (r->o) fflush(r->o);
    return s;
}

/* A checkpoint every --checkpoint-every steps and at the last. */
static fsdp_status maybe_checkpoint(train_run *r, int step) {
    const fsdp_train_config *c = &r->cfg;
    if (!((c->checkpoint_every > 0 && step % c->checkpoint_every == 0) || step == r->last)) return FSDP_OK;
    fsdp_loader_state ls = fsdp_loader_get_state(&r->train);
    r->st.step = step;
    r->st.data_pos = ls.pos;
    r->st.data_epoch = ls.epoch;
    char *saved = NULL;
    fsdp_trace_begin("checkpoint", "checkpoint");
    FSDP_TRY(fsdp_ckpt_save(r->rm.eng, c->checkpoint_dir, r->cj, &r->st, &saved));
    fsdp_trace_end("checkpoint", "checkpoint");
    if (r->o) { /* flushed now: the line that says which checkpoint is complete outlives a kill */
        fprintf(r->o, "%ssaved %s\n", r->tty ? "\n" : "", saved);
        fflush(r->o);
    }
    free(r->last_saved);
    r->last_saved = saved;
    /* --keep-last: the older checkpoints beyond the newest K go, now that this one is complete */
    fsdp_status s = FSDP_OK;
    int removed = 0;
    char names[1024];
    if (c->keep_last > 0 && r->rank == 0)
        s = fsdp_ckpt_prune(c->checkpoint_dir, c->keep_last, c->keep_every, &removed, names, sizeof names);
    if (s == FSDP_OK && removed && r->o)
        fprintf(r->o, "removed %s (--keep-last %d%s)\n", names, c->keep_last,
                c->keep_every ? ", --keep-every" : "");
    return fsdp_comm_agree(r->comm, s, "removing old checkpoints");
}

/* --export-final: the last checkpoint's model alone (rank 0, reading the shard files as `export`
 * does) as DIR/model.safetensors in --export-dtype, with config.json and the tokenizer beside it. */
static fsdp_status run_export_final(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    if (!c->export_final || !r->last_saved) return FSDP_OK;
    fsdp_status s = FSDP_OK;
    if (r->rank == 0) {
        fsdp_train_config e = fsdp_train_config_default();
        e.cmd = FSDP_CMD_EXPORT;
        e.checkpoint = r->last_saved;
        e.export_dtype = c->export_dtype;
        e.merge = c->lora_rank > 0; /* a LoRA run's adapters folded in */
        char *path = fsdp_strdupf("%s/model.safetensors", c->export_final);
        e.out = path;
        s = path ? fsdp_export_run(&e, r->o) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        free(path);
    }
    return fsdp_comm_agree(r->comm, s, "--export-final");
}

/* After the last step: --metrics closed (its last lines' fate is known only then), the summary line,
 * predicted vs measured memory (max over ranks, since the loop began: model states, steps, evals and
 * checkpoints and the sample, which runs before it), --report and --trace. */
static fsdp_status run_report(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_comm_t *comm = r->comm;
    fsdp_status s = FSDP_OK;
    if (r->metrics >= 0) {
        s = fsdp_io_close_sync(r->metrics, c->metrics);
        r->metrics = -1;
    }
    FSDP_TRY(fsdp_comm_agree(comm, s, "closing --metrics"));
    if (r->o && r->tty) fputc('\n', r->o);
    if (r->o && r->rr.last_step >= r->rr.first_step) {
        char peak[32];
        fsdp_train_fmt_bytes(peak, sizeof peak, fsdp_mem_total_peak());
        fprintf(r->o,
                "done: steps %d..%d in %.1f s, %.0f tokens/s, final loss %.4f, peak memory %s per rank\n",
                r->rr.first_step, r->rr.last_step, fsdp_time_s() - r->t_loop, r->rr.tokens_per_s,
                r->rr.last_loss, peak);
    }
    fsdp_mem_peaks meas;
    fsdp_mem_peaks_local(&meas);
    FSDP_TRY(fsdp_mem_peaks_max(comm, &meas));
    if (r->o) {
        fprintf(r->o, "memory per rank, predicted vs measured (max over %d rank%s):\n", r->world,
                r->world == 1 ? "" : "s");
        fsdp_plan_print(r->o, &r->plan, &meas);
        char cached[32];
        fsdp_train_fmt_bytes(cached, sizeof cached, fsdp_mem_cached_peak());
        fprintf(r->o,
                "allocator cache (rank 0): up to %s of freed blocks kept for reuse, not counted above\n",
                cached);
    }
    s = r->rank == 0 && c->report ? fsdp_train_write_report(c->report, &r->plan, &meas) : FSDP_OK;
    s = fsdp_comm_agree(comm, s, "writing the --report file");
    if (s == FSDP_OK && c->trace) s = fsdp_train_write_trace(c->trace, comm);
    if (s != FSDP_OK) return s;
    if (r->o && (c->report || c->trace))
        fprintf(r->o, "wrote%s%s%s%s\n", c->report ? " " : "", c->report ? c->report : "",
                c->trace ? " " : "", c->trace ? c->trace : "");
    return FSDP_OK;
}

/* --sample-tokens of text from the trained model. */
static fsdp_status run_sample(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    if (c->sample_tokens <= 0) return FSDP_OK;
    if (r->o)
        fprintf(r->o, "sample (%d tokens, temperature %g, top-k %d):\n", c->sample_tokens, c->temperature,
                c->top_k);
    char *tpath = NULL;
    fsdp_bpe *bpe = NULL;
    fsdp_status s = fsdp_train_find_tokenizer(NULL, c->init_from, c->data, &tpath);
    if (s == FSDP_OK) s = fsdp_train_load_tokenizer(tpath, c->vocab, &bpe);
    s = fsdp_comm_agree(r->comm, s, "loading the tokenizer");
    if (s == FSDP_OK)
        s = fsdp_train_generate(r->rm.model, c, r->comm, c->vocab == FSDP_BYTE_VOCAB || bpe ? c->prompt : "",
                                c->sample_tokens, r->st.rng, r->o, bpe);
    fsdp_bpe_free(bpe);
    free(tpath);
    return s;
}

static void run_free(train_run *r) {
    if (r->cfg.trace) fsdp_trace_free();
    if (r->metrics >= 0) close(r->metrics); /* only on a failure, which is already being reported */
    fsdp_ckpt_unlock(r->lock);
    free(r->guard);
    free(r->waits);
    free(r->last_saved);
    cJSON_Delete(r->cj);
    fsdp_mem_free(r->doc);
    fsdp_mem_free(r->tg);
    fsdp_mem_free(r->in);
    fsdp_train_model_free(&r->rm);
    fsdp_loader_free(&r->val);
    fsdp_loader_free(&r->train);
    fsdp_data_files_free(&r->files);
}

fsdp_status fsdp_train_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out,
                           fsdp_train_result *res) {
    train_run *r = calloc(1, sizeof *r);
    if (r == NULL) return FSDP_ERR(FSDP_ENOMEM, "no memory for the run state");
    r->cfg = *cfg;
    r->comm = comm;
    r->rank = fsdp_comm_rank(comm);
    r->world = fsdp_comm_size(comm);
    r->o = r->rank == 0 ? out : NULL;
    r->metrics = r->lock = -1;
    r->rr = (fsdp_train_result){0, 0, NAN, NAN, 0};
    fsdp_io_inputs_reset();

    int nothing = 1;
    fsdp_train_signals_catch(1);
    fsdp_status s = run_setup(r);
    if (s == FSDP_OK) s = run_start(r, &nothing);
    for (int step = r->first; s == FSDP_OK && !nothing && step <= r->last; step++) {
        step_record rec;
        s = train_step(r, step, &rec);
        if (s == FSDP_OK) s = log_step(r, &rec);
        if (s == FSDP_OK) s = maybe_evaluate(r, step);
        if (s == FSDP_OK) s = maybe_checkpoint(r, step);
        if (step == r->cfg.trace_steps) fsdp_trace_disable();
        if (s == FSDP_OK) s = stop_on_signal(r, step);
    }
    fsdp_trace_disable();
    if (s == FSDP_OK && !nothing) s = run_sample(r);
    if (s == FSDP_OK && !nothing) s = run_report(r);
    if (s == FSDP_OK && !nothing) s = run_export_final(r);
    if (res) *res = r->rr;
    run_free(r);
    free(r);
    if (out) fflush(out);
    fsdp_train_signals_catch(0);
    return s;
}
