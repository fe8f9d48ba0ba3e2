/* run.h — one `train` run's state and the parts of the trainer that work on it, each in a file of its
 * own: host set-up (host.c), the memory plan (plan_cmd.c), sampling (sample.c), output files
 * (outputs.c), agreement between ranks (agree.c), resume checks (resume.c); train.c holds set-up, the
 * step and the loop. Internal to src/train. */
#ifndef FSDP_TRAIN_RUN_H
#define FSDP_TRAIN_RUN_H

#include "checkpoint/checkpoint.h"
#include "core/prof.h"
#include "data/bpe.h"
#include "data/data.h"
#include "fsdp_model.h"
#include "train/model_load.h"
#include "train/perf.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

/* Everything one `train` run holds, so that each part of it is a function of its own. */
typedef struct {
    fsdp_train_config cfg; /* resolved: vocabulary, --init-from as an absolute path */
    char init_abs[PATH_MAX];
    fsdp_comm_t *comm;
    int rank, world, threads;
    FILE *o; /* rank 0's output, NULL on the others */
    int tty;
    run_model rm;
    fsdp_loader train, val;
    int have_val;
    int32_t *in, *tg;      /* one micro-batch's input and target tokens (b, T) */
    int32_t *doc;          /* --pack doc: its document ids (b, T); else NULL */
    fsdp_data_files files; /* --data's training and validation shards */
    int metrics, lock;     /* file descriptors, -1 when closed */
    cJSON *cj;             /* the config the checkpoints record */
    fsdp_ckpt_state st;
    fsdp_plan plan;
    int first, last; /* the steps this run trains */
    double t_loop, t_steps;
    int steps_timed;
    fsdp_train_result rr;
    const char *gemm_path;    /* the GEMM path every rank takes (fsdp_gemm_path_name) */
    double flops_per_token;   /* the model's forward + backward FLOPs per token at --seq-len */
    double peak_rank_gflops;  /* this rank's GEMM peak (measured or --peak-gflops); 0: no MFU */
    double peak_total_gflops; /* the sum over ranks */
    double mem_total;         /* bytes of physical memory on this machine (0: unknown) */
    fsdp_outlier *guard;      /* --skip-update-z's window, NULL when off */
    char *last_saved;         /* the step folder of this run's last checkpoint */
    int skipped;              /* updates the guard skipped in this run */
    float *waits;             /* (world) each rank's collective wait in the step, gathered */
} train_run;

/* What one step measured. */
typedef struct {
    int step;
    double lr, dt;
    float loss, norm;      /* loss: the mean over the global batch */
    fsdp_prof_counts prof; /* this rank's time per kernel class in the step (core/prof.h) */
    int skipped;           /* the outlier guard skipped this step's update */
    double z_loss, z_norm; /* their z-scores against the guard's window (NAN: guard off or filling) */
    int straggler;         /* the rank that waited least at the collectives: it arrived last */
    double straggler_s;    /* the longest wait minus its wait (0 with one rank) */
} step_record;

/* host.c */
void fsdp_train_fmt_bytes(char *buf, size_t cap, size_t b);
void fsdp_train_fmt_eta(char *buf, size_t cap, double s);
fsdp_status fsdp_train_agree_gemm_path(train_run *r);
fsdp_status fsdp_train_setup_perf(train_run *r);

/* SIGINT while a run or a sample works (host.c): catch(1) records it (a second one ends the process;
 * SIGTERM keeps its default), catch(0) restores the disposition before; signal_stop is FSDP_OK, or, on
 * every rank alike (an agreement: call it at the same point on every rank), an error saying that
 * SIGINT stopped the work `where` ("after step 12: ..."). */
void fsdp_train_signals_catch(int on);
fsdp_status fsdp_train_signal_stop(fsdp_comm_t *comm, const char *where);

/* plan_cmd.c */
fsdp_status fsdp_train_check_mem_limit(train_run *r);

/* sample.c */
void fsdp_train_rng_seed(uint64_t s[2], uint64_t seed);
fsdp_status fsdp_train_generate(fsdp_model_t *model, const fsdp_train_config *c, fsdp_comm_t *comm,
                                const char *prompt, int n, uint64_t rng[2], FILE *out, fsdp_bpe *bpe);

/* outputs.c */
fsdp_status fsdp_train_probe_folder(const char *dir, int rank);
fsdp_status fsdp_train_claim_paths(const fsdp_train_config *c);
fsdp_status fsdp_train_open_metrics(const char *path, int *fd_out);
fsdp_status fsdp_train_write_metrics(int fd, const char *path, const char *line, int n);
fsdp_status fsdp_train_write_report(const char *path, const fsdp_plan *plan, const fsdp_mem_peaks *meas);
fsdp_status fsdp_train_write_trace(const char *path, fsdp_comm_t *comm);

/* agree.c */
fsdp_status fsdp_train_agree_settings(train_run *r);
fsdp_status fsdp_train_check_shared_folder(train_run *r);

/* resume.c */
fsdp_status fsdp_train_carry_init_from(const char *step_dir, cJSON *cj);
cJSON *fsdp_train_data_shards_json(const fsdp_loader *L);
fsdp_status fsdp_train_data_tokenizer_id(const char *data, char *out, size_t cap);
fsdp_status fsdp_train_check_resume_drift(train_run *r, const char *step_dir);

#endif
