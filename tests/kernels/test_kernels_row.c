/* test_kernels_row.c — the kernels table (kernels.h, fsdp_kernels; issue 35 item 3): fsdp_kctx_init
 * gives the CPU row for the CPU (and NULL) and for the simulated device, and refuses a device no row
 * runs on, naming it; every entry of the CPU row is wired to the kernel of its name: on the same inputs
 * each writes the same bytes as the direct call (a swapped or missing entry differs or crashes). The
 * kernels' numerics themselves are checked against float64 references in the other tests here. */
#include "kernels/kernels.h"

#include "test_util.h"

#include <stdint.h>

enum { B = 2, T = 5, C = 8, NH = 2, V = 11, VP = 16, N = B * T };

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffff) / 32768.0f - 1.0f;
}
static void fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = urand();
}

/* Two output buffers per call (row, direct) poisoned alike; equal bytes afterwards. */
#define SAME(a, b, n) CHECKF(memcmp((a), (b), (n) * sizeof *(a)) == 0, "%s: row and direct call differ", #a)

static float A1[4096], A2[4096], G1[4096], G2[4096], S1[512], S2[512];

static void poison(void) {
    for (int i = 0; i < 4096; i++)
        A1[i] = A2[i] = G1[i] = G2[i] = -7.0f;
    for (int i = 0; i < 512; i++)
        S1[i] = S2[i] = -7.0f;
}

int main(void) {
    fsdp_kctx x;
    CHECK_ERR(fsdp_kctx_init(NULL, NULL, NULL), FSDP_EINVAL, "NULL");
    CHECK_OK(fsdp_kctx_init(&x, NULL, NULL));
    CHECK(x.k == fsdp_kernels_cpu() && x.dev == fsdp_device_cpu() && x.stream == NULL);
    CHECK(strcmp(x.k->name, "cpu") == 0 && (x.k->flags & FSDP_KERN_HOST));
    fsdp_device_t *sim = NULL;
    CHECK_OK(fsdp_device_sim_create(3, 0, &sim));
    fsdp_kctx xs;
    CHECK_OK(fsdp_kctx_init(&xs, sim, NULL));
    CHECK(xs.k == fsdp_kernels_cpu() && xs.dev == sim);
    fsdp_device_sim_destroy(sim);
    fsdp_device_t fake = *fsdp_device_cpu();
    fake.name = "gpu-test";
    CHECK_ERR(fsdp_kctx_init(&xs, &fake, NULL), FSDP_EUNSUPPORTED, "gpu-test");

    const fsdp_kernels *k = x.k;
    float in[N * 3 * C], w[4 * C * C], bias[4 * C], dout[N * 4 * C], qkv[N * 3 * C], inv[C / 2];
    int tok[N], pos[N], tgt[N];
    int32_t doc[N];
    fill(in, sizeof in / sizeof *in);
    fill(w, sizeof w / sizeof *w);
    fill(bias, sizeof bias / sizeof *bias);
    fill(dout, sizeof dout / sizeof *dout);
    fill(qkv, sizeof qkv / sizeof *qkv);
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 5) % V;
        pos[i] = i % T;
        tgt[i] = i == 3 ? FSDP_IGNORE_INDEX : (i * 7) % V;
        doc[i] = i % T < 2 ? 0 : 1;
    }
    CHECK_OK(fsdp_rope_inv_freq(inv, C, 10000.0, NULL));

    poison();
    CHECK_OK(k->matmul_forward(&x, A1, in, w, bias, FSDP_F32, N, C, 2 * C));
    CHECK_OK(fsdp_matmul_forward(A2, in, w, bias, FSDP_F32, N, C, 2 * C));
    SAME(A1, A2, N * 2 * C);
    poison();
    CHECK_OK(k->matmul_backward(&x, A1, 0, G1, 0, S1, 0, dout, in, w, FSDP_F32, N, C, 2 * C));
    CHECK_OK(fsdp_matmul_backward(A2, 0, G2, 0, S2, 0, dout, in, w, FSDP_F32, N, C, 2 * C));
    SAME(A1, A2, N * C);
    SAME(G1, G2, 2 * C * C);
    SAME(S1, S2, 2 * C);
    poison();
    CHECK_OK(k->encoder_forward_pos(&x, A1, tok, pos, w, bias, FSDP_F32, B, T, C / 2, V, T));
    CHECK_OK(fsdp_encoder_forward_pos(A2, tok, pos, w, bias, FSDP_F32, B, T, C / 2, V, T));
    SAME(A1, A2, N * C / 2);
    poison();
    CHECK_OK(k->encoder_backward_pos(&x, G1, 0, S1, 0, dout, tok, pos, B, T, C, V, T));
    CHECK_OK(fsdp_encoder_backward_pos(G2, 0, S2, 0, dout, tok, pos, B, T, C, V, T));
    SAME(G1, G2, V * C);
    SAME(S1, S2, T * C);
    poison();
    CHECK_OK(k->layernorm_forward(&x, A1, S1, S1 + N, in, w, bias, FSDP_F32, N, C));
    CHECK_OK(fsdp_layernorm_forward(A2, S2, S2 + N, in, w, bias, FSDP_F32, N, C));
    SAME(A1, A2, N * C);
    SAME(S1, S2, 2 * N);
    CHECK_OK(k->layernorm_backward(&x, G1, 0, G1 + N * C, G1 + N * C + C, 0, dout, in, w, FSDP_F32, S1,
                                   S1 + N, N, C));
    CHECK_OK(fsdp_layernorm_backward(G2, 0, G2 + N * C, G2 + N * C + C, 0, dout, in, w, FSDP_F32, S2, S2 + N,
                                     N, C));
    SAME(G1, G2, N * C + 2 * C);
    poison();
    CHECK_OK(k->gelu_forward(&x, A1, in, N * C));
    CHECK_OK(fsdp_gelu_forward(A2, in, N * C));
    SAME(A1, A2, N * C);
    CHECK_OK(k->gelu_backward(&x, G1, in, dout, N * C));
    CHECK_OK(fsdp_gelu_backward(G2, in, dout, N * C));
    SAME(G1, G2, N * C);
    CHECK_OK(k->residual_forward(&x, A1, in, dout, N * C));
    CHECK_OK(fsdp_residual_forward(A2, in, dout, N * C));
    SAME(A1, A2, N * C);
    poison();
    CHECK_OK(k->attention_forward_doc(&x, A1, NULL, G1, qkv, doc, B, T, C, NH));
    CHECK_OK(fsdp_attention_forward_doc(A2, NULL, G2, qkv, doc, B, T, C, NH));
    SAME(A1, A2, N * C);
    SAME(G1, G2, B * NH * T * T);
    CHECK_OK(k->attention_backward(&x, S1, dout, qkv, G1, B, T, C, NH));
    CHECK_OK(fsdp_attention_backward(S2, dout, qkv, G2, B, T, C, NH));
    SAME(S1, S2, N * 3 * C);
    poison();
    /* GQA: 2 query heads over 1 KV head of 4: qkv rows of (2 + 2) * 4 floats */
    CHECK_OK(k->attention_gqa_forward(&x, A1, S1, qkv, doc, B, T, 2, 1, 4));
    CHECK_OK(fsdp_attention_gqa_forward(A2, S2, qkv, doc, B, T, 2, 1, 4));
    SAME(A1, A2, N * 8);
    SAME(S1, S2, B * 2 * T);
    CHECK_OK(k->attention_gqa_backward(&x, G1, dout, qkv, S1, doc, B, T, 2, 1, 4));
    CHECK_OK(fsdp_attention_gqa_backward(G2, dout, qkv, S2, doc, B, T, 2, 1, 4));
    SAME(G1, G2, N * 16);
    poison();
    CHECK_OK(
        k->decode_attention(&x, A1, C, qkv, 3 * C, in, in + C, 2 * C, G1, 1, 2, 2, NH, NH, C / NH, 0.5f, T));
    CHECK_OK(
        fsdp_decode_attention(A2, C, qkv, 3 * C, in, in + C, 2 * C, G2, 1, 2, 2, NH, NH, C / NH, 0.5f, T));
    SAME(A1, A2, 2 * C);
    poison();
    CHECK_OK(k->rmsnorm_forward(&x, A1, C, S1, in, C, w, FSDP_F32, N, C, 1e-6f));
    CHECK_OK(fsdp_rmsnorm_forward(A2, C, S2, in, C, w, FSDP_F32, N, C, 1e-6f));
    SAME(A1, A2, N * C);
    SAME(S1, S2, N);
    CHECK_OK(k->rmsnorm_backward(&x, G1, C, 0, G1 + N * C, 0, dout, C, in, C, w, FSDP_F32, S1, N, C));
    CHECK_OK(fsdp_rmsnorm_backward(G2, C, 0, G2 + N * C, 0, dout, C, in, C, w, FSDP_F32, S2, N, C));
    SAME(G1, G2, N * C + C);
    poison();
    CHECK_OK(k->head_rmsnorm_forward(&x, A1, C, S1, in, C, w, FSDP_F32, N, 2, 4, 1e-6f));
    CHECK_OK(fsdp_head_rmsnorm_forward(A2, C, S2, in, C, w, FSDP_F32, N, 2, 4, 1e-6f));
    SAME(A1, A2, N * C);
    SAME(S1, S2, 2 * N);
    CHECK_OK(k->head_rmsnorm_backward(&x, G1, C, 0, G1 + N * C, 0, dout, C, in, C, w, FSDP_F32, S1, N, 2, 4));
    CHECK_OK(fsdp_head_rmsnorm_backward(G2, C, 0, G2 + N * C, 0, dout, C, in, C, w, FSDP_F32, S2, N, 2, 4));
    SAME(G1, G2, N * C + 4);
    memcpy(A1, in, sizeof in);
    memcpy(A2, in, sizeof in);
    CHECK_OK(k->rope_forward(&x, A1, 3 * C, pos, inv, N, 2, C));
    CHECK_OK(fsdp_rope_forward(A2, 3 * C, pos, inv, N, 2, C));
    SAME(A1, A2, N * 3 * C);
    CHECK_OK(k->rope_backward(&x, A1, 3 * C, pos, inv, N, 2, C));
    CHECK_OK(fsdp_rope_backward(A2, 3 * C, pos, inv, N, 2, C));
    SAME(A1, A2, N * 3 * C);
    poison();
    CHECK_OK(k->swiglu_forward(&x, A1, in, N, C));
    CHECK_OK(fsdp_swiglu_forward(A2, in, N, C));
    SAME(A1, A2, N * C);
    CHECK_OK(k->swiglu_backward(&x, G1, dout, in, N, C));
    CHECK_OK(fsdp_swiglu_backward(G2, dout, in, N, C));
    SAME(G1, G2, N * 2 * C);
    poison();
    float logits[N * VP], m1 = 0, m2 = 0;
    int n1 = 0, n2 = 0;
    fill(logits, N * VP);
    CHECK_OK(k->softmax_crossentropy_count(&x, S1, &m1, &n1, A1, logits, tgt, N, V, VP, 0.1f));
    CHECK_OK(fsdp_softmax_crossentropy_count(S2, &m2, &n2, A2, logits, tgt, N, V, VP, 0.1f));
    SAME(S1, S2, N);
    SAME(A1, A2, N * VP);
    CHECK(m1 == m2 && n1 == n2 && n1 == N - 1);
    CHECK_OK(k->softmax_forward(&x, G1, logits, N, V, VP, 0.7f));
    CHECK_OK(fsdp_softmax_forward(G2, logits, N, V, VP, 0.7f));
    SAME(G1, G2, N * VP);

    fsdp_gemm_mixed_choice c1 = {0}, c2 = {0};
    CHECK_OK(k->gemm_choice(&x, &c1));
    CHECK_OK(fsdp_gemm_mixed_choice_get(&c2));
    CHECK(c1.path == c2.path);
    fsdp_gemm_peak_result pk = {0};
    CHECK_OK(k->gemm_peak(&x, FSDP_F32, 0.02, &pk));
    CHECK(pk.gflops > 0 && pk.reps >= 1);
    fsdp_kernels_shutdown();
    return TEST_MAIN_END();
}
