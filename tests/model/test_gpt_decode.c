/* test_gpt_decode.c — gpt_decode (the KV cache) against gpt_forward over the whole context: a prompt
 * prefilled at once, then one token at a time up to T_max; at every length the last position's logits
 * equal the full forward's (fp32: 1e-5 of the largest logit; mixed: 1e-3, bf16 GEMM inputs rounded in
 * other groupings), for fp32 and mixed engines. Plus the argument checks. */
#include "test_util.h"

#include "fsdp.h"
#include "model/gpt2/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double max_rel(const float *a, const float *b, int V) {
    double d = 0, mx = 0;
    for (int i = 0; i < V; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return d / (mx > 0 ? mx : 1);
}

/* LoRA (lora > 0): every B (zero at initialisation) set to small values, so the adapters count. */
static void lora_b_on(fsdp_engine_t *e) {
    unsigned seed = 5u;
    for (int i = 0; i < fsdp_engine_num_units(e); i++) {
        fsdp_unit_t *u = fsdp_engine_unit(e, i);
        for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
            if (strncmp(ti.name, "lora_b_", 7) != 0) continue;
            float *v = malloc(ti.numel * sizeof *v);
            for (size_t k = 0; v && k < ti.numel; k++) {
                seed = seed * 1103515245u + 12345u;
                v[k] = 0.1f * ((float)((seed >> 8) % 2001u) / 1000.0f - 1.0f);
            }
            CHECK(v != NULL);
            if (v) CHECK_OK(fsdp_unit_load_tensor(u, t, v, -1));
            free(v);
        }
    }
}

static void run(fsdp_comm_t *comm, fsdp_dtype dt, double tol, int lora) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = dt;
    ec.seed = 7;
    fsdp_engine_t *e = NULL;
    gpt_model_t *m = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    gpt_config gc = gpt_config_default();
    gc.n_layer = 2, gc.n_embd = 32, gc.n_head = 4, gc.vocab_size = 300, gc.padded_vocab_size = 0,
    gc.max_seq_len = 24;
    gc.lora_rank = lora; /* LoRA: decode adds every adapter as the forward does */
    CHECK_OK(gpt_init(&m, e, &gc));
    CHECK_OK(fsdp_engine_init_params(e));
    if (lora) lora_b_on(e);
    const int V = gc.vocab_size, T = gc.max_seq_len, P = 5;
    int toks[24];
    for (int i = 0; i < T; i++)
        toks[i] = (int)(((unsigned)i * 2654435761u + 12345u) % (unsigned)V);
    float ref[512];
    double worst = 0;
    for (int len = P; len <= T; len++) {
        const float *lg = NULL, *full = NULL;
        int Vp = 0;
        if (len == P)
            CHECK_OK(gpt_decode(m, toks, P, 0, &lg));
        else
            CHECK_OK(gpt_decode(m, toks + len - 1, 1, len - 1, &lg));
        if (!lg) break;
        memcpy(ref, lg, sizeof(float) * (size_t)V);
        CHECK_OK(gpt_forward(m, toks, NULL, 1, len, NULL));
        CHECK_OK(gpt_logits(m, &full, NULL, NULL, &Vp));
        worst = fmax(worst, max_rel(ref, full + (size_t)(len - 1) * (size_t)Vp, V));
    }
    CHECKF(worst <= tol, "%s lora %d: decode vs forward logits differ by %.3g of the largest (tol %g)",
           dt == FSDP_F32 ? "fp32" : "mixed", lora, worst, tol);
    fprintf(stderr, "%s lora %d: max |decode - forward| / max |logit| over lengths %d..%d = %.3g\n",
            dt == FSDP_F32 ? "fp32" : "mixed", lora, P, T, worst);
    /* Argument checks. */
    const float *lg = NULL;
    CHECK_ERR(gpt_decode(m, toks, 1, 3, &lg), FSDP_EINVAL, "cached");
    CHECK_ERR(gpt_decode(m, toks, T + 1, 0, &lg), FSDP_EINVAL, "max_seq_len");
    int badtok = V;
    CHECK_ERR(gpt_decode(m, &badtok, 1, 0, &lg), FSDP_EINVAL, "outside the vocabulary");
    CHECK_OK(gpt_end_eval(m));
    gpt_free(m);
    fsdp_engine_free(e);
}

int main(void) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    if (fsdp_comm_init(&comm, &cc, NULL, NULL) != FSDP_OK) return 1;
    run(comm, FSDP_F32, 1e-5, 0);
    run(comm, FSDP_BF16, 1e-3, 0);
    run(comm, FSDP_F32, 1e-5, 3);
    run(comm, FSDP_BF16, 1e-3, 2);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
