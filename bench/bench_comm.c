/* bench_comm.c — all-gather and reduce-scatter bandwidth of the communicator at the world size it is
 * launched with (tests/mpirun.sh N build/bench/bench_comm), F32 and BF16, 1 KiB .. 256 MiB, on both
 * transports side by side: the shared-memory transport (the default when every rank is on one host)
 * the communicator's MPI paths (shm 0: MPI_Iallgather; reduce-scatter as an all-to-all + rank-order
 * sum) and Open MPI's own blocking MPI_Allgather / MPI_Reduce_scatter_block called directly (f32; bf16
 * has no MPI sum), beside memcpy on the same machine at the same moment (every rank copying `size`
 * bytes at once, so the cores and the memory bus are shared as in the collective).
 * Figures follow nccl-tests: size = the total buffer (all-gather: recv = world*count elements;
 * reduce-scatter: send = world*count), algbw = size / time, busbw = algbw * (n-1)/n. The time of one
 * call is the slowest rank's mean over the timed iterations; the transports alternate size by size.
 * shm and mpi time the out-of-place form (nccl-tests' default); eng times the shared-memory transport
 * in the form the engine calls it (all-gather in place, f32 reduce-scatter accumulating into a
 * separate gradient buffer, bf16 reduce-scatter in place into the rank's own block): an in-place
 * all-gather does not copy its own block, so its ceiling against memcpy is 1.0 where the out-of-place
 * one's is 0.5 at 2 ranks. heap times the engine's form again with both buffers from
 * fsdp_mem_alloc_shared (the host-shared heap, as the engine allocates main_grad, the bf16 wire and the
 * unsharded parameters): the peers read them with plain loads instead of process_vm_readv; hoop times
 * the out-of-place form (nccl-tests' default, as Open MPI's) with heap buffers. At 2 ranks
 * a reduce-scatter reads two blocks and writes one for the one block busbw counts (the accumulating
 * form reads a third), and memcpy of the same size (two blocks) reads two and writes two, plus two
 * more reads for ownership where its stores are not streamed: ceilings of 0.67-1.0 against memcpy
 * (0.5-0.75 accumulating), the lower one past the caches, where memcpy streams.
 * Usage: bench_comm [max_mib (256)] [min_kib (1)] */
#include "fsdp.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FSDP_TRY_BENCH(expr)                                                                                 \
    do {                                                                                                     \
        fsdp_status s_ = (expr);                                                                             \
        if (s_ != FSDP_OK) return s_;                                                                        \
    } while (0)

static int die(fsdp_comm_t *c, const char *what) {
    fprintf(stderr, "bench_comm: %s: %s\n", what, fsdp_last_error());
    fsdp_comm_abort(c, 1);
    return 1;
}

static int iters_for(size_t size) {
    int iters = (int)(((size_t)512 << 20) / size);
    return iters < 3 ? 3 : (iters > 200 ? 200 : iters);
}

/* One call in the engine's form: all-gather in place (send = recv + rank*count), reduce-scatter F32
 * accumulating into the gradient shard (fsdp_comm_ireduce_scatter_acc), BF16 in place into the rank's
 * own block (recv = send + rank*count). */
static fsdp_status engine_form(fsdp_comm_t *c, int k, void *send, void *recv, size_t count, fsdp_dtype t) {
    size_t es = fsdp_dtype_size(t);
    if (k == 0)
        return fsdp_comm_all_gather(c, (char *)recv + (size_t)fsdp_comm_rank(c) * count * es, recv, count, t);
    if (t == FSDP_BF16) /* in place, the result left in this rank's own block, as the engine calls it */
        return fsdp_comm_reduce_scatter(c, send, (char *)send + (size_t)fsdp_comm_rank(c) * count * es, count,
                                        t, FSDP_SUM);
    fsdp_comm_req_t *q = NULL;
    FSDP_TRY_BENCH(fsdp_comm_ireduce_scatter_acc(c, send, recv, count, 1.0f, &q));
    return fsdp_comm_wait(q);
}

/* Seconds per call of collective k (0 all-gather, 1 reduce-scatter), slowest rank; < 0 on failure.
 * form 0: out of place; 1: the engine's form. */
static double time_coll(fsdp_comm_t *c, int k, int form, void *send, void *recv, size_t count, fsdp_dtype t,
                        int iters) {
    fsdp_status s = FSDP_OK;
    double t0 = 0;
    for (int it = -1; it < iters && s == FSDP_OK; it++) { /* it == -1: warm-up */
        if (it == 0 && (s = fsdp_comm_barrier(c)) != FSDP_OK) break;
        if (it == 0) t0 = fsdp_time_s();
        if (form == 1)
            s = engine_form(c, k, send, recv, count, t);
        else if (k == 0)
            s = fsdp_comm_all_gather(c, send, recv, count, t);
        else
            s = fsdp_comm_reduce_scatter(c, send, recv, count, t, FSDP_SUM);
    }
    if (s != FSDP_OK) return -1;
    float per = (float)((fsdp_time_s() - t0) / iters), slowest = 0;
    if (fsdp_comm_all_reduce(c, &per, &slowest, 1, FSDP_F32, FSDP_MAX) != FSDP_OK) return -1;
    return slowest;
}

/* Open MPI's own blocking collective on MPI_COMM_WORLD; < 0 when it has none (bf16 sums). */
static double time_ompi(fsdp_comm_t *c, int k, void *send, void *recv, size_t count, fsdp_dtype t,
                        int iters) {
    if ((k == 1 && t != FSDP_F32) || count > (size_t)1 << 30) return -1;
    MPI_Datatype ty = t == FSDP_F32 ? MPI_FLOAT : MPI_UINT16_T;
    int rc = MPI_SUCCESS;
    double t0 = 0;
    for (int it = -1; it < iters && rc == MPI_SUCCESS; it++) {
        if (it == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = fsdp_time_s();
        }
        if (k == 0)
            rc = MPI_Allgather(send, (int)count, ty, recv, (int)count, ty, MPI_COMM_WORLD);
        else
            rc = MPI_Reduce_scatter_block(send, recv, (int)count, ty, MPI_SUM, MPI_COMM_WORLD);
    }
    if (rc != MPI_SUCCESS) return -1;
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
    void *hsend = NULL, *hrecv = NULL;
    if (fsdp_mem_alloc_shared(&hsend, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c[0], "heap send");
    if (fsdp_mem_alloc_shared(&hrecv, max_bytes, FSDP_MEM_OTHER) != FSDP_OK) return die(c[0], "heap recv");
    memset(hsend, 0, max_bytes);
    memset(hrecv, 0, max_bytes);
    int heap = fsdp_mem_is_shared(hsend) && fsdp_mem_is_shared(hrecv);

    if (rank == 0) {
        printf("# bench_comm: world %d, transports: %s vs mpi, shared heap: %s, OMP_NUM_THREADS %s\n", world,
               fsdp_comm_shm_active(c[0]) ? "shm" : "mpi (shm does not apply here)",
               heap ? "yes" : "no (heap = eng's buffers from the ordinary heap)",
               getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(unset)");
        printf("# %-14s %-5s %12s %12s %6s %11s %11s %10s %10s %10s %10s %10s %10s %10s %8s %8s %8s %8s\n",
               "collective", "dtype", "size_bytes", "count/rank", "iters", "shm_us", "mpi_us", "shm_busbw",
               "eng_busbw", "heap_busbw", "hoop_busbw", "mpi_busbw", "ompi_busbw", "memcpy", "shm/cpy",
               "eng/cpy", "heap/cpy", "hoop/cpy");
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
                double t[2], te, th, tho;
                for (int tr = 0; tr < 2; tr++)
                    if ((t[tr] = time_coll(c[tr], k, 0, send, recv, count, dts[d], iters)) < 0)
                        return die(c[tr], names[k]);
                if ((te = time_coll(c[0], k, 1, send, recv, count, dts[d], iters)) < 0)
                    return die(c[0], names[k]);
                if ((th = time_coll(c[0], k, 1, hsend, hrecv, count, dts[d], iters)) < 0)
                    return die(c[0], names[k]);
                if ((tho = time_coll(c[0], k, 0, hsend, hrecv, count, dts[d], iters)) < 0)
                    return die(c[0], names[k]);
                double to = time_ompi(c[0], k, send, recv, count, dts[d], iters);
                double cpy = memcpy_gbs(c[0], recv, send, size, iters);
                if (cpy < 0) return die(c[0], "memcpy timing");
                double bus[2], be = (double)size / te / 1e9 * (double)(world - 1) / (double)world;
                double bh = (double)size / th / 1e9 * (double)(world - 1) / (double)world;
                double bho = (double)size / tho / 1e9 * (double)(world - 1) / (double)world;
                for (int tr = 0; tr < 2; tr++)
                    bus[tr] = (double)size / t[tr] / 1e9 * (double)(world - 1) / (double)world;
                char ob[16] = "n/a";
                if (to > 0)
                    snprintf(ob, sizeof ob, "%.3f",
                             (double)size / to / 1e9 * (double)(world - 1) / (double)world);
                if (rank == 0)
                    printf(
                        "  %-14s %-5s %12zu %12zu %6d %11.1f %11.1f %10.3f %10.3f %10.3f %10.3f %10.3f %10s "
                        "%10.3f %8.2f %8.2f %8.2f %8.2f\n",
                        names[k], fsdp_dtype_name(dts[d]), size, count, iters, 1e6 * t[0], 1e6 * t[1], bus[0],
                        be, bh, bho, bus[1], ob, cpy, bus[0] / cpy, be / cpy, bh / cpy, bho / cpy);
                if (rank == 0) fflush(stdout);
            }
    fsdp_mem_free(hrecv);
    fsdp_mem_free(hsend);
    fsdp_mem_free(recv);
    fsdp_mem_free(send);
    fsdp_comm_free(c[1]);
    fsdp_comm_free(c[0]);
    return 0;
}
