/* comm_mpi.c — the Open MPI backend: MPI start-up and shut-down, and each collective as a short
 * sequence of non-blocking MPI steps that comm.c polls (so every collective can time out).
 * BF16 reductions are done here, deterministically, by moving the bf16 blocks with an all-to-all and
 * summing each element's world contributions in fp32 in rank order, rounding once. */
#include "comm/comm_mpi.h"
#include "comm/comm_shm.h"
#include "comm/comm_watch.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The row's communicator state (c->state[COMM_ROW_MPI]). */
typedef struct {
    MPI_Comm comm;   /* a duplicate of MPI_COMM_WORLD (or a split) with MPI_ERRORS_RETURN */
    int inited_here; /* fsdp_comm_init called MPI_Init_thread: free finalises */
    /* Progress thread, across hosts: moves MPI requests while the caller computes. When it runs,
     * comm_mpi_mu serialises every MPI call and every use of the in-flight list. */
    int thr_on;
    volatile int thr_stop;
    pthread_t thr;
    long thr_interval_us;
} mpi_state;

/* Where a request is in its sequence of steps (what to do when the posted step completes). */
typedef enum {
    PH_NONE = 0,    /* nothing posted: done */
    PH_FINAL,       /* the posted step is the last one; nothing to do after it */
    PH_RS_A2A,      /* MPI_Ialltoall into stage: reduce the world contributions into recv afterwards */
    PH_AR_BF16_A2A, /* MPI_Ialltoallv of chunk blocks into stage: reduce own block, then all-gatherv */
    PH_AR_BF16_AG   /* MPI_Iallgatherv of the reduced blocks of the chunk: then the next chunk */
} mpi_phase;

/* A request's state (r->priv; zero before the start). */
typedef struct {
    MPI_Request mreq;
    mpi_phase phase;
    size_t off, len;       /* all-reduce: the chunk in flight, elements */
    size_t blk;            /* all-reduce: elements per rank block of the chunk */
    void *stage;           /* FSDP_MEM_COMM staging (alltoall receive), or NULL */
    MPI_Datatype blk_type; /* a derived "count elements" type for counts > int_limit */
    int blk_type_owned;
    int *counts; /* all-reduce: 4*world ints: scount, sdispl, rcount, rdispl */
} mpi_req;
_Static_assert(sizeof(mpi_req) <= COMM_REQ_PRIV_BYTES, "mpi_req must fit fsdp_comm_req.priv");

static mpi_state *st_of(const fsdp_comm_t *c) { return c->state[COMM_ROW_MPI]; }
static mpi_req *rq(fsdp_comm_req_t *r) { return (mpi_req *)(void *)r->priv; }
static const mpi_req *rqc(const fsdp_comm_req_t *r) { return (const mpi_req *)(const void *)r->priv; }

/* An MPI failure as FSDP_ECOMM with MPI's own text, the rank, the label and the step: the request's
 * label when a request failed (r), else the communicator's. */
static fsdp_status mpi_fail_at(const fsdp_comm_t *c, const fsdp_comm_req_t *r, int rc, const char *step,
                               const char *coll) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", rc);
    return fsdp_set_error_at(FSDP_ECOMM, "fsdp_comm", "rank %d: %s failed in %s (label \"%s\"): %s",
                             c ? c->rank : -1, step, coll,
                             r   ? r->label
                             : c ? c->label
                                 : "",
                             msg);
}

static fsdp_status mpi_fail(const fsdp_comm_t *c, int rc, const char *step, const char *coll) {
    return mpi_fail_at(c, NULL, rc, step, coll);
}

static fsdp_status req_fail(const fsdp_comm_req_t *r, int rc, const char *step) {
    return mpi_fail_at(r->c, r, rc, step, comm_coll_name(r->coll));
}

/* ---------------------------------------------------------------------------- progress thread */

/* Open MPI moves a non-blocking collective only inside MPI calls. Within one host the collectives run
 * on the shared-memory transport, whose progress is the copying itself, done by the caller between
 * kernels. Across hosts the bytes go through TCP, which needs an MPI call now and then and little CPU:
 * there a thread polls every in-flight MPI request every thr_interval_us (FSDP_COMM_PROGRESS_US,
 * default 100; FSDP_COMM_PROGRESS_THREAD=0 turns it off), so a gather or reduction keeps the link
 * busy while the caller computes: without it the link idles during every kernel, and overlap can be
 * slower than no overlap (docs/MULTIHOST.md has the measurement). It needs MPI_THREAD_SERIALIZED: every MPI
 * call, on any thread, holds comm_mpi_mu. */
static void *progress_thread(void *arg) {
    fsdp_comm_t *c = arg;
    mpi_state *m = st_of(c);
    while (!m->thr_stop) {
        int busy = 0;
        pthread_mutex_lock(&comm_mpi_mu);
        for (fsdp_comm_req_t *q = c->inflight; q != NULL && !busy; q = q->next_inflight)
            busy = q->tp == &comm_transport_mpi && !q->done && !q->stalled && !q->failed;
        if (busy) c->poll(c); /* the front end's turn over the in-flight MPI requests */
        pthread_mutex_unlock(&comm_mpi_mu);
        struct timespec ts = {0, (busy ? m->thr_interval_us : 1000) * 1000L}; /* idle: 1 ms naps */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static fsdp_status thread_start(fsdp_comm_t *c) {
    mpi_state *m = st_of(c);
    int on = 1;
    FSDP_TRY(fsdp_env_bool("FSDP_COMM_PROGRESS_THREAD", 1, &on));
    FSDP_TRY(fsdp_env_int("FSDP_COMM_PROGRESS_US", 100, &m->thr_interval_us));
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    /* one host: the shared-memory row carries the collectives (the first row is not this one) */
    if (c->size < 2 || c->rows[0] != &comm_transport_mpi || provided < MPI_THREAD_SERIALIZED || !on)
        return FSDP_OK;
    m->thr_stop = 0;
    m->thr_on = 1;
    comm_mpi_threads++; /* before the thread exists: from here every MPI call takes the lock */
    if (pthread_create(&m->thr, NULL, progress_thread, c) != 0) {
        m->thr_on = 0;
        comm_mpi_threads--;
    }
    c->row_thread = m->thr_on;
    return FSDP_OK;
}

static void thread_stop(fsdp_comm_t *c) {
    mpi_state *m = st_of(c);
    if (m == NULL || !m->thr_on) return;
    m->thr_stop = 1;
    pthread_join(m->thr, NULL);
    m->thr_on = 0;
    c->row_thread = 0;
    comm_mpi_threads--;
}

int fsdp_comm_progress_thread(const fsdp_comm_t *c) {
    return c && c->backend == FSDP_COMM_MPI && st_of(c) ? st_of(c)->thr_on : 0;
}

int comm_mpi_inited_here(const fsdp_comm_t *c) { return st_of(c) ? st_of(c)->inited_here : 0; }

/* Rank, size, error handler, node size and the shared-memory transport of c->comm (a duplicate of
 * MPI_COMM_WORLD, or a split). */
static fsdp_status setup(fsdp_comm_t *c, const char *who) {
    MPI_Comm comm = st_of(c)->comm;
    /* Failures come back as return codes (FSDP_ECOMM with MPI's text), not as an abort inside MPI. */
    int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &c->size);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Comm_rank/size", who);
    MPI_Comm node = MPI_COMM_NULL;
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &c->local_size);
    if (rc != MPI_SUCCESS) {
        if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
        return mpi_fail(c, rc, "MPI_Comm_split_type", who);
    }
    fsdp_status s = comm_shm_init(c, node, c->local_size); /* puts its row first when it is on */
    MPI_Comm_free(&node);
    return s;
}

static fsdp_status state_new(fsdp_comm_t *c) {
    mpi_state *m = calloc(1, sizeof *m);
    if (m == NULL) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the MPI row's state");
    m->comm = MPI_COMM_NULL;
    c->state[COMM_ROW_MPI] = m;
    return FSDP_OK;
}

static void state_free(fsdp_comm_t *c) {
    free(c->state[COMM_ROW_MPI]);
    c->state[COMM_ROW_MPI] = NULL;
}

/* Open MPI's TCP transport by default moves a large message by RDMA emulation ("put"): the receiver
 * answers the sender's first fragment with a control message that asks for the rest. With both
 * directions of a link busy (every all-gather and all-to-all of the step), that control message
 * queues behind the receiver's own bulk data on the same socket, the two transfers run one after the
 * other and a collective takes twice its time. Measured on two namespace hosts at 1 Gbit/s (Open MPI
 * 4.1.4): the step's collective sequence ran at ~0.55 of the line rate with "put" and ~0.92 without;
 * one collective repeated alone was at the line rate either way (docs/MULTIHOST.md). Without "put"
 * the sender streams the message in send fragments after one acknowledgement. Only the TCP transport
 * reads this setting; a value the user gave (`--mca btl_tcp_flags`, which mpirun passes on in the
 * environment) is kept, and MPI initialised by the caller is left as it is. */
static void tcp_defaults(void) {
#ifdef OMPI_MAJOR_VERSION
    if (getenv("OMPI_MCA_btl_tcp_flags") == NULL) setenv("OMPI_MCA_btl_tcp_flags", FSDP_TCP_FLAGS, 0);
#endif
}

static fsdp_status comm_mpi_init(fsdp_comm_t *c, int *argc, char ***argv) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return FSDP_ERR(FSDP_ESTATE, "MPI is already finalised; create communicators before MPI_Finalize");
    FSDP_TRY(state_new(c));
    mpi_state *m = st_of(c);
    fsdp_status s = FSDP_OK;
    int rc;
    if (!inited) {
        int provided = 0;
        tcp_defaults();
        /* SERIALIZED: the caller's thread and, across hosts, the progress thread make MPI calls, never
         * at once (the communicator's lock); OpenMP threads never do. */
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            state_free(c);
            return mpi_fail(c, rc, "MPI_Init_thread", "fsdp_comm_init");
        }
        m->inited_here = 1;
    }
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc != MPI_SUCCESS) {
        s = mpi_fail(c, rc, "MPI_Comm_dup", "fsdp_comm_init");
        goto fail;
    }
    if ((s = setup(c, "fsdp_comm_init")) != FSDP_OK) goto fail_dup;
    comm_watch_start(c);
    if ((s = thread_start(c)) != FSDP_OK) { /* a bad FSDP_COMM_PROGRESS_* value */
        comm_watch_stop(c);
        goto fail_shm;
    }
    return FSDP_OK;
fail_shm:
    comm_shm_free(c);
fail_dup:
    MPI_Comm_free(&m->comm);
fail:
    if (m->inited_here) MPI_Finalize();
    state_free(c);
    return s;
}

static fsdp_status comm_mpi_split(fsdp_comm_t *parent, int color, int key, fsdp_comm_t *c) {
    FSDP_TRY(state_new(c));
    mpi_state *m = st_of(c);
    comm_lock(parent);
    int rc = MPI_Comm_split(st_of(parent)->comm, color, key, &m->comm);
    fsdp_status s = rc == MPI_SUCCESS ? setup(c, "fsdp_comm_split")
                                      : mpi_fail(parent, rc, "MPI_Comm_split", "fsdp_comm_split");
    if (s != FSDP_OK && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    comm_unlock(parent);
    if (s != FSDP_OK) state_free(c);
    return s; /* no progress thread of its own: its waits poll it */
}

static void mpi_stop(fsdp_comm_t *c) { thread_stop(c); }

/* After the front end's drain (watched: it calls into MPI). A timed-out collective still owned by MPI
 * would make MPI_Finalize wait for it forever: not drained, MPI is left alone; the job should be
 * ending through fsdp_comm_abort anyway. */
static void mpi_free(fsdp_comm_t *c, int drained, double grace) {
    comm_watch_stop(c);
    if (!drained) {
        fprintf(stderr,
                "fsdp_comm_free: rank %d: a timed-out collective is still pending after %.1f s; MPI is "
                "not finalised (end the job with fsdp_comm_abort)\n",
                c->rank, grace);
        return;
    }
    comm_shm_free(c);
    mpi_state *m = st_of(c);
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    if (m->inited_here) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
    state_free(c);
}

/* MPI_Abort asks the launcher to kill every rank of the job, and blocks until it does; the front end
 * (fsdp_comm_abort) armed a deadline before it, so the job's end on the surviving hosts does not depend
 * on the launcher's cleanup. */
static void comm_mpi_abort(fsdp_comm_t *c, int code) {
    mpi_state *m = st_of(c);
    if (m->thr_on) { /* no MPI call may run beside MPI_Abort: stop the thread, or give it 0.5 s */
        m->thr_stop = 1;
        for (int i = 0; i < 500 && pthread_mutex_trylock(&comm_mpi_mu) != 0; i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    MPI_Abort(m->comm != MPI_COMM_NULL ? m->comm : MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort does not return; this only satisfies noreturn */
}

/* ------------------------------------------------------------------------------------- datatypes */

/* MPI's type for each dtype. I32 and I64 take the same all-to-all paths as BF16 (the reductions below
 * that are not F32's native ones): moved as MPI's integer types, reduced locally and exactly
 * (comm_reduce_blocks), so the order of the contributions cannot matter. */
static MPI_Datatype base_type(fsdp_dtype t) {
    switch (t) {
    case FSDP_F32: return MPI_FLOAT;
    case FSDP_BF16: return MPI_UINT16_T; /* opaque 16-bit words: MPI never does arithmetic on bf16 */
    case FSDP_I32: return MPI_INT32_T;
    case FSDP_I64: return MPI_INT64_T;
    case FSDP_U8: return MPI_UINT8_T;
    }
    return MPI_DATATYPE_NULL; /* not reached: check_args refuses other values */
}

/* Count and datatype describing n contiguous elements. Up to int_limit elements that is (n, base);
 * above it, MPI's int counts would overflow, so one derived type of exactly n elements (q chunks of
 * int_limit, then the remainder) is built, committed and kept in r->blk_type: (1, that type). Only for
 * data movement: predefined reduction ops are not used on derived types. */
static fsdp_status count_and_type(fsdp_comm_req_t *r, size_t n, int *cnt, MPI_Datatype *type) {
    mpi_req *mr = rq(r);
    MPI_Datatype base = base_type(r->t);
    size_t lim = r->c->int_limit, es = fsdp_dtype_size(r->t);
    if (n <= lim) {
        *cnt = (int)n;
        *type = base;
        return FSDP_OK;
    }
    size_t q = n / lim, rem = n % lim;
    if (q > INT_MAX)
        return FSDP_ERR(FSDP_EINVAL, "%s: count %zu is too large to describe to MPI", comm_coll_name(r->coll),
                        n);
    MPI_Datatype chunk = MPI_DATATYPE_NULL, body = MPI_DATATYPE_NULL, whole = MPI_DATATYPE_NULL;
    int rc = MPI_Type_contiguous((int)lim, base, &chunk);
    if (rc == MPI_SUCCESS) rc = MPI_Type_contiguous((int)q, chunk, &body);
    if (rc == MPI_SUCCESS && rem > 0) {
        int bl[2] = {1, (int)rem};
        MPI_Aint disp[2] = {0, (MPI_Aint)(q * lim * es)};
        MPI_Datatype ty[2] = {body, base};
        rc = MPI_Type_create_struct(2, bl, disp, ty, &whole);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_create_resized(rem > 0 ? whole : body, 0, (MPI_Aint)(n * es), &mr->blk_type);
    if (rc == MPI_SUCCESS) {
        mr->blk_type_owned = 1;
        rc = MPI_Type_commit(&mr->blk_type);
    }
    if (whole != MPI_DATATYPE_NULL) MPI_Type_free(&whole);
    if (body != MPI_DATATYPE_NULL) MPI_Type_free(&body);
    if (chunk != MPI_DATATYPE_NULL) MPI_Type_free(&chunk);
    if (rc != MPI_SUCCESS) return req_fail(r, rc, "building a datatype");
    *cnt = 1;
    *type = mr->blk_type;
    return FSDP_OK;
}

static void comm_mpi_req_release(fsdp_comm_req_t *r) {
    mpi_req *q = rq(r);
    if (q->blk_type_owned) MPI_Type_free(&q->blk_type);
    q->blk_type_owned = 0;
    fsdp_mem_free(q->stage);
    q->stage = NULL;
    free(q->counts);
    q->counts = NULL;
}

/* ----------------------------------------------------------------------------------- collectives */

/* Largest all-reduce chunk: elements, <= int_limit; the alltoallv displacements
 * (world-1)*ceil(len/world) < len + world must stay ints too. */
static size_t ar_chunk_cap(const fsdp_comm_req_t *r) {
    size_t cap = r->c->int_limit;
    if (cap > (size_t)INT_MAX - (size_t)r->c->size) cap = (size_t)INT_MAX - (size_t)r->c->size;
    return cap;
}

/* Posts the all-reduce step(s) of chunk [q->off, q->off + len). Counts above int_limit are split into
 * chunks because reductions need predefined datatypes; the op is element-wise, so chunking is exact. */
static fsdp_status post_ar_chunk(fsdp_comm_req_t *r) {
    fsdp_comm_t *c = r->c;
    mpi_req *q = rq(r);
    mpi_state *m = st_of(c);
    size_t es = fsdp_dtype_size(r->t), cap = ar_chunk_cap(r);
    q->len = r->count - q->off < cap ? r->count - q->off : cap;
    const char *send = (const char *)r->send + q->off * es;
    int rc;
    /* Reduce-scatter by alltoallv (block s of the chunk, len_s elements, to rank s), then each rank
     * reduces its block in rank order (F32 too: the same sums as the shared-memory transport, so one
     * host and many give the same bits) and an all-gatherv puts the blocks back together. */
    int w = c->size;
    q->blk = (q->len + (size_t)w - 1) / (size_t)w;
    if (q->stage == NULL) { /* the first chunk is the largest: size the staging for it */
        fsdp_status s = fsdp_mem_alloc(&q->stage, (size_t)w * q->blk * es, FSDP_MEM_COMM);
        if (s != FSDP_OK) return s;
    }
    if (q->counts == NULL) {
        q->counts = malloc(4 * (size_t)w * sizeof(int));
        if (q->counts == NULL) return FSDP_ERR(FSDP_ENOMEM, "all-reduce: cannot allocate %d counts", 4 * w);
    }
    int *scnt = q->counts, *sdsp = scnt + w, *rcnt = sdsp + w, *rdsp = rcnt + w;
    for (int s = 0; s < w; s++) {
        size_t b0 = (size_t)s * q->blk;
        scnt[s] = b0 >= q->len ? 0 : (int)(q->len - b0 < q->blk ? q->len - b0 : q->blk);
        sdsp[s] = (int)b0;
        rdsp[s] = (int)b0;
    }
    for (int s = 0; s < w; s++)
        rcnt[s] = scnt[c->rank];
    rc = MPI_Ialltoallv(send, scnt, sdsp, base_type(r->t), q->stage, rcnt, rdsp, base_type(r->t), m->comm,
                        &q->mreq);
    if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Ialltoallv");
    q->phase = PH_AR_BF16_A2A;
    return FSDP_OK;
}

static fsdp_status comm_mpi_start(fsdp_comm_req_t *r) {
    fsdp_comm_t *c = r->c;
    mpi_req *q = rq(r);
    mpi_state *m = st_of(c);
    size_t es = r->coll == COLL_BARRIER ? 1 : fsdp_dtype_size(r->t);
    int cnt = 0, rc = MPI_SUCCESS;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    switch (r->coll) {
    case COLL_BARRIER:
        rc = MPI_Ibarrier(m->comm, &q->mreq);
        q->phase = PH_FINAL;
        if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Ibarrier");
        return FSDP_OK;
    case COLL_BROADCAST:
        FSDP_TRY(count_and_type(r, r->count, &cnt, &type));
        rc = MPI_Ibcast(r->recv, cnt, type, r->root, m->comm, &q->mreq);
        q->phase = PH_FINAL;
        if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Ibcast");
        return FSDP_OK;
    case COLL_ALL_GATHER:
        FSDP_TRY(count_and_type(r, r->count, &cnt, &type));
        rc = MPI_Iallgather(r->in_place ? MPI_IN_PLACE : r->send, cnt, type, r->recv, cnt, type, m->comm,
                            &q->mreq);
        q->phase = PH_FINAL;
        if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Iallgather");
        return FSDP_OK;
    case COLL_REDUCE_SCATTER:
        /* All-to-all of the blocks, then a local reduction in fp32, in rank order, rounded once (bf16).
         * Not a user-defined MPI_Op on bf16: MPI combines partial results pairwise along its
         * algorithm's tree or ring, so every hop would round to bf16 again and the result would depend
         * on the world size and the algorithm. Not MPI_Ireduce_scatter_block for f32 either: its sums
         * follow Open MPI's schedule (not the shared-memory transport's rank order, so one host and
         * several would differ), and its libnbc form reduces the whole buffer to rank 0 and scatters,
         * 1.25-1.5x the bytes, all through rank 0's link (measured on namespace hosts). The all-to-all
         * moves exactly (world-1)/world of the input per rank. */
        FSDP_TRY(fsdp_mem_alloc(&q->stage, (size_t)c->size * r->count * es, FSDP_MEM_COMM));
        FSDP_TRY(count_and_type(r, r->count, &cnt, &type));
        rc = MPI_Ialltoall(r->send, cnt, type, q->stage, cnt, type, m->comm, &q->mreq);
        q->phase = PH_RS_A2A;
        if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Ialltoall");
        return FSDP_OK;
    case COLL_ALL_REDUCE: q->off = 0; return post_ar_chunk(r);
    }
    return FSDP_ERR(FSDP_EINTERNAL, "unknown collective %d", (int)r->coll);
}

static int comm_mpi_posted_all(const fsdp_comm_req_t *r) {
    const mpi_req *q = rqc(r);
    if (q->phase == PH_AR_BF16_A2A) return 0;                          /* its all-gather follows */
    if (q->phase == PH_AR_BF16_AG) return q->off + q->len >= r->count; /* the last chunk's */
    return 1;
}

static fsdp_status comm_mpi_progress(fsdp_comm_req_t *r, int *done) {
    fsdp_comm_t *c = r->c;
    mpi_req *q = rq(r);
    mpi_state *m = st_of(c);
    size_t es = r->coll == COLL_BARRIER ? 1 : fsdp_dtype_size(r->t);
    for (;;) {
        if (q->phase == PH_NONE) {
            *done = 1;
            return FSDP_OK;
        }
        int flag = 0;
        int rc = MPI_Test(&q->mreq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Test");
        if (!flag) {
            *done = 0;
            return FSDP_OK;
        }
        switch (q->phase) {
        case PH_NONE:
        case PH_FINAL: q->phase = PH_NONE; break;
        case PH_RS_A2A:
            /* the staging stays until the request is released (test/wait): its lifetime then
             * depends on the caller's calls only, not on when progress happened to complete it,
             * which keeps the memory plan exact */
            comm_req_reduce_blocks(r, r->recv, q->stage, r->count, r->count);
            q->phase = PH_NONE;
            break;
        case PH_AR_BF16_A2A: {
            int w = c->size, *scnt = q->counts, *sdsp = scnt + w;
            size_t mine = (size_t)scnt[c->rank];
            char *chunk = (char *)r->recv + q->off * es;
            if (mine > 0)
                comm_reduce_blocks(chunk + (size_t)c->rank * q->blk * es, q->stage, q->blk, w, mine, r->t,
                                   r->op);
            rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, base_type(r->t), chunk, scnt, sdsp, base_type(r->t),
                                 m->comm, &q->mreq);
            if (rc != MPI_SUCCESS) return req_fail(r, rc, "MPI_Iallgatherv");
            q->phase = PH_AR_BF16_AG;
            break;
        }
        case PH_AR_BF16_AG:
            q->off += q->len;
            if (q->off < r->count)
                FSDP_TRY(post_ar_chunk(r));
            else
                q->phase = PH_NONE;
            break;
        }
    }
}

/* Posting and testing, each one call into MPI as the stuck watchdog sees it. */
static fsdp_status mpi_start_watched(fsdp_comm_req_t *r) {
    comm_watch_enter(r);
    fsdp_status s = comm_mpi_start(r);
    comm_watch_leave();
    return s;
}

static fsdp_status mpi_progress_watched(fsdp_comm_req_t *r, int *done) {
    comm_watch_enter(r);
    fsdp_status s = comm_mpi_progress(r, done);
    comm_watch_leave();
    return s;
}

/* The staging this row allocates (category comm) for a collective, held from its start to its
 * completion: a reduce-scatter is an all-to-all into w * count elements (both dtypes, comm_mpi_start);
 * an all-reduce an all-to-all of its first (largest) chunk, len <= INT_MAX - w elements, into w blocks
 * of ceil(len / w) (post_ar_chunk). All-gathers and broadcasts move in place. */
static size_t mpi_staging_bytes(comm_coll coll, int w, size_t count, fsdp_dtype t) {
    size_t es = fsdp_dtype_size(t), ww = (size_t)w;
    if (coll == COLL_REDUCE_SCATTER) return ww * count * es;
    if (coll != COLL_ALL_REDUCE) return 0;
    size_t cap = (size_t)INT_MAX - ww, len = count < cap ? count : cap;
    return ww * ((len + ww - 1) / ww) * es;
}

const comm_transport comm_transport_mpi = {
    .name = "mpi",
    .id = COMM_ROW_MPI,
    .caps = COMM_CAP_ACCUMULATE | COMM_CAP_HOST_POLL,
    .staging_bytes = mpi_staging_bytes,
    .init = comm_mpi_init,
    .split = comm_mpi_split,
    .stop = mpi_stop,
    .free = mpi_free,
    .abort = comm_mpi_abort,
    .start = mpi_start_watched,
    .progress = mpi_progress_watched,
    .posted_all = comm_mpi_posted_all,
    .release = comm_mpi_req_release,
};
