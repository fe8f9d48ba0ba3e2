/* bench_comm.c — all-gather and reduce-scatter bandwidth of the communicator at the world size it is
 * launched with (tests/mpirun.sh N build/bench/bench_comm), F32 and BF16, 1 KiB .. 256 MiB, on both
 * transports side by side: the shared-memory transport (the default when every rank is on one host)
 * and Open MPI's own collectives (shm 0), beside memcpy on the same machine at the same moment (every
 * rank copying `size` bytes at once, so the cores and the memory bus are shared as in the collective).
 * Figures follow nccl-tests: size = the total buffer (all-gather: recv = world*count elements;
 * reduce-scatter: send = world*count), algbw = size / time, busbw = algbw * (n-1)/n. The time of one
 * call is the slowest rank's mean over the timed iterations; the transports alternate size by size.
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

static int iters_for(size_t size) {
    int iters = (int)(((size_t)512 << 20) / size);
    return iters < 3 ? 3 : (iters > 200 ? 200 : iters);
}

/* Seconds per call of collective k (0 all-gather, 1 reduce-scatter), slowest rank; < 0 on failure. */
static double time_coll(fsdp_comm_t *c, int k, void *send, void *recv, size_t count, fsdp_dtype t,
                        int iters) {
    fsdp_status s = FSDP_OK;
    double t0 = 0;
    for (int it = -1; it < iters && s == FSDP_OK; it++) { /* it == -1: warm-up */
        if (it == 0 && (s = fsdp_comm_barrier(c)) != FSDP_OK) break;
        if (it == 0) t0 = fsdp_time_s();
        if (k == 0)
            s = fsdp_comm_all_gather(c, send, recv, count, t);
        else
            s = fsdp_comm_reduce_scatter(c, send, recv, count, t, FSDP_SUM);
    }
    if (s != FSDP_OK) return -1;
    float per = (float)((fsdp_time_s() - t0) / iters), slowest = 0;
    if (fsdp_comm_all_reduce(c, &per, &slowest, 1, FSDP_F32, FSDP_MAX) != FSDP_OK) return -1;
    return slowest;
}

/* memcpy of `bytes` on every rank at once: GB/s of the slowest rank. */
static double memcpy_gbs(fsdp_comm_t *c, void *dst, const void *src, size_t bytes, int iters) {
    if (fsdp_comm_barrier(c) != FSDP_OK) return -1;
    double t0 = fsdp_time_s();
    for (int it = 0; it < iters; it++)
        memcpy(dst, src, bytes);
    float per = (float)((fsdp_time_s() - t0) / iters), slowest = 0;
    if (fsdp_comm_all_reduce(c, &per, &slowest, 1, FSDP_F32, FSDP_MAX) != FSDP_OK) return -1;
    return (double)bytes / slowest / 1e9;
}

int main(int argc, char **argv) {
    fsdp_comm_t *c[2] = {NULL, NULL}; /* [0] shared memory (when it applies), [1] Open MPI */
    for (int k = 0; k < 2; k++) {
        fsdp_comm_config cfg = fsdp_comm_config_default();
        cfg.timeout_s = 300;
        cfg.shm = k == 0;
        if (fsdp_comm_init(&c[k], &cfg, &argc, &argv) != FSDP_OK) {
            fprintf(stderr, "bench_comm: fsdp_comm_init: %s\n", fsdp_last_error());
            return 1;
        }
    }
    size_t max_bytes = (size_t)(argc > 1 ? atof(argv[1]) : 256.0) * 1024 * 1024;
    size_t min_bytes = (size_t)(argc > 2 ? atof(argv[2]) : 1.0) * 1024;
    if (min_bytes == 0) min_bytes = 1024;
    int rank = fsdp_comm_rank(c[0]), world = fsdp_comm_size(c[0]);

    /* One send and one recv buffer of max_bytes (F32 view; BF16 uses the same bytes), reused. */
    void *send = NULL, *recv = NULL;
    if (fsdp_mem_alloc(&send, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c[0], "send buffer");
    if (fsdp_mem_alloc(&recv, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c[0], "recv buffer");
    memset(send, 0, max_bytes); /* zeros: valid in both dtypes, and pages touched before timing */
    memset(recv, 0, max_bytes);

    if (rank == 0) {
        printf("# bench_comm: world %d, transports: %s vs mpi, OMP_NUM_THREADS %s\n", world,
               fsdp_comm_shm_active(c[0]) ? "shm" : "mpi (shm does not apply here)",
               getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(unset)");
        printf("# %-14s %-5s %12s %12s %6s %11s %11s %10s %10s %10s %8s\n", "collective", "dtype",
               "size_bytes", "count/rank", "iters", "shm_us", "mpi_us", "shm_busbw", "mpi_busbw", "memcpy",
               "shm/cpy");
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
                int iters = iters_for(size);
                double t[2];
                for (int tr = 0; tr < 2; tr++)
                    if ((t[tr] = time_coll(c[tr], k, send, recv, count, dts[d], iters)) < 0)
                        return die(c[tr], names[k]);
                double cpy = memcpy_gbs(c[0], recv, send, size, iters);
                if (cpy < 0) return die(c[0], "memcpy timing");
                double bus[2];
                for (int tr = 0; tr < 2; tr++)
                    bus[tr] = (double)size / t[tr] / 1e9 * (double)(world - 1) / (double)world;
                if (rank == 0)
                    printf("  %-14s %-5s %12zu %12zu %6d %11.1f %11.1f %10.3f %10.3f %10.3f %8.2f\n",
                           names[k], fsdp_dtype_name(dts[d]), size, count, iters, 1e6 * t[0], 1e6 * t[1],
                           bus[0], bus[1], cpy, bus[0] / cpy);
                if (rank == 0) fflush(stdout);
            }
    fsdp_mem_free(recv);
    fsdp_mem_free(send);
    fsdp_comm_free(c[1]);
    fsdp_comm_free(c[0]);
    return 0;
}
