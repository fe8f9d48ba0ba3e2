/* bench_safetensors.c — what `--init-from` costs in the safetensors reader (src/io/safetensors.h): every
 * tensor of FILE read whole as fp32 (the widening, the NaN/Inf check, the SIGBUS guard), and every 2-D
 * tensor with at most 4096 rows also read transposed in one call (GPT-2's Conv1D weights load that way).
 * Single thread, the file in the page cache after the first pass; the best of REPS passes is printed.
 * Usage: bench_safetensors FILE.safetensors [REPS, default 5]. */
#include "fsdp.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.safetensors [REPS]\n", argv[0]);
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    fsdp_safetensors st;
    if (fsdp_st_open(&st, argv[1]) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 1;
    }
    uint64_t maxn = 1, whole = 0, transposed = 0;
    for (int i = 0; i < st.n; i++) {
        if (st.t[i].numel > maxn) maxn = st.t[i].numel;
        if (st.t[i].dtype == FSDP_ST_OTHER) continue;
        whole += st.t[i].numel;
        if (st.t[i].ndim == 2 && st.t[i].shape[0] <= 4096) transposed += st.t[i].numel;
    }
    float *out = malloc(4 * (size_t)maxn);
    if (!out) return 1;
    double best_whole = 1e30, best_tr = 1e30;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = now();
        for (int i = 0; i < st.n; i++)
            if (st.t[i].dtype != FSDP_ST_OTHER &&
                fsdp_st_read_f32(&st, i, 0, st.t[i].numel, out) != FSDP_OK) {
                fprintf(stderr, "%s\n", fsdp_last_error());
                return 1;
            }
        double t1 = now();
        for (int i = 0; i < st.n; i++)
            if (st.t[i].dtype != FSDP_ST_OTHER && st.t[i].ndim == 2 && st.t[i].shape[0] <= 4096 &&
                fsdp_st_read_transposed_f32(&st, i, 0, st.t[i].numel, out) != FSDP_OK) {
                fprintf(stderr, "%s\n", fsdp_last_error());
                return 1;
            }
        double t2 = now();
        if (t1 - t0 < best_whole) best_whole = t1 - t0;
        if (t2 - t1 < best_tr) best_tr = t2 - t1;
    }
    printf("bench_safetensors %s: %d tensors, best of %d, single thread\n", argv[1], st.n, reps);
    printf("  whole reads:      %llu elements in %.3f s (%.2f GB/s of fp32 out)\n", (unsigned long long)whole,
           best_whole, 4e-9 * (double)whole / best_whole);
    printf("  transposed reads: %llu elements in %.3f s\n", (unsigned long long)transposed, best_tr);
    free(out);
    fsdp_st_close(&st);
    return 0;
}
