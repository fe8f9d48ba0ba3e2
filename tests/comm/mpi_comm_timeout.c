/* mpi_comm_timeout.c — a collective that one rank never joins ends in FSDP_ETIMEOUT on the others
 * (message naming the rank, the label, the collective and the elapsed time) instead of a hang, and the
 * job still shuts down cleanly. The fault switch FSDP_TEST_SKIP_COLLECTIVE=<last rank>:1 makes the last
 * rank skip its second collective; once every other rank has reported its timeout (point-to-point on
 * MPI_COMM_WORLD, outside the communicator under test), the last rank joins the pending collective so
 * that every rank can finalise MPI. */
#include "comm/comm_mpi.h"
#include "test_util.h"

#define TIMEOUT_S 0.5

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv); /* the test owns MPI: fsdp_comm_init must not initialise or finalise it */
    int R = 0, W = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    test_set_rank(R);
    const int S = W - 1; /* the rank that skips */
    char v[32];
    snprintf(v, sizeof v, "%d:1", S);
    setenv("FSDP_TEST_SKIP_COLLECTIVE", v, 1);

    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 60; /* start-up may be slow on a loaded machine; lowered below */
    CHECK_OK(fsdp_comm_init(&c, &cfg, &argc, &argv));
    if (c == NULL) {
        MPI_Finalize();
        return TEST_MAIN_END();
    }
    CHECK(comm_mpi_inited_here(c) == 0);
    fsdp_comm_set_label(c, "unit block7 / test");
    CHECK_OK(fsdp_comm_barrier(c)); /* collective 0 */
    c->timeout_s = TIMEOUT_S;       /* white-box: a short timeout just for collective 1 */

    float x = (float)(R + 1), y = 0.0f, want = (float)(W * (W + 1) / 2);
    if (R == S) {
        CHECK_OK(fsdp_comm_all_reduce(c, &x, &y, 1, FSDP_F32, FSDP_SUM)); /* collective 1: skipped */
        CHECK(y == 0.0f);
        for (int k = 0; k < W - 1; k++) { /* every other rank timed out and checked its message */
            int ok = 0;
            MPI_Recv(&ok, 1, MPI_INT, MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECKF(ok == 1, "another rank's timeout checks failed");
        }
        c->timeout_s = 60;
        /* Now join the collective the others abandoned, so that their fsdp_comm_free can drain it. */
        CHECK_OK(fsdp_comm_all_reduce(c, &x, &y, 1, FSDP_F32, FSDP_SUM));
        CHECK(y == want);
    } else {
        double t0 = fsdp_time_s();
        fsdp_status s = fsdp_comm_all_reduce(c, &x, &y, 1, FSDP_F32, FSDP_SUM);
        double el = fsdp_time_s() - t0;
        int fails_before = test_fail_;
        CHECK_ERR(s, FSDP_ETIMEOUT, "all-reduce");
        char rank_txt[32];
        snprintf(rank_txt, sizeof rank_txt, "rank %d of %d", R, W);
        const char *rank_needle = rank_txt; /* a pointer: CHECK_ERR tests the needle for NULL */
        CHECK_ERR(s, FSDP_ETIMEOUT, rank_needle);
        CHECK_ERR(s, FSDP_ETIMEOUT, "unit block7 / test");
        CHECK_ERR(s, FSDP_ETIMEOUT, "fsdp_comm_abort");
        double reported = -1;
        const char *p = strstr(fsdp_last_error(), "after ");
        if (p) reported = atof(p + 6);
        CHECKF(reported >= TIMEOUT_S && reported <= el + 0.001, "reported %.3f s, waited %.3f s", reported,
               el);
        CHECKF(el >= TIMEOUT_S && el < TIMEOUT_S + 10.0, "timed out after %.3f s", el);
        /* The communicator is out of step now: later collectives are refused, not mismatched. */
        CHECK_ERR(fsdp_comm_barrier(c), FSDP_ESTATE, "timed out");
        /* A buffer of the timed-out call goes to the communicator: not freed now (the call may still
         * write it), freed once the call completes (in fsdp_comm_free's drain below). */
        void *held = NULL;
        CHECK_OK(fsdp_mem_alloc(&held, 4096, FSDP_MEM_COMM));
        fsdp_comm_adopt_buffer(c, held);
        CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 4096);
        int ok = test_fail_ == fails_before;
        MPI_Send(&ok, 1, MPI_INT, S, 77, MPI_COMM_WORLD);
        c->timeout_s = 30; /* the grace fsdp_comm_free gives the abandoned collective: 2 x this */
    }
    fsdp_comm_free(c); /* the other ranks: waits for the abandoned all-reduce, which S has now joined */
    if (R != S) CHECKF(y == want, "abandoned all-reduce finished with %g, want %g", y, want);
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0); /* the adopted buffer went with the completed call */
    MPI_Finalize();
    return TEST_MAIN_END();
}
