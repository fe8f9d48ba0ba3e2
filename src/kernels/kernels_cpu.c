/* kernels_cpu.c — the CPU row of the kernels table (kernels.h): each entry is the kernel of the same
 * name, run on the calling thread at the call; the context's stream, handle and workspace are unused
 * (oneDNN's engine, stream, cache and workspace are process-wide, gemm.c). And the list of rows that
 * fsdp_kctx_init picks from by the device's name. */
#include "kernels/kernels.h"

#include <string.h>

static fsdp_status cpu_gemm_peak(const fsdp_kctx *x, fsdp_dtype pdt, double budget_s,
                                 fsdp_gemm_peak_result *out) {
    (void)x;
    return fsdp_gemm_peak(pdt, budget_s, out);
}

static fsdp_status cpu_gemm_choice(const fsdp_kctx *x, fsdp_gemm_mixed_choice *out) {
    (void)x;
    return fsdp_gemm_mixed_choice_get(out);
}

static fsdp_status cpu_matmul_forward(const fsdp_kctx *x, float *out, const float *inp, const void *weight,
                                      const void *bias, fsdp_dtype pdt, int M, int K, int N) {
    (void)x;
    return fsdp_matmul_forward(out, inp, weight, bias, pdt, M, K, N);
}

static fsdp_status cpu_matmul_backward(const fsdp_kctx *x, float *dinp, int dinp_acc, float *dweight,
                                       int dweight_acc, float *dbias, int dbias_acc, const float *dout,
                                       const float *inp, const void *weight, fsdp_dtype pdt, int M, int K,
                                       int N) {
    (void)x;
    return fsdp_matmul_backward(dinp, dinp_acc, dweight, dweight_acc, dbias, dbias_acc, dout, inp, weight,
                                pdt, M, K, N);
}

static fsdp_status cpu_encoder_forward_pos(const fsdp_kctx *x, float *out, const int *tokens, const int *pos,
                                           const void *wte, const void *wpe, fsdp_dtype pdt, int B, int T,
                                           int C, int Vrows, int maxT) {
    (void)x;
    return fsdp_encoder_forward_pos(out, tokens, pos, wte, wpe, pdt, B, T, C, Vrows, maxT);
}

static fsdp_status cpu_encoder_backward_pos(const fsdp_kctx *x, float *dwte, int dwte_acc, float *dwpe,
                                            int dwpe_acc, const float *dout, const int *tokens,
                                            const int *pos, int B, int T, int C, int Vrows, int maxT) {
    (void)x;
    return fsdp_encoder_backward_pos(dwte, dwte_acc, dwpe, dwpe_acc, dout, tokens, pos, B, T, C, Vrows, maxT);
}

static fsdp_status cpu_layernorm_forward(const fsdp_kctx *x, float *out, float *mean, float *rstd,
                                         const float *inp, const void *weight, const void *bias,
                                         fsdp_dtype pdt, int N, int C) {
    (void)x;
    return fsdp_layernorm_forward(out, mean, rstd, inp, weight, bias, pdt, N, C);
}

static fsdp_status cpu_layernorm_backward(const fsdp_kctx *x, float *dinp, int dinp_acc, float *dweight,
                                          float *dbias, int dparam_acc, const float *dout, const float *inp,
                                          const void *weight, fsdp_dtype pdt, const float *mean,
                                          const float *rstd, int N, int C) {
    (void)x;
    return fsdp_layernorm_backward(dinp, dinp_acc, dweight, dbias, dparam_acc, dout, inp, weight, pdt, mean,
                                   rstd, N, C);
}

static fsdp_status cpu_gelu_forward(const fsdp_kctx *x, float *out, const float *inp, size_t n) {
    (void)x;
    return fsdp_gelu_forward(out, inp, n);
}

static fsdp_status cpu_gelu_backward(const fsdp_kctx *x, float *dinp, const float *inp, const float *dout,
                                     size_t n) {
    (void)x;
    return fsdp_gelu_backward(dinp, inp, dout, n);
}

static fsdp_status cpu_residual_forward(const fsdp_kctx *x, float *out, const float *a, const float *b,
                                        size_t n) {
    (void)x;
    return fsdp_residual_forward(out, a, b, n);
}

static fsdp_status cpu_attention_forward_doc(const fsdp_kctx *x, float *out, float *preatt, float *att,
                                             const float *qkv, const int32_t *doc, int B, int T, int C,
                                             int NH) {
    (void)x;
    return fsdp_attention_forward_doc(out, preatt, att, qkv, doc, B, T, C, NH);
}

static fsdp_status cpu_attention_backward(const fsdp_kctx *x, float *dqkv, const float *dout,
                                          const float *qkv, const float *att, int B, int T, int C, int NH) {
    (void)x;
    return fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
}

static fsdp_status cpu_attention_gqa_forward(const fsdp_kctx *x, float *out, float *lse, const float *qkv,
                                             const int32_t *doc, int B, int T, int H, int KV, int hd) {
    (void)x;
    return fsdp_attention_gqa_forward(out, lse, qkv, doc, B, T, H, KV, hd);
}

static fsdp_status cpu_attention_gqa_backward(const fsdp_kctx *x, float *dqkv, const float *dout,
                                              const float *qkv, const float *lse, const int32_t *doc, int B,
                                              int T, int H, int KV, int hd) {
    (void)x;
    return fsdp_attention_gqa_backward(dqkv, dout, qkv, lse, doc, B, T, H, KV, hd);
}

static fsdp_status cpu_decode_attention(const fsdp_kctx *x, float *out, int ld_out, const float *qkv,
                                        int ld_q, const float *K, const float *V, int ld_kv, float *att,
                                        int nthr, int n, int pos, int H, int KV, int hd, float scale,
                                        int Tmax) {
    (void)x;
    return fsdp_decode_attention(out, ld_out, qkv, ld_q, K, V, ld_kv, att, nthr, n, pos, H, KV, hd, scale,
                                 Tmax);
}

static fsdp_status cpu_rmsnorm_forward(const fsdp_kctx *x, float *out, int ld_out, float *rstd,
                                       const float *inp, int ld_in, const void *weight, fsdp_dtype pdt, int N,
                                       int C, float eps) {
    (void)x;
    return fsdp_rmsnorm_forward(out, ld_out, rstd, inp, ld_in, weight, pdt, N, C, eps);
}

static fsdp_status cpu_rmsnorm_backward(const fsdp_kctx *x, float *dinp, int ld_dinp, int dinp_acc,
                                        float *dweight, int dweight_acc, const float *dout, int ld_dout,
                                        const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                        const float *rstd, int N, int C) {
    (void)x;
    return fsdp_rmsnorm_backward(dinp, ld_dinp, dinp_acc, dweight, dweight_acc, dout, ld_dout, inp, ld_in,
                                 weight, pdt, rstd, N, C);
}

static fsdp_status cpu_head_rmsnorm_forward(const fsdp_kctx *x, float *out, int ld_out, float *rstd,
                                            const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                            int N_tok, int n_heads, int hd, float eps) {
    (void)x;
    return fsdp_head_rmsnorm_forward(out, ld_out, rstd, inp, ld_in, weight, pdt, N_tok, n_heads, hd, eps);
}

static fsdp_status cpu_head_rmsnorm_backward(const fsdp_kctx *x, float *dinp, int ld_dinp, int dinp_acc,
                                             float *dweight, int dweight_acc, const float *dout, int ld_dout,
                                             const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                             const float *rstd, int N_tok, int n_heads, int hd) {
    (void)x;
    return fsdp_head_rmsnorm_backward(dinp, ld_dinp, dinp_acc, dweight, dweight_acc, dout, ld_dout, inp,
                                      ld_in, weight, pdt, rstd, N_tok, n_heads, hd);
}

static fsdp_status cpu_rope_forward(const fsdp_kctx *x, float *xs, int ld, const int *pos,
                                    const float *inv_freq, int N_tok, int n_heads, int hd) {
    (void)x;
    return fsdp_rope_forward(xs, ld, pos, inv_freq, N_tok, n_heads, hd);
}

static fsdp_status cpu_rope_backward(const fsdp_kctx *x, float *dx, int ld, const int *pos,
                                     const float *inv_freq, int N_tok, int n_heads, int hd) {
    (void)x;
    return fsdp_rope_backward(dx, ld, pos, inv_freq, N_tok, n_heads, hd);
}

static fsdp_status cpu_swiglu_forward(const fsdp_kctx *x, float *out, const float *gu, int N, int I) {
    (void)x;
    return fsdp_swiglu_forward(out, gu, N, I);
}

static fsdp_status cpu_swiglu_backward(const fsdp_kctx *x, float *dgu, const float *dout, const float *gu,
                                       int N, int I) {
    (void)x;
    return fsdp_swiglu_backward(dgu, dout, gu, N, I);
}

static fsdp_status cpu_softmax_crossentropy_count(const fsdp_kctx *x, float *losses, float *mean_loss,
                                                  int *n_counted, float *dlogits, const float *logits,
                                                  const int *targets, int N, int V, int Vp, float dloss) {
    (void)x;
    return fsdp_softmax_crossentropy_count(losses, mean_loss, n_counted, dlogits, logits, targets, N, V, Vp,
                                           dloss);
}

static fsdp_status cpu_softmax_forward(const fsdp_kctx *x, float *probs, const float *logits, int N, int V,
                                       int Vp, float temperature) {
    (void)x;
    return fsdp_softmax_forward(probs, logits, N, V, Vp, temperature);
}

static const fsdp_kernels cpu_row = {
    .name = "cpu",
    .flags = FSDP_KERN_HOST,
    .gemm_peak = cpu_gemm_peak,
    .gemm_choice = cpu_gemm_choice,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .encoder_forward_pos = cpu_encoder_forward_pos,
    .encoder_backward_pos = cpu_encoder_backward_pos,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .attention_forward_doc = cpu_attention_forward_doc,
    .attention_backward = cpu_attention_backward,
    .attention_gqa_forward = cpu_attention_gqa_forward,
    .attention_gqa_backward = cpu_attention_gqa_backward,
    .decode_attention = cpu_decode_attention,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .head_rmsnorm_forward = cpu_head_rmsnorm_forward,
    .head_rmsnorm_backward = cpu_head_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .softmax_crossentropy_count = cpu_softmax_crossentropy_count,
    .softmax_forward = cpu_softmax_forward,
};

const fsdp_kernels *fsdp_kernels_cpu(void) { return &cpu_row; }

/* The rows, by the name of the device they run on. The simulated device (tests) holds host memory and
 * has its compute stream caught up before the engine hands out a view: the CPU row runs there. */
static const struct {
    const char *device;
    const fsdp_kernels *row;
} rows[] = {{"cpu", &cpu_row}, {"sim", &cpu_row}};

fsdp_status fsdp_kctx_init(fsdp_kctx *x, fsdp_device_t *d, fsdp_stream_t *s) {
    if (x == NULL) return FSDP_ERR(FSDP_EINVAL, "kernel context is NULL");
    memset(x, 0, sizeof *x);
    if (d == NULL) d = fsdp_device_cpu();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (d->name != NULL && strcmp(d->name, rows[i].device) == 0) {
            x->k = rows[i].row;
            x->dev = d;
            x->stream = s;
            return FSDP_OK;
        }
    return FSDP_ERR(FSDP_EUNSUPPORTED, "no kernels run on device \"%s\" (rows: cpu, sim)",
                    d->name ? d->name : "(unnamed)");
}
