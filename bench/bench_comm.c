/* bench_comm.c — all-gather and reduce-scatter bandwidth of the communicator at the world size it is
 * launched with (tests/mpirun.sh N build/bench/bench_comm), F32 and BF16, 1 KiB .. 256 MiB.
 * Figures follow nccl-tests: size = the total buffer (all-gather: recv = world*count elements;
 * reduce-scatter: send = world*count), algbw = size / time, busbw = algbw * (n-1)/n. The time of one
 * call is the slowest rank's mean over the timed iterations.
 * Usage: bench_comm [max_mib (256)] [min_kib (1)] */
#include "fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(fsdp_comm_t *c, const char *what) {
    fprintf(stderr, "bench_comm: %s: %s\n", what, fsdp_last_error());
    fsdp_comm_abort(c, 1);
    return 1;
}

int main(int argc, char **argv) {
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 300;
    if (fsdp_comm_init(&c, &cfg, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "bench_comm: fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    size_t max_bytes = (size_t)(argc > 1 ? atof(argv[1]) : 256.0) * 1024 * 1024;
    size_t min_bytes = (size_t)(argc > 2 ? atof(argv[2]) : 1.0) * 1024;
    if (min_bytes == 0) min_bytes = 1024;
    int rank = fsdp_comm_rank(c), world = fsdp_comm_size(c);

    /* One send and one recv buffer of max_bytes (F32 view; BF16 uses the same bytes), reused. */
    void *send = NULL, *recv = NULL;
    if (fsdp_mem_alloc(&send, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c, "send buffer");
    if (fsdp_mem_alloc(&recv, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c, "recv buffer");
    memset(send, 0, max_bytes); /* zeros: valid in both dtypes, and pages touched before timing */
    memset(recv, 0, max_bytes);

    if (rank == 0) {
        printf("# bench_comm: backend %s, world %d, OMP_NUM_THREADS %s\n", fsdp_comm_backend_name(c), world,
               getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(unset)");
        printf("# %-14s %-5s %12s %12s %6s %11s %10s %10s\n", "collective", "dtype", "size_bytes",
               "count/rank", "iters", "time_us", "algbw_GB/s", "busbw_GB/s");
    }
    const char *names[2] = {"all-gather", "reduce-scatter"};
    fsdp_dtype dts[2] = {FSDP_F32, FSDP_BF16};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++)
            for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
                size_t es = fsdp_dtype_size(dts[d]);
                size_t count = bytes / ((size_t)world * es); /* elements per rank */
                if (count == 0) continue;
                size_t size = count * (size_t)world * es; /* the total buffer, nccl-tests' "size" */
                int iters = (int)(((size_t)512 << 20) / size);
                iters = iters < 3 ? 3 : (iters > 200 ? 200 : iters);
                fsdp_status s = FSDP_OK;
                double t0 = 0;
                for (int it = -1; it < iters && s == FSDP_OK; it++) { /* it == -1: warm-up */
                    if (it == 0 && (s = fsdp_comm_barrier(c)) != FSDP_OK) break;
                    if (it == 0) t0 = fsdp_time_s();
                    if (k == 0)
                        s = fsdp_comm_all_gather(c, send, recv, count, dts[d]);
                    else
                        s = fsdp_comm_reduce_scatter(c, send, recv, count, dts[d], FSDP_SUM);
                }
                if (s != FSDP_OK) return die(c, names[k]);
                float per = (float)((fsdp_time_s() - t0) / iters), slowest = 0;
                if (fsdp_comm_all_reduce(c, &per, &slowest, 1, FSDP_F32, FSDP_MAX) != FSDP_OK)
                    return die(c, "all-reduce of timings");
                double algbw = (double)size / slowest / 1e9;
                double busbw = algbw * (double)(world - 1) / (double)world;
                if (rank == 0)
                    printf("  %-14s %-5s %12zu %12zu %6d %11.1f %10.3f %10.3f\n", names[k],
                           fsdp_dtype_name(dts[d]), size, count, iters, 1e6 * slowest, algbw, busbw);
                if (rank == 0) fflush(stdout);
            }
    fsdp_mem_free(recv);
    fsdp_mem_free(send);
    fsdp_comm_free(c);
    return 0;
}
