/* train.h — the commands of `fsdp-train` as library calls: train (the loop), sample, export. Each
 * returns an fsdp_status (the program's main turns it into a message and an exit code). */
#ifndef FSDP_TRAIN_TRAIN_H
#define FSDP_TRAIN_TRAIN_H

#include "fsdp.h"
#include "fsdp_model.h"
#include "train/config.h"

#include <stdio.h>

/* Per-run results, for tests and the final summary. */
typedef struct {
    int first_step, last_step; /* steps run in this call: first_step..last_step (1-based) */
    float last_loss, last_val_loss;
    double tokens_per_s;
} fsdp_train_result;

/* The model cfg describes: its family's defaults, then every shape setting cfg gives (0, or -1 for
 * --tie-embeddings, leaves the family's default); validated. */
fsdp_status fsdp_train_model_config(const fsdp_train_config *cfg, fsdp_model_config *mc);

/* The whole `train` command on comm (any world size): data, model, optional resume, the loop with
 * eval, metrics, progress, checkpoints, and the sample at the end. cfg is checked against the world
 * size. Output (settings, progress, sample) goes to out on rank 0 only. */
fsdp_status fsdp_train_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out,
                           fsdp_train_result *res);

/* The memory plan of the run cfg describes (a checked config with the vocabulary resolved) on `world`
 * ranks with `threads` OpenMP threads per rank: the model's units (gpt_units_init, so the layout is the
 * one gpt_init builds), the engine policies of the flags, activations = the model's arena + the token
 * buffers + attention backward's per-thread scratch, other = the GEMM workspace (the model's other_bytes:
 * exact, oneDNN's scratchpad included, fsdp_gemm_workspace_bytes) + the data loaders' buffers (validation
 * loader counted when have_val). Allocates nothing tracked. */
fsdp_status fsdp_train_plan_compute(const fsdp_train_config *cfg, int world, int threads, int have_val,
                                    fsdp_engine_t *eng, /* the run's (its transports), or NULL: one host */
                                    fsdp_plan *out);

/* `--plan`: prints the plan of cfg's run on cfg->world ranks (0: comm's size) on rank 0 — every
 * category, the ZeRO formula, plain data parallel — and with --report writes it as JSON. Builds no
 * model and reads no data file (DIR/meta.json gives the vocabulary when it exists). */
fsdp_status fsdp_train_plan(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out);

/* `sample`: text from a checkpoint (any world size saved it; this runs on comm, rank 0 prints). */
fsdp_status fsdp_sample_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out);

/* `export`: cfg->checkpoint -> cfg->out (.safetensors, tensors in cfg->export_dtype) + config.json beside it.
 * Reads the shard files directly (no engine, any saving world size), one process. With cfg->init_from
 * instead, the Hugging Face folder goes through a temporary checkpoint beside cfg->out (removed afterwards).
 */
fsdp_status fsdp_export_run(const fsdp_train_config *cfg, FILE *out);
/* 1 if name is an entry an export writes into its folder (the model file, config.json, the tokenizer
 * files, their temporaries): --export-final's own entries. */
int fsdp_export_managed_name(const char *name);
/* Checks, creating nothing, that an export with --out DIR/model.safetensors may replace folder dir (what:
 * "--export-final"): absent, or a folder holding only files export writes (fsdp_io_dir_stage). */
fsdp_status fsdp_export_check_folder(const char *dir, const char *what);

/* For the export check: loads the checkpoint (ckpt: step or checkpoint folder) into an fp32 model in
 * this process (world 1), runs a fixed input (B 2, T min(16, seq-len), token i = i*2654435761 mod V)
 * and writes {int32 B, T, V; int32 tokens[B*T]; float logits[B*T][V]} to path. */
fsdp_status fsdp_train_write_logits(const char *ckpt, const char *path);

/* Learning rate at 1-based step s: linear warmup to lr over `warmup` steps, then cosine decay to
 * min_lr at step `steps`. */
double fsdp_train_lr(const fsdp_train_config *cfg, int s);

/* Threads per rank the trainer uses: cfg->threads, or the cores this process may run on (its CPU
 * affinity: a launcher's binding, taskset, a cgroup cpuset) / ranks on this node (at least 1). */
int fsdp_train_threads(const fsdp_train_config *cfg, fsdp_comm_t *comm);
/* The cores this process may run on (its CPU affinity mask), and the cores online on the machine. */
int fsdp_train_affinity_cores(void);
int fsdp_train_online_cores(void);
/* Warns (to err) when threads exceed the cores this rank may run on, and notes when a launcher's
 * binding leaves this node's ranks fewer cores than are online; rank 0 notes for the node, every rank
 * warns for itself. */
void fsdp_train_check_affinity(FILE *err, int threads, fsdp_comm_t *comm);

/* The trainer's OpenMP wait policy: idle OpenMP threads sleep (OMP_WAIT_POLICY=passive) instead of
 * spinning, unless the environment already sets OMP_WAIT_POLICY (any value: the user's choice stands).
 * libgomp reads the variable once, when it loads, so this sets it and re-executes the program
 * (/proc/self/exe, same argv); call it first thing in main(), before MPI_Init. Returns only when the
 * variable was already set or the re-execution failed (then the variable is unset again and the run
 * keeps libgomp's default). Tools that follow the process across exec (valgrind without
 * --trace-children) should set OMP_WAIT_POLICY themselves. */
void fsdp_train_omp_wait_default(char **argv);

#endif
