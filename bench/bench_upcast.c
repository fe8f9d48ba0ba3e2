/* bench_upcast.c — memory bandwidth of the one-pass bf16 -> f32 upcast-copy, the upcast-add
 * (f32 += bf16) and the f32 -> bf16 downcast, against memcpy moving the same number of bytes, for each
 * SIMD path this CPU has. Single thread. Usage: bench_upcast [MiB of the fp32 buffer, default 256]
 * [repetitions, default 5]. GB/s counts bytes read + written (10^9 bytes/s); the best rep is kept. */
#include "fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OP_UPCAST_COPY, OP_UPCAST_ADD, OP_DOWNCAST, OP_N } op_kind;
static const char *const op_names[OP_N] = {"upcast-copy bf16->f32", "upcast-add f32+=bf16",
                                           "downcast f32->bf16"};

/* Bytes one pass reads + writes over n elements. */
static double op_traffic(op_kind op, size_t n) {
    switch (op) {
    case OP_UPCAST_COPY: return (double)n * (2 + 4);
    case OP_UPCAST_ADD: return (double)n * (2 + 4 + 4);
    case OP_DOWNCAST: return (double)n * (4 + 2);
    default: return 0;
    }
}

static double best_of(int reps, op_kind op, float *f, fsdp_bf16 *h, size_t n) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = fsdp_time_s();
        switch (op) {
        case OP_UPCAST_COPY: fsdp_bf16_to_f32_n(f, h, n); break;
        case OP_UPCAST_ADD: fsdp_bf16_add_f32_n(f, h, n); break;
        case OP_DOWNCAST: fsdp_f32_to_bf16_n(h, f, n); break;
        default: break;
        }
        double dt = fsdp_time_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* memcpy of `bytes` (so read + write = 2 * bytes). */
static double best_memcpy(int reps, void *dst, const void *src, size_t bytes) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = fsdp_time_s();
        memcpy(dst, src, bytes);
        double dt = fsdp_time_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (mib == 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [MiB of the fp32 buffer > 0] [repetitions > 0]\n", argv[0]);
        return 2;
    }
    size_t n = (mib << 20) / sizeof(float); /* elements */
    /* f (n f32) and h (n bf16) for the conversions; memcpy of up to the add's traffic / 2 = 5n bytes
     * needs two buffers of that size: the first reuses f plus a spare, so allocate 5n-byte buffers. */
    size_t cp_max = (size_t)op_traffic(OP_UPCAST_ADD, n) / 2;
    float *f = NULL;
    fsdp_bf16 *h = NULL;
    unsigned char *a = NULL, *b = NULL;
    int rc = 1;
    if (fsdp_mem_alloc((void **)&f, n * sizeof *f, FSDP_MEM_OTHER) != FSDP_OK ||
        fsdp_mem_alloc((void **)&h, n * sizeof *h, FSDP_MEM_OTHER) != FSDP_OK ||
        fsdp_mem_alloc((void **)&a, cp_max, FSDP_MEM_OTHER) != FSDP_OK ||
        fsdp_mem_alloc((void **)&b, cp_max, FSDP_MEM_OTHER) != FSDP_OK) {
        fprintf(stderr, "bench_upcast: %s\n", fsdp_last_error());
        goto done;
    }
    /* Touch every page before timing; small values so repeated adds stay finite. */
    for (size_t i = 0; i < n; i++) {
        f[i] = 0.0f;
        h[i] = fsdp_f32_to_bf16((float)(i % 1000) * 1e-6f);
    }
    memset(a, 1, cp_max);
    memset(b, 2, cp_max);

    printf("bench_upcast: fp32 buffer %zu MiB (%zu elements), best of %d, single thread\n", mib, n, reps);
    printf("%-7s %-23s %10s %9s %8s %12s %6s\n", "path", "op", "MiB moved", "best ms", "GB/s", "memcpy GB/s",
           "ratio");
    const fsdp_simd paths[] = {FSDP_SIMD_SCALAR, FSDP_SIMD_AVX2, FSDP_SIMD_AVX512};
    double memcpy_gbs[OP_N] = {0};
    for (int op = 0; op < OP_N; op++) { /* memcpy moving the same bytes as each op */
        size_t bytes = (size_t)op_traffic((op_kind)op, n) / 2;
        memcpy_gbs[op] = 2.0 * (double)bytes / best_memcpy(reps, a, b, bytes) / 1e9;
    }
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            printf("%-7s (not available on this CPU)\n", fsdp_simd_name(paths[p]));
            continue;
        }
        for (int op = 0; op < OP_N; op++) {
            double traffic = op_traffic((op_kind)op, n);
            double gbs = traffic / best_of(reps, (op_kind)op, f, h, n) / 1e9;
            printf("%-7s %-23s %10.0f %9.2f %8.2f %12.2f %6.2f\n", fsdp_simd_name(paths[p]), op_names[op],
                   traffic / (1 << 20), traffic / gbs / 1e6, gbs, memcpy_gbs[op], gbs / memcpy_gbs[op]);
        }
    }
    fsdp_simd_force(FSDP_SIMD_AUTO);
    rc = 0;
done:
    fsdp_mem_free(b);
    fsdp_mem_free(a);
    fsdp_mem_free(h);
    fsdp_mem_free(f);
    return rc;
}
