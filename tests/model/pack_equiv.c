/* pack_equiv.c — packed documents (fsdp_model_batch.doc) against the same documents run one by one, for
 * both model families (GPT-2; Llama with grouped-query attention, with and without Qwen3's q/k norm and
 * Qwen2's biases), fp32, under mpirun -np 1 and 2 (tests/model/pack_equiv.cmake). A packed batch of two
 * rows holding documents of uneven lengths (one a single token), with some targets FSDP_IGNORE_INDEX,
 * gives each document's logits, the loss (mean over the counted targets) and every parameter gradient
 * of the documents run separately: each its own micro-batch of one row from position 0 without ids (no
 * packing anywhere: a different code path), its backward scaled by its share of the counted targets.
 * Tolerance 1e-5 relative (logits and gradients per tensor, against the tensor's largest value on this
 * rank). The same packed tokens without ids must differ (the check is not vacuous). Each rank packs its
 * own tokens; the engine averages both runs over ranks alike. The packed step's activation peak is the
 * memory plan's figure (activation_bytes) exactly. */
#include "fsdp.h"
#include "fsdp_model.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 24, MAXD = 8 };

/* Document lengths per row (each row sums to T): 9 8 7 | 1 4 19. */
static const int doc_len[B][4] = {{9, 8, 7, 0}, {1, 4, 19, 0}};

typedef struct {
    float loss;
    float *logits; /* [B*T, Vp] */
    float **grads; /* per unit, this rank's shard */
    size_t *grad_n;
    int n_units;
} result;

static void result_free(result *r) {
    for (int i = 0; i < r->n_units; i++)
        free(r->grads[i]);
    free(r->grads), free(r->grad_n), free(r->logits);
    memset(r, 0, sizeof *r);
}

static fsdp_status copy_grads(fsdp_engine_t *e, result *r) {
    r->n_units = fsdp_engine_num_units(e);
    r->grads = calloc((size_t)r->n_units, sizeof *r->grads);
    r->grad_n = calloc((size_t)r->n_units, sizeof *r->grad_n);
    for (int i = 0; i < r->n_units; i++) {
        fsdp_shard_view sv;
        fsdp_status s = fsdp_unit_shard(fsdp_engine_unit(e, i), &sv);
        if (s != FSDP_OK) return s;
        r->grad_n[i] = sv.numel;
        r->grads[i] = malloc(sv.numel * sizeof(float));
        memcpy(r->grads[i], sv.grad, sv.numel * sizeof(float));
    }
    return FSDP_OK;
}

static int counted(const int *tg, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += tg[i] != FSDP_IGNORE_INDEX;
    return k;
}

#define TRY(x)                                                                                               \
    do {                                                                                                     \
        fsdp_status s_ = (x);                                                                                \
        if (s_ != FSDP_OK) return s_;                                                                        \
    } while (0)

/* One step on the packed batch (doc may be NULL: the same tokens unpacked). */
static fsdp_status packed_step(fsdp_model_t *m, fsdp_engine_t *e, const int *tok, const int *tgt,
                               const int *doc, int Vp, result *r) {
    const fsdp_model_batch b = {tok, tgt, doc, B, T};
    fsdp_mem_reset_peaks();
    const size_t before = fsdp_mem_current(FSDP_MEM_ACTIVATION);
    TRY(fsdp_engine_begin_step(e, 1));
    TRY(fsdp_engine_begin_micro(e, 0));
    TRY(fsdp_model_forward(m, &b, &r->loss));
    const float *lg;
    TRY(fsdp_model_logits(m, &lg, NULL, NULL, NULL));
    r->logits = malloc((size_t)B * T * Vp * sizeof(float));
    memcpy(r->logits, lg, (size_t)B * T * Vp * sizeof(float));
    TRY(fsdp_model_backward(m, 1.0f));
    if (doc) { /* the first step of a fresh model: the memory plan's activation figure, exactly */
        const size_t peak = fsdp_mem_peak(FSDP_MEM_ACTIVATION) - before,
                     want =
                         fsdp_model_activation_bytes(fsdp_model_get_config(m), B, T, omp_get_max_threads());
        CHECKF(peak == want, "%s: packed step's activation peak %zu, predicted %zu",
               fsdp_model_get_config(m)->family->name, peak, want);
    }
    return copy_grads(e, r);
}

/* Every document alone: micro-batch i is document i (one row from position 0, no ids); its backward
 * carries n_i / N of the mean (x n_micro, which the engine divides out). */
static fsdp_status separate_step(fsdp_model_t *m, fsdp_engine_t *e, const int *tok, const int *tgt, int Vp,
                                 result *r) {
    int nd = 0, start[B * 4], len[B * 4];
    for (int b = 0; b < B; b++)
        for (int k = 0, t0 = 0; doc_len[b][k]; t0 += doc_len[b][k], k++)
            start[nd] = b * T + t0, len[nd] = doc_len[b][k], nd++;
    const int N = counted(tgt, B * T);
    r->logits = malloc((size_t)B * T * Vp * sizeof(float));
    double loss = 0;
    TRY(fsdp_engine_begin_step(e, nd));
    for (int i = 0; i < nd; i++) {
        const fsdp_model_batch b = {tok + start[i], tgt + start[i], NULL, 1, len[i]};
        const int n = counted(tgt + start[i], len[i]);
        float l;
        TRY(fsdp_engine_begin_micro(e, i));
        TRY(fsdp_model_forward(m, &b, &l));
        const float *lg;
        TRY(fsdp_model_logits(m, &lg, NULL, NULL, NULL));
        memcpy(r->logits + (size_t)start[i] * Vp, lg, (size_t)len[i] * Vp * sizeof(float));
        loss += (double)l * n;
        TRY(fsdp_model_backward(m, (float)n * (float)nd / (float)N));
    }
    r->loss = (float)(loss / N);
    return copy_grads(e, r);
}

/* Largest |a - b| over the largest |b| (relative error against the array's scale). */
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (isnan(e)) return INFINITY;
        d = e > d ? e : d;
        mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
    }
    return mx > 0 ? d / mx : d;
}

/* Per tensor (its part in this rank's shard): the largest relative error of got against want. */
static double grad_rel(fsdp_engine_t *e, const result *got, const result *want, char *worst, size_t wn) {
    double w = 0;
    for (int u = 0; u < got->n_units; u++) {
        fsdp_unit_t *unit = fsdp_engine_unit(e, u);
        fsdp_shard_view sv;
        if (fsdp_unit_shard(unit, &sv) != FSDP_OK) return INFINITY;
        for (int t = 0; t < fsdp_unit_num_tensors(unit); t++) {
            fsdp_tensor_info ti;
            if (fsdp_unit_tensor_info(unit, t, &ti) != FSDP_OK) return INFINITY;
            if (ti.alias_of >= 0) continue;
            size_t lo = ti.offset > sv.offset ? ti.offset : sv.offset;
            size_t hi =
                ti.offset + ti.numel < sv.offset + sv.numel ? ti.offset + ti.numel : sv.offset + sv.numel;
            if (hi <= lo) continue;
            double r = rel(got->grads[u] + (lo - sv.offset), want->grads[u] + (lo - sv.offset), hi - lo);
            if (r > w || isnan(r)) {
                w = r;
                snprintf(worst, wn, "%s.%s", fsdp_unit_name(unit), ti.name);
            }
        }
    }
    return w;
}

static void run(fsdp_comm_t *comm, const char *family, int variant) {
    const int rank = fsdp_comm_rank(comm);
    fsdp_model_config c;
    CHECK_OK(fsdp_model_config_init(&c, family));
    c.n_layer = 2, c.n_embd = 48, c.n_head = 6, c.vocab_size = 97, c.padded_vocab_size = 128;
    c.max_seq_len = T;
    if (!strcmp(family, "llama")) {
        c.n_kv_head = 2, c.head_dim = 8, c.intermediate = 64, c.tie_embeddings = variant == 0;
        c.qk_norm = variant == 1, c.qkv_bias = variant == 2, c.rope_theta = 10000.0;
        c.hf_architecture[0] = '\0';
    }
    char what[64];
    snprintf(what, sizeof what, "%s variant %d", family, variant);
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    ec.seed = 11;
    fsdp_engine_t *e = NULL;
    fsdp_model_t *m = NULL;
    fsdp_status s = fsdp_engine_init(&e, comm, &ec);
    CHECK_OK(s);
    if (s == FSDP_OK) CHECK_OK(s = fsdp_model_init(&m, e, &c));
    if (s == FSDP_OK) CHECK_OK(s = fsdp_engine_init_params(e));
    if (s != FSDP_OK) {
        fsdp_model_free(m);
        fsdp_engine_free(e);
        return;
    }
    const int Vp = fsdp_model_get_config(m)->padded_vocab_size;
    int tok[B * T], tgt[B * T], doc[B * T];
    unsigned seed = 977u + 131u * (unsigned)rank + 7u * (unsigned)variant;
    for (int b = 0; b < B; b++)
        for (int k = 0, t0 = 0; doc_len[b][k]; t0 += doc_len[b][k], k++)
            for (int t = t0; t < t0 + doc_len[b][k]; t++) {
                const int i = b * T + t;
                seed = seed * 1103515245u + 12345u;
                tok[i] = (int)((seed >> 8) % (unsigned)c.vocab_size);
                seed = seed * 1103515245u + 12345u;
                tgt[i] = (int)((seed >> 8) % (unsigned)c.vocab_size);
                /* a prompt-like masked start of each document, every 5th position, and each document's
                 * last position (its target would be the next document's first token) */
                if (t - t0 < 2 || i % 5 == 3 || t == t0 + doc_len[b][k] - 1) tgt[i] = FSDP_IGNORE_INDEX;
                doc[i] = 1000 * b + 10 * k + 3; /* ids distinct per document */
            }
    result pk = {0}, sep = {0}, flat = {0};
    CHECK_OK(s = packed_step(m, e, tok, tgt, doc, Vp, &pk));
    if (s == FSDP_OK) CHECK_OK(s = separate_step(m, e, tok, tgt, Vp, &sep));
    if (s == FSDP_OK) CHECK_OK(s = packed_step(m, e, tok, tgt, NULL, Vp, &flat));
    if (s == FSDP_OK) {
        const size_t nl = (size_t)B * T * Vp;
        double el = rel(pk.logits, sep.logits, nl);
        double ls = fabs((double)pk.loss - sep.loss) / fabs((double)sep.loss);
        char worst[64] = "";
        double eg = grad_rel(e, &pk, &sep, worst, sizeof worst);
        CHECKF(el <= 1e-5, "%s: packed vs separate logits rel err %.3g", what, el);
        CHECKF(ls <= 1e-5, "%s: packed loss %.9g vs separate %.9g", what, pk.loss, sep.loss);
        CHECKF(eg <= 1e-5, "%s: packed vs separate gradients rel err %.3g (worst %s)", what, eg, worst);
        /* without ids the documents see each other: logits and gradients move */
        char w2[64] = "";
        double fl = rel(flat.logits, sep.logits, nl), fg = grad_rel(e, &flat, &sep, w2, sizeof w2);
        CHECKF(fl > 1e-3 && fg > 1e-3, "%s: without document ids the result should differ (%.3g, %.3g)", what,
               fl, fg);
        if (rank == 0)
            printf("%s: logits %.3g, loss %.3g, gradients %.3g (worst %s); unpacked differs by %.3g / %.3g\n",
                   what, el, ls, eg, worst, fl, fg);
    }
    result_free(&pk), result_free(&sep), result_free(&flat);
    fsdp_model_free(m);
    fsdp_engine_free(e);
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    CHECK_OK(fsdp_comm_init(&comm, &cc, &argc, &argv));
    if (!comm) return TEST_MAIN_END();
    test_set_rank(fsdp_comm_rank(comm));
    run(comm, "gpt2", 0);
    for (int v = 0; v < 3; v++)
        run(comm, "llama", v);
    int rc = TEST_MAIN_END();
    fsdp_comm_free(comm);
    return rc;
}
