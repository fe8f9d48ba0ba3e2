/* model_load.h — building and loading the trainer's model (engine + model of include/fsdp_model.h) from
 * the settings, a checkpoint or a Hugging Face folder, and finding a run's tokenizer: shared by the
 * training loop (train.c), sampling (sample.c) and the export command (export.c). Internal to src/train/. */
#ifndef FSDP_TRAIN_MODEL_LOAD_H
#define FSDP_TRAIN_MODEL_LOAD_H

#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/bpe.h"
#include "train/config.h"

typedef struct {
    fsdp_engine_t *eng;
    fsdp_model_t *model;
    fsdp_device_t *dev; /* FSDP_TEST_DEVICE's simulated device (the tests'), or NULL: the CPU */
} run_model;

/* Frees the model, then its engine; leaves rm zeroed. */
void fsdp_train_model_free(run_model *rm);
/* The engine settings of cfg: one place, used by the run and by its memory plan. */
fsdp_engine_config fsdp_train_engine_config(const fsdp_train_config *cfg);
/* The model's parameters, and of them the frozen ones (fsdp_engine_config.freeze); with freeze set,
 * FSDP_EINVAL naming the first glob that matches no tensor, with the names a glob can match. */
fsdp_status fsdp_train_freeze_report(fsdp_engine_t *eng, const char *freeze, size_t *n_frozen,
                                     size_t *n_params);
/* The engine on comm and the model of cfg (fsdp_train_model_config); nothing left on failure. The
 * harness variable FSDP_TEST_DEVICE=sim:SEED (or sim-nohost:SEED) puts the engine on the simulated
 * device (src/core/device.h; seed + the rank), for tests that train end to end on it. */
fsdp_status fsdp_train_model_build(const fsdp_train_config *cfg, fsdp_comm_t *comm, run_model *rm);
/* The model a checkpoint (dir: step or checkpoint folder) was saved from, built with the settings of its
 * manifest (into *c) and loaded; *st its train state. */
/* Collective: loads step_dir into rm (fsdp_ckpt_load). A model with frozen tensors first gets them
 * from where the checkpoint's run started, as its manifest records it: its --init-from folder, else
 * --seed's initialisation (which must be this engine's); fsdp_ckpt_load then checks their digest. */
fsdp_status fsdp_train_ckpt_load(run_model *rm, const char *step_dir, fsdp_ckpt_state *st);
fsdp_status fsdp_train_load_checkpoint_model(const char *dir, fsdp_comm_t *comm, fsdp_train_config *c,
                                             run_model *rm, fsdp_ckpt_state *st);
/* The model of a Hugging Face folder (fp32, the reference mode), loaded on comm; its shape into *c. */
fsdp_status fsdp_train_load_hf_model(const char *dir, fsdp_comm_t *comm, fsdp_train_config *c, run_model *rm);
/* The tokenizer.json of a run: flag if given, else the one in init_from, else data's; *path NULL
 * (FSDP_OK) when there is none (free() it). */
fsdp_status fsdp_train_find_tokenizer(const char *flag, const char *init_from, const char *data, char **path);
/* Loads the tokenizer at path (NULL: *bpe NULL) and checks it fits a model of vocabulary V. */
fsdp_status fsdp_train_load_tokenizer(const char *path, int V, fsdp_bpe **bpe);

/* export --init-from: the Hugging Face folder's model (fp32) saved as a one-rank checkpoint (step 0,
 * manifest "init-from" = the folder) in ckpt_dir, which must not hold one yet; *step_dir its step
 * folder (free()). */
fsdp_status fsdp_train_hf_to_checkpoint(const char *hf_dir, const char *ckpt_dir, char **step_dir);

/* The tokenizer.json of a checkpoint's run: flag (--tokenizer) if given, else tokenizer.json in the
 * manifest's "init-from" folder, else in its "data" folder; *path NULL (FSDP_OK) when there is none. */
fsdp_status fsdp_train_ckpt_tokenizer(const char *flag, const char *ckpt, char **path);

/* The fixed input's logits of a loaded model on comm (every rank runs the forward, rank 0 writes path):
 * B 2, T min(16, seq-len), token i = i*2654435761 mod V; the layout fsdp_train_write_logits documents. */
fsdp_status fsdp_train_model_write_logits(run_model *rm, const fsdp_train_config *cfg, fsdp_comm_t *comm,
                                          const char *path);

/* Resolves cfg's vocabulary 0 (meta.json's, else GPT-2's) and --init-from's shape (its config.json, with
 * data of the same vocabulary), then checks cfg against the world size. */
fsdp_status fsdp_train_resolve_config(fsdp_train_config *c, int world);

#endif
