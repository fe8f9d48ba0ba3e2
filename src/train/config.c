/* config.c — the flag table of `fsdp-train`: one row per setting (name, type, field, range, help,
 * commands that take it). Parsing, usage text, the printed settings and the manifest's JSON record
 * are all generated from this one table, so they cannot disagree. */
#include "train/config.h"

#include "core/core.h"
#include "data/chat.h"
#include "data/pack.h"
#include "fsdp_model.h"
#include "train/toml_read.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_INT, OPT_I64, OPT_DBL, OPT_STR, OPT_BOOL, OPT_ENUM, OPT_LIST } opt_kind;

#define C_TRAIN   (1u << FSDP_CMD_TRAIN)
#define C_PREPARE (1u << FSDP_CMD_PREPARE)
#define C_EXPORT  (1u << FSDP_CMD_EXPORT)
#define C_SAMPLE  (1u << FSDP_CMD_SAMPLE)

static const char *const precision_names[] = {"fp32", "mixed", NULL};
static const char *const mixed_compute_names[] = {"auto", "bf16", "f32", NULL}; /* fsdp_mixed_compute order */
static const char *const strategy_names[] = {"full", "grad-op", "none", "hybrid",
                                             NULL}; /* fsdp_strategy order */
static const char *const main_grad_names[] = {"lazy", "eager", NULL};
static const char *const accum_names[] = {"sharded", "no-sync", NULL};
static const char *const dtype_names[] = {"f32", "bf16", NULL}; /* fsdp_dtype order */
/* --model and --hf-architecture take the registry's lists (fsdp_model_family_list, fsdp_model_hf_
 * architecture_list), copied here before main runs: the flag table below points at these arrays. */
const char *fsdp_train_model_names[FSDP_TRAIN_MAX_NAMES];
const char *fsdp_train_hf_arch_names[FSDP_TRAIN_MAX_NAMES];
__attribute__((constructor)) static void names_from_registry(void) {
    const char *const *f = fsdp_model_family_list(), *const *a = fsdp_model_hf_architecture_list();
    for (int i = 0; f[i] && i < FSDP_TRAIN_MAX_NAMES - 1; i++)
        fsdp_train_model_names[i] = f[i];
    for (int i = 0; a[i] && i < FSDP_TRAIN_MAX_NAMES - 1; i++)
        fsdp_train_hf_arch_names[i] = a[i];
}
static const char *const rope_scaling_names[] = {"none", "llama3", NULL}; /* fsdp_rope_scaling_type order */

typedef struct {
    const char *name; /* without the leading "--" */
    opt_kind kind;
    size_t off;
    double min, max; /* numeric range (inclusive) */
    const char *const *choices;
    unsigned cmds;
    const char *help;
} opt_def;

#define C_ALL    (C_TRAIN | C_PREPARE | C_EXPORT | C_SAMPLE)
#define F(field) offsetof(fsdp_train_config, field)
static const opt_def opts[] = {
    {"config", OPT_STR, F(config_file), 0, 0, NULL, C_ALL,
     "TOML file of settings, keyed like the flags without the dashes (seq-len = 128, recompute = true, "
     "text = [\"a.txt\"]); read first, so flags on the command line override it"},
    {"data", OPT_STR, F(data), 0, 0, NULL, C_TRAIN,
     "folder with train.bin and val.bin (fsdp-train prepare), a folder of llm.c-style shards "
     "(*_train_*.bin, *_val_*.bin) or a quoted glob of shards ('dir/fineweb_train_*.bin'; validation: the "
     "pattern with \"val\" for the last \"train\" of its file name)"},
    {"shuffle", OPT_INT, F(shuffle), 0, 1, NULL, C_TRAIN,
     "a new order of the training sequences every epoch, seeded by --seed and the epoch (the same at every "
     "world size; validation stays in file order); 0: file order"},
    {"model", OPT_ENUM, F(model), 0, 0, fsdp_train_model_names, C_TRAIN,
     "model family: gpt2 (LayerNorm, learned positions, GELU, tied head) or llama (RMSNorm, RoPE, SwiGLU, "
     "grouped-query attention: Llama, SmolLM2, Qwen2/3, Mistral); --init-from sets it from config.json"},
    {"layers", OPT_INT, F(layers), 1, 1024, NULL, C_TRAIN, "transformer blocks"},
    {"width", OPT_INT, F(width), 1, 65536, NULL, C_TRAIN, "model width C (gpt2: divisible by --heads)"},
    {"heads", OPT_INT, F(heads), 1, 1024, NULL, C_TRAIN, "attention (query) heads"},
    {"kv-heads", OPT_INT, F(kv_heads), 0, 1024, NULL, C_TRAIN,
     "llama: key/value heads, a divisor of --heads (0: = --heads)"},
    {"head-dim", OPT_INT, F(head_dim), 0, 4096, NULL, C_TRAIN, "llama: head size (0: --width / --heads)"},
    {"intermediate", OPT_INT, F(intermediate), 0, 1 << 20, NULL, C_TRAIN,
     "MLP hidden width (0: the family's default; gpt2: 4 x --width)"},
    {"tie-embeddings", OPT_INT, F(tie_embeddings), -1, 1, NULL, C_TRAIN,
     "1: the LM head is the token embedding; 0: its own tensor; -1: the family's default (gpt2 1, llama 0)"},
    {"qkv-bias", OPT_BOOL, F(qkv_bias), 0, 1, NULL, C_TRAIN, "llama: biases on q, k and v (Qwen2)"},
    {"qk-norm", OPT_BOOL, F(qk_norm), 0, 1, NULL, C_TRAIN, "llama: per-head RMSNorm of q and k (Qwen3)"},
    {"norm-eps", OPT_DBL, F(norm_eps), 0, 1, NULL, C_TRAIN,
     "LayerNorm/RMSNorm epsilon (0: the family's default; gpt2 fixes 1e-5)"},
    {"rope-theta", OPT_DBL, F(rope_theta), 0, 1e12, NULL, C_TRAIN,
     "llama: RoPE base (0: the family's default)"},
    {"rope-scaling", OPT_ENUM, F(rope_scaling), 0, 0, rope_scaling_names, C_TRAIN,
     "llama: RoPE frequency scaling: none or llama3 (with the four --rope-* settings below)"},
    {"rope-factor", OPT_DBL, F(rope_factor), 0, 1e6, NULL, C_TRAIN, "llama3 scaling: factor"},
    {"rope-low-freq-factor", OPT_DBL, F(rope_low_freq_factor), 0, 1e6, NULL, C_TRAIN,
     "llama3 scaling: low_freq_factor"},
    {"rope-high-freq-factor", OPT_DBL, F(rope_high_freq_factor), 0, 1e6, NULL, C_TRAIN,
     "llama3 scaling: high_freq_factor"},
    {"rope-original-max-pos", OPT_INT, F(rope_original_max_pos), 0, 1 << 24, NULL, C_TRAIN,
     "llama3 scaling: original_max_position_embeddings"},
    {"lora-rank", OPT_INT, F(lora_rank), 0, 4096, NULL, C_TRAIN,
     "train LoRA adapters of this rank on a frozen base (0: full fine-tuning); each targeted "
     "projection W gets A (rank x in, Kaiming-uniform as PEFT) and B (out x rank, zero): "
     "y = x W^T + (alpha / rank) x A^T B^T"},
    {"lora-alpha", OPT_DBL, F(lora_alpha), 0, 1e6, NULL, C_TRAIN, "LoRA's alpha (0: 2 x --lora-rank)"},
    {"lora-targets", OPT_STR, F(lora_targets), 0, 0, NULL, C_TRAIN,
     "the projections with adapters, comma-separated: llama from q,k,v,o,gate,up,down (PEFT's q_proj, ...), "
     "gpt2 from c_attn,attn.c_proj,c_fc,mlp.c_proj (c_proj: both); default: every projection of the blocks"},
    {"init-adapter", OPT_STR, F(init_adapter), 0, 0, NULL, C_TRAIN,
     "a PEFT LoRA folder (adapter_config.json, adapter_model.safetensors) the adapters start from; its r, "
     "lora_alpha and target_modules must be this run's --lora-rank, --lora-alpha and --lora-targets"},
    {"hf-architecture", OPT_ENUM, F(hf_architecture), 0, 0, fsdp_train_hf_arch_names, C_TRAIN,
     "the Hugging Face class export writes (auto: the one --init-from read, else the family's)"},
    {"vocab", OPT_INT, F(vocab), 0, 1 << 22, NULL, C_TRAIN,
     "vocabulary size; 0: DIR/meta.json's, else GPT-2's 50257"},
    {"seq-len", OPT_INT, F(seq_len), 1, 1 << 20, NULL, C_TRAIN, "tokens per training sequence T"},
    {"max-seq-len", OPT_INT, F(max_seq_len), 0, 1 << 20, NULL, C_TRAIN,
     "position table size (>= --seq-len); 0: = --seq-len"},
    {"batch", OPT_INT, F(batch), 1, 1 << 24, NULL, C_TRAIN,
     "global sequences per step (same for any number of ranks)"},
    {"micro-batches", OPT_INT, F(micro_batches), 1, 1 << 20, NULL, C_TRAIN,
     "gradient-accumulation micro-batches per step"},
    {"pack", OPT_ENUM, F(pack), 0, 0, fsdp_pack_names, C_TRAIN,
     "how documents fill the sequences: doc (packed; each position attends only to its own document, "
     "positions restart at every document start: the mask file's document flags, else the end-of-text "
     "token of meta.json's \"eot\"), concat (packed; attention runs across documents), pad (one document "
     "per sequence, padding ignored by the loss; longer ones split into sequences of --seq-len); auto: doc "
     "for data whose mask file marks documents (prepare --jsonl), else concat"},
    {"lr", OPT_DBL, F(lr), 0, 10, NULL, C_TRAIN, "peak learning rate"},
    {"min-lr", OPT_DBL, F(min_lr), 0, 10, NULL, C_TRAIN, "learning rate at the end of the cosine decay"},
    {"warmup", OPT_INT, F(warmup), 0, 1 << 30, NULL, C_TRAIN, "linear warmup steps"},
    {"weight-decay", OPT_DBL, F(weight_decay), 0, 10, NULL, C_TRAIN, "AdamW decoupled weight decay"},
    {"beta1", OPT_DBL, F(beta1), 0, 0.999999, NULL, C_TRAIN, "AdamW beta1"},
    {"beta2", OPT_DBL, F(beta2), 0, 0.999999, NULL, C_TRAIN, "AdamW beta2"},
    {"eps", OPT_DBL, F(eps), 1e-30, 1, NULL, C_TRAIN, "AdamW epsilon"},
    {"clip", OPT_DBL, F(clip), 0, 1e30, NULL, C_TRAIN, "global gradient-norm clip (0: off)"},
    {"steps", OPT_INT, F(steps), 0, 1 << 30, NULL, C_TRAIN,
     "optimizer steps in total (a resumed run counts on)"},
    {"stop-at", OPT_INT, F(stop_at), 0, 1 << 30, NULL, C_TRAIN,
     "end this run after this step and checkpoint it (0: run to --steps); the LR schedule still spans "
     "--steps"},
    {"eval-every", OPT_INT, F(eval_every), 0, 1 << 30, NULL, C_TRAIN,
     "validation loss every N steps (0: off)"},
    {"eval-batches", OPT_INT, F(eval_batches), 1, 1 << 20, NULL, C_TRAIN, "global batches per validation"},
    {"seed", OPT_I64, F(seed), 0, 9.007199254740992e15, NULL, C_TRAIN | C_SAMPLE,
     "seed of the initial weights and of --shuffle's order (train), and of sampling"},
    {"precision", OPT_ENUM, F(precision), 0, 0, precision_names, C_TRAIN,
     "fp32 (reference) or mixed (bf16 params on the wire and in memory, fp32 master and main_grad)"},
    {"mixed-compute", OPT_ENUM, F(mixed_compute), 0, 0, mixed_compute_names, C_TRAIN,
     "--precision mixed: how GEMMs compute. bf16: bf16 x bf16 (activations rounded to bf16); f32: the bf16 "
     "weights widened exactly, fp32 activations, f32 GEMMs; auto: bf16 only where a probe at start-up "
     "finds it faster than f32 on this CPU (never without bf16 instructions), rank 0's choice for all "
     "ranks (auto also reads FSDP_MIXED_COMPUTE=auto|bf16|f32)"},
    {"strategy", OPT_ENUM, F(strategy), 0, 0, strategy_names, C_TRAIN,
     "full (ZeRO-3), grad-op (keep params forward to backward), none (data parallel), hybrid (full within "
     "each group of --shard-group ranks, replicated across groups: HSDP)"},
    {"shard-group", OPT_INT, F(shard_group), 0, 1 << 20, NULL, C_TRAIN,
     "--strategy hybrid: ranks per shard group, a divisor of the world size (0: the ranks of one host)"},
    {"main-grad", OPT_ENUM, F(main_grad), 0, 0, main_grad_names, C_TRAIN,
     "lazy (allocate in pre-backward) or eager (before forward)"},
    {"accum", OPT_ENUM, F(accum), 0, 0, accum_names, C_TRAIN,
     "micro-batch accumulation: sharded (reduce each) or no-sync (reduce at the last)"},
    {"reduce-dtype", OPT_ENUM, F(reduce_dtype), 0, 0, dtype_names, C_TRAIN, "gradient dtype on the wire"},
    {"recompute", OPT_BOOL, F(recompute), 0, 1, NULL, C_TRAIN, "recompute activations in backward"},
    {"max-inflight", OPT_INT, F(max_inflight), 0, 64, NULL, C_TRAIN,
     "overlap: all-gathers prefetched ahead of their unit (from step 2), the first units of backward "
     "kept gathered from forward, and each reduce-scatter run during the next unit's backward; 0: every "
     "collective completes in its hook (least memory)"},
    {"threads", OPT_INT, F(threads), 0, 4096, NULL, C_TRAIN | C_SAMPLE | C_EXPORT,
     "OpenMP threads per rank; 0: the cores this process may use (CPU affinity) / ranks on this node"},
    {"comm-timeout", OPT_DBL, F(comm_timeout), -1, 1e9, NULL, C_TRAIN,
     "seconds before a stuck collective aborts the job, and before a rank stuck inside one call into MPI "
     "ends "
     "itself (status 1) (<= 0: wait forever)"},
    {"checkpoint-dir", OPT_STR, F(checkpoint_dir), 0, 0, NULL, C_TRAIN, "where step_NNNNNN/ folders go"},
    {"checkpoint-every", OPT_INT, F(checkpoint_every), 0, 1 << 30, NULL, C_TRAIN,
     "save every N steps (0: only at the end)"},
    {"resume", OPT_BOOL, F(resume), 0, 1, NULL, C_TRAIN,
     "continue from --checkpoint-dir's latest checkpoint"},
    {"keep-last", OPT_INT, F(keep_last), 0, 1 << 30, NULL, C_TRAIN,
     "after each checkpoint is complete, remove the older ones beyond the newest K (the one `latest` "
     "names counts and is never removed; 0: keep all)"},
    {"keep-every", OPT_INT, F(keep_every), 0, 1 << 30, NULL, C_TRAIN,
     "with --keep-last: checkpoints of steps that are multiples of N are kept forever (0: none)"},
    {"export-final", OPT_STR, F(export_final), 0, 0, NULL, C_TRAIN,
     "after the last step, export the model alone (no optimizer state) into this folder: "
     "model.safetensors in --export-dtype, config.json and the tokenizer, as `fsdp-train export` does "
     "(a LoRA run's: merged, as export --merge)"},
    {"export-dtype", OPT_ENUM, F(export_dtype), 0, 0, dtype_names, C_TRAIN | C_EXPORT,
     "dtype of the exported tensors: f32 (the fp32 master weights as they are) or bf16 (rounded to "
     "nearest even)"},
    {"metrics", OPT_STR, F(metrics), 0, 0, NULL, C_TRAIN,
     "JSONL file: one object per step (appended); a write that fails (full disk) stops the run with an "
     "error, never loses lines silently"},
    {"log-every", OPT_INT, F(log_every), 1, 1 << 30, NULL, C_TRAIN, "print a line every N steps"},
    {"peak-gflops", OPT_DBL, F(peak_gflops), -1, 1e12, NULL, C_TRAIN,
     "per-rank peak of MFU: 0 measures it at start-up (the best of a few 512^3 or 1024^3 GEMMs on the "
     "run's GEMM path and threads, within 0.25 s, recorded in the manifest); > 0: this GFLOP/s per rank, no "
     "measurement; -1: no measurement and no TFLOPS share (MFU) in the step line"},
    {"peak-cache", OPT_STR, F(peak_cache), 0, 0, NULL, C_TRAIN,
     "with --peak-gflops 0: a JSON file of the best peak this CPU has measured, per GEMM path, threads "
     "and ranks on the host; MFU divides by the larger of it and this run's probe, so a probe in a busy "
     "moment does not inflate it, and rank 0 records a higher one (default "
     "$XDG_CACHE_HOME/fsdp/gemm-peak.json, else ~/.cache/fsdp/gemm-peak.json; off: this run's probe only)"},
    {"skip-update-z", OPT_DBL, F(skip_update_z), 0, 1e6, NULL, C_TRAIN,
     "outlier guard: skip the optimizer update of a step whose loss or grad norm lies more than Z "
     "standard deviations above the mean of the last --skip-update-window steps (0: off); skips are "
     "counted in the step line and --metrics"},
    {"skip-nonfinite", OPT_BOOL, F(skip_nonfinite), 0, 1, NULL, C_TRAIN,
     "a step whose loss or grad norm is NaN or Inf skips its optimizer update (counted like the "
     "outlier guard's skips) instead of stopping the run with an error naming the step (the default)"},
    {"skip-update-window", OPT_INT, F(skip_update_window), 2, 4096, NULL, C_TRAIN,
     "steps of loss and grad-norm statistics the outlier guard compares against (it acts once the "
     "window is full; a resumed run starts a new window)"},
    {"sample-tokens", OPT_INT, F(sample_tokens), 0, 1 << 20, NULL, C_TRAIN,
     "tokens of text generated after training (0: none)"},
    {"plan", OPT_BOOL, F(plan), 0, 1, NULL, C_TRAIN,
     "print the predicted per-rank peak memory of these settings (every category, the ZeRO formula, "
     "plain data parallel) and stop: allocates no model, needs no data files"},
    {"world", OPT_INT, F(world), 0, 1 << 20, NULL, C_TRAIN,
     "ranks --plan plans for; 0: the launcher's (a run must match it)"},
    {"fit", OPT_I64, F(fit), 0, 9.007199254740992e15, NULL, C_TRAIN,
     "with --plan: a per-rank budget in bytes; finds the largest micro-batch (fewest --micro-batches "
     "dividing the batch), then --recompute, then a more sharded --strategy, whose plan fits, and prints "
     "that plan (an error naming the largest category when nothing fits)"},
    {"mem-limit", OPT_I64, F(mem_limit), 0, 9.007199254740992e15, NULL, C_TRAIN,
     "per-rank bytes a run may plan for: a run whose memory plan exceeds it is refused before the model "
     "is allocated, naming the largest category (0: the machine's physical memory / ranks on this host)"},
    {"report", OPT_STR, F(report), 0, 0, NULL, C_TRAIN,
     "JSON file: predicted and measured peak bytes per category, max over ranks (--plan: predicted)"},
    {"trace", OPT_STR, F(trace), 0, 0, NULL, C_TRAIN,
     "Chrome-trace JSON file (Perfetto, chrome://tracing): a span per unit and phase per rank, memory "
     "counters per category"},
    {"trace-steps", OPT_INT, F(trace_steps), 0, 1 << 30, NULL, C_TRAIN,
     "--trace covers steps up to this one (0: the whole run)"},
    {"checkpoint", OPT_STR, F(checkpoint), 0, 0, NULL, C_EXPORT | C_SAMPLE,
     "a step folder, or a checkpoint folder (its `latest`)"},
    {"logits", OPT_STR, F(logits), 0, 0, NULL, C_EXPORT | C_SAMPLE,
     "write the fp32 model's logits on a fixed input to this file (export: as well; sample: instead of "
     "text)"},
    {"merge", OPT_BOOL, F(merge), 0, 1, NULL, C_EXPORT,
     "a LoRA checkpoint (--lora-rank): write the full model with each adapter folded in, W + (alpha / r) "
     "B A (what PEFT's merge_and_unload gives)"},
    {"adapter", OPT_BOOL, F(adapter), 0, 1, NULL, C_EXPORT,
     "a LoRA checkpoint: write its adapters alone as a PEFT folder, --out DIR/adapter_model.safetensors "
     "with adapter_config.json beside it (PeftModel.from_pretrained(base, DIR) loads it)"},
    {"freeze", OPT_STR, F(freeze), 0, 0, NULL, C_TRAIN,
     "frozen parameters: comma-separated shell globs over unit.tensor names (units root, h0, h1, ...; "
     "e.g. \"root.*,h*.qkv_w\"); a frozen tensor is used forward and backward but gets no gradient, "
     "AdamW state or update and is held once in the compute dtype; every glob must match a tensor (the "
     "error lists the names)"},
    {"init-from", OPT_STR, F(init_from), 0, 0, NULL, C_TRAIN | C_SAMPLE | C_EXPORT,
     "Hugging Face model folder (config.json, model.safetensors or its index) to start from; its "
     "config.json sets --model and the shape (--layers, --width, --heads, ..., --vocab, --max-seq-len)"},
    {"prompt", OPT_STR, F(prompt), 0, 0, NULL, C_TRAIN | C_SAMPLE, "text the sample starts from"},
    {"tokens", OPT_INT, F(tokens), 1, 1 << 20, NULL, C_SAMPLE, "tokens to generate"},
    {"kv-cache", OPT_BOOL, F(kv_cache), 0, 1, NULL, C_TRAIN | C_SAMPLE,
     "sample with a key/value cache (per-token cost linear in the context); 0: a full forward per token"},
    {"timing", OPT_BOOL, F(timing), 0, 1, NULL, C_SAMPLE, "print the sampling speed (tokens/s) on stderr"},
    {"temperature", OPT_DBL, F(temperature), 0, 100, NULL, C_TRAIN | C_SAMPLE,
     "sampling temperature (0: greedy)"},
    {"top-k", OPT_INT, F(top_k), 0, 1 << 20, NULL, C_TRAIN | C_SAMPLE,
     "sample among the k likeliest (0: all)"},
    {"text", OPT_LIST, F(texts), 0, 0, NULL, C_PREPARE, "input text files (one or more)"},
    {"out", OPT_STR, F(out), 0, 0, NULL, C_PREPARE | C_EXPORT,
     "prepare: output folder; export: DIR/FILE.safetensors (DIR, a folder of its own, is replaced as one "
     "unit)"},
    {"val-fraction", OPT_DBL, F(val_fraction), 0, 0.999, NULL, C_PREPARE,
     "share of documents kept for val.bin"},
    {"doc-sep", OPT_STR, F(doc_sep), 0, 0, NULL, C_PREPARE,
     "a line equal to this separates documents (e.g. % for fortune files)"},
    {"jsonl", OPT_STR, F(jsonl), 0, 0, NULL, C_PREPARE,
     "instead of --text: fine-tuning rows, one JSON object a line, {\"prompt\": ..., \"completion\": ...} or "
     "{\"messages\": [{\"role\": \"system|user|assistant\", \"content\": ...}, ...]}, rendered with the "
     "chat format of --tokenizer; writes train.mask and val.mask: only the assistant's tokens count in the "
     "loss"},
    {"chat-format", OPT_ENUM, F(chat_format), 0, 0, fsdp_chat_format_names, C_PREPARE,
     "--jsonl: chatml (<|im_start|>role\\n...<|im_end|>: Qwen2, SmolLM2) or llama3 (<|start_header_id|>...); "
     "auto: from the chat_template of the tokenizer_config.json beside --tokenizer, else its special tokens"},
    {"tokenizer", OPT_STR, F(tokenizer), 0, 0, NULL, C_PREPARE | C_SAMPLE | C_EXPORT,
     "GPT-2 style tokenizer.json (byte-level BPE): prepare encodes with it (unset: bytes) and copies it "
     "into the folder; sample and export: instead of the data folder's or --init-from's"},
};
#undef F
#define NOPTS ((int)(sizeof opts / sizeof opts[0]))

static const char *const cmd_names[FSDP_CMD_NCMD] = {"train", "prepare", "export", "sample"};
const char *fsdp_train_cmd_name(fsdp_train_cmd c) { return (unsigned)c < FSDP_CMD_NCMD ? cmd_names[c] : "?"; }

fsdp_train_config fsdp_train_config_default(void) {
    fsdp_train_config c;
    memset(&c, 0, sizeof c);
    c.cmd = FSDP_CMD_TRAIN;
    c.model = 0;
    c.tie_embeddings = -1;
    c.layers = 4;
    c.width = 128;
    c.heads = 4;
    c.vocab = 0;
    c.seq_len = 128;
    c.max_seq_len = 0;
    c.data = "data/fortunes";
    c.shuffle = 1;
    c.batch = 32;
    c.micro_batches = 1;
    c.pack = FSDP_PACK_AUTO;
    c.lr = 2e-3;
    c.min_lr = 2e-4;
    c.warmup = 50;
    c.weight_decay = 0.1;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.clip = 1.0;
    c.steps = 800;
    c.eval_every = 100;
    c.eval_batches = 4;
    c.seed = 1337;
    c.precision = FSDP_PRECISION_MIXED;
    c.strategy = FSDP_FULL_SHARD;
    c.main_grad = FSDP_MAIN_GRAD_LAZY;
    c.accum = FSDP_ACCUM_SHARDED;
    c.reduce_dtype = FSDP_F32;
    c.recompute = 0;
    c.threads = 0;
    c.comm_timeout = 600;
    c.max_inflight = 2;
    c.checkpoint_dir = "checkpoints";
    c.checkpoint_every = 0;
    c.resume = 0;
    c.metrics = NULL;
    c.log_every = 10;
    c.peak_gflops = 0;
    c.skip_update_z = 0;
    c.skip_update_window = 128;
    c.skip_nonfinite = 0;
    c.sample_tokens = 200;
    c.prompt = "";
    c.temperature = 0.8;
    c.top_k = 40;
    c.tokens = 200;
    c.kv_cache = 1;
    c.val_fraction = 0.05;
    c.doc_sep = NULL;
    return c;
}

static fsdp_status set_value(fsdp_train_config *cfg, const opt_def *o, const char *v) {
    char *p = (char *)cfg + o->off;
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_INT:
    case OPT_I64: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || errno == ERANGE)
            return fsdp_set_error(FSDP_EINVAL, "--%s: \"%s\" is not a whole number", o->name, v);
        /* Compared as integers: as doubles, 2^53 + 1 rounds to 2^53 and passed --seed's bound, then
         * did not survive the manifest's JSON number (found by fuzz_cmdline). */
        if (x < (long long)o->min || x > (long long)o->max)
            return fsdp_set_error(FSDP_EINVAL, "--%s %lld is outside its range %.0f..%.0f", o->name, x,
                                  o->min, o->max);
        if (o->kind == OPT_INT)
            *(int *)p = (int)x;
        else
            *(int64_t *)p = (int64_t)x;
        return FSDP_OK;
    }
    case OPT_DBL: {
        double x = strtod(v, &end);
        if (end == v || *end != '\0')
            return fsdp_set_error(FSDP_EINVAL, "--%s: \"%s\" is not a number", o->name, v);
        if (!isfinite(x) || (errno == ERANGE && fabs(x) > 1))
            return fsdp_set_error(FSDP_EINVAL, "--%s: \"%s\" is not a finite number", o->name, v);
        /* The optimizer runs in float: a nonzero value below float's smallest normal (or one that
         * underflows even a double) would silently become 0 or lose its precision. */
        if (x != 0 ? fabs(x) < FLT_MIN : errno == ERANGE)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--%s %s is too small: nonzero values must be at least %.3g in magnitude "
                                  "(the smallest normal float); use 0 or a larger value",
                                  o->name, v, (double)FLT_MIN);
        if (x < o->min || x > o->max)
            return fsdp_set_error(FSDP_EINVAL, "--%s %g is outside its range [%g, %g]", o->name, x, o->min,
                                  o->max);
        *(double *)p = x;
        return FSDP_OK;
    }
    case OPT_STR:
        if (*v == '\0') return fsdp_set_error(FSDP_EINVAL, "--%s needs a non-empty value", o->name);
        *(const char **)p = v;
        return FSDP_OK;
    case OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on")) {
            *(int *)p = 1;
        } else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off")) {
            *(int *)p = 0;
        } else {
            return fsdp_set_error(FSDP_EINVAL, "--%s=%s: a switch takes 0 or 1 (or no value)", o->name, v);
        }
        return FSDP_OK;
    case OPT_ENUM:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(v, o->choices[i])) {
                *(int *)p = i;
                return FSDP_OK;
            }
        {
            char list[200] = "";
            for (int i = 0; o->choices[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                         o->choices[i]);
            return fsdp_set_error(FSDP_EINVAL, "--%s: \"%s\" is not one of %s", o->name, v, list);
        }
    case OPT_LIST: break; /* handled by the parser (several argv words) */
    }
    return FSDP_ERR(FSDP_EINTERNAL, "flag kind %d of --%s", (int)o->kind, o->name);
}

/* ---------------------------------------------------------------- --config FILE.toml */

/* Strings read from settings files, kept for the life of the process: fsdp_train_config owns nothing
 * (its strings point into argv, at static defaults or here), and a program reads one settings file. */
typedef struct kept_block {
    struct kept_block *next;
    char data[];
} kept_block;
static kept_block *kept_strings;

static void *keep_bytes(size_t n) {
    kept_block *b = malloc(sizeof *b + n);
    if (!b) return NULL;
    b->next = kept_strings;
    kept_strings = b;
    return b->data;
}

typedef struct {
    fsdp_train_config *cfg;
    const char *path;
    const char *list_key; /* the OPT_LIST key being collected, NULL when none */
    const char **list;    /* its strings so far (malloc'd, kept once complete) */
    int n_list;
    fsdp_status status;          /* of the key that stopped the walk */
    const char *seen_key[NOPTS]; /* the key that set each setting (seq-len or seq_len), NULL: none yet */
    int seen_line[NOPTS];
} toml_ctx;

/* The opt_def of a file key: the flag's name, or the same with '_' for '-' (seq_len). */
static const opt_def *find_key(const char *key) {
    char name[64];
    size_t n = strlen(key);
    if (n == 0 || n >= sizeof name) return NULL;
    for (size_t k = 0; k <= n; k++)
        name[k] = key[k] == '_' ? '-' : key[k];
    for (int k = 0; k < NOPTS; k++)
        if (!strcmp(opts[k].name, name)) return &opts[k];
    return NULL;
}

static fsdp_status set_value(fsdp_train_config *cfg, const opt_def *o, const char *v);

/* Ends the array being collected: its strings become cfg's list. */
static fsdp_status finish_list(toml_ctx *t) {
    if (!t->list_key) return FSDP_OK;
    const char **kept = keep_bytes(sizeof(char *) * (size_t)(t->n_list + 1));
    if (!kept) return FSDP_ERR(FSDP_ENOMEM, "no memory for %s's settings", t->path);
    memcpy(kept, t->list, sizeof(char *) * (size_t)t->n_list);
    kept[t->n_list] = NULL;
    t->cfg->texts = kept;
    t->cfg->n_texts = t->n_list;
    free(t->list);
    t->list = NULL;
    t->list_key = NULL;
    t->n_list = 0;
    return FSDP_OK;
}

/* One key of the settings file: set like its flag, with the flag's checks, errors prefixed by
 * FILE:LINE. Returns 0 or 1 (fsdp error set). */
static int visit_key(void *ctx, const char *key, const char *value, fsdp_toml_kind kind, int line) {
    toml_ctx *t = ctx;
    const opt_def *o = find_key(key);
    const char *cmd = cmd_names[t->cfg->cmd];
    fsdp_status s = FSDP_OK;
    if (t->list_key && (kind != FSDP_TOML_ARRAY_ITEM || strcmp(key, t->list_key) != 0)) s = finish_list(t);
    if (s != FSDP_OK) return t->status = s, 1;
    if (!o || !(o->cmds & (1u << t->cfg->cmd))) {
        t->status = fsdp_set_error(
            FSDP_EINVAL,
            "--config: %s:%d: unknown setting \"%s\" for `fsdp-train %s` (see fsdp-train %s --help)", t->path,
            line, key, cmd, cmd);
        return 1;
    }
    /* one setting, one key: seq-len and seq_len in one file would leave one of them silently unused */
    const int k = (int)(o - opts);
    if (!(kind == FSDP_TOML_ARRAY_ITEM && t->list_key && !strcmp(key, t->list_key))) {
        if (t->seen_key[k]) { /* named by line: toml++ visits the keys in key order, not the file's */
            const int later = line > t->seen_line[k];
            t->status =
                fsdp_set_error(FSDP_EINVAL,
                               "--config: %s:%d: \"%s\" sets --%s, which \"%s\" (line %d) already set: "
                               "give each setting once",
                               t->path, later ? line : t->seen_line[k], later ? key : t->seen_key[k], o->name,
                               later ? t->seen_key[k] : key, later ? t->seen_line[k] : line);
            return 1;
        }
        t->seen_key[k] = keep_bytes(strlen(key) + 1);
        if (!t->seen_key[k]) {
            t->status = FSDP_ERR(FSDP_ENOMEM, "no memory for %s's settings", t->path);
            return 1;
        }
        strcpy((char *)t->seen_key[k], key);
        t->seen_line[k] = line;
    }
    if (o->kind == OPT_STR && !strcmp(o->name, "config")) {
        t->status = fsdp_set_error(
            FSDP_EINVAL, "--config: %s:%d: a settings file cannot name another (\"%s\")", t->path, line, key);
        return 1;
    }
    /* TOML's types must match the setting's: a string for a name or a path, a number for a number. */
    const int want_string = o->kind == OPT_STR || o->kind == OPT_ENUM;
    const int is_number = kind == FSDP_TOML_INTEGER || kind == FSDP_TOML_FLOAT;
    const char *bad = NULL;
    if (o->kind == OPT_LIST && kind != FSDP_TOML_ARRAY_ITEM)
        bad = "an array of strings";
    else if (o->kind != OPT_LIST && kind == FSDP_TOML_ARRAY_ITEM)
        bad = "a single value, not an array";
    else if (want_string && kind != FSDP_TOML_STRING)
        bad = "a string";
    else if (o->kind == OPT_BOOL && kind != FSDP_TOML_BOOL)
        bad = "true or false";
    else if ((o->kind == OPT_INT || o->kind == OPT_I64) && kind != FSDP_TOML_INTEGER)
        bad = "an integer";
    else if (o->kind == OPT_DBL && !is_number)
        bad = "a number";
    if (bad) {
        t->status =
            fsdp_set_error(FSDP_EINVAL, "--config: %s:%d: \"%s\" must be %s", t->path, line, key, bad);
        return 1;
    }
    if (o->kind == OPT_LIST) {
        if (!t->list_key) t->list_key = o->name;
        const char **grown = realloc(t->list, sizeof(char *) * (size_t)(t->n_list + 1));
        char *copy = keep_bytes(strlen(value) + 1);
        if (!grown || !copy) {
            if (grown) t->list = grown;
            t->status = FSDP_ERR(FSDP_ENOMEM, "no memory for %s's settings", t->path);
            return 1;
        }
        t->list = grown;
        strcpy(copy, value);
        t->list[t->n_list++] = copy;
        return 0;
    }
    const char *v = value;
    if (o->kind == OPT_STR) {
        char *copy = keep_bytes(strlen(value) + 1);
        if (!copy) {
            t->status = FSDP_ERR(FSDP_ENOMEM, "no memory for %s's settings", t->path);
            return 1;
        }
        strcpy(copy, value);
        v = copy;
    }
    if (set_value(t->cfg, o, v) != FSDP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        t->status = fsdp_set_error(FSDP_EINVAL, "--config: %s:%d: %s", t->path, line, msg);
        return 1;
    }
    return 0;
}

/* --config FILE among argv[first..argc) (at most one): its settings into cfg, before the flags. */
static fsdp_status apply_config_file(fsdp_train_config *cfg, int argc, char **argv, int first) {
    const char *path = NULL;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *p = NULL;
        if (!a) break;
        if (!strcmp(a, "--help") || !strcmp(a, "--h")) return FSDP_OK; /* the parser shows the help */
        if (!strcmp(a, "--config") && i + 1 < argc && argv[i + 1])
            p = argv[++i];
        else if (!strncmp(a, "--config=", 9))
            p = a + 9;
        if (!p || !*p) continue; /* no value or an empty one: the flag parser says so */
        if (path)
            return fsdp_set_error(FSDP_EINVAL, "--config given twice (%s and %s): name one file", path, p);
        path = p;
    }
    if (!path) return FSDP_OK;
    toml_ctx t = {.cfg = cfg, .path = path, .status = FSDP_OK};
    char err[1024];
    int rc = fsdp_toml_visit(path, visit_key, &t, err, sizeof err);
    fsdp_status s = rc < 0   ? fsdp_set_error(FSDP_EINVAL, "--config: %s", err)
                    : rc > 0 ? t.status
                             : finish_list(&t);
    free(t.list);
    return s;
}

fsdp_status fsdp_train_config_parse(fsdp_train_config *cfg, int argc, char **argv) {
    *cfg = fsdp_train_config_default();
    int i = 1;
    if (argc > 1 && argv[1] && argv[1][0] != '-') {
        int found = 0;
        for (int c = 0; c < FSDP_CMD_NCMD; c++)
            if (!strcmp(argv[1], cmd_names[c])) {
                cfg->cmd = (fsdp_train_cmd)c;
                found = 1;
            }
        if (!strcmp(argv[1], "help")) {
            cfg->help = 1;
            return FSDP_OK;
        }
        if (!found)
            return fsdp_set_error(
                FSDP_EINVAL,
                "unknown command \"%s\": use train (the default), prepare, export or sample; "
                "see fsdp-train --help",
                argv[1]);
        i = 2;
    }
    const char *cmd = cmd_names[cfg->cmd];
    FSDP_TRY(apply_config_file(cfg, argc, argv, i));
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!a || strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return fsdp_set_error(FSDP_EINVAL,
                                  "unexpected argument \"%s\" for `fsdp-train %s`: flags start with --; see "
                                  "fsdp-train %s --help",
                                  a ? a : "(null)", cmd, cmd);
        const char *name = a + 2;
        if (!strcmp(name, "help") || !strcmp(name, "h")) {
            cfg->help = 1;
            return FSDP_OK;
        }
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def *o = NULL;
        for (int k = 0; k < NOPTS; k++)
            if (strlen(opts[k].name) == nlen && !strncmp(opts[k].name, name, nlen)) o = &opts[k];
        if (!o || !(o->cmds & (1u << cfg->cmd)))
            return fsdp_set_error(FSDP_EINVAL,
                                  "unknown flag --%.*s for `fsdp-train %s`: see fsdp-train %s --help",
                                  (int)nlen, name, cmd, cmd);
        if (o->kind == OPT_LIST) {
            if (eq) return fsdp_set_error(FSDP_EINVAL, "--%s takes its files as separate words", o->name);
            int n = 0;
            while (i + 1 + n < argc && argv[i + 1 + n] && strncmp(argv[i + 1 + n], "--", 2) != 0)
                n++;
            if (n == 0) return fsdp_set_error(FSDP_EINVAL, "--%s needs at least one file", o->name);
            cfg->texts = (const char *const *)&argv[i + 1];
            cfg->n_texts = n;
            i += n;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if (o->kind == OPT_BOOL) {
            v = "1";
        } else {
            if (i + 1 >= argc || !argv[i + 1])
                return fsdp_set_error(FSDP_EINVAL, "--%s needs a value; see fsdp-train %s --help", o->name,
                                      cmd);
            v = argv[++i];
        }
        FSDP_TRY(set_value(cfg, o, v));
    }
    return fsdp_train_config_check(cfg, 0);
}

/* Value of a setting as text (the defaults and the printed settings). */
static void format_value(char *buf, size_t cap, const fsdp_train_config *cfg, const opt_def *o) {
    const char *p = (const char *)cfg + o->off;
    switch (o->kind) {
    case OPT_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case OPT_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
    case OPT_DBL: snprintf(buf, cap, "%g", *(const double *)p); break;
    case OPT_BOOL: snprintf(buf, cap, "%d", *(const int *)p); break;
    case OPT_ENUM: snprintf(buf, cap, "%s", o->choices[*(const int *)p]); break;
    case OPT_STR: {
        const char *s = *(const char *const *)p;
        snprintf(buf, cap, "%s", s ? s : "(none)");
        break;
    }
    case OPT_LIST: {
        size_t used = 0;
        buf[0] = '\0';
        for (int i = 0; i < cfg->n_texts && used < cap; i++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " " : "", cfg->texts[i]);
        if (cfg->n_texts == 0) snprintf(buf, cap, "(none)");
        break;
    }
    }
}

void fsdp_train_usage(FILE *f, fsdp_train_cmd cmd) {
    static const char *const what[FSDP_CMD_NCMD] = {
        "train a model (GPT-2 or the Llama family) on token files with FSDP (the default command; under "
        "mpirun, one process per rank)",
        "tokenise text files (bytes, or --tokenizer's BPE) into DIR/train.bin, DIR/val.bin (llm.c's layout), "
        "or with --jsonl chat rows into those and the loss masks DIR/train.mask, DIR/val.mask; the folder "
        "is replaced as one unit",
        "write a checkpoint's (or a Hugging Face folder's) full model (fp32, or --export-dtype bf16) as "
        ".safetensors with its family's Hugging Face tensor names, plus config.json (and the tokenizer when "
        "the run has one), its folder replaced as one unit",
        "generate text from a checkpoint or a Hugging Face folder (GPT-2 or the Llama family)",
    };
    fprintf(f, "usage: fsdp-train %s[flags]\n  %s\n\nflags (default in brackets):\n",
            cmd == FSDP_CMD_TRAIN     ? "[train] "
            : cmd == FSDP_CMD_PREPARE ? "prepare "
            : cmd == FSDP_CMD_EXPORT  ? "export "
                                      : "sample ",
            what[cmd]);
    fsdp_train_config d = fsdp_train_config_default();
    for (int k = 0; k < NOPTS; k++) {
        const opt_def *o = &opts[k];
        if (!(o->cmds & (1u << cmd))) continue;
        char def[256], name[200];
        format_value(def, sizeof def, &d, o);
        if (o->kind == OPT_ENUM) {
            char list[128] = "";
            for (int i = 0; o->choices[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                         o->choices[i]);
            snprintf(name, sizeof name, "--%s %s", o->name, list);
        } else if (o->kind == OPT_BOOL) {
            snprintf(name, sizeof name, "--%s", o->name);
        } else if (o->kind == OPT_LIST) {
            snprintf(name, sizeof name, "--%s FILE...", o->name);
        } else {
            snprintf(name, sizeof name, "--%s X", o->name);
        }
        fprintf(f, "  %-30s %s [%s]\n", name, o->help, def);
    }
    fprintf(f, "  %-30s this text\n", "--help");
    if (cmd == FSDP_CMD_TRAIN)
        fprintf(
            f,
            "\nother commands: fsdp-train prepare|export|sample --help\n"
            "many ranks: mpirun -np N --bind-to none fsdp-train ... (same flags; the global batch stays the "
            "same)\n"
            "idle OpenMP threads sleep (OMP_WAIT_POLICY=passive) unless OMP_WAIT_POLICY is set\n");
}

void fsdp_train_config_print(FILE *f, const fsdp_train_config *cfg) {
    fprintf(f, "fsdp-train %s settings:\n", cmd_names[cfg->cmd]);
    for (int k = 0; k < NOPTS; k++) {
        const opt_def *o = &opts[k];
        if (!(o->cmds & (1u << cfg->cmd))) continue;
        char v[1024];
        format_value(v, sizeof v, cfg, o);
        fprintf(f, "  --%-18s %s\n", o->name, v);
    }
}

cJSON *fsdp_train_config_to_json(const fsdp_train_config *cfg) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    for (int k = 0; k < NOPTS; k++) {
        const opt_def *o = &opts[k];
        if (!(o->cmds & C_TRAIN)) continue;
        const char *p = (const char *)cfg + o->off;
        cJSON *item = NULL;
        switch (o->kind) {
        case OPT_INT:
        case OPT_BOOL: item = cJSON_CreateNumber(*(const int *)p); break;
        case OPT_I64: item = cJSON_CreateNumber((double)*(const int64_t *)p); break;
        case OPT_DBL: item = cJSON_CreateNumber(*(const double *)p); break;
        case OPT_ENUM: item = cJSON_CreateString(o->choices[*(const int *)p]); break;
        case OPT_STR: {
            const char *s = *(const char *const *)p;
            item = s ? cJSON_CreateString(s) : cJSON_CreateNull();
            break;
        }
        case OPT_LIST: continue;
        }
        if (!item || !cJSON_AddItemToObject(j, o->name, item)) {
            cJSON_Delete(item);
            cJSON_Delete(j);
            return NULL;
        }
    }
    return j;
}

/* Sets one setting of the table from its JSON record; absent keys are an error only when required. */
static fsdp_status from_json_key(fsdp_train_config *cfg, const cJSON *j, const char *key, int required,
                                 const char *what) {
    const opt_def *o = NULL;
    for (int i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, key)) o = &opts[i];
    FSDP_INVARIANT(o != NULL);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, o->name);
    if (!v)
        return required ? fsdp_set_error(FSDP_EFORMAT, "%s: config lacks \"%s\"", what, o->name) : FSDP_OK;
    char buf[64];
    if (o->kind == OPT_ENUM && cJSON_IsString(v)) {
        snprintf(buf, sizeof buf, "%s", v->valuestring);
    } else if (o->kind == OPT_DBL && cJSON_IsNumber(v)) {
        snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
    } else if (o->kind != OPT_ENUM && o->kind != OPT_STR && cJSON_IsNumber(v) &&
               v->valuedouble == floor(v->valuedouble)) {
        snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
    } else {
        return fsdp_set_error(FSDP_EFORMAT, "%s: config \"%s\" has the wrong type", what, o->name);
    }
    if (set_value(cfg, o, buf) != FSDP_OK)
        return FSDP_WRAP_USER(FSDP_EFORMAT, "%s: config value is invalid", what);
    return FSDP_OK;
}

static const opt_def *numeric_opt(const char *name) {
    const opt_def *o = NULL;
    for (int i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, name)) o = &opts[i];
    return o && (o->kind == OPT_INT || o->kind == OPT_BOOL || o->kind == OPT_ENUM || o->kind == OPT_DBL)
               ? o
               : NULL;
}

int fsdp_train_config_get_number(const fsdp_train_config *cfg, const char *name, double *v) {
    const opt_def *o = numeric_opt(name);
    if (!o) return -1;
    const char *p = (const char *)cfg + o->off;
    *v = o->kind == OPT_DBL ? *(const double *)p : *(const int *)p;
    return 0;
}

int fsdp_train_config_set_number(fsdp_train_config *cfg, const char *name, double v) {
    const opt_def *o = numeric_opt(name);
    if (!o) return -1;
    char *p = (char *)cfg + o->off;
    if (o->kind == OPT_DBL)
        *(double *)p = v;
    else
        *(int *)p = (int)v;
    return 0;
}

fsdp_status fsdp_train_config_from_json(fsdp_train_config *cfg, const cJSON *j, const char *what) {
    /* The settings that fix the model's shape and numerics: a checkpoint can only be read with these.
     * The model family's fields came later: a manifest without them is a GPT-2's (their defaults). */
    static const char *const keys[] = {"layers",  "width",       "heads",     "vocab",
                                       "seq-len", "max-seq-len", "precision", "seed"};
    if (!cJSON_IsObject(j)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"config\" is not a JSON object", what);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        FSDP_TRY(from_json_key(cfg, j, keys[k], 1, what));
    /* the family, every model field's flag (fsdp_model_fields) and the architecture, where recorded */
    FSDP_TRY(from_json_key(cfg, j, "model", 0, what));
    int n;
    const fsdp_model_field *f = fsdp_model_fields(&n);
    for (int i = 0; i < n; i++) {
        int required = 0;
        for (size_t k = 0; f[i].flag && k < sizeof keys / sizeof keys[0]; k++)
            required |= !strcmp(keys[k], f[i].flag);
        if (f[i].flag && f[i].identity && !required) FSDP_TRY(from_json_key(cfg, j, f[i].flag, 0, what));
    }
    FSDP_TRY(from_json_key(cfg, j, "hf-architecture", 0, what));
    /* --freeze and --lora-targets fix the checkpoint's layout (its frozen tensors are not in it):
     * strings kept for the life of the process, as a settings file's are */
    static const char *const strs[2] = {"freeze", "lora-targets"};
    const char **dst[2] = {&cfg->freeze, &cfg->lora_targets};
    for (int k = 0; k < 2; k++) {
        const cJSON *fz = cJSON_GetObjectItemCaseSensitive(j, strs[k]);
        if (fz && !cJSON_IsNull(fz) && (!cJSON_IsString(fz) || !*fz->valuestring))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not a non-empty string or null", what,
                                  strs[k]);
        *dst[k] = NULL;
        if (cJSON_IsString(fz)) {
            char *copy = keep_bytes(strlen(fz->valuestring) + 1);
            if (!copy) return FSDP_ERR(FSDP_ENOMEM, "no memory for a setting");
            *dst[k] = strcpy(copy, fz->valuestring);
        }
    }
    if (cfg->vocab < 2 || (cfg->head_dim == 0 && cfg->width % cfg->heads) || cfg->seq_len > cfg->max_seq_len)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: inconsistent model shape (vocab %d, width %d, heads %d, "
                              "seq-len %d, max-seq-len %d)",
                              what, cfg->vocab, cfg->width, cfg->heads, cfg->seq_len, cfg->max_seq_len);
    return FSDP_OK;
}
