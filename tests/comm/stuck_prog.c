/* stuck_prog.c — run by stuck.sh under mpirun with 2 ranks: rank 1's second collective never returns
 * from its first progress call (FSDP_TEST_SKIP_COLLECTIVE=1:1:hang, as if MPI itself did not return,
 * holding the MPI lock). With stuck_exit 7 and timeout_s 1, its stuck watchdog must end it with status
 * 7 and a message naming the collective; rank 0 (timeout 60 s, no watchdog) waits in the same
 * collective until the launcher ends the job. Anything else prints FAIL. */
#include "comm/comm_impl.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int provided = 0, r = 0, w = 0;
    /* SERIALIZED, as fsdp_comm_init asks for: with FSDP_COMM_SHM=0 the progress thread then runs and
     * waits on the lock the hung call holds, as on the namespace hosts. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    if (w != 2) {
        printf("FAIL: run with 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.backend = FSDP_COMM_MPI;
    cfg.timeout_s = r == 1 ? 1.0 : 60.0; /* rank 1: a short timeout and the watchdog; rank 0 neither */
    cfg.stuck_exit = r == 1 ? 7 : 0;
    if (fsdp_comm_init(&c, &cfg, &argc, &argv) != FSDP_OK) {
        printf("FAIL: rank %d: fsdp_comm_init: %s\n", r, fsdp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    printf("rank %d: progress thread %d\n", r, fsdp_comm_progress_thread(c));
    fflush(stdout);
    fsdp_comm_set_label(c, "unit block7 / stuck");
    if (fsdp_comm_barrier(c) != FSDP_OK) { /* collective 0 */
        printf("FAIL: rank %d: barrier: %s\n", r, fsdp_last_error());
        fflush(stdout);
        fsdp_comm_abort(c, 3);
    }
    float x = 1.0f, y = 0.0f;
    fsdp_status s = fsdp_comm_all_reduce(c, &x, &y, 1, FSDP_F32, FSDP_SUM); /* collective 1: rank 1 hangs */
    printf("FAIL: rank %d: the all-reduce returned (%s: %s)\n", r, fsdp_strerror(s), fsdp_last_error());
    fflush(stdout);
    fsdp_comm_abort(c, 3);
}
