/* sample.c — text generation: top-k / temperature sampling with its own seeded generator, the tokens
 * printed through the tokenizer, generation after a run and the `sample` command. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* xoshiro-style 128-bit state (xorshift128+), seeded through splitmix64: sampling only. */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fsdp_train_rng_seed(uint64_t s[2], uint64_t seed) {
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
fsdp_status fsdp_train_generate(fsdp_model_t *model, const fsdp_train_config *c, fsdp_comm_t *comm,
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
        if (s == FSDP_OK) { /* SIGINT / SIGTERM: the text so far stays printed (and flushed) */
            char where[64];
            snprintf(where, sizeof where, "after %d sampled token%s", k + 1, k ? "s" : "");
            s = fsdp_train_signal_stop(comm, where);
        }
    }
    if (rank0 && out) fputc('\n', out);
    fsdp_status s2 = fsdp_model_end_eval(model);
    free(toks);
    return s != FSDP_OK ? s : s2;
}

static fsdp_status sample_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out);

/* The sample command under SIGINT / SIGTERM catching (host.c): stopped between tokens, output flushed. */
fsdp_status fsdp_sample_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out) {
    fsdp_train_signals_catch(1);
    fsdp_status s = sample_run(cfg, comm, out);
    if (out) fflush(out);
    fsdp_train_signals_catch(0);
    return s;
}

static fsdp_status sample_run(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out) {
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
        fsdp_train_rng_seed(rng, (uint64_t)cfg->seed);
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
            s = fsdp_train_generate(rm.model, &c, comm, cfg->prompt, cfg->tokens, rng,
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
