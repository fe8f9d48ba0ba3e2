/* mpi_comm_order.c — several collectives in flight at once on Open MPI's paths give the right results
 * whatever order each rank waits for them in. The all-reduce posts its all-gather (per chunk) when its
 * all-to-all completes: before comm.c's posting rule (mpi_posts_pending), ranks that waited in
 * different orders posted in different orders and MPI matched one collective's messages with
 * another's (MPI_ERR_TRUNCATE, or silently mixed data when the sizes agree). Two communicators: shm 0
 * (every collective on MPI; the progress thread runs, as across hosts) and the default one (on one
 * host F32/BF16 go through shared memory, the I64 all-reduces through MPI). Expected values are small
 * integers, exact in f32 and bf16 in any order, recomputed here in double. */
#include "comm/comm_impl.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>

static int R, W;

static float val(int r, size_t i, int salt) { return (float)((r + 1) * (int)((i + (size_t)salt) % 7 + 1)); }
static double sum_val(size_t i, int salt) {
    double s = 0;
    for (int r = 0; r < W; r++)
        s += val(r, i, salt);
    return s;
}

/* One round: all-reduces A (f32 SUM, nA), B (f32 AVG, nB), D (i64 SUM), E (bf16 SUM) and all-gather G
 * started in that order; every rank waits for them in its own order (by rank and round). */
static void round_once(fsdp_comm_t *c, int round, size_t nA, size_t nB) {
    const size_t nG = 37, nD = 5, nE = 41;
    float *a = malloc(nA * 4), *ao = malloc(nA * 4), *b = malloc(nB * 4), *bo = malloc(nB * 4);
    float *g = malloc(nG * 4), *go = malloc(nG * (size_t)W * 4);
    int64_t d[5], dout[5];
    uint16_t e[41], eo[41];
    if (!a || !ao || !b || !bo || !g || !go) {
        CHECK(0);
        return;
    }
    for (size_t i = 0; i < nA; i++)
        a[i] = val(R, i, round);
    for (size_t i = 0; i < nB; i++)
        b[i] = val(R, i, round + 1);
    for (size_t i = 0; i < nG; i++)
        g[i] = val(R, i, round + 2);
    for (size_t i = 0; i < nD; i++)
        d[i] = (int64_t)(R + 1) << 33 | (int64_t)i;
    for (size_t i = 0; i < nE; i++) {
        float f = val(R, i, round + 3);
        uint32_t u;
        memcpy(&u, &f, 4);
        e[i] = (uint16_t)(u >> 16); /* small integers: exact in bf16 */
    }
    fsdp_comm_req_t *q[5] = {0};
    CHECK_OK(fsdp_comm_iall_reduce(c, a, ao, nA, FSDP_F32, FSDP_SUM, &q[0]));
    CHECK_OK(fsdp_comm_iall_reduce(c, b, bo, nB, FSDP_F32, FSDP_AVG, &q[1]));
    CHECK_OK(fsdp_comm_iall_gather(c, g, go, nG, FSDP_F32, &q[2]));
    CHECK_OK(fsdp_comm_iall_reduce(c, d, dout, nD, FSDP_I64, FSDP_SUM, &q[3]));
    CHECK_OK(fsdp_comm_iall_reduce(c, e, eo, nE, FSDP_BF16, FSDP_SUM, &q[4]));
    /* Wait orders: reversed, forward, or a rotation, depending on rank and round. */
    int order[5];
    for (int k = 0; k < 5; k++) {
        int m = (R + round) % 3;
        order[k] = m == 0 ? 4 - k : m == 1 ? k : (k + R + 2) % 5;
    }
    for (int k = 0; k < 5; k++)
        if (q[order[k]] != NULL) CHECK_OK(fsdp_comm_wait(q[order[k]]));
    int bad = 0;
    for (size_t i = 0; i < nA; i++)
        bad += ao[i] != (float)sum_val(i, round);
    for (size_t i = 0; i < nB; i++)
        bad += bo[i] != (float)(sum_val(i, round + 1) / W);
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < nG; i++)
            bad += go[(size_t)r * nG + i] != val(r, i, round + 2);
    for (size_t i = 0; i < nD; i++)
        bad += dout[i] != ((int64_t)W * (W + 1) / 2 << 33 | (int64_t)(i * (size_t)W));
    for (size_t i = 0; i < nE; i++) {
        uint32_t u = (uint32_t)eo[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        bad += f != (float)sum_val(i, round + 3);
    }
    CHECKF(bad == 0, "round %d (nA %zu, nB %zu, shm %d): %d wrong elements", round, nA, nB,
           fsdp_comm_shm_active(c), bad);
    free(a), free(ao), free(b), free(bo), free(g), free(go);
}

static void run_rounds(fsdp_comm_t *c) {
    for (int round = 0; round < 12; round++)
        round_once(c, round, round % 2 ? 1000 : 333, round % 3 ? 1000 : 333); /* equal and unequal sizes */
    comm_test_set_int_limit(c, 300); /* every all-reduce in several chunks: several all-gathers each */
    for (int round = 0; round < 6; round++)
        round_once(c, round, 1000, 700);
    comm_test_set_int_limit(c, 0);
}

int main(int argc, char **argv) {
    fsdp_comm_t *c = NULL, *c2 = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 120; /* a mismatch must fail, not hang the suite */
    cfg.shm = 0;
    CHECK_OK(fsdp_comm_init(&c, &cfg, &argc, &argv));
    if (c == NULL) return TEST_MAIN_END();
    R = fsdp_comm_rank(c);
    W = fsdp_comm_size(c);
    test_set_rank(R);
    if (W > 1 && getenv("OMPI_COMM_WORLD_SIZE") != NULL)
        CHECKF(fsdp_comm_progress_thread(c) == 1,
               "shm 0: the progress thread should run (provided thread level?)");
    run_rounds(c);
    cfg.shm = 1;
    CHECK_OK(fsdp_comm_init(&c2, &cfg, NULL, NULL));
    if (c2 != NULL) {
        run_rounds(c2);
        fsdp_comm_free(c2);
    }
    fsdp_comm_free(c); /* finalises MPI: it initialised it */
    return TEST_MAIN_END();
}
