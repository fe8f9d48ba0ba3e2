/* test_perf.c — the trainer's speed figures: each family's flops_per_token against a count written
 * here from the model's GEMM shapes (every linear layer as an M x K x N product of its own, attention
 * as score and value products over the keys each query sees), the MFU arithmetic, the GEMM peak probe
 * (bounded, releases its workspace), and the outlier guard's window (z-scores against a float64
 * recomputation, filling, non-finite values, a constant window). No wall-clock assertion. */
#include "test_util.h"

#include "fsdp.h"
#include "fsdp_model.h"
#include "kernels/kernels.h"
#include "train/perf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 2 M K N FLOPs for out[M,N] = in[M,K] W[N,K]^T; backward (dinp and wgrad) twice that. */
static double gemm3(double M, double K, double N) { return 3.0 * 2.0 * M * K * N; }

/* GPT-2 over one T-long sequence: per block c_attn C->3C, attn c_proj C->C, c_fc C->4C, mlp c_proj
 * 4C->C; the tied LM head C->Vp (the padded vocabulary: the GEMM runs over it); attention forward
 * q.k^T and p.v over the full T x T square per head (the convention gpt2 documents: PaLM's), backward
 * twice. Per token. */
static double gpt2_count(int L, int C, int NH, int V, int T) {
    double Vp = (V + 127) / 128 * 128, hs = (double)C / NH, tok = T, f = 0;
    for (int l = 0; l < L; l++) {
        f += gemm3(tok, C, 3.0 * C) + gemm3(tok, C, C) + gemm3(tok, C, 4.0 * C) + gemm3(tok, 4.0 * C, C);
        for (int h = 0; h < NH; h++)
            f += 3.0 * (2.0 * T * T * hs + 2.0 * T * T * hs);
    }
    f += gemm3(tok, C, Vp);
    return f / tok;
}

/* Llama over one T-long sequence: per block q (C -> NH hd), k and v (C -> NKV hd each), o (NH hd ->
 * C), gate and up (C -> I each), down (I -> C); the head C -> Vp; causal attention: query i sees
 * i + 1 keys, each costing 2 hd (score) + 2 hd (value) per head forward, backward twice. Per token. */
static double llama_count(int L, int C, int NH, int NKV, int hd, int I, int Vp, int T) {
    double tok = T, f = 0;
    for (int l = 0; l < L; l++) {
        f += gemm3(tok, C, (double)NH * hd) + 2 * gemm3(tok, C, (double)NKV * hd) +
             gemm3(tok, (double)NH * hd, C);
        f += 2 * gemm3(tok, C, I) + gemm3(tok, I, C);
        for (int i = 0; i < T; i++)
            f += 3.0 * NH * (i + 1) * 4.0 * hd;
    }
    f += gemm3(tok, C, Vp);
    return f / tok;
}

static void close_rel(double got, double want, const char *what) {
    CHECKF(fabs(got - want) <= 1e-12 * fabs(want), "%s: flops_per_token %.17g, counted %.17g", what, got,
           want);
}

static void test_flops(void) {
    fsdp_model_config c;
    /* GPT-2 124M's shape at T 1024 and a tiny one at T 1 and 32 */
    CHECK_OK(fsdp_model_config_init(&c, "gpt2"));
    c.n_layer = 12, c.n_embd = 768, c.n_head = 12, c.vocab_size = 50257, c.max_seq_len = 1024;
    close_rel(fsdp_model_flops_per_token(&c, 1024), gpt2_count(12, 768, 12, 50257, 1024), "gpt2 124M");
    c.n_layer = 2, c.n_embd = 32, c.n_head = 2, c.vocab_size = 257, c.max_seq_len = 64;
    for (int T = 1; T <= 64; T *= 2)
        close_rel(fsdp_model_flops_per_token(&c, T), gpt2_count(2, 32, 2, 257, T), "gpt2 tiny");
    /* Llama: SmolLM2-135M-like (GQA 9/3, tied), and an untied MHA one with its own padded vocabulary */
    CHECK_OK(fsdp_model_config_init(&c, "llama"));
    c.n_layer = 30, c.n_embd = 576, c.n_head = 9, c.n_kv_head = 3, c.head_dim = 64, c.intermediate = 1536;
    c.vocab_size = 49152, c.padded_vocab_size = 49152, c.max_seq_len = 2048, c.tie_embeddings = 1;
    CHECK_OK(fsdp_model_config_validate(&c));
    close_rel(fsdp_model_flops_per_token(&c, 2048), llama_count(30, 576, 9, 3, 64, 1536, 49152, 2048),
              "llama smollm2");
    c.n_layer = 3, c.n_embd = 48, c.n_head = 4, c.n_kv_head = 4, c.head_dim = 16, c.intermediate = 80;
    c.vocab_size = 300, c.padded_vocab_size = 0, c.max_seq_len = 40, c.tie_embeddings = 0;
    CHECK_OK(fsdp_model_config_validate(&c));
    for (int T = 1; T <= 40; T += 13)
        close_rel(fsdp_model_flops_per_token(&c, T), llama_count(3, 48, 4, 4, 16, 80, 384, T), "llama tiny");
    CHECK(fsdp_model_flops_per_token(&c, 0) == 0);
}

static void test_mfu(void) {
    /* 1e6 FLOPs/token x 4096 tokens in 0.5 s = 8.192 GFLOP/s; of a 100 GFLOP/s peak: 8.192% */
    CHECK(fabs(fsdp_train_model_flops(1e6, 4096, 0.5) - 8.192e9) < 1e-3);
    CHECK(fabs(fsdp_train_mfu(1e6, 4096, 0.5, 100e9) - 0.08192) < 1e-15);
    CHECK(fsdp_train_mfu(1e6, 4096, 0.5, 0) == 0 && fsdp_train_mfu(1e6, 4096, 0, 1e9) == 0);
    CHECK(fsdp_train_model_flops(-1, 4096, 0.5) == 0);
}

static void test_peak(void) {
    fsdp_gemm_peak_result pk;
    CHECK_ERR(fsdp_gemm_peak(FSDP_I32, 0.1, &pk), FSDP_EINVAL, "gemm peak");
    CHECK_ERR(fsdp_gemm_peak(FSDP_F32, 0, &pk), FSDP_EINVAL, "budget");
    for (int d = 0; d < 2; d++) {
        size_t before = fsdp_mem_current(FSDP_MEM_OTHER);
        CHECK_OK(fsdp_gemm_peak(d ? FSDP_BF16 : FSDP_F32, 0.2, &pk));
        CHECK(pk.reps >= 1 && pk.reps <= 16 && (pk.size == 512 || pk.size == 1024));
        CHECK(pk.gflops > 0 && pk.best_s > 0 && pk.best_s <= pk.total_s);
        CHECKF(fabs(pk.gflops - 2.0 * pk.size * (double)pk.size * pk.size / pk.best_s / 1e9) <
                   1e-9 * pk.gflops,
               "gflops %g from best %g s at %d", pk.gflops, pk.best_s, pk.size);
        /* nothing tracked is left behind: the GEMM workspace is released */
        CHECK(fsdp_mem_current(FSDP_MEM_OTHER) == before);
    }
}

static double ref_z(const double *v, int n, double x) {
    double m = 0, q = 0;
    for (int i = 0; i < n; i++)
        m += v[i];
    m /= n;
    for (int i = 0; i < n; i++)
        q += (v[i] - m) * (v[i] - m);
    return (x - m) / sqrt(q / n);
}

static void test_outlier(void) {
    fsdp_outlier *o = malloc(sizeof *o);
    CHECK(o != NULL);
    CHECK_ERR(fsdp_outlier_init(o, 1), FSDP_EINVAL, "--skip-update-window");
    CHECK_ERR(fsdp_outlier_init(o, FSDP_OUTLIER_MAX_WINDOW + 1), FSDP_EINVAL, "--skip-update-window");
    CHECK_OK(fsdp_outlier_init(o, 5));
    double loss[12], norm[12];
    for (int i = 0; i < 12; i++) {
        loss[i] = 3.0 - 0.1 * i + 0.01 * (i % 3);
        norm[i] = 1.0 + 0.05 * ((i * 7) % 5);
    }
    for (int i = 0; i < 12; i++) {
        double zl = fsdp_outlier_z(o, 0, loss[i]), zn = fsdp_outlier_z(o, 1, norm[i]);
        if (i < 5) {
            CHECK(isnan(zl) && isnan(zn)); /* the window fills first */
        } else {
            CHECKF(fabs(zl - ref_z(loss + i - 5, 5, loss[i])) < 1e-12, "step %d z_loss %g", i, zl);
            CHECKF(fabs(zn - ref_z(norm + i - 5, 5, norm[i])) < 1e-12, "step %d z_norm %g", i, zn);
        }
        fsdp_outlier_push(o, loss[i], norm[i]);
    }
    /* a spike far above the window's values; non-finite values neither score nor enter the window */
    CHECK(fsdp_outlier_z(o, 0, 100.0) > 100);
    CHECK(isnan(fsdp_outlier_z(o, 1, NAN)) && isnan(fsdp_outlier_z(o, 0, INFINITY)));
    fsdp_outlier_push(o, NAN, 1.0);
    fsdp_outlier_push(o, 1.0, INFINITY);
    CHECK(fabs(fsdp_outlier_z(o, 0, loss[11]) - ref_z(loss + 7, 5, loss[11])) < 1e-12);
    CHECK(isnan(fsdp_outlier_z(o, 2, 1.0)));
    /* a constant window */
    CHECK_OK(fsdp_outlier_init(o, 3));
    for (int i = 0; i < 3; i++)
        fsdp_outlier_push(o, 2.0, 1.0);
    CHECK(fsdp_outlier_z(o, 0, 2.0) == 0 && fsdp_outlier_z(o, 0, 2.5) == INFINITY);
    free(o);
}

int main(void) {
    test_flops();
    test_mfu();
    test_peak();
    test_outlier();
    return TEST_MAIN_END();
}
