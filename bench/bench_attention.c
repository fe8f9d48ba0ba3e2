/* bench_attention.c — causal attention forward and backward of one layer, per-row kernels (blocked
 * AVX-512 where the CPU has it) against the sgemm form, side by side at several sequence lengths; the
 * data for FSDP_ATT_GEMM_MIN_T (kernels.h). Best of R reps, the two forms interleaved rep by rep (the
 * machine is shared). GFLOP/s counts the causal work: 4 * B * NH * T(T+1)/2 * hs forward, twice that
 * backward.
 * Usage: bench_attention [--reps R] [--B b] [--C c] [--NH nh] [--T t1,t2,...]
 *        (defaults 5, 1, 768, 12, 64,128,256,512,1024)
 * --gqa H,KV,hd (e.g. 9,3,64, SmolLM2-135M): grouped-query attention on the fused [B,T,(H+2KV)hd] qkv
 * instead, the grouped-query kernel (fsdp_attention_gqa_*, log-sum-exp saved) against the path it
 * replaced in the Llama model: k and v copied to every query head of their group, the multi-head kernel
 * (AUTO implementation, T x T probabilities saved) and the group sums of dk, dv. Both time the whole
 * forward and backward with those copies; same run, interleaved. */
#include "kernels/kernels.h"

#include <omp.h>
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

/* ---------------------------------------------------------------- --gqa: the grouped-query kernel vs
 * repeat + multi-head */

typedef struct {
    int B, T, H, KV, hd;
    float *qkv, *dout, *out, *lse, *dqkv; /* fused [N,(H+2KV)hd], [N,A], [N,A], [B,H,T], fused */
    float *qkv3, *att, *dqkv3;            /* the old path: [N,3A], [B,H,T,T], [N,3A] */
} gqa_bufs;

static int old_fwd(gqa_bufs *g) {
    const size_t N = (size_t)g->B * g->T, A = (size_t)g->H * g->hd, KVd = (size_t)g->KV * g->hd,
                 W = A + 2 * KVd, G = (size_t)(g->H / g->KV), hd = (size_t)g->hd;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        const float *src = g->qkv + i * W;
        float *dst = g->qkv3 + i * 3 * A;
        memcpy(dst, src, A * sizeof(float));
        for (size_t h = 0; h < (size_t)g->H; h++) {
            memcpy(dst + A + h * hd, src + A + (h / G) * hd, hd * sizeof(float));
            memcpy(dst + 2 * A + h * hd, src + A + KVd + (h / G) * hd, hd * sizeof(float));
        }
    }
    return fsdp_attention_forward(g->out, NULL, g->att, g->qkv3, g->B, g->T, (int)A, g->H) != FSDP_OK;
}

static int old_bwd(gqa_bufs *g) {
    const size_t N = (size_t)g->B * g->T, A = (size_t)g->H * g->hd, KVd = (size_t)g->KV * g->hd,
                 W = A + 2 * KVd, G = (size_t)(g->H / g->KV), hd = (size_t)g->hd;
    if (fsdp_attention_backward(g->dqkv3, g->dout, g->qkv3, g->att, g->B, g->T, (int)A, g->H) != FSDP_OK)
        return 1;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        const float *src = g->dqkv3 + i * 3 * A;
        float *dst = g->dqkv + i * W;
        memcpy(dst, src, A * sizeof(float));
        for (size_t kv = 0; kv < (size_t)g->KV; kv++)
            for (size_t e = 0; e < hd; e++) {
                float sk = 0.0f, sv = 0.0f;
                for (size_t h = kv * G; h < (kv + 1) * G; h++) {
                    sk += src[A + h * hd + e];
                    sv += src[2 * A + h * hd + e];
                }
                dst[A + kv * hd + e] = sk;
                dst[A + KVd + kv * hd + e] = sv;
            }
    }
    return 0;
}

static int bench_gqa_T(int reps, int B, int T, int H, int KV, int hd) {
    gqa_bufs g = {.B = B, .T = T, .H = H, .KV = KV, .hd = hd};
    const size_t N = (size_t)B * T, A = (size_t)H * hd, W = A + 2 * (size_t)KV * hd;
    int rc = 1;
    if (fsdp_mem_alloc((void **)&g.qkv, N * W * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.dqkv, N * W * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.out, N * A * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.dout, N * A * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.lse, (size_t)B * H * T * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.qkv3, N * 3 * A * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.dqkv3, N * 3 * A * 4, FSDP_MEM_ACTIVATION) ||
        fsdp_mem_alloc((void **)&g.att, (size_t)B * H * T * T * 4, FSDP_MEM_ACTIVATION))
        goto done;
    for (size_t i = 0; i < N * W; i++)
        g.qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < N * A; i++)
        g.dout[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
    best b[2] = {{1e30, 1e30}, {1e30, 1e30}}; /* 0: repeat + multi-head, 1: grouped-query */
    for (int r = 0; r <= reps; r++) {         /* rep 0 warms up and is dropped */
        best w = {1e30, 1e30}, *d0 = r ? &b[0] : &w, *d1 = r ? &b[1] : &w;
        double t0 = fsdp_time_s();
        if (old_fwd(&g)) goto done;
        double t1 = fsdp_time_s();
        if (old_bwd(&g)) goto done;
        double t2 = fsdp_time_s();
        if (t1 - t0 < d0->fwd) d0->fwd = t1 - t0;
        if (t2 - t1 < d0->bwd) d0->bwd = t2 - t1;
        t0 = fsdp_time_s();
        if (fsdp_attention_gqa_forward(g.out, g.lse, g.qkv, NULL, B, T, H, KV, hd) != FSDP_OK) goto done;
        t1 = fsdp_time_s();
        if (fsdp_attention_gqa_backward(g.dqkv, g.dout, g.qkv, g.lse, NULL, B, T, H, KV, hd) != FSDP_OK)
            goto done;
        t2 = fsdp_time_s();
        if (t1 - t0 < d1->fwd) d1->fwd = t1 - t0;
        if (t2 - t1 < d1->bwd) d1->bwd = t2 - t1;
    }
    const int nthr = omp_get_max_threads();
    const double old_mb = ((double)B * H * T * T + 6.0 * N * A) * 4 / 1048576.0; /* att, qkv3, dqkv3 */
    const double new_mb =
        ((double)B * H * T * 4 + fsdp_attention_gqa_backward_scratch_bytes(B, T, KV, hd, nthr)) / 1048576.0;
    printf("T=%5d repeat+mha fwd %8.2f ms  bwd %8.2f ms   (saved+buffers %8.1f MiB)\n", T, b[0].fwd * 1e3,
           b[0].bwd * 1e3, old_mb);
    printf("T=%5d gqa        fwd %8.2f ms  bwd %8.2f ms   (lse+scratch   %8.1f MiB)\n", T, b[1].fwd * 1e3,
           b[1].bwd * 1e3, new_mb);
    printf("T=%5d gqa/old time: fwd %.2f  bwd %.2f  fwd+bwd %.2f\n", T, b[1].fwd / b[0].fwd,
           b[1].bwd / b[0].bwd, (b[1].fwd + b[1].bwd) / (b[0].fwd + b[0].bwd));
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_attention --gqa: T=%d: %s\n", T, fsdp_last_error());
    fsdp_mem_free(g.att), fsdp_mem_free(g.dqkv3), fsdp_mem_free(g.qkv3), fsdp_mem_free(g.lse);
    fsdp_mem_free(g.dout), fsdp_mem_free(g.out), fsdp_mem_free(g.dqkv), fsdp_mem_free(g.qkv);
    return rc;
}

int main(int argc, char **argv) {
    int reps = 5, B = 1, C = 768, NH = 12;
    const char *Ts = "64,128,256,512,1024", *gqa = NULL;
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
        else if (i + 1 < argc && strcmp(argv[i], "--gqa") == 0)
            gqa = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--reps R] [--B b] [--C c] [--NH nh] [--T t1,t2,...] [--gqa H,KV,hd]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || B < 1 || NH < 1 || C < NH || C % NH) {
        fprintf(stderr, "bench_attention: need reps, B, NH >= 1 and C a positive multiple of NH\n");
        return 2;
    }
    int H = 0, KV = 0, hd = 0;
    if (gqa && (sscanf(gqa, "%d,%d,%d", &H, &KV, &hd) != 3 || H < 1 || KV < 1 || hd < 1 || H % KV)) {
        fprintf(stderr, "bench_attention: --gqa wants H,KV,hd with H a multiple of KV, got '%s'\n", gqa);
        return 2;
    }
    if (gqa)
        printf("# grouped-query attention, one layer: B=%d H=%d KV=%d hd=%d, best of %d reps, %d threads; "
               "ISA %s, SIMD %s\n",
               B, H, KV, hd, reps, omp_get_max_threads(), fsdp_kernels_isa_name(),
               fsdp_simd_name(fsdp_simd_active()));
    else
        printf("# causal attention, one layer: B=%d C=%d NH=%d (hs %d), best of %d reps; ISA %s\n", B, C, NH,
               C / NH, reps, fsdp_kernels_isa_name());
    for (const char *p = Ts; *p;) {
        int T = atoi(p);
        if (T < 1) {
            fprintf(stderr, "bench_attention: bad --T list '%s'\n", Ts);
            return 2;
        }
        if (gqa ? bench_gqa_T(reps, B, T, H, KV, hd) : bench_T(reps, B, T, C, NH)) return 1;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}
