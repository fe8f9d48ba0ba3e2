/* hybrid_comms.c — the engine's communicators under HYBRID_SHARD (4 ranks, groups of 2; registered by
 * hybrid.cmake at np 4 only, since no smaller world has a shard group of more than one rank beside a
 * replica group). Three properties, each a bug found under hybrid sharding:
 *  1. fsdp_engine_progress moves every communicator of the engine: one call is one progress turn on
 *     the world, the shard group and the replica group, and a prefetched all-gather and a pending
 *     reduce-scatter on the shard group complete with no test or wait, by fsdp_engine_progress alone
 *     (before, only the world moved and overlap was lost under hybrid).
 *  2. The test fault switch reaches split communicators: FSDP_TEST_SKIP_COLLECTIVE="3:@unit t0" makes
 *     rank 3 skip the first collective labelled for unit t0, which runs on its shard group.
 *  3. After that all-gather times out on rank 2 (its group peer), the parameter buffer stays held by
 *     the shard group's timed-out request (the collective may still write it), not by the world and
 *     not freed into the allocator's reuse park; it is freed once rank 3 joins the collective late and
 *     the shard group is freed. */
#include "comm/comm_impl.h"

#include <mpi.h>
#include "fsdp.h"
#include "shard/shard.h"
#include "test_util.h"

#include <sched.h>

#define NU 3
static const int SIZES[NU] = {40, 24, 56};

static fsdp_engine_t *build(fsdp_comm_t *comm, const char *prefix, int max_inflight, fsdp_unit_t **u) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    ec.strategy = FSDP_HYBRID_SHARD;
    ec.shard_group = 2;
    ec.max_inflight = max_inflight;
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    for (int i = 0; i < NU && e; i++) {
        char name[8];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        fsdp_tensor_spec sp = {
            .name = "w", .ndim = 1, .shape = {SIZES[i]}, .init = FSDP_INIT_NORMAL, .std = 1};
        CHECK_OK(fsdp_engine_add_unit(e, name, &sp, 1, NULL, &u[i]));
    }
    if (e) CHECK_OK(fsdp_engine_init_params(e));
    return e;
}

static void backward_unit(fsdp_unit_t *u, int i) {
    float *g = NULL;
    int acc = -1;
    CHECK_OK(fsdp_unit_main_grad(u, 0, &g, &acc));
    if (g == NULL) return;
    for (int k = 0; k < SIZES[i]; k++)
        g[k] = 0.25f * (float)(k + i);
}

/* Calls fsdp_engine_progress (and nothing else that progresses) until *req reports done; 0 if it did
 * not within 60 s (a guard against a hang, not a speed assertion: it completes in microseconds). */
static int progress_until_done(fsdp_engine_t *e, fsdp_comm_req_t *const *req) {
    double t0 = fsdp_time_s();
    while (!(*req)->done) {
        if (fsdp_time_s() - t0 > 60.0) return 0;
        fsdp_engine_progress(e);
        sched_yield();
    }
    return 1;
}

static void test_progress(fsdp_comm_t *comm) {
    fsdp_unit_t *u[NU] = {0};
    fsdp_engine_t *e = build(comm, "u", 1, u);
    if (e == NULL || u[NU - 1] == NULL) return;
    fsdp_comm_t *sc = fsdp_engine_shard_comm(e), *rc = fsdp_engine_replica_comm(e);
    CHECK(sc != comm && fsdp_comm_size(sc) == 2 && rc != NULL && fsdp_comm_size(rc) == 2);
    for (int step = 0; step < 2; step++) { /* step 0 records the order; step 1 prefetches */
        CHECK_OK(fsdp_engine_begin_step(e, 1));
        CHECK_OK(fsdp_engine_begin_micro(e, 0));
        for (int i = 0; i < NU; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            if (step == 1 && i == 0) {
                /* u1's gather is in flight on the shard group: the engine's progress alone moves it */
                CHECK(u[1]->gather != NULL);
                uint64_t w0 = comm->progress_calls, s0 = sc->progress_calls, r0 = rc->progress_calls;
                fsdp_engine_progress(e);
                CHECKF(comm->progress_calls == w0 + 1 && sc->progress_calls == s0 + 1 &&
                           rc->progress_calls == r0 + 1,
                       "one fsdp_engine_progress: world +%llu, shard group +%llu, replica group +%llu "
                       "(want +1 each)",
                       (unsigned long long)(comm->progress_calls - w0),
                       (unsigned long long)(sc->progress_calls - s0),
                       (unsigned long long)(rc->progress_calls - r0));
                if (u[1]->gather != NULL)
                    CHECKF(progress_until_done(e, &u[1]->gather),
                           "the prefetched all-gather on the shard group did not complete under "
                           "fsdp_engine_progress");
            }
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        for (int i = NU - 1; i >= 0; i--) {
            CHECK_OK(fsdp_unit_pre_backward(u[i]));
            backward_unit(u[i], i);
            CHECK_OK(fsdp_unit_post_backward(u[i]));
        }
        /* u0's reduce-scatter is pending (overlap) on the shard group */
        if (step == 1) {
            CHECK(u[0]->reduce != NULL);
            if (u[0]->reduce != NULL)
                CHECKF(progress_until_done(e, &u[0]->reduce),
                       "the pending reduce-scatter on the shard group did not complete under "
                       "fsdp_engine_progress");
        }
        float norm = 0;
        CHECK_OK(fsdp_engine_clip_grad_norm(e, 0.0f, &norm));
        fsdp_adamw_config oc = fsdp_adamw_config_default();
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    }
    fsdp_engine_free(e);
}

static void test_timeout(fsdp_comm_t *comm, int R) {
    fsdp_unit_t *u[NU] = {0};
    fsdp_engine_t *e = build(comm, "t", 0, u);
    if (e == NULL || u[NU - 1] == NULL) return;
    fsdp_comm_t *sc = fsdp_engine_shard_comm(e);
    const size_t n = fsdp_unit_padded_numel(u[0]) / 2, full = 2 * n * sizeof(float);
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    CHECK_OK(fsdp_engine_begin_micro(e, 0));
    if (R == 2) sc->timeout_s = 0.5; /* white-box: a short timeout for the gather rank 3 skips */
    fsdp_status st = fsdp_unit_pre_forward(u[0]);
    if (R == 2) {
        CHECK_ERR(st, FSDP_ETIMEOUT, "unit t0 / all-gather params");
        /* the buffer is held by the shard group's timed-out request, not freed and not the world's */
        CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full,
               "after the timeout param_full is %zu bytes, want %zu (the buffer the gather may still write)",
               fsdp_mem_current(FSDP_MEM_PARAM_FULL), full);
        CHECK(sc->stale != NULL && sc->stale->adopted[0] != NULL && comm->stale == NULL);
        int go = 1;
        MPI_Send(&go, 1, MPI_INT, 3, 78, MPI_COMM_WORLD);
        sc->timeout_s = 30; /* the grace the shard group's free gives the abandoned gather: 2 x this */
    } else {
        CHECK_OK(st); /* rank 3: skipped (the fault reached the shard group); ranks 0, 1: done */
        CHECK_OK(fsdp_unit_post_forward(u[0]));
        if (R == 3) { /* join the all-gather rank 2 abandoned, so that its shard group can drain */
            int go = 0;
            MPI_Recv(&go, 1, MPI_INT, 2, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            float *mine = calloc(n, sizeof *mine), *all = calloc(2 * n, sizeof *all);
            CHECK_OK(fsdp_comm_all_gather(sc, mine, all, n, FSDP_F32));
            free(mine);
            free(all);
        }
    }
    fsdp_engine_free(e); /* rank 2: waits for the abandoned gather, then frees its buffer */
    CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0, "param_full %zu bytes after the engine's free",
           fsdp_mem_current(FSDP_MEM_PARAM_FULL));
}

int main(int argc, char **argv) {
    /* rank 3 skips the first collective labelled for unit t0 (test_timeout's first all-gather) */
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "3:@unit t0", 1);
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    int R = fsdp_comm_rank(comm), W = fsdp_comm_size(comm);
    CHECKF(W == 4, "hybrid_comms needs 4 ranks (groups of 2), got %d", W);
    if (W == 4) {
        test_progress(comm);
        CHECK_OK(fsdp_comm_barrier(comm));
        test_timeout(comm, R);
        CHECK_OK(fsdp_comm_barrier(comm));
    }
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
