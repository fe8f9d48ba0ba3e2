/* bench_attention.c — causal attention forward and backward of one layer, per-row kernels (blocked
 * AVX-512 where the CPU has it) against the sgemm form, side by side at several sequence lengths; the
 * data for FSDP_ATT_GEMM_MIN_T (kernels.h). Best of R reps, the two forms interleaved rep by rep (the
 * machine is shared). GFLOP/s counts the causal work: 4 * B * NH * T(T+1)/2 * hs forward, twice that
 * backward.
 * Usage: bench_attention [--reps R] [--B b] [--C c] [--NH nh] [--T t1,t2,...]
 *        (defaults 5, 1, 768, 12, 64,128,256,512,1024) */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double fwd, bwd; /* best seconds */
} best;

static int one_rep(fsdp_att_impl impl, best *b, float *out, float *att, float *dqkv, const float *qkv,
                   const float *dout, int B, int T, int C, int NH) {
    if (fsdp_attention_force_impl(impl) != FSDP_OK) return 1;
    double t0 = fsdp_time_s();
    if (fsdp_attention_forward(out, NULL, att, qkv, B, T, C, NH) != FSDP_OK) return 1;
    double t1 = fsdp_time_s();
    if (fsdp_attention_backward(dqkv, dout, qkv, att, B, T, C, NH) != FSDP_OK) return 1;
    double t2 = fsdp_time_s();
    if (t1 - t0 < b->fwd) b->fwd = t1 - t0;
    if (t2 - t1 < b->bwd) b->bwd = t2 - t1;
    return 0;
}

static int bench_T(int reps, int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = NULL, *out = NULL, *dout = NULL, *att = NULL, *dqkv = NULL;
    int rc = 1;
    if (fsdp_mem_alloc((void **)&qkv, nq * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&dqkv, nq * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&out, no * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&dout, no * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&att, na * 4, FSDP_MEM_ACTIVATION))
        goto done;
    for (size_t i = 0; i < nq; i++)
        qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < no; i++)
        dout[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
    best b[2] = {{1e30, 1e30}, {1e30, 1e30}};
    const fsdp_att_impl impl[2] = {FSDP_ATT_BLOCKED, FSDP_ATT_GEMM};
    for (int r = 0; r <= reps; r++) /* rep 0 warms up and is dropped */
        for (int k = 0; k < 2; k++) {
            best *dst = &b[k], scratch = {1e30, 1e30};
            if (one_rep(impl[k], r ? dst : &scratch, out, att, dqkv, qkv, dout, B, T, C, NH)) goto done;
        }
    const double hs = (double)C / NH, fl = 4.0 * B * NH * (T * (T + 1.0) / 2.0) * hs;
    for (int k = 0; k < 2; k++)
        printf("T=%5d %-8s fwd %8.2f ms (%6.1f GFLOP/s)  bwd %8.2f ms (%6.1f GFLOP/s)\n", T,
               fsdp_attention_impl_name(impl[k]), b[k].fwd * 1e3, fl / b[k].fwd / 1e9, b[k].bwd * 1e3,
               2 * fl / b[k].bwd / 1e9);
    printf("T=%5d gemm/blocked time: fwd %.2f  bwd %.2f  fwd+bwd %.2f  (AUTO takes %s)\n", T,
           b[1].fwd / b[0].fwd, b[1].bwd / b[0].bwd, (b[1].fwd + b[1].bwd) / (b[0].fwd + b[0].bwd),
           (fsdp_attention_force_impl(FSDP_ATT_AUTO),
            fsdp_attention_impl_name(fsdp_attention_impl_for(T, (int)hs))));
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_attention: T=%d: %s\n", T, fsdp_last_error());
    fsdp_mem_free(att);
    fsdp_mem_free(dout);
    fsdp_mem_free(out);
    fsdp_mem_free(dqkv);
    fsdp_mem_free(qkv);
    return rc;
}

int main(int argc, char **argv) {
    int reps = 5, B = 1, C = 768, NH = 12;
    const char *Ts = "64,128,256,512,1024";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--B") == 0)
            B = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--C") == 0)
            C = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--NH") == 0)
            NH = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--T") == 0)
            Ts = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps R] [--B b] [--C c] [--NH nh] [--T t1,t2,...]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || B < 1 || NH < 1 || C < NH || C % NH) {
        fprintf(stderr, "bench_attention: need reps, B, NH >= 1 and C a positive multiple of NH\n");
        return 2;
    }
    printf("# causal attention, one layer: B=%d C=%d NH=%d (hs %d), best of %d reps; ISA %s\n", B, C, NH,
           C / NH, reps, fsdp_kernels_isa_name());
    for (const char *p = Ts; *p;) {
        int T = atoi(p);
        if (T < 1) {
            fprintf(stderr, "bench_attention: bad --T list '%s'\n", Ts);
            return 2;
        }
        if (bench_T(reps, B, T, C, NH)) return 1;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}
