/* bench_gemm.c — measured GEMM throughput of the kernels layer on this machine: f32 and bf16 peak with a
 * large square matmul, the GEMMs of one GPT-2-124M step (B*T rows) for forward, dinp and the fused wgrad
 * into fp32 main_grad with beta 0 and beta 1 (the cost of accumulating), and the oneDNN ISA/impl in use.
 * Three paths: fp32 parameters ("f32"), bf16 parameters on bf16 GEMMs ("bf16", or "bf16-via-f32" where
 * oneDNN has no bf16 matmul) and bf16 parameters on the f32-compute path ("f32-compute").
 * Usage: bench_gemm [--reps R] [--rows BT] [--square S] [--widen-kib W]   (defaults 5, 256, 2048, the
 * library's block bound). Best-of-R timings, the ops of one shape interleaved. */
#include "kernels/kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reps = 5;

/* One step's GEMMs timed alone, per path (0 f32, 1 bf16, 2 f32-compute): the sum of the best fwd,
 * dinp and wgrad-beta0 times, each shape counted `step_mult` times (its layers), and their flops; and
 * each path's square peak. */
static double step_ms[3], step_gflop[3], square_gflops[3];
static int step_mult = 0, cur_path = 0;

typedef enum { OP_FWD = 0, OP_DINP, OP_WGRAD0, OP_WGRAD1 } op_kind;
static const char *op_name[] = {"fwd Y=XW^T", "dinp dX=dYW", "wgrad beta0", "wgrad beta1"};

/* Seconds of one run of `op`; -1 on failure (message printed). */
static double run_op(op_kind op, fsdp_dtype pdt, int M, int K, int N, float *X, float *Y, void *W, float *G) {
    double t0 = fsdp_time_s();
    fsdp_status s;
    switch (op) {
    case OP_FWD: s = fsdp_matmul_forward(Y, X, W, NULL, pdt, M, K, N); break;
    case OP_DINP: s = fsdp_matmul_backward(X, 0, NULL, 0, NULL, 0, Y, NULL, W, pdt, M, K, N); break;
    case OP_WGRAD0: s = fsdp_matmul_backward(NULL, 0, G, 0, NULL, 0, Y, X, NULL, pdt, M, K, N); break;
    default: s = fsdp_matmul_backward(NULL, 0, G, 1, NULL, 0, Y, X, NULL, pdt, M, K, N); break;
    }
    if (s != FSDP_OK) {
        fprintf(stderr, "bench_gemm: %s failed: %s\n", op_name[op], fsdp_last_error());
        return -1.0;
    }
    return fsdp_time_s() - t0;
}

static void sort_d(double *t, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
}

/* Runs every op for one shape and dtype, printing one row per op. */
static int bench_shape(const char *label, fsdp_dtype pdt, int M, int K, int N, const op_kind *ops, int nops) {
    const char *pname = fsdp_gemm_path_name(fsdp_gemm_path_for(pdt));
    size_t mk = (size_t)M * K, mn = (size_t)M * N, nk = (size_t)N * K;
    float *X = NULL, *Y = NULL, *G = NULL;
    void *W = NULL;
    int rc = 1;
    if (fsdp_mem_alloc((void **)&X, mk * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&Y, mn * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&G, nk * 4, FSDP_MEM_MAIN_GRAD) ||
        fsdp_mem_alloc(&W, nk * fsdp_dtype_size(pdt), FSDP_MEM_PARAM_FULL)) {
        fprintf(stderr, "bench_gemm: %s\n", fsdp_last_error());
        goto done;
    }
    for (size_t i = 0; i < mk; i++)
        X[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < mn; i++)
        Y[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
    for (size_t i = 0; i < nk; i++) {
        float v = (float)((i * 69069u) % 991) / 991.0f - 0.5f;
        G[i] = 0.0f;
        if (pdt == FSDP_BF16)
            ((fsdp_bf16 *)W)[i] = fsdp_f32_to_bf16(v);
        else
            ((float *)W)[i] = v;
    }
    double gflop = 2.0 * M * K * N / 1e9, best0 = 0;
    /* One warm-up run per op (primitive creation), then the ops interleaved rep by rep so that load
     * changes on a shared machine hit every op alike (beta0 vs beta1 in particular). */
    enum { MAXR = 64 };
    double t[4][MAXR];
    int r = reps < MAXR ? reps : MAXR;
    for (int i = -1; i < r; i++)
        for (int o = 0; o < nops; o++) {
            double s = run_op(ops[o], pdt, M, K, N, X, Y, W, G);
            if (s < 0) goto done;
            if (i >= 0) t[o][i] = s;
        }
    for (int o = 0; o < nops; o++) {
        sort_d(t[o], r);
        double best = t[o][0], med = t[o][r / 2];
        if (ops[o] == OP_WGRAD0) best0 = best;
        if (step_mult > 0 && ops[o] != OP_WGRAD1) {
            step_ms[cur_path] += step_mult * best * 1e3;
            step_gflop[cur_path] += step_mult * gflop;
        }
        if (step_mult == 0) square_gflops[cur_path] = gflop / best;
        printf("%-10s %-12s %5d %5d %5d  %-12s %9.3f %9.3f %8.1f", label, pname, M, K, N, op_name[ops[o]],
               best * 1e3, med * 1e3, gflop / best);
        if (ops[o] == OP_WGRAD1 && best0 > 0) printf("   beta1/beta0 = %.3f", best / best0);
        printf("\n");
    }
    rc = 0;
done:
    fsdp_mem_free(W);
    fsdp_mem_free(G);
    fsdp_mem_free(Y);
    fsdp_mem_free(X);
    return rc;
}

int main(int argc, char **argv) {
    int rows = 256, sq = 2048, widen_kib = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--square") && i + 1 < argc)
            sq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--widen-kib") && i + 1 < argc)
            widen_kib = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps R] [--rows B*T] [--square S] [--widen-kib W]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || rows < 1 || sq < 1 || widen_kib < 0) {
        fprintf(stderr, "bench_gemm: --reps, --rows and --square must be positive, --widen-kib >= 0\n");
        return 2;
    }
    fsdp_gemm_set_widen_bytes((size_t)widen_kib << 10);
    if (fsdp_kernels_init() != FSDP_OK) {
        fprintf(stderr, "bench_gemm: %s\n", fsdp_last_error());
        return 1;
    }
    printf("# oneDNN ISA: %s; OpenMP threads: %d\n", fsdp_kernels_isa_name(), omp_get_max_threads());
    printf("# f32 GEMM: path %s, impl %s\n", fsdp_gemm_path_name(fsdp_gemm_path_for(FSDP_F32)),
           fsdp_gemm_impl_name(FSDP_F32));
    fsdp_gemm_mixed_choice ch;
    if (fsdp_gemm_mixed_choice_get(&ch) != FSDP_OK) {
        fprintf(stderr, "bench_gemm: %s\n", fsdp_last_error());
        return 1;
    }
    printf("# mixed precision (bf16 parameters) default: %s (%s; probe bf16 %.3f ms, f32-compute %.3f ms)\n",
           fsdp_gemm_path_name(ch.path), ch.source, ch.probe_bf16_ms, ch.probe_f32_ms);
    fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_BF16);
    printf("# bf16 GEMM: path %s, impl %s\n", fsdp_gemm_path_name(fsdp_gemm_path_for(FSDP_BF16)),
           fsdp_gemm_impl_name(FSDP_BF16));
    printf("# f32-compute: weight widened in blocks of <= %d rows at K=768 (lm_head)\n",
           fsdp_gemm_widen_rows(768, 50304));
    printf(
        "# times in ms (best, median of %d); GFLOP/s from the best; bf16 includes rounding the fp32\n"
        "# activation operands to bf16, f32-compute widening the bf16 weight; wgrad writes fp32 main_grad\n"
        "# (beta0 overwrite, beta1 sum post-op)\n",
        reps);
    printf("%-10s %-12s %5s %5s %5s  %-12s %9s %9s %8s\n", "shape", "path", "M", "K", "N", "op", "best_ms",
           "med_ms", "GFLOP/s");

    const op_kind all[] = {OP_FWD, OP_DINP, OP_WGRAD0, OP_WGRAD1};
    const op_kind fwd[] = {OP_FWD};
    int rc = 0;
    /* d: 0 fp32 parameters, 1 bf16 GEMMs, 2 f32-compute */
    static const fsdp_mixed_compute mode[3] = {FSDP_MIXED_COMPUTE_BF16, FSDP_MIXED_COMPUTE_BF16,
                                               FSDP_MIXED_COMPUTE_F32};
#define RUN(label, M, K, N, ops, nops)                                                                       \
    for (int d = 0; d < 3 && !rc; d++) {                                                                     \
        fsdp_gemm_set_mixed_compute(mode[d]);                                                                \
        cur_path = d;                                                                                        \
        rc = bench_shape(label, d ? FSDP_BF16 : FSDP_F32, M, K, N, ops, nops);                               \
    }
    RUN("square", sq, sq, sq, fwd, 1);
    /* GPT-2 124M (C = 768, padded vocab 50304): per-layer linears and the tied LM head. */
    struct {
        const char *name;
        int K, N;
    } gpt[] = {{"qkv", 768, 2304},
               {"attn.proj", 768, 768},
               {"mlp.fc", 768, 3072},
               {"mlp.proj", 3072, 768},
               {"lm_head", 768, 50304}};
    for (size_t s = 0; s < sizeof gpt / sizeof gpt[0] && !rc; s++) {
        step_mult = s + 1 < sizeof gpt / sizeof gpt[0] ? 12 : 1;
        RUN(gpt[s].name, rows, gpt[s].K, gpt[s].N, all, 4);
    }
#undef RUN
    /* The ceiling a training step's "share of the GEMM peak" can reach on this machine when nothing
     * but its GEMMs ran, at the speed each has alone (operands hot in cache). */
    double peak = square_gflops[0] > square_gflops[1] ? square_gflops[0] : square_gflops[1];
    for (int d = 0; d < 3 && !rc; d++)
        printf(
            "# one GPT-2-124M step's GEMMs (12 layers x 4 linears + LM head; fwd, dinp, wgrad beta0) alone, "
            "%s: %.1f ms, %.1f GFLOP/s = %.1f%% of the faster square peak (%.1f)\n",
            d == 0   ? "f32"
            : d == 1 ? "bf16"
                     : "f32-compute",
            step_ms[d], step_gflop[d] / step_ms[d] * 1e3, 100.0 * step_gflop[d] / step_ms[d] * 1e3 / peak,
            peak);
    fsdp_kernels_shutdown();
    return rc;
}
