/* test_comm_rows.c — the communicator's transport table as a second backend meets it: a row added to
 * a communicator's ordered list (what a device backend's init does) carries the requests it takes and
 * no others, and fsdp_comm_wait_stream hands the stream dependency to the row instead of waiting on the
 * host. The row here is the test's own stand-in for a stream-ordered transport: its "collective" is a
 * copy queued on a simulated device's communication stream (device_sim.c runs queued work in any
 * order the queues and recorded waits allow, seeded), so a missing dependency reads poison. The same
 * run with the row's wait_stream emptied shows that the check can fail. */
#include "comm/comm_impl.h"
#include "comm/comm_plan.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>

#define N     4099
#define SEEDS 12

static struct {
    fsdp_device_t *d;
    fsdp_stream_t *cs; /* the row's communication stream */
    fsdp_event_t *ev;  /* recorded after the collective's copy */
    int starts, waits, forget;
} row;

static int row_takes(const fsdp_comm_req_t *r) { return r->coll == COLL_ALL_REDUCE && r->t == FSDP_F32; }

static fsdp_status row_start(fsdp_comm_req_t *r) {
    row.starts++;
    row.d->copy(row.d, r->recv, r->send, r->count * sizeof(float), row.cs); /* runs when cs gets there */
    row.d->record(row.d, row.ev, row.cs);
    return FSDP_OK;
}

static fsdp_status row_progress(fsdp_comm_req_t *r, int *done) {
    (void)r;
    *done = row.d->query(row.d, row.ev);
    return FSDP_OK;
}

static fsdp_status row_wait_stream(fsdp_comm_req_t *r, fsdp_device_t *d, fsdp_stream_t *s) {
    (void)r;
    row.waits++;
    if (!row.forget) d->wait(d, s, row.ev);
    return FSDP_OK;
}

static const comm_transport stream_row = {
    .name = "test-stream",
    .id = COMM_ROW_SHM, /* a free slot on a self communicator; the row keeps no state there */
    .caps = COMM_CAP_DEVICE_MEM,
    .takes = row_takes,
    .start = row_start,
    .progress = row_progress,
    .wait_stream = row_wait_stream,
};

typedef struct {
    const float *got, *want;
    size_t n;
    long *bad;
} check_arg;

/* Runs on the caller's stream, where a kernel would read the collective's result. */
static void check_fn(void *p) {
    const check_arg *a = p;
    for (size_t i = 0; i < a->n; i++)
        if (!(a->got[i] == a->want[i])) ++*a->bad;
}

/* One all-reduce through the row per seed; the result read on stream s after fsdp_comm_wait_stream
 * (host 0) or fsdp_comm_wait (host 1). Returns the seeds whose read saw a wrong element. */
static int run_seeds(fsdp_comm_t *c, int host, long *reordered_out) {
    static float send[N], recv[N];
    for (size_t i = 0; i < N; i++)
        send[i] = (float)((int)(i * 13 % 97) - 48) * 0.25f;
    int caught = 0;
    *reordered_out = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        CHECK_OK(fsdp_device_sim_create(seed, 0, &row.d));
        fsdp_stream_t *s = NULL;
        CHECK_OK(row.d->stream_create(row.d, &row.cs));
        CHECK_OK(row.d->stream_create(row.d, &s));
        CHECK_OK(row.d->event_create(row.d, &row.ev));
        for (size_t i = 0; i < N; i++)
            recv[i] = NAN;
        long bad = 0;
        fsdp_comm_req_t *r = NULL;
        CHECK_OK(fsdp_comm_iall_reduce(c, send, recv, N, FSDP_F32, FSDP_SUM, &r));
        CHECK_OK(host ? fsdp_comm_wait(r) : fsdp_comm_wait_stream(r, row.d, s));
        check_arg a = {recv, send, N, &bad};
        row.d->host_fn(row.d, s, check_fn, &a, sizeof a);
        CHECK_OK(row.d->sync(row.d));
        caught += bad > 0;
        long ran = 0, re = 0;
        fsdp_device_sim_counts(row.d, &ran, &re);
        *reordered_out += re;
        row.d->event_destroy(row.d, row.ev);
        fsdp_device_sim_destroy(row.d); /* its streams with it */
        row.d = NULL;
    }
    return caught;
}

int main(void) {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("FSDP_TEST_SKIP_COLLECTIVE");
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.backend = FSDP_COMM_SELF;
    cfg.timeout_s = 30;
    fsdp_comm_t *c = NULL;
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    if (c == NULL) return TEST_MAIN_END();
    CHECK(c->nrows == 1 && c->rows[0] == c->be);
    CHECK(comm_caps(c) & COMM_CAP_HOST_POLL);

    /* A host row: wait_stream is the host wait (the stream needs nothing more). */
    float a[3] = {1, 2, 3}, b[3] = {0};
    fsdp_comm_req_t *r = NULL;
    CHECK_OK(fsdp_comm_iall_reduce(c, a, b, 3, FSDP_F32, FSDP_SUM, &r));
    CHECK_OK(fsdp_comm_wait_stream(r, NULL, NULL));
    CHECK(b[0] == 1 && b[1] == 2 && b[2] == 3);
    CHECK_ERR(fsdp_comm_wait_stream(NULL, NULL, NULL), FSDP_EINVAL, "NULL");

    comm_rows_prepend(c, &stream_row);
    CHECK(c->nrows == 2 && c->rows[0] == &stream_row && c->rows[1] == c->be);
    /* The stream row takes F32 all-reduces only: the engine's gathers and reduce-scatters still go to
     * the self row, whose capabilities the communicator states. */
    CHECK(comm_caps(c) == c->be->caps);

    /* Requests the row does not take go down the list to the backend's row (done at the start). */
    row.starts = 0;
    int64_t ia[2] = {5, 6}, ib[2] = {0};
    CHECK_OK(fsdp_comm_all_reduce(c, ia, ib, 2, FSDP_I64, FSDP_SUM));
    CHECK(ib[0] == 5 && ib[1] == 6 && row.starts == 0);
    CHECK_OK(fsdp_comm_all_gather(c, a, b, 3, FSDP_F32));
    CHECK(row.starts == 0);

    long re = 0;
    row.waits = row.starts = 0;
    int caught = run_seeds(c, 0, &re);
    CHECKF(caught == 0, "the stream read the collective's result early on %d of %d seeds", caught, SEEDS);
    CHECKF(row.starts == SEEDS && row.waits == SEEDS, "row started %d and ordered %d of %d", row.starts,
           row.waits, SEEDS);

    row.waits = 0;
    caught = run_seeds(c, 1, &re); /* the host wait: complete before anything is queued on s */
    CHECKF(caught == 0 && row.waits == 0, "host wait: %d seeds wrong, %d stream waits", caught, row.waits);

    row.forget = 1; /* planted: the row orders nothing */
    caught = run_seeds(c, 0, &re);
    fprintf(stderr, "planted missing stream wait: caught on %d of %d seeds (%ld items out of order)\n",
            caught, SEEDS, re);
    CHECKF(caught > 0, "a row that orders nothing was not caught on any of %d seeds", SEEDS);
    row.forget = 0;

    c->nrows = 1; /* the test's row out before the self row's shut-down */
    c->rows[0] = c->be;
    fsdp_comm_free(c);
    return TEST_MAIN_END();
}
