/* test_gpt.c — the GPT-2 model on one process: activation recompute gives bitwise the same loss,
 * logits and gradients (fp32, and mixed on each GEMM path); config validation and misuse give clear errors;
 * activations are tracked under their category; the fixture reader rejects corrupt files. */
#include "fixture.h"
#include "kernels/kernels.h"
#include "gpt_test_util.h"
#include "kernels/kernels.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static gpt_config small_config(void) {
    gpt_config c = gpt_config_default();
    c.n_layer = 2, c.n_embd = 32, c.n_head = 4, c.vocab_size = 50, c.padded_vocab_size = 64;
    c.max_seq_len = 16;
    return c;
}

enum { B = 2, T = 12 };

static void batch(int *tok, int *tgt, int V) {
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 3) % V;
        tgt[i] = (i * 13 + 5) % V;
    }
}

/* One forward + backward; copies the loss, the logits (B*T*Vp) and every unit's full gradient. */
static void fwd_bwd(fsdp_engine_t *e, gpt_model_t *m, float *loss, float *logits, float **grads) {
    const gpt_config *c = gpt_get_config(m);
    int tok[B * T], tgt[B * T];
    batch(tok, tgt, c->vocab_size);
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    CHECK_OK(fsdp_engine_begin_micro(e, 0));
    CHECK_OK(gpt_forward(m, tok, tgt, B, T, loss));
    const float *lg;
    if (gpt_logits(m, &lg, NULL, NULL, NULL) == FSDP_OK)
        memcpy(logits, lg, (size_t)B * T * c->padded_vocab_size * sizeof(float));
    CHECK_OK(gpt_backward(m, 1.0f));
    for (int ui = 0; ui <= c->n_layer; ui++)
        CHECK_OK(gt_gather_grad(e, fsdp_engine_unit(e, ui), &grads[ui]));
}

static void test_recompute_bitwise(fsdp_comm_t *comm, fsdp_dtype dt) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = dt;
    ec.seed = 42;
    fsdp_engine_t *e = NULL;
    gpt_model_t *m = NULL;
    gpt_config gc = small_config();
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    CHECK_OK(gpt_init(&m, e, &gc));
    CHECK_OK(fsdp_engine_init_params(e));
    const size_t nlog = (size_t)B * T * gc.padded_vocab_size;
    float loss[2], *logits[2] = {malloc(nlog * 4), malloc(nlog * 4)};
    float *grads[2][3] = {{0}};
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpt_set_recompute(m, r));
        fwd_bwd(e, m, &loss[r], logits[r], grads[r]);
    }
    CHECKF(memcmp(&loss[0], &loss[1], sizeof(float)) == 0, "%s: loss %.9g vs %.9g with recompute",
           fsdp_dtype_name(dt), loss[0], loss[1]);
    CHECK(memcmp(logits[0], logits[1], nlog * 4) == 0);
    for (int ui = 0; ui <= gc.n_layer; ui++) {
        fsdp_unit_t *u = fsdp_engine_unit(e, ui);
        int same = grads[0][ui] && grads[1][ui] &&
                   memcmp(grads[0][ui], grads[1][ui], fsdp_unit_padded_numel(u) * sizeof(float)) == 0;
        CHECKF(same, "%s: unit %s gradients differ with recompute", fsdp_dtype_name(dt), fsdp_unit_name(u));
        /* and they are real gradients, not zeros */
        double n2 = 0;
        for (size_t i = 0; grads[0][ui] && i < fsdp_unit_padded_numel(u); i++)
            n2 += grads[0][ui][i] * grads[0][ui][i];
        CHECK(n2 > 0 && isfinite(n2));
    }
    CHECK(isfinite(loss[0]) && loss[0] > 0);
    for (int r = 0; r < 2; r++) {
        free(logits[r]);
        for (int ui = 0; ui < 3; ui++)
            free(grads[r][ui]);
    }
    gpt_free(m);
    fsdp_engine_free(e);
}

static void test_config_and_misuse(fsdp_comm_t *comm) {
    gpt_config c = small_config();
    CHECK_OK(gpt_config_validate(&c));
    c.n_embd = 30; /* not a multiple of n_head 4 */
    CHECK_ERR(gpt_config_validate(&c), FSDP_EINVAL, "n_embd");
    c = small_config();
    c.padded_vocab_size = 10;
    CHECK_ERR(gpt_config_validate(&c), FSDP_EINVAL, "padded_vocab_size");
    c = small_config();
    c.n_layer = 0;
    CHECK_ERR(gpt_config_validate(&c), FSDP_EINVAL, "n_layer");
    c = small_config();
    c.padded_vocab_size = 0;
    CHECK_OK(gpt_config_validate(&c));
    /* the default config is GPT-2 124M: 124,475,904 parameters with the 50304-row padded vocab
     * (124,439,808 with V rows, the figure usually quoted) */
    gpt_config d = gpt_config_default();
    size_t expect = 50304 * 768 + 1024 * 768 + 2 * 768 +
                    12 * (size_t)(2 * 768 + 3 * 768 * 768 + 3 * 768 + 768 * 768 + 768 + 2 * 768 +
                                  4 * 768 * 768 + 4 * 768 + 4 * 768 * 768 + 768);
    CHECK(gpt_num_params(&d) == expect);
    CHECK(gpt_num_params(&d) - (size_t)(50304 - 50257) * 768 == 124439808u);

    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    fsdp_engine_t *e = NULL;
    gpt_model_t *m = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    c = small_config();
    CHECK_OK(gpt_init(&m, e, &c));
    CHECK_OK(fsdp_engine_init_params(e));
    CHECK(fsdp_engine_num_units(e) == 3);
    CHECK(gpt_root_unit(m) == fsdp_engine_unit(e, 0) && gpt_block_unit(m, 1) == fsdp_engine_unit(e, 2));
    CHECK(gpt_block_unit(m, 2) == NULL);
    size_t param_total = 0;
    for (int i = 0; i < 3; i++) {
        fsdp_unit_t *u = fsdp_engine_unit(e, i);
        for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
            if (ti.alias_of < 0) param_total += ti.numel;
        }
    }
    CHECK(param_total == gpt_num_params(&c));

    int tok[B * T], tgt[B * T];
    batch(tok, tgt, c.vocab_size);
    const float *lg;
    CHECK_ERR(gpt_logits(m, &lg, NULL, NULL, NULL), FSDP_ESTATE, "gpt_forward");
    CHECK_ERR(gpt_backward(m, 1.0f), FSDP_ESTATE, "targets");
    tok[5] = c.vocab_size; /* out of the vocabulary */
    CHECK_ERR(gpt_forward(m, tok, tgt, B, T, NULL), FSDP_EINVAL, "tokens[5]");
    batch(tok, tgt, c.vocab_size);
    CHECK_ERR(gpt_forward(m, tok, tgt, B, c.max_seq_len + 1, NULL), FSDP_EINVAL, "max_seq_len");

    /* activations: tracked, and recompute needs fewer of them */
    size_t act0 = fsdp_mem_current(FSDP_MEM_ACTIVATION);
    float loss;
    CHECK_OK(gpt_forward(m, tok, tgt, B, T, &loss));
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) - act0 >= gpt_activation_bytes(&c, B, T));
    CHECK_ERR(gpt_set_recompute(m, 1), FSDP_ESTATE, "gpt_backward");
    CHECK_ERR(gpt_end_eval(m), FSDP_ESTATE, "gpt_backward");
    CHECK_OK(gpt_backward(m, 1.0f));
    CHECK_ERR(gpt_backward(m, 1.0f), FSDP_ESTATE, "already");
    gpt_config cr = c;
    cr.recompute = 1;
    CHECK(gpt_activation_bytes(&cr, B, T) < gpt_activation_bytes(&c, B, T));

    /* inference: logits only, then the root's parameters are released */
    CHECK_OK(gpt_forward(m, tok, NULL, 1, 5, &loss));
    CHECK(isnan(loss));
    int lb, lt, lvp;
    CHECK_OK(gpt_logits(m, &lg, &lb, &lt, &lvp));
    CHECK(lb == 1 && lt == 5 && lvp == 64);
    CHECK_ERR(gpt_backward(m, 1.0f), FSDP_ESTATE, "targets");
    size_t full_before = fsdp_mem_current(FSDP_MEM_PARAM_FULL);
    CHECK(full_before > 0);
    CHECK_OK(gpt_end_eval(m));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0);
    gpt_free(m);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATION) == act0);
    fsdp_engine_free(e);
    gpt_free(NULL);
}

static void write_file(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void test_fixture_reader(void) {
    gpt_fixture fx;
    const char *good = FSDP_SOURCE_DIR "/tests/model/gpt2_tiny.bin";
    CHECK_OK(gpt_fixture_load(good, &fx));
    const gpt_fixture_record *r;
    CHECK_OK(gpt_fixture_find(&fx, "w.root.wte", FX_BF16, (size_t)fx.Vp * fx.C, &r));
    CHECK_ERR(gpt_fixture_find(&fx, "w.root.wte", FX_F32, 0, &r), FSDP_EINVAL, "dtype");
    CHECK_ERR(gpt_fixture_find(&fx, "nope", -1, 0, &r), FSDP_EINVAL, "no record");
    /* the recorded size of the blob, to corrupt copies of it */
    size_t size = GPT_FIXTURE_HEADER_BYTES;
    for (int i = 0; i < fx.n_records; i++)
        size += GPT_FIXTURE_REC_HEADER_BYTES + fx.recs[i].numel * gpt_fixture_dtype_size(fx.recs[i].dtype);
    unsigned char *copy = malloc(size + 8);
    CHECK(copy != NULL);
    if (!copy) return;
    memcpy(copy, fx.blob, size);
    gpt_fixture_free(&fx);
    const char *tmp = FSDP_BINARY_DIR "/tests/gpt_fixture_corrupt.bin";
    gpt_fixture bad;

    write_file(tmp, copy, size - 10);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "truncated");
    write_file(tmp, copy, 100);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "header");
    memset(copy + size, 0, 8);
    write_file(tmp, copy, size + 8);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "trailing");
    copy[4] = 9; /* version */
    write_file(tmp, copy, size);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "version");
    copy[4] = 1;
    copy[0] ^= 0xff; /* magic */
    write_file(tmp, copy, size);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "magic");
    copy[0] ^= 0xff;
    int32_t huge = 1 << 29; /* first record's shape[0] */
    memcpy(copy + GPT_FIXTURE_HEADER_BYTES + 40, &huge, 4);
    write_file(tmp, copy, size);
    CHECK_ERR(gpt_fixture_load(tmp, &bad), FSDP_EFORMAT, "record 0");
    CHECK_ERR(gpt_fixture_load(FSDP_BINARY_DIR "/tests/no_such_fixture.bin", &bad), FSDP_EIO, "cannot open");
    gpt_fixture_free(&bad);
    remove(tmp);
    free(copy);
}

int main(void) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_comm_init(&comm, &cc, NULL, NULL));
    if (!comm) return TEST_MAIN_END();
    /* both attention implementations (kernels.h); mixed: each GEMM path, then whatever auto picks here */
    const fsdp_att_impl impls[2] = {FSDP_ATT_BLOCKED, FSDP_ATT_GEMM};
    static const fsdp_mixed_compute mc[] = {FSDP_MIXED_COMPUTE_BF16, FSDP_MIXED_COMPUTE_F32,
                                            FSDP_MIXED_COMPUTE_AUTO};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(fsdp_attention_force_impl(impls[i]));
        test_recompute_bitwise(comm, FSDP_F32);
        for (int j = 0; j < 3; j++) {
            CHECK_OK(fsdp_gemm_set_mixed_compute(mc[j]));
            test_recompute_bitwise(comm, FSDP_BF16);
        }
    }
    CHECK_OK(fsdp_attention_force_impl(FSDP_ATT_AUTO));
    test_config_and_misuse(comm);
    test_fixture_reader();
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
