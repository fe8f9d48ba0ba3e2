/* mpi_comm_agree.c — fsdp_comm_agree under mpirun -np 1..4: no failure gives FSDP_OK everywhere; with
 * one or several failing ranks every rank learns the lowest failing rank and its status, a failing
 * rank keeps its own status and message, the others get FSDP_EPEER with "<what> failed on rank r (its
 * message says why)"; a later clean agreement clears the record; world 1 and a NULL communicator pass
 * the status through. Every rank derives the expected outcome from the scenario alone. */
#include "comm/comm_impl.h"
#include "test_util.h"

static int R, W;

/* Scenario: ranks in `failing` (a bit set) fail with status st_of(rank). */
static fsdp_status st_of(int r) { return r % 2 ? FSDP_EIO : FSDP_EINVAL; }

static void scenario(fsdp_comm_t *c, unsigned failing, const char *what) {
    fsdp_status mine = FSDP_OK;
    if (failing >> R & 1u)
        mine = fsdp_set_error(st_of(R), "own failure of rank %d", R);
    else
        fsdp_clear_error();
    fsdp_status got = fsdp_comm_agree(c, mine, what);
    int lowest = -1;
    for (int r = 0; r < W && lowest < 0; r++)
        if (failing >> r & 1u) lowest = r;
    fsdp_status lowest_st = FSDP_OK;
    int agreed = fsdp_comm_agreed_failure(c, &lowest_st);
    if (lowest < 0) {
        CHECKF(got == FSDP_OK, "%s: no failure, got %s: %s", what, fsdp_strerror(got), fsdp_last_error());
        CHECK(agreed == -1 && lowest_st == FSDP_OK);
        return;
    }
    if (W == 1) { /* nothing to agree with: the status passes through, nothing is recorded */
        CHECK(got == mine && agreed == -1);
        return;
    }
    CHECKF(agreed == lowest && lowest_st == st_of(lowest), "%s: agreed rank %d status %s, want %d %s", what,
           agreed, fsdp_strerror(lowest_st), lowest, fsdp_strerror(st_of(lowest)));
    if (mine != FSDP_OK) {
        CHECKF(got == mine, "%s: a failing rank got %s", what, fsdp_strerror(got));
        char own[64];
        snprintf(own, sizeof own, "own failure of rank %d", R);
        CHECKF(strcmp(fsdp_last_error(), own) == 0, "%s: own message replaced by \"%s\"", what,
               fsdp_last_error());
    } else {
        CHECKF(got == FSDP_EPEER, "%s: a rank that was fine got %s", what, fsdp_strerror(got));
        char want[128];
        snprintf(want, sizeof want, "%s failed on rank %d (its message says why)", what, lowest);
        CHECKF(strcmp(fsdp_last_error(), want) == 0, "message \"%s\", want \"%s\"", fsdp_last_error(), want);
    }
}

int main(int argc, char **argv) {
    CHECK(strcmp(fsdp_strerror(FSDP_EPEER), "another rank failed") == 0);
    /* no communicator: the status passes through */
    CHECK(fsdp_comm_agree(NULL, FSDP_EIO, "x") == FSDP_EIO && fsdp_comm_agreed_failure(NULL, NULL) == -1);

    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.timeout_s = 120;
    fsdp_comm_t *c = NULL;
    if (fsdp_comm_init(&c, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    R = fsdp_comm_rank(c);
    W = fsdp_comm_size(c);
    test_set_rank(R);
    CHECK(fsdp_comm_agreed_failure(c, NULL) == -1); /* none made yet */

    scenario(c, 0, "a clean step");
    for (int f = 0; f < W; f++) { /* each rank alone */
        char what[32];
        snprintf(what, sizeof what, "step %d", f);
        scenario(c, 1u << f, what);
    }
    scenario(c, 0, "a clean step after failures"); /* clears the record */
    if (W >= 3) scenario(c, 1u << 1 | 1u << 2, "two ranks failing");
    scenario(c, (1u << W) - 1, "every rank failing");
    if (W >= 2) scenario(c, 1u << (W - 1), "the last rank");
    fsdp_comm_free(c);
    return TEST_MAIN_END();
}
