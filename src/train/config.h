/* config.h — every setting of `fsdp-train` as one struct, parsed from the command line with range and
 * consistency checks whose messages name the flag. Library code: parsing returns fsdp_status and
 * never exits, so it can be unit-tested and fuzzed; only the program's main() exits. */
#ifndef FSDP_TRAIN_CONFIG_H
#define FSDP_TRAIN_CONFIG_H

#include "fsdp.h"

#include <stdint.h>
#include <stdio.h>

typedef enum {
    FSDP_CMD_TRAIN = 0,
    FSDP_CMD_PREPARE,
    FSDP_CMD_EXPORT,
    FSDP_CMD_SAMPLE,
    FSDP_CMD_NCMD
} fsdp_train_cmd;

typedef enum { FSDP_PRECISION_FP32 = 0, FSDP_PRECISION_MIXED } fsdp_precision;

/* Strings point into argv, at static defaults or at strings read from --config's file (kept for the
 * life of the process): the struct owns nothing and needs no free. */
typedef struct {
    fsdp_train_cmd cmd;
    int help;                /* --help given: print fsdp_train_usage(cmd) and stop */
    const char *config_file; /* --config FILE.toml: read before the flags, which override it */

    /* model (include/fsdp_model.h): the family and its shape; 0 (-1 for tie_embeddings) = the family's
     * default for that field */
    int model; /* index into fsdp_train_model_names: gpt2, llama */
    int layers, width, heads;
    int kv_heads;     /* key/value heads (grouped-query attention) */
    int head_dim;     /* 0: width / heads */
    int intermediate; /* MLP width */
    int tie_embeddings;
    int qkv_bias, qk_norm;
    double norm_eps, rope_theta;
    int rope_scaling; /* fsdp_rope_scaling_type */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int lora_rank;            /* LoRA adapters' rank (0: none; the base is then frozen) */
    double lora_alpha;        /* 0: 2 x rank */
    const char *lora_targets; /* comma-separated q,k,v,o,gate,up,down; NULL: all */
    const char *init_adapter; /* train: a PEFT adapter folder the adapters start from */
    int hf_architecture;      /* index into fsdp_train_hf_arch_names; 0 = the family's default */
    int vocab;                /* 0: auto (DIR/meta.json's vocab, else GPT-2's 50257) */
    int seq_len;              /* T of training sequences */
    int max_seq_len;          /* longest sequence (GPT-2: position table size); 0: = seq_len */

    /* data and batch */
    const char *data; /* folder with train.bin and val.bin, a folder of shards or a glob (data/data.h) */
    int shuffle;      /* 1: a seeded order of the training sequences per epoch; 0: file order */
    int batch;        /* global sequences per step, for any world size */
    int micro_batches;
    int pack; /* fsdp_pack_mode (data/pack.h): auto, doc, concat or pad */

    /* optimisation */
    double lr, min_lr; /* peak learning rate; end of the cosine decay */
    int warmup;        /* linear warmup steps */
    double weight_decay, clip, beta1, beta2, eps;
    int steps, eval_every, eval_batches;
    int stop_at; /* end this run after this step (0: at --steps); the schedule still spans --steps */
    int64_t seed;

    /* engine policies */
    int precision;     /* fsdp_precision */
    int mixed_compute; /* --precision mixed: fsdp_mixed_compute (src/kernels/kernels.h): auto, bf16, f32 */
    int strategy;      /* fsdp_strategy */
    int main_grad;     /* fsdp_main_grad_policy */
    int accum;         /* fsdp_accum_mode */
    int reduce_dtype;  /* fsdp_dtype */
    int recompute;
    int max_inflight;    /* prefetched gathers / overlap depth; 0: synchronous */
    int shard_group;     /* --strategy hybrid: ranks per group; 0: the ranks of one host */
    int threads;         /* OpenMP threads per rank; 0: cores / ranks on the node */
    double comm_timeout; /* seconds; <= 0 waits forever */

    /* checkpoints, metrics, output */
    const char *checkpoint_dir;
    int checkpoint_every; /* 0: only at the end */
    int resume;
    int keep_last;  /* keep the newest K checkpoints (latest's included; 0: keep all) */
    int keep_every; /* with keep_last: steps that are multiples of N are kept forever (0: none) */
    const char
        *export_final;   /* train: after the last step, export the model (safetensors) into this folder */
    int export_dtype;    /* export, --export-final: fsdp_dtype of the exported tensors (f32, bf16) */
    const char *metrics; /* JSONL file or NULL */
    int log_every;
    double peak_gflops;     /* MFU's per-rank peak: 0 measure at start-up, > 0 this GFLOP/s, < 0 no MFU */
    const char *peak_cache; /* the measured peak's cache file; NULL: the default; "off": none (host.c) */
    double
        skip_update_z; /* outlier guard: skip an update whose loss or grad norm z-score exceeds it (0: off) */
    int skip_nonfinite;     /* a step with a NaN/Inf loss or grad norm skips its update (0: stops the run) */
    int skip_update_window; /* steps of running statistics the z-scores are taken against */
    int sample_tokens;      /* generated at the end of training (0: none) */

    /* memory plan, report, trace (docs/DESIGN.md section 5) */
    int plan;           /* --plan: print the predicted per-rank memory of these settings and stop */
    int world;          /* ranks --plan plans for; 0: the launcher's (1 without one) */
    int64_t fit;        /* --plan --fit BYTES: solve for settings whose per-rank plan fits (0: off) */
    int64_t mem_limit;  /* per-rank bytes a run may plan for (0: the machine's memory / ranks on the host) */
    const char *report; /* JSON file: predicted (and, after a run, measured) peak bytes per category */
    const char *trace;  /* Chrome-trace JSON file of the run */
    int trace_steps;    /* trace steps 1..N of the run only (0: the whole run) */

    /* sample (and the sample after training) */
    const char *prompt;
    double temperature;
    int top_k;
    int tokens;   /* sample: tokens to generate */
    int kv_cache; /* sampling with the key/value cache (gpt_decode); 0: a full forward per token */
    int timing;   /* sample: tokens/s on stderr */

    /* prepare */
    const char *const *texts;
    int n_texts;
    const char *out; /* prepare: folder; export: .safetensors file */
    double val_fraction;
    const char *doc_sep;
    const char *jsonl; /* prepare: chat / prompt-completion rows instead of --text (data/chat.h) */
    int chat_format;   /* prepare --jsonl: fsdp_chat_format (auto, chatml, llama3) */

    /* export, sample */
    const char *checkpoint; /* a step folder, or a checkpoint folder with `latest` */
    const char *logits;     /* export: also write the fp32 model's logits on a fixed input here;
                               sample: write them instead of generating */

    /* Hugging Face interop (train/hf.h, train/bpe.h) */
    int merge;             /* export: fold a LoRA checkpoint's adapters into the weights */
    int adapter;           /* export: a LoRA checkpoint's adapters alone, as a PEFT folder */
    const char *freeze;    /* train: comma-separated globs over unit.tensor names to freeze (NULL: none) */
    const char *init_from; /* train, sample: a GPT-2 folder (config.json + safetensors) to start from */
    const char *tokenizer; /* prepare: a GPT-2 style tokenizer.json to encode the text with */
} fsdp_train_config;

/* NULL-terminated names of the --model and --hf-architecture choices (index = the config field). */
#define FSDP_TRAIN_MAX_NAMES 64
extern const char *fsdp_train_model_names[FSDP_TRAIN_MAX_NAMES];   /* the registry's, NULL-terminated */
extern const char *fsdp_train_hf_arch_names[FSDP_TRAIN_MAX_NAMES]; /* "auto", then every family's */

fsdp_train_config fsdp_train_config_default(void);

/* Parses argv[1..argc): an optional command word (train, prepare, export, sample) then flags
 * (`--name value` or `--name=value`; switches take no value or =0/=1). Fills *cfg starting from the
 * defaults, then --config FILE.toml's settings (top-level keys named like the flags, '_' or '-';
 * TOML's type must fit the flag's; errors name FILE:LINE), then the other flags (which override the
 * file), then runs fsdp_train_config_check(cfg, 0). FSDP_EINVAL with a message naming the flag
 * on anything wrong. With --help, returns FSDP_OK and cfg->help = 1 without checking. */
fsdp_status fsdp_train_config_parse(fsdp_train_config *cfg, int argc, char **argv);

/* Consistency checks (also run by parse). world > 0 additionally checks --batch against
 * --micro-batches x world. Resolves max_seq_len 0 -> seq_len. */
fsdp_status fsdp_train_config_check(fsdp_train_config *cfg, int world);

/* Usage text of one command (all flags, their defaults and meaning). */
void fsdp_train_usage(FILE *f, fsdp_train_cmd cmd);
/* Every resolved setting of cfg->cmd, one per line ("  --layers 4"). */
void fsdp_train_config_print(FILE *f, const fsdp_train_config *cfg);

/* Every train setting as a JSON object keyed by flag name without dashes ("seq-len"), for manifests.
 * Caller frees with cJSON_Delete. NULL if out of memory. */
struct cJSON;
struct cJSON *fsdp_train_config_to_json(const fsdp_train_config *cfg);
/* Reads the model-shape settings back (layers, width, heads, vocab, seq-len, max-seq-len, precision,
 * seed...: every key present is applied, then checked); FSDP_EFORMAT naming `what` on a bad value. */
fsdp_status fsdp_train_config_from_json(fsdp_train_config *cfg, const struct cJSON *j, const char *what);
/* The numeric setting (int, bool, enum index or double) of flag `name` as a double, or set from one:
 * 0, or -1 when no numeric flag has that name. The model's fields reach the trainer's settings this
 * way, by their flags (fsdp_model_fields). */
int fsdp_train_config_get_number(const fsdp_train_config *cfg, const char *name, double *v);
int fsdp_train_config_set_number(fsdp_train_config *cfg, const char *name, double v);

const char *fsdp_train_cmd_name(fsdp_train_cmd c);

#endif
