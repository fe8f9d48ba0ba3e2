/* bench_train_step.c — times one GPT-2 training step (forward, backward with the main_grad reduction,
 * grad clipping, AdamW) at world size 1 in fp32 and mixed precision, splits it by kernel class
 * (core/prof.h: GEMM, attention, LayerNorm, GELU, residual, softmax-CE, encoder, AdamW, casts,
 * communication; the rest is "other"), and compares the GEMM work per second with the machine's GEMM
 * peak measured in the same run: the faster of an f32 and a bf16 S^3 oneDNN GEMM (one rep of each
 * between every two steps, best rep counts: the machine is shared and its load changes by the second).
 * Usage: bench_train_step [--steps N] [--modes fp32,mixed] [--L 12 --C 768 --NH 12 --V 50257 --T 64
 *        --B 4] [--recompute] [--square S] [--json PATH] [--omp-wait default]
 *        (defaults: GPT-2 124M shape, 3 timed steps, S 2048, OMP_WAIT_POLICY=passive unless set;
 *        --json writes the figures for bench/run_benchmarks.sh) */
#include "core/core.h"
#include "core/prof.h"
#include "kernels/kernels.h"
#include "model/gpt2/gpt.h"
#include "train/train.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The GEMM peak: an S x S x S GEMM through the kernels layer with f32 and with bf16 parameters (the
 * bf16 one includes rounding the fp32 activation operand to bf16, O(S^2) against O(S^3) work). One rep
 * of each runs before the steps and between every two steps, so the peak and the steps see the same
 * machine load (the machine is shared: a peak taken only at the start is a different moment). The best
 * rep of each counts; the peak a step is measured against is the faster of the two, whichever precision
 * the step runs in (it is what this CPU can do). */
typedef struct {
    int S;
    float *X, *Y, *W32;
    fsdp_bf16 *W16;
    double best_s[2]; /* fastest rep so far, seconds: [0] f32, [1] bf16 */
    int reps;
} peak_gemm;

/* The bf16 peak is a bf16 GEMM whatever mixed precision computes with (--mixed-compute auto may run
 * mixed steps on f32-compute): the setting is forced to bf16 for that one call, then put back to the
 * path resolved before (explicitly, so no second probe runs). */
static fsdp_status matmul_bf16_gemm(float *Y, const float *X, const fsdp_bf16 *W, int S) {
    fsdp_gemm_mixed_choice c;
    FSDP_TRY(fsdp_gemm_mixed_choice_get(&c));
    fsdp_mixed_compute prev =
        c.path == FSDP_GEMM_F32_COMPUTE ? FSDP_MIXED_COMPUTE_F32 : FSDP_MIXED_COMPUTE_BF16;
    FSDP_TRY(fsdp_gemm_set_mixed_compute(FSDP_MIXED_COMPUTE_BF16));
    fsdp_status st = fsdp_matmul_forward(Y, X, W, NULL, FSDP_BF16, S, S, S);
    fsdp_status st2 = fsdp_gemm_set_mixed_compute(prev);
    return st != FSDP_OK ? st : st2;
}

static int peak_init(peak_gemm *pk, int S) {
    size_t n = (size_t)S * S;
    memset(pk, 0, sizeof *pk);
    pk->S = S;
    pk->best_s[0] = pk->best_s[1] = 1e30;
    if (fsdp_mem_alloc((void **)&pk->X, n * 4, FSDP_MEM_OTHER) ||
        fsdp_mem_alloc((void **)&pk->Y, n * 4, FSDP_MEM_OTHER) ||
        fsdp_mem_alloc((void **)&pk->W32, n * 4, FSDP_MEM_OTHER) ||
        fsdp_mem_alloc((void **)&pk->W16, n * 2, FSDP_MEM_OTHER))
        return 1;
    for (size_t i = 0; i < n; i++) {
        pk->X[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        pk->W32[i] = (float)((i * 69069u) % 991) / 991.0f - 0.5f;
        pk->W16[i] = fsdp_f32_to_bf16(pk->W32[i]);
    }
    /* warm-up: primitive creation and first touch */
    return fsdp_matmul_forward(pk->Y, pk->X, pk->W32, NULL, FSDP_F32, S, S, S) != FSDP_OK ||
           matmul_bf16_gemm(pk->Y, pk->X, pk->W16, S) != FSDP_OK;
}

static int peak_rep(peak_gemm *pk) {
    for (int d = 0; d < 2; d++) {
        double t0 = fsdp_time_s();
        fsdp_status st = d ? matmul_bf16_gemm(pk->Y, pk->X, pk->W16, pk->S)
                           : fsdp_matmul_forward(pk->Y, pk->X, pk->W32, NULL, FSDP_F32, pk->S, pk->S, pk->S);
        if (st != FSDP_OK) return 1;
        double t = fsdp_time_s() - t0;
        if (t < pk->best_s[d]) pk->best_s[d] = t;
    }
    pk->reps++;
    return 0;
}

/* GFLOP/s of the best rep: d 0 f32, 1 bf16, 2 the faster of the two. */
static double peak_gflops(const peak_gemm *pk, int d) {
    if (d == 2) {
        double a = peak_gflops(pk, 0), b = peak_gflops(pk, 1);
        return a > b ? a : b;
    }
    return pk->best_s[d] < 1e30 ? 2.0 * pk->S * pk->S * (double)pk->S / pk->best_s[d] / 1e9 : 0.0;
}

static void peak_free(peak_gemm *pk) {
    fsdp_mem_free(pk->W16);
    fsdp_mem_free(pk->W32);
    fsdp_mem_free(pk->Y);
    fsdp_mem_free(pk->X);
}

typedef struct {
    double step, fwd, bwd, opt; /* best-step seconds and its phases */
    double mean;
    float loss0, loss_last;
    fsdp_prof_counts prof; /* summed over the timed steps */
} timing;

static int run_mode(fsdp_dtype dt, const gpt_config *gc, int B, int T, int steps, peak_gemm *pk,
                    timing *out) {
    fsdp_comm_t *comm = NULL;
    fsdp_engine_t *e = NULL;
    gpt_model_t *m = NULL;
    int *tok = NULL, *tgt = NULL, rc = 1;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = dt;
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    if (fsdp_comm_init(&comm, &cc, NULL, NULL) || fsdp_engine_init(&e, comm, &ec) || gpt_init(&m, e, gc) ||
        fsdp_engine_init_params(e))
        goto done;
    tok = malloc((size_t)B * T * sizeof(int));
    tgt = malloc((size_t)B * T * sizeof(int));
    if (!tok || !tgt) goto done;
    for (int i = 0; i < B * T; i++) { /* a deterministic token stream */
        tok[i] = (int)(((unsigned)i * 2654435761u) % (unsigned)gc->vocab_size);
        tgt[i] = (int)(((unsigned)(i + 1) * 2654435761u) % (unsigned)gc->vocab_size);
    }
    fsdp_mem_reset_peaks();
    memset(out, 0, sizeof *out);
    out->step = 1e30;
    double total = 0;
    for (int s = -1; s < steps; s++) { /* step -1: warm-up (allocations, oneDNN primitives) */
        float loss, norm;
        if (peak_rep(pk)) goto done;
        fsdp_prof_reset();
        double t0 = fsdp_time_s();
        if (fsdp_engine_begin_step(e, 1) || fsdp_engine_begin_micro(e, 0) ||
            gpt_forward(m, tok, tgt, B, T, &loss))
            goto done;
        double t1 = fsdp_time_s();
        if (gpt_backward(m, 1.0f)) goto done;
        double t2 = fsdp_time_s();
        if (fsdp_engine_clip_grad_norm(e, 1.0f, &norm) || fsdp_engine_adamw_step(e, &oc)) goto done;
        double t3 = fsdp_time_s();
        if (s == -1) out->loss0 = loss;
        out->loss_last = loss;
        if (s < 0) continue;
        fsdp_prof_counts pc;
        fsdp_prof_get(&pc);
        for (int c = 0; c < FSDP_PROF_NCLASS; c++)
            out->prof.seconds[c] += pc.seconds[c], out->prof.calls[c] += pc.calls[c];
        total += t3 - t0;
        if (t3 - t0 < out->step)
            out->step = t3 - t0, out->fwd = t1 - t0, out->bwd = t2 - t1, out->opt = t3 - t2;
    }
    out->mean = total / steps;
    printf("  memory peaks (MiB):");
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        if (fsdp_mem_peak((fsdp_mem_cat)c))
            printf(" %s %.0f", fsdp_mem_cat_name((fsdp_mem_cat)c),
                   fsdp_mem_peak((fsdp_mem_cat)c) / 1048576.0);
    printf("; total %.0f (other includes the peak GEMMs' %.0f)\n", fsdp_mem_total_peak() / 1048576.0,
           (double)pk->S * pk->S * 14 / 1048576.0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_train_step: %s: %s\n", fsdp_dtype_name(dt), fsdp_last_error());
    free(tgt);
    free(tok);
    gpt_free(m);
    fsdp_engine_free(e);
    fsdp_comm_free(comm);
    return rc;
}

/* The trainer's wait policy (fsdp_train_omp_wait_default: passive unless OMP_WAIT_POLICY is set, by
 * re-executing): on this shared 2-core machine libgomp's default (spin at every barrier) loses whole
 * time slices whenever another process preempts one of the two threads, and each step has hundreds of
 * barriers: passive waiting measured 1.5-1.9 s per step against 2.8-5.3 s, alternating runs under load
 * 3-3.5. --omp-wait default keeps libgomp's. */
static void omp_wait_policy(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--omp-wait") && i + 1 < argc && !strcmp(argv[i + 1], "default")) return;
    fsdp_train_omp_wait_default(argv);
}

int main(int argc, char **argv) {
    omp_wait_policy(argc, argv);
    gpt_config gc = gpt_config_default();
    int B = 4, T = 64, steps = 3, square = 2048;
    const char *modes = "fp32,mixed", *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--recompute"))
            gc.recompute = 1;
        else if (has && !strcmp(a, "--steps"))
            steps = atoi(argv[++i]);
        else if (has && !strcmp(a, "--modes"))
            modes = argv[++i];
        else if (has && !strcmp(a, "--L"))
            gc.n_layer = atoi(argv[++i]);
        else if (has && !strcmp(a, "--C"))
            gc.n_embd = atoi(argv[++i]);
        else if (has && !strcmp(a, "--NH"))
            gc.n_head = atoi(argv[++i]);
        else if (has && !strcmp(a, "--V"))
            gc.vocab_size = atoi(argv[++i]), gc.padded_vocab_size = 0;
        else if (has && !strcmp(a, "--T"))
            T = atoi(argv[++i]);
        else if (has && !strcmp(a, "--B"))
            B = atoi(argv[++i]);
        else if (has && !strcmp(a, "--square"))
            square = atoi(argv[++i]);
        else if (has && !strcmp(a, "--json"))
            json = argv[++i];
        else if (has && !strcmp(a, "--omp-wait") && !strcmp(argv[i + 1], "default"))
            i++; /* handled by omp_wait_policy */
        else {
            fprintf(stderr,
                    "usage: %s [--steps N] [--modes fp32,mixed] [--L n --C n --NH n --V n --T n --B n] "
                    "[--recompute] [--square S] [--json PATH] [--omp-wait default]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1 || B < 1 || T < 1 || square < 1 || gpt_config_validate(&gc) != FSDP_OK ||
        T > gc.max_seq_len) {
        fprintf(stderr, "bench_train_step: bad arguments: %s (need steps, B, T, square >= 1, T <= %d)\n",
                fsdp_last_error(), gc.max_seq_len);
        return 2;
    }
    if (fsdp_kernels_init() != FSDP_OK) {
        fprintf(stderr, "bench_train_step: %s\n", fsdp_last_error());
        return 1;
    }
    const gpt_config *r = &gc;
    const int Vp = gc.padded_vocab_size ? gc.padded_vocab_size : (gc.vocab_size + 127) / 128 * 128;
    const double C = r->n_embd, L = r->n_layer, N = (double)B * T;
    /* GEMM work of one step: forward, input gradient and weight gradient of every linear layer and the
     * LM head (3 x 2 x rows x weights). Attention's T x T products run in plain C and are not counted. */
    const double gemm_flop = 3.0 * 2.0 * N * (L * 12.0 * C * C + C * Vp);
    printf("# GPT-2 L=%d C=%d NH=%d V=%d (Vp %d) T=%d B=%d: %.1fM params, %.1f GFLOP of GEMMs per step%s\n",
           r->n_layer, r->n_embd, r->n_head, r->vocab_size, Vp, T, B, gpt_num_params(&gc) / 1e6,
           gemm_flop / 1e9, gc.recompute ? ", recompute on" : "");
    const char *wp = getenv("OMP_WAIT_POLICY");
    printf("# OMP_WAIT_POLICY %s\n", wp ? wp : "unset (libgomp default: spin, then sleep)");
    printf("# oneDNN ISA %s; OpenMP threads %d; GEMMs with f32 parameters: %s path (%s); with bf16 "
           "parameters: %s path (%s)\n",
           fsdp_kernels_isa_name(), omp_get_max_threads(), fsdp_gemm_path_name(fsdp_gemm_path_for(FSDP_F32)),
           fsdp_gemm_impl_name(FSDP_F32), fsdp_gemm_path_name(fsdp_gemm_path_for(FSDP_BF16)),
           fsdp_gemm_impl_name(FSDP_BF16));
    peak_gemm pk;
    if (peak_init(&pk, square) || peak_rep(&pk) || peak_rep(&pk)) {
        fprintf(stderr, "bench_train_step: peak GEMM: %s\n", fsdp_last_error());
        peak_free(&pk);
        return 1;
    }
    FILE *js = NULL;
    if (json && !(js = fopen(json, "w"))) {
        fprintf(stderr, "bench_train_step: cannot write --json %s\n", json);
        peak_free(&pk);
        return 1;
    }
    if (js)
        fprintf(js,
                "{\"L\": %d, \"C\": %d, \"NH\": %d, \"V\": %d, \"T\": %d, \"B\": %d, \"params\": %lld, "
                "\"gemm_flop\": %.6g, \"threads\": %d, \"isa\": \"%s\", \"modes\": [",
                r->n_layer, r->n_embd, r->n_head, r->vocab_size, T, B, (long long)gpt_num_params(&gc),
                gemm_flop, omp_get_max_threads(), fsdp_kernels_isa_name());
    int rc = 0, first = 1;
    for (int d = 0; d < 2; d++) {
        const char *name = d ? "mixed" : "fp32";
        if (!strstr(modes, name)) continue;
        timing t;
        printf("%s:\n", name);
        if (run_mode(d ? FSDP_BF16 : FSDP_F32, &gc, B, T, steps, &pk, &t)) {
            rc = 1;
            continue;
        }
        const double p32 = peak_gflops(&pk, 0), p16 = peak_gflops(&pk, 1), peak = peak_gflops(&pk, 2);
        const double gf = gemm_flop / t.step / 1e9;
        const fsdp_dtype pdt = d ? FSDP_BF16 : FSDP_F32;
        /* the GEMMs' parameter dtype as the step ran them (the kernel-class counts), not as the mode
         * suggests: mixed precision may compute on f32 copies */
        const int used16 = t.prof.calls[FSDP_PROF_GEMM_BF16] > 0,
                  used32 = t.prof.calls[FSDP_PROF_GEMM_F32] > 0;
        const fsdp_dtype gdt = used16 && !used32 ? FSDP_BF16 : used32 && !used16 ? FSDP_F32 : pdt;
        printf("  GEMMs: %s parameters%s, %s path (%s)\n", fsdp_dtype_name(gdt),
               used16 && used32 ? " (and some with the other dtype)" : "",
               fsdp_gemm_path_name(fsdp_gemm_path_for(gdt)), fsdp_gemm_impl_name(gdt));
        printf("  step %.0f ms best (fwd %.0f, bwd+reduce %.0f, clip+adamw %.0f), %.0f ms mean of %d; "
               "%.0f tokens/s best, %.0f mean\n",
               t.step * 1e3, t.fwd * 1e3, t.bwd * 1e3, t.opt * 1e3, t.mean * 1e3, steps, N / t.step,
               N / t.mean);
        printf(
            "  measured GEMM peak: f32 %.1f, bf16 %.1f GFLOP/s (best of %d reps each of a %d^3 oneDNN GEMM "
            "through fsdp_matmul_forward, interleaved with the steps); peak = the faster, %.1f\n",
            p32, p16, pk.reps, square, peak);
        printf("  GEMM work %.1f GFLOP/s = %.1f%% of the peak (mean step: %.1f%%); loss %.4f -> %.4f\n", gf,
               peak > 0 ? 100.0 * gf / peak : 0.0, peak > 0 ? 100.0 * gemm_flop / t.mean / 1e9 / peak : 0.0,
               t.loss0, t.loss_last);
        /* per-class exclusive time, mean per timed step; "other" is the step's remainder (engine hooks,
         * allocation, bookkeeping, and anything not instrumented) */
        printf("  breakdown, ms per step (mean of %d) and share of the mean step:", steps);
        double sum = 0;
        for (int c = 0; c < FSDP_PROF_NCLASS; c++) {
            double ms = t.prof.seconds[c] / steps * 1e3;
            sum += t.prof.seconds[c];
            if (t.prof.calls[c])
                printf(" %s %.1f (%.1f%%)", fsdp_prof_class_name((fsdp_prof_class)c), ms,
                       100.0 * t.prof.seconds[c] / (t.mean * steps));
        }
        printf(" other %.1f (%.1f%%)\n", (t.mean * steps - sum) / steps * 1e3,
               100.0 * (t.mean * steps - sum) / (t.mean * steps));
        if (js) {
            fprintf(
                js,
                "%s{\"mode\": \"%s\", \"gemm_path\": \"%s\", \"gemm_impl\": \"%s\", \"step_best_s\": %.6f, "
                "\"step_mean_s\": %.6f, \"fwd_s\": %.6f, \"bwd_s\": %.6f, \"opt_s\": %.6f, \"steps\": %d, "
                "\"tokens_per_s_best\": %.3f, \"tokens_per_s_mean\": %.3f, \"peak_f32_gflops\": %.3f, "
                "\"peak_bf16_gflops\": %.3f, \"peak_gflops\": %.3f, \"share_best\": %.5f, "
                "\"share_mean\": %.5f, \"breakdown_s\": {",
                first ? "" : ", ", name, fsdp_gemm_path_name(fsdp_gemm_path_for(gdt)),
                fsdp_gemm_impl_name(gdt), t.step, t.mean, t.fwd, t.bwd, t.opt, steps, N / t.step, N / t.mean,
                p32, p16, peak, peak > 0 ? gf / peak : 0.0, peak > 0 ? gemm_flop / t.mean / 1e9 / peak : 0.0);
            for (int c = 0; c < FSDP_PROF_NCLASS; c++)
                fprintf(js, "\"%s\": %.6f, ", fsdp_prof_class_name((fsdp_prof_class)c),
                        t.prof.seconds[c] / steps);
            fprintf(js, "\"other\": %.6f}}", (t.mean * steps - sum) / steps);
            first = 0;
        }
    }
    if (js) {
        fprintf(js, "]}\n");
        if (fclose(js) != 0) {
            fprintf(stderr, "bench_train_step: cannot write --json %s\n", json);
            rc = 1;
        }
    }
    peak_free(&pk);
    fsdp_kernels_shutdown();
    return rc;
}
