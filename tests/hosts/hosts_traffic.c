/* hosts_traffic.c — the traffic probe of the multi-host tests (tests/hosts/hosts_traffic.sh): REPS
 * all-gathers of MIB MiB (f32) per rank through fsdp_comm, each rank's block filled from its rank, so
 * the result checks itself. Prints one line per rank: "rank R host H local L", which the script
 * compares with the harness's layout, and returns non-zero on a wrong result.
 * usage: hosts_traffic MIB REPS */
#include "comm/comm_impl.h" /* white-box: a request's done flag, set by the progress thread */

#include <mpi.h>
#include "test_util.h"

#include <time.h>

static float recv_probe[1024];

#include <unistd.h>

/* Open MPI's btl_tcp_flags as the TCP transport of this process sees it (MPI_T), or -1. */
static long tcp_flags(void) {
    int prov = 0, idx = -1, count = 0;
    long v = -1;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS) return -1;
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_get_index("btl_tcp_flags", &idx) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
        unsigned int u = 0;
        if (count == 1 && MPI_T_cvar_read(h, &u) == MPI_SUCCESS) v = (long)u;
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return v;
}

int main(int argc, char **argv) {
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 60;
    if (fsdp_comm_init(&c, &cfg, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "hosts_traffic: fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    int rank = fsdp_comm_rank(c), world = fsdp_comm_size(c);
    test_set_rank(rank);
    /* across hosts: no shared-memory transport, and the MPI progress thread runs (unless turned off) */
    int across = fsdp_comm_local_size(c) < world;
    const char *thr = getenv("FSDP_COMM_PROGRESS_THREAD");
    CHECK(fsdp_comm_shm_active(c) == !across);
    CHECK(fsdp_comm_progress_thread(c) == (across && !(thr && strcmp(thr, "0") == 0)));
    /* fsdp_comm_init took RDMA emulation ("put", 0x2) out of Open MPI's TCP transport unless the launcher
     * set the flags (HOSTS_TCP_FLAGS_SET=1 from the script then): with it the step's collectives ran at
     * half the line rate (comm_mpi.c) */
    long fl = tcp_flags();
    const char *user = getenv("HOSTS_TCP_FLAGS_SET");
    CHECKF(fl >= 0, "btl_tcp_flags not readable through MPI_T");
    if (user == NULL)
        CHECKF(fl >= 0 && (fl & 0x1) && !(fl & 0x2), "btl_tcp_flags %#lx: want send (0x1) without put (0x2)",
               fl);
    else
        CHECKF(fl >= 0 && (fl & 0x2), "btl_tcp_flags %#lx: the launcher's value (with put) was not kept", fl);
    /* and non-blocking requests complete through it while this thread only sleeps */
    if (across) {
        float x = (float)(rank + 1), y = 0;
        fsdp_comm_req_t *q = NULL;
        CHECK_OK(fsdp_comm_iall_gather(c, &x, recv_probe, 1, FSDP_F32, &q));
        for (int i = 0; i < 2000 && q; i++) { /* up to 2 s: the thread must finish it */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            if (q->done) break;
        }
        CHECK(q == NULL || q->done);
        if (q) CHECK_OK(fsdp_comm_wait(q));
        for (int r = 0; r < world; r++)
            y += recv_probe[r];
        CHECK(y == (float)(world * (world + 1) / 2));
    }
    double mib = argc > 1 ? atof(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 0;
    CHECKF(mib > 0 && mib <= 1024 && reps >= 1 && reps <= 100,
           "usage: hosts_traffic MIB(0..1024] REPS[1..100]");
    size_t n = mib > 0 && mib <= 1024 ? (size_t)(mib * 1024 * 1024 / sizeof(float)) : 1;
    float *send = malloc(n * sizeof *send), *recv = malloc(n * (size_t)world * sizeof *recv);
    CHECK(send != NULL && recv != NULL);
    if (send != NULL && recv != NULL) {
        for (size_t i = 0; i < n; i++)
            send[i] = (float)(rank * 1000 + (int)(i % 997));
        for (int k = 0; k < reps && reps <= 100; k++) {
            memset(recv, 0xff, n * (size_t)world * sizeof *recv);
            CHECK_OK(fsdp_comm_all_gather(c, send, recv, n, FSDP_F32));
            size_t wrong = 0;
            for (int r = 0; r < world; r++)
                for (size_t i = 0; i < n; i++)
                    wrong += recv[(size_t)r * n + i] != (float)(r * 1000 + (int)(i % 997));
            CHECKF(wrong == 0, "all-gather %d: %zu wrong elements", k, wrong);
        }
    }
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    printf("rank %d host %s local %d\n", rank, host, fsdp_comm_local_size(c));
    free(send);
    free(recv);
    int failed = test_fail_ != 0;
    fsdp_comm_free(c);
    return failed;
}
