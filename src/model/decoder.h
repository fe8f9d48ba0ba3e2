/* decoder.h — the one decoder driver every model family runs on (decoder.c), and the block table a
 * family fills in (GPT-2: gpt2/gpt.c, the Llama family: llama/llama.c).
 *
 * A decoder here is: a root unit (embeddings, final norm, LM head) around L block units "h0".."h<L-1>",
 * a residual stream, a loss over the LM head's logits. The driver owns what every such model does the
 * same way: the batch checks, the copies of tokens/targets/document ids and the positions they imply,
 * the activation arena (its common buffers, and the family's carved where the family says), the unit
 * hooks (pre/post forward and backward), recompute inside pre_backward, the loss, the LM head's input
 * gradient and its deferred weight gradient (after the blocks: the tied embedding's second use then
 * accumulates into the same main_grad slice by the first-touch flag), the KV-cache decode's buffers,
 * chunks and hooks, and the state checks between forward, backward, logits and decode. The family
 * supplies what differs: its per-block activations, its block forward/backward/decode, the embeddings,
 * the final norm. The driver is the implementation of fsdp_model.h's per-model entries for every family.
 */
#ifndef FSDP_MODEL_DECODER_H
#define FSDP_MODEL_DECODER_H

#include "fsdp_model.h"
#include "kernels/kernels.h"

#include <stddef.h>

/* Carves 64-byte aligned float buffers out of an arena from its start; with p == NULL it only counts
 * (every buffer NULL), which is how the memory plan sizes an arena without a model: one description
 * serves the count and the carve. */
typedef struct {
    float *p; /* the arena, or NULL to count */
    size_t n; /* floats taken so far */
} fsdp_carve;

#define FSDP_CARVE_ALIGN 16 /* floats: 64 bytes */
static inline float *fsdp_carve_take(fsdp_carve *k, size_t n) {
    float *r = k->p ? k->p + k->n : NULL;
    k->n += (n + FSDP_CARVE_ALIGN - 1) / FSDP_CARVE_ALIGN * FSDP_CARVE_ALIGN;
    return r;
}

typedef struct fsdp_decoder fsdp_decoder;

#define FSDP_DECODER_MAX_ROOT 8 /* root tensors a family may have */

/* What a family gives the driver. Every hook receives the resolved config (d->cfg) and its own state
 * (d->fam). The arena is carved in this order: n_sets x carve_block, the residual stream (L+1) x N x C,
 * the final norm's output xf (N x C), carve_head, logits (N x Vp), tmpC, dres, dtmpC (N x C each),
 * carve_grad, then tokens, targets, pos, doc (N int32 each). */
typedef struct {
    const char *name;
    fsdp_model_config (*resolve)(const fsdp_model_config *c);          /* every "0 = default" made explicit */
    size_t max_positions;                                              /* B x T limit of one forward */
    int n_root;                                                        /* tensors of the root unit */
    int head;                                                          /* the LM head's index in the root */
    size_t acts_size;                                                  /* one block's activation struct */
    fsdp_status (*state_init)(const fsdp_model_config *c, void **fam); /* c resolved; fam may be NULL */
    void (*state_free)(void *fam);
    /* Carving (fsdp_carve): acts is one block's struct (acts_size bytes), fam the family's state; both
     * NULL when counting. carve_head: the final norm's statistics; carve_grad: backward's scratch. */
    void (*carve_block)(const fsdp_model_config *c, fsdp_carve *k, size_t B, size_t T, void *acts);
    void (*carve_head)(const fsdp_model_config *c, fsdp_carve *k, size_t N, void *fam);
    void (*carve_grad)(const fsdp_model_config *c, fsdp_carve *k, size_t N, void *fam);
    /* Training: the embeddings of d->tokens (at d->pos where d->has_doc) into out (N, C); a block's
     * forward from x into acts, out (N, C) its output or NULL while recomputing (only what backward reads
     * is needed); its backward (d->dres holds dL/d(output) on entry, dL/dx on exit); the final norm of x
     * (n rows) into xf (decode: its statistics in the family's decode scratch); its backward from d->dtmpC
     * into d->dres; the embeddings' weight gradients from d->dres. */
    fsdp_status (*embed_forward)(fsdp_decoder *d, float *out);
    fsdp_status (*block_forward)(fsdp_decoder *d, int l, const float *x, void *acts, float *out);
    fsdp_status (*block_backward)(fsdp_decoder *d, int l, const float *x, void *acts);
    fsdp_status (*norm_forward)(fsdp_decoder *d, const float *x, int n, float *xf, int decode);
    fsdp_status (*norm_backward)(fsdp_decoder *d, const float *x);
    fsdp_status (*embed_backward)(fsdp_decoder *d);
    /* Decode (KV cache of kv_width floats per position, layer and K/V): rows new tokens at most per
     * chunk; the family's scratch for that many rows (d->dec_scratch); the embeddings of n tokens at
     * positions pos.. into x; a block over n rows of x in place, appending K and V at pos.. (K, V: the
     * layer's cache, [max_seq_len, kv_width]; att: max_seq_len floats per each of nthr threads). */
    int (*decode_rows)(const fsdp_model_config *c);
    size_t (*decode_floats)(const fsdp_model_config *c, size_t rows);
    size_t (*kv_width)(const fsdp_model_config *c);
    fsdp_status (*embed_decode)(fsdp_decoder *d, const int *tokens, int n, int pos, float *x);
    fsdp_status (*block_decode)(fsdp_decoder *d, int l, float *x, int n, int pos, float *K, float *V,
                                float *att, int nthr);
} fsdp_block_table;

/* A kernel call through context kc (const fsdp_kctx *): the row of the engine's device. */
#define FSDP_KC(kc, fn, ...) ((kc)->k->fn((kc), __VA_ARGS__))
/* The same through decoder d's context. */
#define FSDP_K(d, fn, ...) FSDP_KC(&(d)->kc, fn, __VA_ARGS__)

/* The driver's state; families read it in their hooks (and write only their own buffers). */
struct fsdp_decoder {
    const fsdp_block_table *bt;
    fsdp_kctx kc;          /* the kernels: the row of the engine's device, on its compute stream */
    fsdp_model_config cfg; /* resolved */
    void *fam;             /* the family's state (bt->state_init) */
    fsdp_engine_t *eng;
    fsdp_dtype pdt;       /* the engine's compute dtype: parameter views are float* or fsdp_bf16* */
    fsdp_unit_t *root;    /* "root" */
    fsdp_unit_t **blocks; /* (L) "h<l>" */
    const void *root_w[FSDP_DECODER_MAX_ROOT]; /* the root's parameter views while it is gathered */
    int recompute;                             /* what the next forward does */

    /* the arena, carved for act_B x act_T rows and act_recompute */
    void *arena;
    size_t arena_bytes;
    int act_B, act_T, act_recompute;
    unsigned char *acts;        /* (L) block structs of acts_size bytes; with recompute all copies of one */
    float *res;                 /* (L+1) slices (N, C): res[0] the embeddings, res[l+1] block l's output */
    float *xf;                  /* (N, C) the final norm's output, the LM head's input */
    float *logits;              /* (N, Vp); dlogits after backward */
    float *tmpC, *dres, *dtmpC; /* (N, C) */
    int *tokens, *targets, *pos, *doc; /* (N) the batch's copies; pos restarts at each document */
    int has_doc;                       /* the last forward had document ids */
    int n_counted;                     /* targets of the last forward that count (not FSDP_IGNORE_INDEX) */

    /* decode */
    float *kv;          /* (L, 2, max_seq_len, kv_width) */
    float *dec;         /* x (rows, C), the family's scratch, one row of logits (Vp) */
    float *dec_scratch; /* the family's part of dec */
    int dec_rows;
    int kv_len; /* positions cached */

    int B, T; /* of the last forward */
    int have_targets, pending_backward, logits_valid;
};

/* A block table's hooks, for a family file that defines each as a static function of the hook's name
 * (every family does: the names say which hook a function is). */
#define FSDP_BLOCK_TABLE_HOOKS                                                                               \
    .state_init = state_init, .state_free = state_free, .carve_block = carve_block,                          \
    .carve_head = carve_head, .carve_grad = carve_grad, .embed_forward = embed_forward,                      \
    .block_forward = block_forward, .block_backward = block_backward, .norm_forward = norm_forward,          \
    .norm_backward = norm_backward, .embed_backward = embed_backward, .decode_rows = decode_rows,            \
    .decode_floats = decode_floats, .kv_width = kv_width, .embed_decode = embed_decode,                      \
    .block_decode = block_decode

/* 1 when tensor `tensor` of every block h0..h<L-1> (L >= 1), or of the root (L 0), matches one of the
 * --freeze globs (fsdp_engine_config.freeze; NULL: none): its weight-gradient GEMM never runs. */
int fsdp_decoder_frozen_all(const char *freeze, int L, const char *tensor);

/* The (N, C) residual slice l (0..L) of the current arena. */
float *fsdp_decoder_res(const fsdp_decoder *d, int l);
/* The family's activation struct of block l. */
void *fsdp_decoder_acts(const fsdp_decoder *d, int l);
/* Gives the collectives started by the hooks a turn between kernels (fsdp_engine_progress). */
void fsdp_decoder_progress(fsdp_decoder *d);
/* Views of a unit's first n tensors (n <= the unit's tensor count). */
fsdp_status fsdp_decoder_views(fsdp_unit_t *u, int n, const void **w);

/* ---- LoRA adapters, for every family: a projection y = x W^T (N rows, input width in, n outputs
 * written at columns [0, n) of rows with stride ldy: the caller offsets y for a fused projection's part)
 * gains scale * (x A^T) B^T, A (R, in) and B (n, R) in the compute dtype pdt. */
typedef struct {
    const fsdp_kctx *kc; /* the kernels' context (the decoder's) */
    const void *A, *B;   /* the adapter's views */
    float *gA, *gB;      /* main_grad views (NULL: frozen) and their accumulate flags */
    int aA, aB;
    int in, n, ldy, R;
    float scale; /* alpha / R */
} fsdp_lora;
/* t (N, R) = x A^T: the adapter's input side, which backward needs (saved, or recomputed). */
fsdp_status fsdp_lora_xa(const fsdp_lora *l, const float *x, float *t, int N, fsdp_dtype pdt);
/* y[:, 0:n] += scale * t B^T, through u (N, n). */
fsdp_status fsdp_lora_add(const fsdp_lora *l, const float *t, float *y, float *u, int N, fsdp_dtype pdt);
/* Backward: dy (columns [0, n), stride ldy) the projection output's gradient, x its input, t = x A^T;
 * dB (+)= g^T t and dA (+)= (g B)^T x by the flags, dx (N, in) += (g B) A, g = scale * dy; scratch u
 * (N, n) and dt (N, R). */
fsdp_status fsdp_lora_backward(const fsdp_lora *l, const float *dy, const float *x, const float *t, float *dx,
                               float *u, float *dt, int N, fsdp_dtype pdt);

/* Bytes of the activation arena for (B, T) batches of config c (not resolved) under c->recompute. */
size_t fsdp_decoder_arena_bytes(const fsdp_block_table *bt, const fsdp_model_config *c, int B, int T);

/* fsdp_model_family entries, for every family built on the driver (impl is an fsdp_decoder): a family
 * table names them all with FSDP_DECODER_ENTRIES, and its own init calls fsdp_decoder_init. */
#define FSDP_DECODER_ENTRIES                                                                                 \
    .free = fsdp_decoder_free, .forward = fsdp_decoder_forward, .backward = fsdp_decoder_backward,           \
    .logits = fsdp_decoder_logits, .end_eval = fsdp_decoder_end_eval, .decode = fsdp_decoder_decode,         \
    .set_recompute = fsdp_decoder_set_recompute, .unit = fsdp_decoder_unit
/* init registers the units fsdp_model_units_init describes for c, root first, on eng. */
fsdp_status fsdp_decoder_init(void **impl, fsdp_engine_t *eng, const fsdp_model_config *c,
                              const fsdp_block_table *bt);
void fsdp_decoder_free(void *impl);
fsdp_status fsdp_decoder_forward(void *impl, const fsdp_model_batch *b, float *loss);
fsdp_status fsdp_decoder_backward(void *impl, float loss_scale);
fsdp_status fsdp_decoder_logits(const void *impl, const float **logits, int *B, int *T, int *Vp);
fsdp_status fsdp_decoder_end_eval(void *impl);
fsdp_status fsdp_decoder_decode(void *impl, const int *tokens, int n, int pos, const float **logits);
fsdp_status fsdp_decoder_set_recompute(void *impl, int on);
fsdp_unit_t *fsdp_decoder_unit(void *impl, int i);

#endif
