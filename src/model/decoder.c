/* decoder.c — the one decoder driver (decoder.h): forward, backward, logits and KV-cache decode of
 * every model family, over the family's block table. */
#include "model/decoder.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "shard/shard.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

static size_t aligned(size_t n) { return (n + FSDP_CARVE_ALIGN - 1) / FSDP_CARVE_ALIGN * FSDP_CARVE_ALIGN; }

/* The arena's one description (decoder.h gives the order): counts when k->p is NULL (d NULL then),
 * carves d's buffers otherwise. c is resolved. */
static void carve(const fsdp_block_table *bt, const fsdp_model_config *c, fsdp_carve *k, size_t B, size_t T,
                  int recompute, fsdp_decoder *d) {
    const size_t N = B * T, C = (size_t)c->n_embd, L = (size_t)c->n_layer;
    const size_t nsets = recompute ? 1 : L;
    for (size_t s = 0; s < nsets; s++)
        bt->carve_block(c, k, B, T, d ? d->acts + s * bt->acts_size : NULL);
    float *res = fsdp_carve_take(k, (L + 1) * aligned(N * C));
    float *xf = fsdp_carve_take(k, N * C);
    bt->carve_head(c, k, N, d ? d->fam : NULL);
    float *logits = fsdp_carve_take(k, N * (size_t)c->padded_vocab_size);
    float *tmpC = fsdp_carve_take(k, N * C), *dres = fsdp_carve_take(k, N * C);
    float *dtmpC = fsdp_carve_take(k, N * C);
    bt->carve_grad(c, k, N, d ? d->fam : NULL);
    int *ints[4];
    for (int i = 0; i < 4; i++) /* int32 buffers of N, carved as floats */
        ints[i] = (int *)fsdp_carve_take(k, N);
    if (!d) return;
    for (size_t s = nsets; s < L; s++) /* recompute: every block shares the one set */
        memcpy(d->acts + s * bt->acts_size, d->acts, bt->acts_size);
    d->res = res, d->xf = xf, d->logits = logits;
    d->tmpC = tmpC, d->dres = dres, d->dtmpC = dtmpC;
    d->tokens = ints[0], d->targets = ints[1], d->pos = ints[2], d->doc = ints[3];
}

size_t fsdp_decoder_arena_bytes(const fsdp_block_table *bt, const fsdp_model_config *c, int B, int T) {
    const fsdp_model_config r = bt->resolve(c);
    fsdp_carve k = {0};
    carve(bt, &r, &k, (size_t)B, (size_t)T, r.recompute, NULL);
    return k.n * sizeof(float);
}

/* Carves the arena for (B, T) and the current recompute setting; reallocates only when it must grow. */
static fsdp_status ensure_arena(fsdp_decoder *d, int B, int T) {
    if (d->arena && d->act_B == B && d->act_T == T && d->act_recompute == d->recompute) return FSDP_OK;
    fsdp_carve count = {0};
    carve(d->bt, &d->cfg, &count, (size_t)B, (size_t)T, d->recompute, NULL);
    size_t bytes;
    if (!fsdp_mul_ok(count.n, sizeof(float), &bytes))
        return FSDP_ERR(FSDP_EINVAL, "activations for B=%d T=%d overflow size_t", B, T);
    if (bytes > d->arena_bytes) {
        fsdp_mem_free(d->arena);
        d->arena = NULL;
        d->arena_bytes = 0;
        FSDP_TRY(fsdp_mem_alloc(&d->arena, bytes, FSDP_MEM_ACTIVATION));
        d->arena_bytes = bytes;
    }
    fsdp_carve k = {.p = d->arena};
    carve(d->bt, &d->cfg, &k, (size_t)B, (size_t)T, d->recompute, d);
    FSDP_INVARIANT(k.n == count.n);
    d->act_B = B, d->act_T = T, d->act_recompute = d->recompute;
    return FSDP_OK;
}

float *fsdp_decoder_res(const fsdp_decoder *d, int l) {
    return d->res + (size_t)l * aligned((size_t)d->act_B * (size_t)d->act_T * (size_t)d->cfg.n_embd);
}

void *fsdp_decoder_acts(const fsdp_decoder *d, int l) { return d->acts + (size_t)l * d->bt->acts_size; }

void fsdp_decoder_progress(fsdp_decoder *d) { fsdp_engine_progress(d->eng); }

fsdp_status fsdp_decoder_views(fsdp_unit_t *u, int n, const void **w) {
    for (int t = 0; t < n; t++) {
        void *v;
        FSDP_TRY(fsdp_unit_param(u, t, &v));
        w[t] = v;
    }
    return FSDP_OK;
}

fsdp_status fsdp_lora_xa(const fsdp_lora *l, const float *x, float *t, int N, fsdp_dtype pdt) {
    return FSDP_KC(l->kc, matmul_forward, t, x, l->A, NULL, pdt, N, l->in, l->R);
}

fsdp_status fsdp_lora_add(const fsdp_lora *l, const float *t, float *y, float *u, int N, fsdp_dtype pdt) {
    FSDP_TRY(FSDP_KC(l->kc, matmul_forward, u, t, l->B, NULL, pdt, N, l->R, l->n));
    const float sc = l->scale;
    const int n = l->n;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)n > 65536)
    for (size_t i = 0; i < (size_t)N; i++) {
        float *yr = y + i * (size_t)l->ldy;
        const float *ur = u + i * (size_t)n;
        for (int j = 0; j < n; j++)
            yr[j] += sc * ur[j];
    }
    return FSDP_OK;
}

fsdp_status fsdp_lora_backward(const fsdp_lora *l, const float *dy, const float *x, const float *t, float *dx,
                               float *u, float *dt, int N, fsdp_dtype pdt) {
    const float sc = l->scale;
    const size_t NR = (size_t)N * (size_t)l->R;
    if (l->ldy == l->n) { /* dy contiguous: the scale goes on the narrow side, t and g B */
        for (size_t i = 0; i < NR; i++)
            u[i] = sc * t[i];
        FSDP_TRY(
            FSDP_KC(l->kc, matmul_backward, dt, 0, l->gB, l->aB, NULL, 0, dy, u, l->B, pdt, N, l->R, l->n));
        for (size_t i = 0; i < NR; i++)
            dt[i] *= sc;
    } else { /* a column slice of a fused output: copied out, scaled */
        const int n = l->n;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)n > 65536)
        for (size_t i = 0; i < (size_t)N; i++) {
            const float *dr = dy + i * (size_t)l->ldy;
            float *g = u + i * (size_t)n;
            for (int j = 0; j < n; j++)
                g[j] = sc * dr[j];
        }
        FSDP_TRY(
            FSDP_KC(l->kc, matmul_backward, dt, 0, l->gB, l->aB, NULL, 0, u, t, l->B, pdt, N, l->R, l->n));
    }
    return FSDP_KC(l->kc, matmul_backward, dx, 1, l->gA, l->aA, NULL, 0, dt, x, l->A, pdt, N, l->in, l->R);
}

static fsdp_status root_views(fsdp_decoder *d) {
    return fsdp_decoder_views(d->root, d->bt->n_root, d->root_w);
}

/* ---------------------------------------------------------------- init / free */

void fsdp_decoder_free(void *impl) {
    fsdp_decoder *d = impl;
    if (d == NULL) return;
    fsdp_mem_free(d->kv);
    fsdp_mem_free(d->dec);
    fsdp_mem_free(d->arena);
    if (d->fam) d->bt->state_free(d->fam);
    free(d->acts);
    free(d->blocks);
    free(d);
}

static void units_release(fsdp_model_units *u) {
    if (u->release) u->release(u->owner);
    free(u->units);
    memset(u, 0, sizeof *u);
}

fsdp_status fsdp_decoder_init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *c,
                              const fsdp_block_table *bt) {
    if (impl == NULL || eng == NULL || bt == NULL)
        return FSDP_ERR(FSDP_EINVAL, "impl, eng and the block table must not be NULL");
    *impl = NULL;
    if (bt->n_root < 1 || bt->n_root > FSDP_DECODER_MAX_ROOT || bt->head < 0 || bt->head >= bt->n_root)
        return FSDP_ERR(FSDP_EINTERNAL, "block table %s: %d root tensors, head %d", bt->name, bt->n_root,
                        bt->head);
    /* c was validated by fsdp_model_init; the family's own table (not model.c's dispatch, which calls
     * into the families: no file-level loop) */
    fsdp_model_units us = {0};
    FSDP_TRY(c->family->units(&us, c));
    fsdp_status st;
    fsdp_decoder *d = calloc(1, sizeof *d);
    if (d == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model struct");
        goto fail;
    }
    d->bt = bt;
    d->cfg = bt->resolve(c);
    d->eng = eng;
    d->pdt = fsdp_engine_get_config(eng)->compute_dtype;
    st = fsdp_kctx_init(&d->kc, fsdp_engine_get_config(eng)->device, shard_compute_stream(eng));
    if (st != FSDP_OK) goto fail;
    d->recompute = d->cfg.recompute;
    const size_t L = (size_t)d->cfg.n_layer;
    d->blocks = calloc(L, sizeof *d->blocks);
    d->acts = calloc(L, bt->acts_size);
    if (!d->blocks || !d->acts) {
        st = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the model's tables (%zu layers)", L);
        goto fail;
    }
    st = bt->state_init(&d->cfg, &d->fam);
    if (st != FSDP_OK) goto fail;
    /* Exactly the units the family describes: root, then h0..h<L-1>. */
    for (int i = 0; i < us.n_units; i++) {
        const fsdp_plan_unit *pu = &us.units[i];
        st = fsdp_engine_add_unit(eng, pu->name, pu->specs, pu->n_specs, pu->cfg,
                                  i ? &d->blocks[i - 1] : &d->root);
        if (st != FSDP_OK) goto fail;
    }
    units_release(&us);
    *impl = d;
    return FSDP_OK;
fail: /* units already added belong to the engine (freed with it) */
    fsdp_decoder_free(d);
    units_release(&us);
    return st;
}

fsdp_unit_t *fsdp_decoder_unit(void *impl, int i) {
    fsdp_decoder *d = impl;
    if (d == NULL || i < 0 || i > d->cfg.n_layer) return NULL;
    return i == 0 ? d->root : d->blocks[i - 1];
}

fsdp_status fsdp_decoder_set_recompute(void *impl, int on) {
    fsdp_decoder *d = impl;
    if (d == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (on != 0 && on != 1) return FSDP_ERR(FSDP_EINVAL, "recompute must be 0 or 1, got %d", on);
    if (d->pending_backward)
        return FSDP_ERR(FSDP_ESTATE, "cannot switch recompute between a forward and its backward; run the "
                                     "backward first");
    d->recompute = on;
    d->cfg.recompute = on;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- forward */

static fsdp_status check_batch(const fsdp_decoder *d, const fsdp_model_batch *b) {
    const fsdp_model_config *c = &d->cfg;
    const int B = b->B, T = b->T, V = c->vocab_size;
    if (B < 1 || T < 1 || T > c->max_seq_len)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: need B >= 1 and 1 <= T <= max_seq_len (%d)", B, T,
                        c->max_seq_len);
    if ((size_t)B * (size_t)T > d->bt->max_positions)
        return FSDP_ERR(FSDP_EINVAL, "batch B=%d T=%d: more than %zu positions", B, T, d->bt->max_positions);
    const int N = B * T;
    for (int i = 0; i < N; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= V)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, b->tokens[i],
                            V);
        if (b->targets && b->targets[i] != FSDP_IGNORE_INDEX && (b->targets[i] < 0 || b->targets[i] >= V))
            return FSDP_ERR(FSDP_EINVAL, "targets[%d] = %d is neither in [0, %d) nor FSDP_IGNORE_INDEX (%d)",
                            i, b->targets[i], V, FSDP_IGNORE_INDEX);
    }
    return FSDP_OK;
}

/* The batch's copies in the arena, and the positions: 0 at each row's start and where the document
 * id changes, else the previous position + 1. */
static void take_batch(fsdp_decoder *d, const fsdp_model_batch *b) {
    const int B = b->B, T = b->T;
    const size_t N = (size_t)B * (size_t)T;
    memcpy(d->tokens, b->tokens, N * sizeof(int));
    if (b->targets) memcpy(d->targets, b->targets, N * sizeof(int));
    d->has_doc = b->doc != NULL;
    if (b->doc) memcpy(d->doc, b->doc, N * sizeof(int));
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)r * T + t;
            d->pos[i] = (t == 0 || (b->doc && b->doc[i] != b->doc[i - 1])) ? 0 : d->pos[i - 1] + 1;
        }
    d->B = B, d->T = T;
}

static fsdp_status forward(fsdp_decoder *d, const fsdp_model_batch *b, float *loss) {
    FSDP_TRY(check_batch(d, b));
    const fsdp_model_config *c = &d->cfg;
    const int N = b->B * b->T, C = c->n_embd, L = c->n_layer, V = c->vocab_size, Vp = c->padded_vocab_size;
    d->logits_valid = 0;
    d->pending_backward = 0;
    FSDP_TRY(ensure_arena(d, b->B, b->T));
    take_batch(d, b);

    FSDP_TRY(fsdp_unit_pre_forward(d->root));
    FSDP_TRY(root_views(d));
    FSDP_TRY(d->bt->embed_forward(d, fsdp_decoder_res(d, 0)));
    for (int l = 0; l < L; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(d->blocks[l]));
        FSDP_TRY(d->bt->block_forward(d, l, fsdp_decoder_res(d, l), fsdp_decoder_acts(d, l),
                                      fsdp_decoder_res(d, l + 1)));
        FSDP_TRY(fsdp_unit_post_forward(d->blocks[l]));
    }
    FSDP_TRY(d->bt->norm_forward(d, fsdp_decoder_res(d, L), N, d->xf, 0));
    FSDP_TRY(FSDP_K(d, matmul_forward, d->logits, d->xf, d->root_w[d->bt->head], NULL, d->pdt, N, C, Vp));
    if (b->targets) {
        float mean;
        FSDP_TRY(FSDP_K(d, softmax_crossentropy_count, NULL, &mean, &d->n_counted, NULL, d->logits,
                        d->targets, N, V, Vp, 1.0f));
        if (loss) *loss = mean;
    } else if (loss) {
        *loss = NAN;
    }
    FSDP_TRY(fsdp_unit_post_forward(d->root));
    d->have_targets = b->targets != NULL;
    d->pending_backward = b->targets != NULL;
    d->logits_valid = 1;
    return FSDP_OK;
}

/* A forward without targets has no backward: the engine reshards it as such (nothing kept for a
 * backward that cannot come), whatever the caller set before, which is restored after. */
fsdp_status fsdp_decoder_forward(void *impl, const fsdp_model_batch *b, float *loss) {
    fsdp_decoder *d = impl;
    if (d == NULL || b == NULL || b->tokens == NULL)
        return FSDP_ERR(FSDP_EINVAL, "model, batch and tokens must not be NULL");
    if (b->targets) return forward(d, b, loss);
    const int was = fsdp_engine_no_backward(d->eng);
    FSDP_TRY(fsdp_engine_set_no_backward(d->eng, 1));
    fsdp_status s = forward(d, b, loss);
    fsdp_engine_set_no_backward(d->eng, was);
    return s;
}

fsdp_status fsdp_decoder_logits(const void *impl, const float **logits, int *B, int *T, int *Vp) {
    const fsdp_decoder *d = impl;
    if (d == NULL || logits == NULL) return FSDP_ERR(FSDP_EINVAL, "model and logits must not be NULL");
    if (!d->logits_valid)
        return FSDP_ERR(FSDP_ESTATE, "no logits: run a forward first (backward turns them into gradients)");
    *logits = d->logits;
    if (B) *B = d->B;
    if (T) *T = d->T;
    if (Vp) *Vp = d->cfg.padded_vocab_size;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- backward */

fsdp_status fsdp_decoder_backward(void *impl, float loss_scale) {
    fsdp_decoder *d = impl;
    if (d == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (!d->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        d->have_targets
                            ? "backward already ran for the last forward; run a forward again"
                            : "the last forward had no targets (inference); run one with targets");
    if (!isfinite(loss_scale))
        return FSDP_ERR(FSDP_EINVAL, "loss_scale must be finite, got %g", (double)loss_scale);
    const fsdp_model_config *c = &d->cfg;
    const int B = d->B, T = d->T, N = B * T, C = c->n_embd, L = c->n_layer, V = c->vocab_size;
    const int Vp = c->padded_vocab_size;
    d->pending_backward = 0;
    d->logits_valid = 0;

    /* Loss and LM head: dlogits (in place of the logits), then the gradient of the LM head's input and
     * the final norm's. The LM head's weight gradient (a tied weight's first use) waits until the blocks
     * are done: nothing in between needs it, its inputs (dlogits, the final norm's output) stay in the
     * arena, and the root's main_grad is held until the root's post_backward anyway. Across hosts the
     * links idle during the LM head (there is no gradient to send before the first block's), so its GEMM
     * belongs where the blocks' reduce-scatters keep them busy. */
    FSDP_TRY(fsdp_unit_pre_backward(d->root));
    FSDP_TRY(root_views(d));
    /* the mean over the counted targets (all N of them unless some are FSDP_IGNORE_INDEX) */
    const float dloss = d->n_counted > 0 ? loss_scale / (float)d->n_counted : 0.0f;
    FSDP_TRY(FSDP_K(d, softmax_crossentropy_count, NULL, NULL, NULL, d->logits, d->logits, d->targets, N, V,
                    Vp, dloss));
    FSDP_TRY(FSDP_K(d, matmul_backward, d->dtmpC, 0, NULL, 0, NULL, 0, d->logits, d->xf,
                    d->root_w[d->bt->head], d->pdt, N, C, Vp));
    fsdp_decoder_progress(d);
    FSDP_TRY(d->bt->norm_backward(d, fsdp_decoder_res(d, L)));

    for (int l = L - 1; l >= 0; l--) {
        fsdp_unit_t *u = d->blocks[l];
        FSDP_TRY(fsdp_unit_pre_backward(u));
        if (d->act_recompute) { /* same kernels on the same input: bitwise the forward's activations */
            FSDP_TRY(fsdp_unit_pre_forward(u));
            FSDP_TRY(d->bt->block_forward(d, l, fsdp_decoder_res(d, l), fsdp_decoder_acts(d, l), NULL));
            FSDP_TRY(fsdp_unit_post_forward(u));
        }
        FSDP_TRY(d->bt->block_backward(d, l, fsdp_decoder_res(d, l), fsdp_decoder_acts(d, l)));
        FSDP_TRY(fsdp_unit_post_backward(u));
    }

    /* The LM head's weight gradient (deferred, above), then the embeddings': with a tied head both land
     * in one main_grad slice, and the second use accumulates by the first-touch flag. */
    float *gw;
    int aw;
    FSDP_TRY(fsdp_unit_main_grad(d->root, d->bt->head, &gw, &aw));
    FSDP_TRY(FSDP_K(d, matmul_backward, NULL, 0, gw, aw, NULL, 0, d->logits, d->xf, NULL, d->pdt, N, C, Vp));
    fsdp_decoder_progress(d);
    FSDP_TRY(d->bt->embed_backward(d));
    return fsdp_unit_post_backward(d->root);
}

fsdp_status fsdp_decoder_end_eval(void *impl) {
    fsdp_decoder *d = impl;
    if (d == NULL) return FSDP_ERR(FSDP_EINVAL, "model must not be NULL");
    if (d->pending_backward)
        return FSDP_ERR(FSDP_ESTATE,
                        "a training forward is waiting for its backward; run the backward first");
    return fsdp_engine_reshard_all(d->eng);
}

/* ---------------------------------------------------------------- incremental inference (KV cache) */

/* dec: x (rows, C), the family's scratch, one row of logits (Vp). */
static size_t dec_floats(const fsdp_decoder *d, size_t rows) {
    return rows * (size_t)d->cfg.n_embd + d->bt->decode_floats(&d->cfg, rows) +
           (size_t)d->cfg.padded_vocab_size;
}

static fsdp_status decode_alloc(fsdp_decoder *d) {
    const fsdp_model_config *c = &d->cfg;
    const size_t rows = (size_t)d->bt->decode_rows(c);
    size_t kvb, decb;
    if (!fsdp_mul_ok((size_t)c->n_layer * 2 * (size_t)c->max_seq_len * d->bt->kv_width(c), sizeof(float),
                     &kvb) ||
        !fsdp_mul_ok(dec_floats(d, rows), sizeof(float), &decb))
        return FSDP_ERR(FSDP_EINVAL, "the KV cache for max_seq_len %d overflows size_t", c->max_seq_len);
    FSDP_TRY(fsdp_mem_alloc((void **)&d->kv, kvb, FSDP_MEM_ACTIVATION));
    fsdp_status st = fsdp_mem_alloc((void **)&d->dec, decb, FSDP_MEM_ACTIVATION);
    if (st != FSDP_OK) {
        fsdp_mem_free(d->kv);
        d->kv = NULL;
        return st;
    }
    d->dec_rows = (int)rows;
    d->dec_scratch = d->dec + rows * (size_t)c->n_embd;
    return FSDP_OK;
}

/* One chunk of n <= dec_rows new tokens at positions pos.. through every layer; the last row's logits
 * into out when want_logits. */
static fsdp_status decode_chunk(fsdp_decoder *d, const int *tokens, int n, int pos, float *att, int nthr,
                                int want_logits, float *out) {
    const fsdp_model_config *c = &d->cfg;
    const int C = c->n_embd, Vp = c->padded_vocab_size;
    const size_t Tmax = (size_t)c->max_seq_len, kvw = d->bt->kv_width(c);
    float *x = d->dec;
    FSDP_TRY(fsdp_unit_pre_forward(d->root));
    FSDP_TRY(root_views(d));
    FSDP_TRY(d->bt->embed_decode(d, tokens, n, pos, x));
    for (int l = 0; l < c->n_layer; l++) {
        FSDP_TRY(fsdp_unit_pre_forward(d->blocks[l]));
        float *K = d->kv + (size_t)l * 2 * Tmax * kvw, *V = K + Tmax * kvw;
        FSDP_TRY(d->bt->block_decode(d, l, x, n, pos, K, V, att, nthr));
        FSDP_TRY(fsdp_unit_post_forward(d->blocks[l]));
    }
    if (want_logits) { /* only the last position's logits are needed */
        float *xf = d->dec_scratch;
        FSDP_TRY(d->bt->norm_forward(d, x + (size_t)(n - 1) * C, 1, xf, 1));
        FSDP_TRY(FSDP_K(d, matmul_forward, out, xf, d->root_w[d->bt->head], NULL, d->pdt, 1, C, Vp));
    }
    return fsdp_unit_post_forward(d->root);
}

static fsdp_status decode(fsdp_decoder *d, const int *tokens, int n, int pos, const float **logits) {
    const fsdp_model_config *c = &d->cfg;
    const int Tmax = c->max_seq_len;
    if (n < 1 || pos < 0 || pos > Tmax - n)
        return FSDP_ERR(FSDP_EINVAL,
                        "decode: %d tokens at position %d: need n >= 1 and pos + n <= max_seq_len (%d)", n,
                        pos, Tmax);
    if (pos != 0 && pos != d->kv_len)
        return FSDP_ERR(FSDP_EINVAL, "decode: position %d but %d positions are cached (pass 0 to start over)",
                        pos, d->kv_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return FSDP_ERR(FSDP_EINVAL, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, tokens[i],
                            c->vocab_size);
    d->pending_backward = 0; /* as a new forward does: a forward left without backward is abandoned */
    if (!d->kv) FSDP_TRY(decode_alloc(d));
    d->logits_valid = 0;
    d->kv_len = pos; /* a failure below leaves the cache at the positions that were complete */
    const int nthr = omp_get_max_threads();
    float *att = NULL, *out = d->dec + (dec_floats(d, (size_t)d->dec_rows) - (size_t)c->padded_vocab_size);
    FSDP_TRY(fsdp_mem_alloc((void **)&att, (size_t)nthr * (size_t)Tmax * sizeof(float), FSDP_MEM_ACTIVATION));
    fsdp_status st = FSDP_OK;
    for (int i0 = 0; i0 < n && st == FSDP_OK; i0 += d->dec_rows) {
        const int k = n - i0 < d->dec_rows ? n - i0 : d->dec_rows;
        st = decode_chunk(d, tokens + i0, k, pos + i0, att, nthr, i0 + k == n, out);
        if (st == FSDP_OK) d->kv_len = pos + i0 + k;
    }
    fsdp_mem_free(att);
    FSDP_TRY(st);
    *logits = out;
    return FSDP_OK;
}

fsdp_status fsdp_decoder_decode(void *impl, const int *tokens, int n, int pos, const float **logits) {
    fsdp_decoder *d = impl;
    if (d == NULL || tokens == NULL || logits == NULL)
        return FSDP_ERR(FSDP_EINVAL, "model, tokens and logits must not be NULL");
    const int was = fsdp_engine_no_backward(d->eng); /* as a forward without targets */
    FSDP_TRY(fsdp_engine_set_no_backward(d->eng, 1));
    fsdp_status s = decode(d, tokens, n, pos, logits);
    fsdp_engine_set_no_backward(d->eng, was);
    return s;
}

int fsdp_decoder_frozen_all(const char *freeze, int L, const char *tensor) {
    if (freeze == NULL || freeze[0] == '\0') return 0;
    if (L == 0) return shard_freeze_match(freeze, "root", tensor);
    for (int l = 0; l < L; l++) {
        char unit[32];
        snprintf(unit, sizeof unit, "h%d", l);
        if (!shard_freeze_match(freeze, unit, tensor)) return 0;
    }
    return 1;
}
