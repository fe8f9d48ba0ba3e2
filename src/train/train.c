/* train.c — the training loop of `fsdp-train` and its sampling command: builds the engine and the model
 * (include/fsdp_model.h) from the settings (model_load.c), resumes from a checkpoint or initialises, then
 * runs steps (micro-batches, clipping, AdamW with warmup + cosine LR), evaluates, writes metrics, shows
 * progress, checkpoints, and generates a sample. Every rank runs the same code; only rank 0 writes output. */
#define _GNU_SOURCE
#include "train/train.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/kernels.h"
#include "fsdp_model.h"
#include "data/bpe.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/hf.h"
#include "train/model_load.h"
#include "train/perf.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- small pieces */

double fsdp_train_lr(const fsdp_train_config *c, int s) {
    if (c->warmup > 0 && s <= c->warmup) return c->lr * (double)s / (double)c->warmup;
    if (c->steps <= c->warmup) return c->lr;
    double p = (double)(s - c->warmup) / (double)(c->steps - c->warmup);
    if (p > 1) p = 1;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

int fsdp_train_affinity_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return fsdp_train_online_cores();
}

int fsdp_train_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int fsdp_train_threads(const fsdp_train_config *cfg, fsdp_comm_t *comm) {
    if (cfg->threads > 0) return cfg->threads;
    int local = comm ? fsdp_comm_local_size(comm) : 1;
    int t = fsdp_train_affinity_cores() / (local > 0 ? local : 1);
    return t > 0 ? t : 1;
}

void fsdp_train_check_affinity(FILE *err, int threads, fsdp_comm_t *comm) {
    const int allowed = fsdp_train_affinity_cores(), online = fsdp_train_online_cores();
    const int rank = comm ? fsdp_comm_rank(comm) : 0, local = comm ? fsdp_comm_local_size(comm) : 1;
    if (err == NULL) return;
    /* More threads than cores: they time-share, and every OpenMP barrier waits for a descheduled one
     * (measured: 2 threads bound to 1 core ran 78 tokens/s against 133 on 2 cores). */
    if (threads > allowed)
        fprintf(err,
                "fsdp-train: warning: rank %d runs %d OpenMP threads on %d core%s (its CPU affinity), so "
                "they time-share: give it more cores (under mpirun: --bind-to none, or --map-by "
                "slot:PE=%d) or lower --threads\n",
                rank, threads, allowed, allowed == 1 ? "" : "s", threads);
    else if (rank == 0 && allowed * local < online)
        fprintf(err,
                "fsdp-train: note: rank 0 may run on %d of the %d cores online (its CPU affinity; %d rank%s "
                "on this node); under mpirun, --bind-to none lets the ranks use every core\n",
                allowed, online, local, local == 1 ? "" : "s");
}

void fsdp_train_omp_wait_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") != NULL) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* exec failed: run as we are (the configuration print says so) */
}

/* xoshiro-style 128-bit state (xorshift128+), seeded through splitmix64: sampling only. */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void rng_seed(uint64_t s[2], uint64_t seed) {
    s[0] = splitmix(&seed);
    s[1] = splitmix(&seed);
}
static double rng_uniform(uint64_t s[2]) {
    uint64_t a = s[0], b = s[1];
    s[0] = b;
    a ^= a << 23;
    s[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return (double)((s[1] + b) >> 11) * (1.0 / 9007199254740992.0);
}

static void fmt_bytes(char *buf, size_t cap, size_t b) {
    if (b >= ((size_t)1 << 30))
        snprintf(buf, cap, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, cap, "%.1f MiB", (double)b / (1 << 20));
}

static void fmt_eta(char *buf, size_t cap, double s) {
    if (s < 0 || !isfinite(s)) s = 0;
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%dh%02dm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, cap, "%dm%02ds", t / 60, t % 60);
}

/* ---------------------------------------------------------------- model set-up */

/* --init-from: the model shape from DIR/config.json, and data of the same vocabulary. */
static fsdp_status apply_init_from(fsdp_train_config *c) {
    if (!c->init_from) return FSDP_OK;
    FSDP_TRY(fsdp_hf_read_config(c->init_from, c));
    int v = 0;
    FSDP_TRY(fsdp_data_meta_vocab(c->data, &v));
    if (v > 0 && v != c->vocab) {
        char *dir = fsdp_data_dir(c->data);
        fsdp_status s =
            fsdp_set_error(FSDP_EINVAL,
                           "%s/meta.json: the data's vocabulary (%d) is not --init-from %s's (%d): "
                           "prepare the text with `fsdp-train prepare --tokenizer %s/tokenizer.json`",
                           dir ? dir : c->data, v, c->init_from, c->vocab, c->init_from);
        free(dir);
        return s;
    }
    return FSDP_OK;
}

/* Resolves vocab 0 (meta.json's, else GPT-2's) and checks cfg against the world size. */
static fsdp_status resolve_config(fsdp_train_config *c, int world) {
    FSDP_TRY(apply_init_from(c));
    if (c->vocab == 0) {
        int v = 0;
        FSDP_TRY(fsdp_data_meta_vocab(c->data, &v));
        c->vocab = v > 0 ? v : FSDP_GPT2_VOCAB;
    }
    return fsdp_train_config_check(c, world);
}

/* A resumed run keeps the starting point its first run recorded (the manifest's "init-from"). */
static fsdp_status carry_init_from(const char *step_dir, cJSON *cj) {
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

/* ---------------------------------------------------------------- memory plan */

fsdp_status fsdp_train_plan_compute(const fsdp_train_config *c, int world, int threads, int have_val,
                                    fsdp_engine_t *eng, fsdp_plan *out) {
    if (c == NULL || out == NULL || world < 1 || threads < 1)
        return FSDP_ERR(FSDP_EINVAL, "plan: need a config, an output, world >= 1 and threads >= 1");
    if (c->batch % (c->micro_batches * world) != 0)
        return fsdp_set_error(FSDP_EINVAL, "--batch %d is not divisible by --micro-batches %d x %d ranks",
                              c->batch, c->micro_batches, world);
    fsdp_model_config mc;
    FSDP_TRY(fsdp_train_model_config(c, &mc));
    fsdp_model_units us;
    FSDP_TRY(fsdp_model_units_init(&us, &mc));
    /* Per rank and micro-batch: b sequences of T tokens (the loader's split). */
    const int b = c->batch / (c->micro_batches * world), T = c->seq_len;
    const size_t bt = (size_t)b * (size_t)T;
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = world;
    pc.engine = fsdp_train_engine_config(c);
    pc.backend = world > 1 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    /* The transports the engine's communicators really use; without an engine (--plan): one host. */
    fsdp_comm_t *sc = eng ? fsdp_engine_shard_comm(eng) : NULL,
                *rc = eng ? fsdp_engine_replica_comm(eng) : NULL;
    pc.shm = sc ? fsdp_comm_shm_active(sc) : 1;
    pc.shard_group = sc ? fsdp_comm_size(sc) : c->shard_group;
    pc.replica_shm = rc ? fsdp_comm_shm_active(rc) : 1;
    pc.n_micro = c->micro_batches;
    pc.steps = c->steps > 1 ? 2 : 1;    /* prefetch starts with the second step */
    pc.schedule = FSDP_PLAN_ROOT_WRAPS; /* every family's hook order: the root unit wraps the blocks */
    /* activation: the model's own (its arena and attention backward's scratch that lives beside it
     * during backward) and the trainer's input and target tokens (int32 [b, T] each), with --pack doc
     * their document ids too (--pack auto counts as concat before the data are opened). */
    pc.activation_bytes = fsdp_model_activation_bytes(&mc, b, T, threads) +
                          (size_t)(c->pack == FSDP_PACK_DOC ? 3 : 2) * bt * sizeof(int32_t);
    /* other: the GEMM workspace and the loaders' read buffers (b*T + 1 int32 each). */
    pc.other_bytes = fsdp_model_other_bytes(&mc, b, T, pc.engine.compute_dtype) +
                     (size_t)(have_val ? 2 : 1) * (bt + 1) * sizeof(int32_t);
    fsdp_status s = fsdp_plan_compute(us.units, us.n_units, &pc, out);
    fsdp_model_units_free(&us);
    return s;
}

static fsdp_status write_report(const char *path, const fsdp_plan *plan, const fsdp_mem_peaks *meas);

/* The category of a plan with the largest predicted peak. */
static fsdp_mem_cat largest_category(const fsdp_plan *p) {
    int best = 0;
    for (int k = 1; k < FSDP_MEM_NCAT; k++)
        if (p->predicted.peak[k] > p->predicted.peak[best]) best = k;
    return (fsdp_mem_cat)best;
}

static const char *strategy_flag(int s) {
    static const char *const n[] = {"full", "grad-op", "none", "hybrid"};
    return s >= 0 && s < 4 ? n[s] : "?";
}

/* --plan --fit BYTES: the first setting, in this order of preference, whose per-rank plan total fits:
 * for the given --strategy then each more sharded one (none -> grad-op -> full, hybrid -> full), for
 * the given --recompute then on, the fewest --micro-batches that divide the per-rank batch (the largest
 * micro-batch). c gets the choice and *plan its plan; *tried counts the plans computed. Nothing fits:
 * FSDP_EINVAL naming the budget, the smallest plan tried and its largest category. */
static fsdp_status plan_fit(fsdp_train_config *c, int world, int threads, fsdp_plan *plan, int *tried) {
    int strategies[4], ns = 0;
    strategies[ns++] = c->strategy;
    if (c->strategy == FSDP_NO_SHARD) strategies[ns++] = FSDP_SHARD_GRAD_OP;
    if (c->strategy != FSDP_FULL_SHARD) strategies[ns++] = FSDP_FULL_SHARD;
    const int recs[2] = {c->recompute, 1}, nr = c->recompute ? 1 : 2;
    const int per_rank = c->batch / world; /* sequences per rank and step (checked: batch % world == 0) */
    fsdp_train_config best = *c;
    fsdp_plan smallest;
    size_t smallest_total = SIZE_MAX;
    *tried = 0;
    for (int si = 0; si < ns; si++)
        for (int ri = 0; ri < nr; ri++)
            for (int m = 1; m <= per_rank; m++) {
                if (per_rank % m != 0) continue;
                fsdp_train_config t = *c;
                t.strategy = strategies[si];
                t.recompute = recs[ri];
                t.micro_batches = m;
                fsdp_plan p;
                FSDP_TRY(fsdp_train_plan_compute(&t, world, threads, t.eval_every > 0, NULL, &p));
                ++*tried;
                if (p.predicted.total <= (size_t)c->fit) {
                    *c = t;
                    *plan = p;
                    return FSDP_OK;
                }
                if (p.predicted.total < smallest_total) {
                    smallest_total = p.predicted.total;
                    smallest = p;
                    best = t;
                }
            }
    const fsdp_mem_cat big = largest_category(&smallest);
    return fsdp_set_error(
        FSDP_EINVAL,
        "--fit %lld: no setting fits: the smallest plan (--micro-batches %d, --recompute %d, "
        "--strategy %s, %d rank%s) needs %zu B per rank, its largest category %s %zu B; "
        "lower --batch or --seq-len, a smaller model, or more ranks (--world)",
        (long long)c->fit, best.micro_batches, best.recompute, strategy_flag(best.strategy), world,
        world == 1 ? "" : "s", smallest_total, fsdp_mem_cat_name(big), smallest.predicted.peak[big]);
}

/* --plan on this rank (no collective: every rank computes the same, rank 0 prints and writes). */
static fsdp_status plan_local(const fsdp_train_config *cfg_in, fsdp_comm_t *comm, FILE *out) {
    fsdp_train_config cfg = *cfg_in;
    fsdp_train_config *c = &cfg;
    const int world = c->world > 0 ? c->world : fsdp_comm_size(comm);
    const int rank0 = fsdp_comm_rank(comm) == 0;
    c->world = world;
    FSDP_TRY(resolve_config(c, world)); /* the run's own resolution of the vocabulary and checks */
    /* The threads a real run would use: --threads, else the cores split over the ranks (all on this
     * node when planning for a world other than the launcher's). */
    int threads = fsdp_train_threads(c, comm);
    if (c->threads == 0 && world != fsdp_comm_size(comm)) {
        threads = fsdp_train_threads(c, NULL) / world;
        if (threads < 1) threads = 1;
    }
    fsdp_plan plan;
    int tried = 0;
    FSDP_TRY(fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)c->mixed_compute)); /* other: its workspace */
    const fsdp_train_config asked = *c;
    if (c->fit > 0)
        FSDP_TRY(plan_fit(c, world, threads, &plan, &tried));
    else
        FSDP_TRY(fsdp_train_plan_compute(c, world, threads, c->eval_every > 0, NULL, &plan));
    if (!rank0) return FSDP_OK;
    if (out && c->fit > 0)
        fprintf(out,
                "--fit %lld B per rank: --micro-batches %d --recompute %d --strategy %s fits (%zu B, %.1f%% "
                "of the "
                "budget; %d plan%s tried; asked: --micro-batches %d --recompute %d --strategy %s)\n",
                (long long)c->fit, c->micro_batches, c->recompute, strategy_flag(c->strategy),
                plan.predicted.total, 100.0 * (double)plan.predicted.total / (double)c->fit, tried,
                tried == 1 ? "" : "s", asked.micro_batches, asked.recompute, strategy_flag(asked.strategy));
    if (out) {
        fprintf(
            out,
            "fsdp-train --plan: %d layers, width %d, %d heads, vocab %d, seq-len %d, batch %d (%d per rank "
            "and micro-batch), %d thread%s per rank; nothing allocated\n",
            c->layers, c->width, c->heads, c->vocab, c->seq_len, c->batch,
            c->batch / (c->micro_batches * world), threads, threads == 1 ? "" : "s");
        FSDP_TRY(fsdp_plan_print(out, &plan, NULL));
        fprintf(out, "activation is an estimate; the rest is exact (other: the GEMM workspace with oneDNN's "
                     "scratchpad, sized on this CPU's kernels)\n");
        /* what a run would be refused for (check_mem_limit): --mem-limit, else the machine's memory shared
         * by the ranks planned for on this host */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const int local = world != fsdp_comm_size(comm) ? world : fsdp_comm_local_size(comm);
        const double limit = c->mem_limit > 0                    ? (double)c->mem_limit
                             : pages > 0 && psz > 0 && local > 0 ? (double)pages * (double)psz / local
                                                                 : 0;
        if (limit > 0 && (double)plan.predicted.total > limit) {
            const fsdp_mem_cat big = largest_category(&plan);
            fprintf(out,
                    "note: this plan exceeds the %.0f B per rank %s: a run of it would be refused (largest "
                    "category %s, %zu B); --fit finds settings that fit\n",
                    limit, c->mem_limit > 0 ? "of --mem-limit" : "of the machine's memory",
                    fsdp_mem_cat_name(big), plan.predicted.peak[big]);
        }
    }
    if (c->report) FSDP_TRY(write_report(c->report, &plan, NULL));
    return FSDP_OK;
}

fsdp_status fsdp_train_plan(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out) {
    fsdp_io_inputs_reset();
    return fsdp_comm_agree(comm, plan_local(cfg, comm, out), "--plan");
}

/* ---------------------------------------------------------------- sampling */

/* The k-th largest of x[0..n) counting repeats (0 < k <= n), in O(n log k): a min-heap heap[0..k) of the
 * k largest so far, whose root is the answer. */
static float kth_largest(const float *x, int n, int k, float *heap) {
    for (int i = 0; i < k; i++) { /* sift up */
        int c = i;
        heap[c] = x[i];
        while (c > 0 && heap[(c - 1) / 2] > heap[c]) {
            float t = heap[c];
            heap[c] = heap[(c - 1) / 2], heap[(c - 1) / 2] = t;
            c = (c - 1) / 2;
        }
    }
    for (int i = k; i < n; i++) {
        if (!(x[i] > heap[0])) continue;
        heap[0] = x[i];
        for (int c = 0;;) { /* sift down */
            int l = 2 * c + 1, m = c;
            if (l < k && heap[l] < heap[m]) m = l;
            if (l + 1 < k && heap[l + 1] < heap[m]) m = l + 1;
            if (m == c) break;
            float t = heap[c];
            heap[c] = heap[m], heap[m] = t;
            c = m;
        }
    }
    return heap[0];
}

/* Picks a token from logits[0..V) with temperature and top-k; rank 0 decides, every rank learns it. */
static fsdp_status pick_token(const float *logits, int V, double temperature, int top_k, uint64_t rng[2],
                              fsdp_comm_t *comm, int *tok) {
    int32_t chosen = 0;
    if (!comm || fsdp_comm_rank(comm) == 0) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        if (temperature <= 0) {
            chosen = best;
        } else {
            /* threshold = the k-th largest logit (k = V when top_k is 0 or >= V) */
            float thr = -INFINITY;
            if (top_k > 0 && top_k < V) {
                float *heap = malloc(sizeof(float) * (size_t)top_k);
                if (!heap) return FSDP_ERR(FSDP_ENOMEM, "no memory for top-k");
                thr = kth_largest(logits, V, top_k, heap);
                free(heap);
            }
            double sum = 0, mx = logits[best];
            for (int i = 0; i < V; i++)
                if (logits[i] >= thr) sum += exp((logits[i] - mx) / temperature);
            double u = rng_uniform(rng) * sum, acc = 0;
            int pick = best;
            for (int i = 0; i < V; i++) {
                if (logits[i] < thr) continue;
                acc += exp((logits[i] - mx) / temperature);
                if (acc >= u) {
                    pick = i;
                    break;
                }
            }
            chosen = pick;
        }
    }
    if (comm && fsdp_comm_size(comm) > 1) FSDP_TRY(fsdp_comm_broadcast(comm, &chosen, 1, FSDP_I32, 0));
    if (chosen < 0 || chosen >= V)
        return FSDP_ERR(FSDP_EFORMAT, "rank 0 sent token id %d, outside the vocabulary [0, %d)", (int)chosen,
                        V);
    *tok = chosen;
    return FSDP_OK;
}

/* Writes one generated token: bytes as they are (control characters other than newline and tab as
 * '?'), end-of-text as a separator line; with a tokenizer, its text (end-of-text as the separator line);
 * with another vocabulary and no tokenizer, the id in brackets. */
static void put_token(FILE *out, int tok, int vocab, const fsdp_bpe *bpe) {
    size_t len = 0;
    const char *text = bpe ? fsdp_bpe_token_bytes(bpe, tok, &len) : NULL;
    if (bpe && tok == fsdp_bpe_eot(bpe)) {
        fputs("\n----\n", out);
    } else if (text) {
        fwrite(text, 1, len, out);
    } else if (vocab == FSDP_BYTE_VOCAB) {
        if (tok == FSDP_TOKEN_EOT) {
            fputs("\n----\n", out);
        } else {
            int ch = tok;
            if ((ch < 32 && ch != '\n' && ch != '\t') || ch == 127) ch = '?';
            fputc(ch, out);
        }
    } else {
        fprintf(out, "[%d]", tok);
    }
    fflush(out);
}

/* Generates n tokens after prompt with the model on comm: the prompt's bytes with the byte vocabulary,
 * its BPE ids with a tokenizer (bpe; every rank encodes the same ids), none otherwise. */
static fsdp_status generate(fsdp_model_t *model, const fsdp_train_config *c, fsdp_comm_t *comm,
                            const char *prompt, int n, uint64_t rng[2], FILE *out, fsdp_bpe *bpe) {
    const fsdp_model_config *gc = fsdp_model_get_config(model);
    int V = gc->vocab_size, Tmax = gc->max_seq_len, rank0 = !comm || fsdp_comm_rank(comm) == 0;
    size_t plen = strlen(prompt);
    if (V != FSDP_BYTE_VOCAB && plen > 0 && !bpe)
        return fsdp_set_error(FSDP_EINVAL,
                              "--prompt needs the byte-level vocabulary (%d) or a tokenizer; this model's "
                              "vocabulary is %d and no tokenizer.json was found (pass --tokenizer FILE)",
                              FSDP_BYTE_VOCAB, V);
    size_t cap = (bpe ? fsdp_bpe_max_ids(bpe, plen) : plen) + (size_t)n + 1;
    int *toks = malloc(sizeof(int) * cap);
    if (!toks) return FSDP_ERR(FSDP_ENOMEM, "no memory for %zu tokens", cap);
    size_t len = 0;
    toks[len++] = bpe ? fsdp_bpe_eot(bpe) : V == FSDP_BYTE_VOCAB ? FSDP_TOKEN_EOT : FSDP_GPT2_VOCAB - 1;
    if (bpe) {
        size_t k = 0;
        fsdp_status es = fsdp_bpe_encode(bpe, prompt, plen, toks + len, &k);
        if (es != FSDP_OK) {
            free(toks);
            return es;
        }
        len += k;
    } else {
        for (size_t i = 0; i < plen; i++)
            toks[len++] = (unsigned char)prompt[i];
    }
    if (rank0 && out) fputs(prompt, out);
    fsdp_status s = FSDP_OK;
    /* With the cache: positions start.. are in the model's context, the first `cached` of them cached;
     * when the context would pass T_max it restarts from the last half (GPT-2's positions are absolute,
     * so a sliding window cannot reuse the cache). Without: a full forward over the last T_max tokens. */
    size_t start = len > (size_t)Tmax ? len - (size_t)Tmax : 0, cached = 0;
    for (int k = 0; k < n && s == FSDP_OK; k++) {
        const float *logits = NULL, *row = NULL;
        if (c->kv_cache) {
            if (len - start > (size_t)Tmax) {
                start = len - (Tmax / 2 > 0 ? (size_t)(Tmax / 2) : 1);
                cached = 0;
            }
            s = fsdp_model_decode(model, toks + start + cached, (int)(len - start - cached), (int)cached,
                                  &row);
            cached = len - start;
        } else {
            size_t T = len < (size_t)Tmax ? len : (size_t)Tmax;
            int Vp = 0;
            fsdp_model_batch mb = {.tokens = toks + (len - T), .B = 1, .T = (int)T};
            s = fsdp_model_forward(model, &mb, NULL);
            if (s == FSDP_OK) s = fsdp_model_logits(model, &logits, NULL, NULL, &Vp);
            if (s == FSDP_OK) row = logits + (T - 1) * (size_t)Vp;
        }
        int tok = 0;
        if (s == FSDP_OK) s = pick_token(row, V, c->temperature, c->top_k, rng, comm, &tok);
        if (s == FSDP_OK) {
            toks[len++] = tok;
            if (rank0 && out) put_token(out, tok, V, bpe);
        }
    }
    if (rank0 && out) fputc('\n', out);
    fsdp_status s2 = fsdp_model_end_eval(model);
    free(toks);
    return s != FSDP_OK ? s : s2;
}

/* ---------------------------------------------------------------- evaluation */

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

/* ---------------------------------------------------------------- output files */

/* Every rank can create, write, fsync and remove a small file in dir (a read-only or full file
 * system, a folder without write permission: found before the run, not at its first save). */
static fsdp_status probe_folder(const char *dir, int rank) {
    char *p = fsdp_strdupf("%s/.write-test.rank_%05d", dir, rank);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = fsdp_out_check(p, "--checkpoint-dir");
    free(p);
    return s;
}

/* No output is an input or another output, nor among the checkpoint folder's, the --init-from folder's
 * or the --export-final folder's own entries (--report onto ck/latest, --report = --metrics,
 * --export-final inside a step folder): refused naming both flags, before anything is written. */
static fsdp_status claim_paths(const fsdp_train_config *c) {
    const unsigned D = FSDP_CLAIM_DIR, I = FSDP_CLAIM_IN, O = FSDP_CLAIM_OUT;
    FSDP_TRY(fsdp_io_claim(c->checkpoint_dir, "--checkpoint-dir", D | O | (c->resume ? I : 0),
                           fsdp_ckpt_managed_name));
    FSDP_TRY(fsdp_io_claim(c->init_from, "--init-from", D | I, NULL));
    FSDP_TRY(fsdp_io_claim(c->export_final, "--export-final", D | O, fsdp_export_managed_name));
    FSDP_TRY(fsdp_io_claim(c->metrics, "--metrics", O, NULL));
    FSDP_TRY(fsdp_io_claim(c->report, "--report", O, NULL));
    return fsdp_io_claim(c->trace, "--trace", O, NULL);
}

/* --metrics: appended to, so not replaced through a temporary; still a regular file or nothing,
 * never one of the run's inputs, and opened without blocking (a FIFO with no reader is refused). */
static fsdp_status open_metrics(const char *path, int *fd_out) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) return fsdp_io_symlink_error("--metrics", path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return fsdp_set_error(FSDP_EIO, "--metrics %s is %s, not a regular file: refusing to write to it",
                              path, fsdp_io_kind(st.st_mode));
    if (fsdp_io_is_input(path))
        return fsdp_set_error(FSDP_EIO, "--metrics %s is a file this run reads: choose another path", path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
    if (fd < 0 && errno == ELOOP) return fsdp_io_symlink_error("--metrics", path); /* made since the lstat */
    if (fd < 0)
        return fsdp_set_error(FSDP_EIO, "cannot open --metrics %s for appending: %s", path, strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return fsdp_set_error(FSDP_EIO, "--metrics %s is not a regular file: refusing to write to it", path);
    }
    *fd_out = fd;
    return FSDP_OK;
}

/* One metrics line; a failure (a full disk) is an error of the run, never a lost line. */
static fsdp_status write_metrics(int fd, const char *path, const char *line, int n) {
    if (n < 0) return FSDP_ERR(FSDP_EINTERNAL, "metrics line did not format");
    off_t before = lseek(fd, 0, SEEK_END);
    fsdp_status s = fsdp_io_write_all(fd, line, (size_t)n, path);
    if (s != FSDP_OK) {
        /* No half line at the end of a JSONL file (a full disk writes short first). */
        if (before >= 0) (void)!ftruncate(fd, before);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        return fsdp_set_error(s,
                              "--metrics: %s; the run stops rather than lose metrics (the last checkpoint "
                              "is intact: free space and --resume)",
                              msg);
    }
    return FSDP_OK;
}

/* --report through a temporary beside it, renamed over a regular file or nothing. */
static fsdp_status write_report(const char *path, const fsdp_plan *plan, const fsdp_mem_peaks *meas) {
    fsdp_out out;
    FSDP_TRY(fsdp_out_begin(&out, path, "--report", 0));
    close(out.fd); /* fsdp_plan_write_json writes by name */
    out.fd = -1;
    fsdp_status s = fsdp_plan_write_json(out.tmp, plan, meas);
    if (s != FSDP_OK) {
        fsdp_out_abort(&out);
        return s;
    }
    return fsdp_out_commit(&out);
}

/* --trace the same way. Collective: every rank's events go to rank 0, which writes. */
static fsdp_status write_trace(const char *path, fsdp_comm_t *comm) {
    fsdp_out out = {.fd = -1};
    fsdp_status s = FSDP_OK;
    const int rank0 = fsdp_comm_rank(comm) == 0;
    if (rank0) {
        s = fsdp_out_begin(&out, path, "--trace", 0);
        if (s == FSDP_OK) {
            close(out.fd);
            out.fd = -1;
        }
    }
    s = fsdp_comm_agree(comm, s, "creating the --trace file");
    if (s == FSDP_OK) s = fsdp_trace_write(rank0 ? out.tmp : path, comm); /* only rank 0 writes */
    if (rank0 && s == FSDP_OK) s = fsdp_out_commit(&out);
    fsdp_out_abort(&out);
    return fsdp_comm_agree(comm, s, "writing the --trace file");
}

/* ---------------------------------------------------------------- the loop */

/* ---------------------------------------------------------------- the train command */

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

/* How the GEMMs compute, the same on every rank: --mixed-compute, and under auto rank 0's choice (its
 * probe may answer differently from another rank's, and then the ranks' numerics would differ). Rank 0
 * prints the choice and why. */
static fsdp_status agree_gemm_path(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    const int mixed = c->precision == FSDP_PRECISION_MIXED;
    fsdp_gemm_mixed_choice ch0 = {0}, ch = {0}; /* rank 0's own resolution; the agreed one */
    fsdp_status s = fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)c->mixed_compute);
    if (s == FSDP_OK && mixed && r->rank == 0) s = fsdp_gemm_mixed_choice_get(&ch0);
    FSDP_TRY(fsdp_comm_agree(r->comm, s, "choosing the mixed-precision GEMM path"));
    r->gemm_path = fsdp_gemm_path_name(FSDP_GEMM_F32);
    if (mixed) {
        int32_t m = ch0.path == FSDP_GEMM_F32_COMPUTE ? FSDP_MIXED_COMPUTE_F32 : FSDP_MIXED_COMPUTE_BF16;
        FSDP_TRY(fsdp_comm_broadcast(r->comm, &m, 1, FSDP_I32, 0));
        s = fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)m);
        if (s == FSDP_OK) s = fsdp_gemm_mixed_choice_get(&ch);
        FSDP_TRY(fsdp_comm_agree(r->comm, s, "setting the mixed-precision GEMM path"));
        r->gemm_path = fsdp_gemm_path_name(ch.path);
    }
    if (!r->o) return FSDP_OK;
    fsdp_dtype pdt = mixed ? FSDP_BF16 : FSDP_F32;
    fprintf(r->o, "  GEMMs: %s path (oneDNN %s, ISA %s)", r->gemm_path, fsdp_gemm_impl_name(pdt),
            fsdp_kernels_isa_name());
    if (mixed) {
        fprintf(r->o, "; --mixed-compute %s, decided by %s",
                fsdp_mixed_compute_name((fsdp_mixed_compute)c->mixed_compute), ch0.source);
        if (ch0.probe_bf16_ms > 0)
            fprintf(r->o, " (bf16 %.2f ms, f32-compute %.2f ms)", ch0.probe_bf16_ms, ch0.probe_f32_ms);
    }
    fprintf(r->o, "\n");
    return FSDP_OK;
}

/* MFU's denominator, the outlier guard's window and the straggler's buffer. The peak: every rank
 * times a few square GEMMs on its GEMM path and threads at once (ranks sharing a host contend as they
 * will in the steps), or takes --peak-gflops; the sum over ranks is MFU's peak, recorded in the
 * manifest's config ("gemm-peak"). */
static fsdp_status setup_perf(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    r->mem_total = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    r->flops_per_token = fsdp_model_flops_per_token(fsdp_model_get_config(r->rm.model), c->seq_len);
    r->waits = calloc((size_t)r->world, sizeof *r->waits);
    if (!r->waits) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d ranks' wait times", r->world);
    if (c->skip_update_z > 0) {
        r->guard = malloc(sizeof *r->guard);
        if (!r->guard) return FSDP_ERR(FSDP_ENOMEM, "no memory for the outlier guard");
        FSDP_TRY(fsdp_outlier_init(r->guard, c->skip_update_window));
    }
    fsdp_train_peak pk = {0};
    fsdp_status s = FSDP_OK;
    const char *source = c->peak_gflops > 0 ? "--peak-gflops" : c->peak_gflops < 0 ? "off" : "measured";
    if (c->peak_gflops == 0) {
        s = fsdp_comm_barrier(r->comm);
        if (s == FSDP_OK)
            s = fsdp_train_gemm_peak(c->precision == FSDP_PRECISION_MIXED ? FSDP_BF16 : FSDP_F32, 0.25, &pk);
        r->peak_rank_gflops = pk.gflops;
    } else if (c->peak_gflops > 0) {
        r->peak_rank_gflops = c->peak_gflops;
    }
    FSDP_TRY(fsdp_comm_agree(r->comm, s, "measuring the GEMM peak"));
    float mine = (float)r->peak_rank_gflops, sum = mine, lo = mine, neg = -mine;
    if (r->world > 1) {
        fsdp_comm_set_label(r->comm, "train / GEMM peak: sum and minimum over ranks");
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &mine, &sum, 1, FSDP_F32, FSDP_SUM));
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &neg, &neg, 1, FSDP_F32, FSDP_MAX));
        lo = -neg;
    }
    r->peak_total_gflops = sum;
    cJSON *pj = cJSON_CreateObject();
    if (!pj || !cJSON_AddItemToObject(r->cj, "gemm-peak", pj) ||
        !cJSON_AddStringToObject(pj, "source", source) ||
        !cJSON_AddStringToObject(pj, "path", r->gemm_path) ||
        !cJSON_AddNumberToObject(pj, "rank0-gflops", r->peak_rank_gflops) ||
        !cJSON_AddNumberToObject(pj, "min-rank-gflops", lo) ||
        !cJSON_AddNumberToObject(pj, "total-gflops", sum) ||
        !cJSON_AddNumberToObject(pj, "gemm-size", pk.size) || !cJSON_AddNumberToObject(pj, "reps", pk.reps) ||
        !cJSON_AddNumberToObject(pj, "seconds", pk.total_s) ||
        !cJSON_AddNumberToObject(pj, "flops-per-token", r->flops_per_token))
        return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
    if (r->o) {
        if (c->peak_gflops == 0)
            fprintf(
                r->o,
                "  GEMM peak (MFU's denominator): %.1f GFLOP/s on rank 0 (best of %d %d^3 GEMMs on the %s "
                "path, %.2f s), %.1f GFLOP/s over %d rank%s (slowest rank %.1f)\n",
                r->peak_rank_gflops, pk.reps, pk.size, r->gemm_path, pk.total_s, sum, r->world,
                r->world == 1 ? "" : "s", lo);
        else if (c->peak_gflops > 0)
            fprintf(r->o, "  GEMM peak (MFU's denominator): --peak-gflops %g per rank, %.1f over %d rank%s\n",
                    c->peak_gflops, sum, r->world, r->world == 1 ? "" : "s");
        else
            fprintf(r->o, "  GEMM peak: not measured (--peak-gflops -1): no MFU\n");
        fprintf(r->o, "  model FLOPs per token (forward + backward, %s): %.4g\n",
                fsdp_model_get_config(r->rm.model)->family->name, r->flops_per_token);
    }
    return FSDP_OK;
}

/* Before the model is allocated: the run's memory plan (one-host transports) against --mem-limit, or
 * the machine's physical memory shared by this host's ranks; refused naming the largest category. */
static fsdp_status check_mem_limit(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_plan p;
    FSDP_TRY(fsdp_train_plan_compute(c, r->world, r->threads, r->have_val, NULL, &p));
    const int local = fsdp_comm_local_size(r->comm) > 0 ? fsdp_comm_local_size(r->comm) : 1;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double machine = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    const double limit = c->mem_limit > 0 ? (double)c->mem_limit : machine / local;
    if (limit <= 0 || (double)p.predicted.total <= limit) return FSDP_OK;
    const fsdp_mem_cat big = largest_category(&p);
    return fsdp_set_error(
        FSDP_EINVAL,
        "the memory plan of this run needs %zu B per rank, more than the %.0f B %s: its largest "
        "category is %s (%zu B); nothing was allocated. Try --micro-batches, --recompute, "
        "--strategy full or more ranks (`fsdp-train --plan --fit %.0f ...` finds settings "
        "that fit), or set --mem-limit",
        p.predicted.total, limit,
        c->mem_limit > 0 ? "of --mem-limit"
        : local > 1      ? "per rank of the machine's memory (shared by this host's ranks)"
                         : "of the machine's memory",
        fsdp_mem_cat_name(big), p.predicted.peak[big], limit);
}

/* ---------------------------------------------------------------- agreement between ranks */

static fsdp_status data_tokenizer_id(const char *data, char *out, size_t cap);
static cJSON *data_shards_json(const fsdp_loader *L);

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A file's fingerprint: its size and its first `head` bytes (the whole file with head 0); 1 when the
 * file is absent, its type when it is not a regular file (opened without blocking and not read: a
 * FIFO is refused, naming it, when the data is opened). */
static uint64_t file_fingerprint(const char *path, size_t head) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 1;
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ((uint64_t)st.st_mode << 8) | 3;
    }
    uint64_t h = 0xcbf29ce484222325ull, size = (uint64_t)st.st_size;
    unsigned char buf[4096];
    size_t total = 0;
    ssize_t got;
    while ((head == 0 || total < head) && (got = read(fd, buf, sizeof buf)) > 0) {
        size_t n = (size_t)got;
        if (head && total + n > head) n = head - total;
        h = fnv1a(h, buf, n);
        total += n;
    }
    close(fd);
    return fnv1a(h, &size, sizeof size) | 2; /* never 1 */
}

/* The shards --data names (data/data.h) when they are not a folder's train.bin and val.bin (those have
 * entries of their own): each one's name without its folder and file_fingerprint(head); 0 for a folder's
 * train.bin, 1 when they cannot be listed (opening the data says why). */
static uint64_t shards_fingerprint(const char *data, size_t head) {
    fsdp_data_files f;
    if (fsdp_data_files_find(data, &f) != FSDP_OK) return 1;
    const char *b0 = strrchr(f.train[0], '/');
    uint64_t h = 0;
    if (fsdp_data_is_glob(data) || f.n_train > 1 || strcmp(b0 ? b0 + 1 : f.train[0], "train.bin") != 0) {
        h = 0xcbf29ce484222325ull;
        for (int list = 0; list < 2; list++) {
            char **p = list ? f.val : f.train;
            int n = list ? f.n_val : f.n_train;
            h = fnv1a(h, &n, sizeof n);
            for (int i = 0; i < n; i++) {
                const char *b = strrchr(p[i], '/');
                b = b ? b + 1 : p[i];
                uint64_t fp = file_fingerprint(p[i], head);
                h = fnv1a(fnv1a(h, b, strlen(b) + 1), &fp, sizeof fp);
            }
        }
        h |= 2;
    }
    fsdp_data_files_free(&f);
    return h;
}

/* Settings a rank may legitimately hold its own value of: its host's cores, memory and GEMM peak, and
 * the paths of the data and checkpoint folders (a host may mount them elsewhere: the data's content is
 * compared instead, and check_shared_folder finds a checkpoint folder the ranks do not share). */
static int per_rank_setting(const char *name) {
    return !strcmp(name, "threads") || !strcmp(name, "mem-limit") || !strcmp(name, "peak-gflops") ||
           !strcmp(name, "data") || !strcmp(name, "checkpoint-dir");
}

/* The entries agree_settings compares after the settings: the data folder's files, then its shards
 * ("*": shards_fingerprint); heads: the bytes of a file's head hashed beside its size (0: all of it). */
static const char *const agree_files[] = {"train.bin", "val.bin", "meta.json", "tokenizer.json", "*"};
static const size_t agree_heads[] = {1024, 1024, 0, 0, 1024};
enum { AGREE_NFILES = sizeof agree_files / sizeof agree_files[0] };

/* mine[k]: the hash of settings entry k of j (0 for a per-rank one), then of each agree_files entry. */
static fsdp_status settings_hashes(const train_run *r, const cJSON *j, int n, int64_t *mine) {
    int k = 0;
    for (const cJSON *it = j->child; it; it = it->next, k++) {
        if (per_rank_setting(it->string)) continue;
        char *v = cJSON_PrintUnformatted(it);
        if (!v) return FSDP_ERR(FSDP_ENOMEM, "no memory for the settings record");
        mine[k] = (int64_t)fnv1a(fnv1a(0xcbf29ce484222325ull, it->string, strlen(it->string)), v, strlen(v));
        free(v);
    }
    for (int f = 0; f < AGREE_NFILES; f++) {
        if (f == AGREE_NFILES - 1) {
            mine[n + f] = (int64_t)shards_fingerprint(r->cfg.data, agree_heads[f]);
            continue;
        }
        char *dir = fsdp_data_dir(r->cfg.data);
        char *p = dir ? fsdp_strdupf("%s/%s", dir, agree_files[f]) : NULL;
        free(dir);
        if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        mine[n + f] = (int64_t)file_fingerprint(p, agree_heads[f]);
        free(p);
    }
    return FSDP_OK;
}

/* all: every rank's total entries (rank q's at q*total). Writes into msg each entry some rank holds
 * another value of than rank 0, with those ranks; returns how many entries differ. */
static int settings_differences(const train_run *r, const cJSON *j, int n, int total, const int64_t *all,
                                char *msg, size_t cap) {
    size_t len = 0;
    int differ = 0;
    msg[0] = '\0';
    for (int e = 0; e < total; e++) {
        int first = 1;
        for (int q = 1; q < r->world; q++) {
            if (all[(size_t)q * (size_t)total + (size_t)e] == all[e]) continue;
            if (first && len < cap) {
                const char *name = e < n ? NULL : agree_files[e - n];
                if (e < n) {
                    const cJSON *it = j->child;
                    for (int i = 0; i < e; i++)
                        it = it->next;
                    name = it->string;
                }
                if (e == total - 1)
                    len += (size_t)snprintf(msg + len, cap - len,
                                            "%sthe shards of --data %s (names, sizes, first KiB) (ranks",
                                            differ ? "; " : "", r->cfg.data);
                else
                    len += (size_t)snprintf(msg + len, cap - len, "%s%s%s%s (ranks", differ ? "; " : "",
                                            e < n ? "--" : r->cfg.data, e < n ? "" : "/", name);
                differ++;
            }
            if (len < cap) len += (size_t)snprintf(msg + len, cap - len, " %d", q);
            first = 0;
        }
        if (!first && len < cap) len += (size_t)snprintf(msg + len, cap - len, " differ from rank 0)");
    }
    return differ;
}

/* Before anything is built: every rank's resolved settings (the config record, less the per-rank ones)
 * and the data folder's fingerprint (train.bin's and val.bin's size and header, meta.json and
 * tokenizer.json whole, the shards' names, sizes and headers) against rank 0's, one hash per entry and one
 * all-gather. A difference is an error naming each differing entry and the ranks that hold another value than
 * rank 0's. */
static fsdp_status agree_settings(train_run *r) {
    if (r->world == 1) return FSDP_OK;
    cJSON *j = fsdp_train_config_to_json(&r->cfg);
    fsdp_status s = j ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for the settings record");
    int n = 0;
    for (cJSON *it = j ? j->child : NULL; it; it = it->next)
        n++;
    const int total = n + AGREE_NFILES;
    /* The entry count is the code's, the same on every rank; checked all the same (a MAX and a MIN). */
    int64_t *mine = j ? calloc((size_t)total, sizeof *mine) : NULL;
    int64_t *all = j ? calloc((size_t)total * (size_t)r->world, sizeof *all) : NULL;
    if (s == FSDP_OK && (!mine || !all))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d ranks' settings", r->world);
    if (s == FSDP_OK) s = settings_hashes(r, j, n, mine);
    s = fsdp_comm_agree(r->comm, s, "recording the settings");
    if (s == FSDP_OK) {
        int64_t cnt[2] = {total, -total}, red[2];
        fsdp_comm_set_label(r->comm, "train / agreeing on the settings");
        s = fsdp_comm_all_reduce(r->comm, cnt, red, 2, FSDP_I64, FSDP_MAX);
        if (s == FSDP_OK && (red[0] != total || -red[1] != total)) {
            s = fsdp_set_error(FSDP_EINVAL,
                               "the ranks record different numbers of settings (%d here, %lld to %lld): "
                               "they run different builds of fsdp-train",
                               total, (long long)-red[1], (long long)red[0]);
            s = fsdp_comm_agree(r->comm, s, "counting the settings");
        } else if (s == FSDP_OK) {
            s = fsdp_comm_all_gather(r->comm, mine, all, (size_t)total, FSDP_I64);
        }
    }
    char msg[1536];
    const int differ = s == FSDP_OK ? settings_differences(r, j, n, total, all, msg, sizeof msg) : 0;
    if (differ)
        s = fsdp_set_error(
            FSDP_EINVAL,
            "the ranks disagree on %d setting%s or data file%s: %s. Every rank must be given the "
            "same settings and the same data folder; nothing was built or trained",
            differ, differ == 1 ? "" : "s", differ == 1 ? "" : "s", msg);
    /* Every rank found the same differences: agreed, so the job ends without an abort. */
    if (differ) s = fsdp_comm_agree(r->comm, s, "comparing the settings");
    free(mine);
    free(all);
    cJSON_Delete(j);
    return s;
}

/* Every rank sees the checkpoint folder rank 0 sees (multi-host: a folder on each host's own disk
 * would hold each host's shards apart): rank 0 writes a fresh nonce into a file there, every rank
 * reads it back. Found at start, not when a resume cannot find its shards. */
static fsdp_status check_shared_folder(train_run *r) {
    if (r->world == 1) return FSDP_OK;
    const char *dir = r->cfg.checkpoint_dir;
    char *p = fsdp_strdupf("%s/.shared-test", dir);
    fsdp_status s = p ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    int64_t nonce = (int64_t)(fsdp_time_s() * 1e9) ^ ((int64_t)getpid() << 20);
    if (s == FSDP_OK && r->rank == 0) {
        FILE *f = fopen(p, "wb");
        if (!f || fprintf(f, "%lld\n", (long long)nonce) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
            s = FSDP_ERR(FSDP_EIO, "--checkpoint-dir %s: cannot write %s: %s", dir, p, strerror(errno));
        if (f) fclose(f);
    }
    s = fsdp_comm_agree(r->comm, s, "writing the checkpoint folder's shared-test file");
    if (s == FSDP_OK) {
        fsdp_comm_set_label(r->comm, "train / checking that the ranks share the checkpoint folder");
        s = fsdp_comm_broadcast(r->comm, &nonce, 1, FSDP_I64, 0);
        if (s != FSDP_OK) {
            free(p);
            return s;
        }
        long long got = 0;
        FILE *f = fopen(p, "rb");
        int ok = f && fscanf(f, "%lld", &got) == 1 && got == (long long)nonce;
        if (f) fclose(f);
        if (!ok)
            s = fsdp_set_error(
                FSDP_EINVAL,
                "--checkpoint-dir %s is not the folder rank 0 sees: rank %d %s rank 0's %s (each "
                "host its own disk?); the ranks must share one checkpoint folder. Nothing was "
                "trained or saved",
                dir, r->rank, f ? "reads another file than" : "cannot find", p);
        s = fsdp_comm_agree(r->comm, s, "checking that the ranks share the checkpoint folder");
    }
    if (r->rank == 0 && p) unlink(p);
    free(p);
    return s;
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

/* The settings every rank agrees on, the checkpoint folder (this run's alone, writable), the data, the
 * model and its memory plan, the config record. */
static fsdp_status run_setup(train_run *r) {
    fsdp_train_config *c = &r->cfg;
    fsdp_comm_t *comm = r->comm;
    fsdp_status s = resolve_config(c, r->world);
    if (s == FSDP_OK && c->init_from && realpath(c->init_from, r->init_abs)) c->init_from = r->init_abs;
    FSDP_TRY(fsdp_comm_agree(comm, s, "checking the settings"));
    FSDP_TRY(agree_settings(r));
    if (!c->resume && c->steps == 0) return FSDP_OK; /* run_start says so */
    /* The checkpoint folder first: it exists, this run alone uses it (every rank's lock, held to the
     * end), and every rank can write a file into it — found now, not at the first save. */
    s = r->rank == 0 ? fsdp_mkdirs(c->checkpoint_dir) : FSDP_OK;
    s = fsdp_comm_agree(comm, s, "creating the checkpoint folder");
    if (s == FSDP_OK) s = fsdp_ckpt_lock(c->checkpoint_dir, r->rank, &r->lock);
    if (s == FSDP_OK) s = probe_folder(c->checkpoint_dir, r->rank);
    FSDP_TRY(fsdp_comm_agree(comm, s, "locking the checkpoint folder"));
    FSDP_TRY(check_shared_folder(r));

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
        fprintf(r->o, "%s\n", any ? "" : "  environment: no FSDP_* knob set (docs/ENV.md)");
    }
    FSDP_TRY(agree_gemm_path(r));
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
    FSDP_TRY(fsdp_comm_agree(comm, check_mem_limit(r), "checking the memory plan against the memory"));
    size_t bt = (size_t)r->train.b * (size_t)c->seq_len;
    s = fsdp_mem_alloc((void **)&r->in, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK) s = fsdp_mem_alloc((void **)&r->tg, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK && c->pack == FSDP_PACK_DOC)
        s = fsdp_mem_alloc((void **)&r->doc, sizeof(int32_t) * bt, FSDP_MEM_ACTIVATION);
    if (s == FSDP_OK) s = fsdp_train_model_build(c, comm, &r->rm);
    /* The prediction the end-of-run report compares against (the same arithmetic as --plan). */
    if (s == FSDP_OK) s = fsdp_train_plan_compute(c, r->world, r->threads, r->have_val, r->rm.eng, &r->plan);
    FSDP_TRY(fsdp_comm_agree(comm, s, "building the model"));
    if (r->o) {
        const fsdp_model_config *gc = fsdp_model_get_config(r->rm.model);
        fprintf(r->o, "model: %s, %d layers, width %d, %d heads", gc->family->name, gc->n_layer, gc->n_embd,
                gc->n_head);
        if (gc->n_kv_head && gc->n_kv_head != gc->n_head) fprintf(r->o, " (%d key/value)", gc->n_kv_head);
        fprintf(r->o, ", vocab %d, %zu parameters\n", gc->vocab_size, fsdp_model_num_params(gc));
    }
    r->cj = fsdp_train_config_to_json(c);
    if (!r->cj) return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
    { /* the data's tokenizer, which a resume must find unchanged */
        char tk[32];
        s = data_tokenizer_id(c->data, tk, sizeof tk);
        if (s == FSDP_OK && !cJSON_AddStringToObject(r->cj, "data-tokenizer", tk))
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        FSDP_TRY(fsdp_comm_agree(comm, s, "fingerprinting the data's tokenizer"));
    }
    { /* the training shards in their order, which a resume must find unchanged */
        cJSON *sh = data_shards_json(&r->train);
        if (!sh || !cJSON_AddItemToObject(r->cj, "data-shards", sh)) {
            cJSON_Delete(sh);
            return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
        }
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
    return setup_perf(r);
}

/* The training shards as the manifest records them: [[file name, tokens], ...] in their order (the
 * names without their folder: the data may move). */
static cJSON *data_shards_json(const fsdp_loader *L) {
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
 * --seed, the same --pack, and the same training shards (names and token counts, in order; a manifest without
 * the record, written before shards existed, is not checked). A manifest without "shuffle" was written before
 * shuffling existed: file order. Errors name the field, both values and the manifest. */
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
    cJSON *mine = data_shards_json(&r->train);
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
static fsdp_status data_tokenizer_id(const char *data, char *out, size_t cap) {
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

/* The flag that sets a field fsdp_model_config_diff names. */
static const char *model_field_flag(const char *field) {
    static const char *const map[][2] = {
        {"model", "model"},
        {"n_layer", "layers"},
        {"n_embd", "width"},
        {"n_head", "heads"},
        {"n_kv_head", "kv-heads"},
        {"head_dim", "head-dim"},
        {"intermediate", "intermediate"},
        {"vocab_size", "vocab"},
        {"padded_vocab_size", "vocab"},
        {"max_seq_len", "max-seq-len"},
        {"tie_embeddings", "tie-embeddings"},
        {"qkv_bias", "qkv-bias"},
        {"qk_norm", "qk-norm"},
        {"norm_eps", "norm-eps"},
        {"rope_theta", "rope-theta"},
        {"rope_scaling", "rope-scaling"},
        {"rope_factor", "rope-factor"},
        {"rope_low_freq_factor", "rope-low-freq-factor"},
        {"rope_high_freq_factor", "rope-high-freq-factor"},
        {"rope_original_max_pos", "rope-original-max-pos"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], field)) return map[i][1];
    return NULL;
}

/* --resume continues the checkpoint's model on the checkpoint's vocabulary and tokenizer: a different
 * shape (--heads, --layers, ...), vocabulary (--vocab, meta.json's) or data tokenizer.json than the
 * manifest records is refused naming the field, before anything is loaded. */
static fsdp_status check_resume_drift(train_run *r, const char *step_dir) {
    fsdp_ckpt_reader *rd = NULL;
    FSDP_TRY(fsdp_ckpt_open(&rd, step_dir));
    const cJSON *mj = fsdp_ckpt_config(rd);
    char *what = fsdp_strdupf("%s/manifest.json", step_dir);
    fsdp_train_config theirs = r->cfg;
    fsdp_model_config mine_mc, their_mc;
    fsdp_status s = what ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_train_config_from_json(&theirs, mj, what);
    if (s == FSDP_OK) s = fsdp_train_model_config(&theirs, &their_mc);
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
    if (cJSON_IsString(tk)) s = data_tokenizer_id(r->cfg.data, now, sizeof now);
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
        if (s == FSDP_OK) s = check_resume_drift(r, step_dir);
        if (s == FSDP_OK) s = fsdp_ckpt_load(r->rm.eng, step_dir, &r->st);
        if (s == FSDP_OK) s = carry_init_from(step_dir, r->cj);
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
        rng_seed(r->st.rng, (uint64_t)c->seed ^ 0x5A4D504C45ull);
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
    if (r->rank == 0) s = claim_paths(c);
    if (s == FSDP_OK && r->rank == 0 && c->metrics) s = open_metrics(c->metrics, &r->metrics);
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
    fsdp_status s = r->metrics >= 0 ? write_metrics(r->metrics, r->cfg.metrics, line, n) : FSDP_OK;
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
        fmt_eta(eta, sizeof eta, avg * (r->last - rec->step));
        fmt_bytes(peak, sizeof peak, peak_b);
        fmt_bytes(rssb, sizeof rssb, rss);
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
    if (r->o) fprintf(r->o, "%ssaved %s\n", r->tty ? "\n" : "", saved);
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
        fmt_bytes(peak, sizeof peak, fsdp_mem_total_peak());
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
        fmt_bytes(cached, sizeof cached, fsdp_mem_cached_peak());
        fprintf(r->o,
                "allocator cache (rank 0): up to %s of freed blocks kept for reuse, not counted above\n",
                cached);
    }
    s = r->rank == 0 && c->report ? write_report(c->report, &r->plan, &meas) : FSDP_OK;
    s = fsdp_comm_agree(comm, s, "writing the --report file");
    if (s == FSDP_OK && c->trace) s = write_trace(c->trace, comm);
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
        s = generate(r->rm.model, c, r->comm, c->vocab == FSDP_BYTE_VOCAB || bpe ? c->prompt : "",
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
    fsdp_status s = run_setup(r);
    if (s == FSDP_OK) s = run_start(r, &nothing);
    for (int step = r->first; s == FSDP_OK && !nothing && step <= r->last; step++) {
        step_record rec;
        s = train_step(r, step, &rec);
        if (s == FSDP_OK) s = log_step(r, &rec);
        if (s == FSDP_OK) s = maybe_evaluate(r, step);
        if (s == FSDP_OK) s = maybe_checkpoint(r, step);
        if (step == r->cfg.trace_steps) fsdp_trace_disable();
    }
    fsdp_trace_disable();
    if (s == FSDP_OK && !nothing) s = run_sample(r);
    if (s == FSDP_OK && !nothing) s = run_report(r);
    if (s == FSDP_OK && !nothing) s = run_export_final(r);
    if (res) *res = r->rr;
    run_free(r);
    free(r);
    return s;
}

/* ---------------------------------------------------------------- sample command */

fsdp_status fsdp_sample_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out) {
    fsdp_train_config c = *cfg;
    run_model rm = {0};
    fsdp_ckpt_state st;
    fsdp_io_inputs_reset();
    omp_set_num_threads(fsdp_train_threads(&c, comm));
    fsdp_status s = cfg->init_from ? fsdp_train_load_hf_model(cfg->init_from, comm, &c, &rm)
                                   : fsdp_train_load_checkpoint_model(cfg->checkpoint, comm, &c, &rm, &st);
    if (s == FSDP_OK && cfg->logits) {
        s = fsdp_train_model_write_logits(&rm, &c, comm, cfg->logits);
        if (s == FSDP_OK && out && fsdp_comm_rank(comm) == 0) fprintf(out, "wrote %s\n", cfg->logits);
    } else if (s == FSDP_OK) {
        uint64_t rng[2];
        rng_seed(rng, (uint64_t)cfg->seed);
        c.temperature = cfg->temperature;
        c.top_k = cfg->top_k;
        char *tpath = NULL;
        fsdp_bpe *bpe = NULL;
        s = cfg->init_from ? fsdp_train_find_tokenizer(cfg->tokenizer, cfg->init_from, NULL, &tpath)
                           : fsdp_train_ckpt_tokenizer(cfg->tokenizer, cfg->checkpoint, &tpath);
        if (s == FSDP_OK) s = fsdp_train_load_tokenizer(tpath, c.vocab, &bpe);
        s = fsdp_comm_agree(comm, s, "loading the tokenizer");
        c.kv_cache = cfg->kv_cache;
        double t0 = fsdp_time_s();
        if (s == FSDP_OK)
            s = generate(rm.model, &c, comm, cfg->prompt, cfg->tokens, rng,
                         fsdp_comm_rank(comm) == 0 ? out : NULL, bpe);
        double dt = fsdp_time_s() - t0;
        if (s == FSDP_OK && cfg->timing && out && fsdp_comm_rank(comm) == 0) /* stdout is the text alone */
            fprintf(stderr, "sample: %d tokens in %.3f s = %.1f tokens/s (%s)\n", cfg->tokens, dt,
                    cfg->tokens / dt, cfg->kv_cache ? "KV cache" : "full forward per token");
        fsdp_bpe_free(bpe);
        free(tpath);
    }
    fsdp_train_model_free(&rm);
    return s;
}
