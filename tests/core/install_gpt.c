/* install_gpt.c — a program outside the source tree that trains the GPT-2 model with nothing but the
 * installed fsdp.h, fsdp_gpt.h and libfsdp (install_check.sh builds it with pkg-config only, shared and
 * static): a 2-layer model on a world of one learns a fixed batch whose next token is a function of
 * the current one. Checks derived independently of the library: the parameter count from the shapes
 * in fsdp_gpt.h, the first loss near ln(V) (near-zero logits at initialisation), the loss falling to
 * under a third of it in 40 AdamW steps, the logits' shape, and an invalid config refused. */
#include <fsdp.h>
#include <fsdp_gpt.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define EXPECT(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "install_gpt: FAIL line %d: %s (%s)\n", __LINE__, #cond, fsdp_last_error());     \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

enum { L = 2, C = 32, NH = 4, V = 64, TMAX = 16, B = 2, T = 16, STEPS = 40 };

int main(int argc, char **argv) {
    gpt_config gc = gpt_config_default();
    gc.n_layer = L;
    gc.n_embd = C;
    gc.n_head = NH;
    gc.vocab_size = V;
    gc.padded_vocab_size = 0; /* V rounded up to 128 */
    gc.max_seq_len = TMAX;
    EXPECT(gpt_config_validate(&gc) == FSDP_OK);
    gpt_config bad = gc;
    bad.n_embd = 30; /* not a multiple of n_head */
    EXPECT(gpt_config_validate(&bad) == FSDP_EINVAL);

    /* Shapes from fsdp_gpt.h: wte (Vp, C), wpe (T_max, C), lnf 2C; per block 2 LayerNorms (4C),
     * qkv (3C, C) + 3C, attproj (C, C) + C, fc (4C, C) + 4C, fcproj (C, 4C) + C. */
    size_t Vp = 128, blk = 4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C;
    EXPECT(gpt_num_params(&gc) == Vp * C + (size_t)TMAX * C + 2 * C + L * blk);

    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    fsdp_comm_t *comm = NULL;
    fsdp_engine_t *eng = NULL;
    gpt_model_t *m = NULL;
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "install_gpt: fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    ec.seed = 1234;
    fsdp_status s = fsdp_engine_init(&eng, comm, &ec);
    if (s == FSDP_OK) s = gpt_init(&m, eng, &gc);
    if (s == FSDP_OK) s = fsdp_engine_init_params(eng);
    EXPECT(s == FSDP_OK);

    int tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (i * 5 + i / T) % V;
        targets[i] = (tokens[i] * 3 + 1) % V; /* a function of the current token */
    }
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 1e-2f;
    oc.weight_decay = 0.0f;
    float first = -1, last = -1;
    for (int step = 0; s == FSDP_OK && step < STEPS; step++) {
        float loss = 0, norm = 0;
        s = fsdp_engine_begin_step(eng, 1);
        if (s == FSDP_OK) s = fsdp_engine_begin_micro(eng, 0);
        if (s == FSDP_OK) s = gpt_forward(m, tokens, targets, B, T, &loss);
        if (s == FSDP_OK) s = gpt_backward(m, 1.0f);
        if (s == FSDP_OK) s = fsdp_engine_clip_grad_norm(eng, 1.0f, &norm);
        if (s == FSDP_OK) s = fsdp_engine_adamw_step(eng, &oc);
        if (step == 0) first = loss;
        last = loss;
    }
    EXPECT(s == FSDP_OK);
    printf("install_gpt: loss %.4f -> %.4f in %d steps (ln V = %.4f)\n", first, last, STEPS, log((double)V));
    EXPECT(fabs(first - log((double)V)) < 0.15);
    EXPECT(last < first / 3);

    /* Inference: logits of the trained model, shape (B, T, Vp). */
    const float *logits = NULL;
    int lb = 0, lt = 0, lv = 0;
    if (s == FSDP_OK) s = fsdp_engine_begin_step(eng, 1);
    if (s == FSDP_OK) s = fsdp_engine_begin_micro(eng, 0);
    if (s == FSDP_OK) s = gpt_forward(m, tokens, NULL, B, T, NULL);
    if (s == FSDP_OK) s = gpt_logits(m, &logits, &lb, &lt, &lv);
    EXPECT(s == FSDP_OK && logits != NULL && lb == B && lt == T && lv == (int)Vp);
    if (s == FSDP_OK) EXPECT(gpt_end_eval(m) == FSDP_OK);

    gpt_free(m);
    fsdp_engine_free(eng);
    fsdp_comm_free(comm);
    printf("install_gpt: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
