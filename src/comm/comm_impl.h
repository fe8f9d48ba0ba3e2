/* comm_impl.h — the communicator's types, shared by the front end (comm.c: arguments, requests,
 * labels, timeouts) and the transports it runs collectives over, one row each of the table below
 * (comm_self.c, comm_shm.c, comm_mpi.c), and the helpers of comm_util.c that all of them use. Tests
 * include it for white-box checks and the test-only knobs at the bottom; nothing here is part of the
 * public API. Include order inside comm/ (a DAG, checked by tests/core/check_layers.py):
 *   comm_util < comm_watch, comm_shm, comm_self ; comm_shm, comm_watch < comm_mpi ; all of them <
 *   comm.c < comm_agree, comm_peaks, comm_trace (public calls only). */
#ifndef FSDP_COMM_IMPL_H
#define FSDP_COMM_IMPL_H

#include "core/core.h"
#include "comm/comm_plan.h"
#include "core/device.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comm_transport comm_transport;

typedef enum {
    COLL_ALL_GATHER = 0,
    COLL_REDUCE_SCATTER,
    COLL_ALL_REDUCE,
    COLL_BROADCAST,
    COLL_BARRIER
} comm_coll;

/* Slots of a communicator's per-row private state (fsdp_comm.state): one per row of the table. A new
 * transport adds one here, its row, and its own file; nothing else in this header. */
enum { COMM_ROW_SELF = 0, COMM_ROW_SHM, COMM_ROW_MPI, COMM_ROWS };

/* Bytes of a request's private state (fsdp_comm_req.priv) that the row carrying it may use as its own
 * type; each row checks its type fits (_Static_assert in its file). */
#define COMM_REQ_PRIV_BYTES 128

struct fsdp_comm {
    fsdp_comm_backend backend; /* SELF or MPI (AUTO resolved at init) */
    const comm_transport *be;  /* its row: communicator set-up, shut-down, abort (self or mpi) */
    /* The ordered list of rows that carry this communicator's collectives: a request goes to the first
     * whose takes() accepts it (NULL takes: any). The front end puts the backend's row in; its init or
     * split puts the rows it set up before it (comm_rows_prepend: mpi puts shm first on one host). */
    const comm_transport *rows[COMM_ROWS];
    int nrows;
    void *state[COMM_ROWS]; /* each row's private state, of its own type (comm_<row>.c), or NULL */
    int row_thread;         /* the backend row's requests are moved by its own thread (mpi, across
                               hosts): fsdp_comm_progress leaves them to it */
    /* Set by the front end before be->init: advances every in-flight request of the backend's row once
     * (lock held), in start order; what the MPI progress thread runs. */
    void (*poll)(fsdp_comm_t *c);
    int rank, size, local_size;
    double timeout_s;               /* <= 0: wait forever */
    char label[128];                /* fsdp_comm_set_label; "" if none */
    int broken;                     /* a collective timed out: later collectives are refused */
    struct comm_fault *fault;       /* test faults: shared with every communicator split from this one */
    uint64_t progress_calls;        /* fsdp_comm_progress calls (tests count them per communicator) */
    uint64_t coll_elems[5];         /* per comm_coll: elements of the collectives started (count; a
                                       reduce-scatter's: count x size, its send buffer), for tests */
    int stuck_exit;                 /* fsdp_comm_config.stuck_exit */
    int stuck_watch;                /* this communicator holds a reference on the stuck watchdog */
    size_t int_limit;               /* largest count a row may hand on as an int (INT_MAX; tests lower it) */
    struct fsdp_comm_req *stale;    /* timed-out requests a row still owns (list via next_stale) */
    struct fsdp_comm_req *inflight; /* started, not yet complete, in start order (via next_inflight) */
    int agreed_rank;                /* fsdp_comm_agree: lowest failing rank of the last one, or -1 */
    fsdp_status agreed_status;      /* its status (FSDP_OK with agreed_rank -1) */
    int shm_allowed;                /* from the config: a backend may set up the shared-memory row */
};

/* Test faults (FSDP_TEST_SKIP_COLLECTIVE, comm.c), parsed once by fsdp_comm_init and shared by every
 * communicator split from that one (fsdp_comm_split takes a reference): the rank and the collective
 * number are the world's, counted over every communicator of the family in the order this process
 * starts them, so a fault reaches the shard and replica groups of a hybrid engine too. */
typedef struct comm_fault {
    int refs;            /* communicators holding it */
    int world_rank;      /* this process's rank in the communicator fsdp_comm_init made */
    uint64_t seq;        /* collectives started on any communicator of the family */
    int skip_rank;       /* FSDP_TEST_SKIP_COLLECTIVE=<rank>:<n>; -1 when unset */
    uint64_t skip_seq;   /* that rank skips its collective number skip_seq (0-based) */
    int skip_stall;      /* ":stall": after the skip, post nothing more (a rank stuck elsewhere) */
    int skip_hang;       /* ":hang": collective skip_seq never returns from progress (no skip) */
    char skip_label[64]; /* "<rank>:@TEXT": skip the first collective whose label contains TEXT */
} comm_fault;

struct fsdp_comm_req {
    fsdp_comm_t *c;
    const comm_transport *tp; /* the row carrying it (self, shm or mpi); NULL while not started */
    comm_coll coll;
    double t0;       /* fsdp_time_s() when started: timeouts are measured from here */
    char label[128]; /* the communicator's label when this request started (named on timeout) */
    int done;
    int stalled;  /* test fault (":stall"): never posted, never completes */
    int hang;     /* test fault (":hang"): its first progress call never returns */
    int deferred; /* not posted yet; an earlier request of its row had posts to make (comm.c) */
    /* The call's arguments. Element counts; recv/send as given by the caller. */
    const void *send;
    void *recv;
    size_t count;
    fsdp_dtype t;
    fsdp_reduce_op op;
    int root;
    int in_place;
    int acc;         /* fsdp_comm_ireduce_scatter_acc: recv is the accumulator, += acc_scale * sum */
    float acc_scale; /* its scale */
    int acc_discard; /* timed out: the result is no longer written */
    /* The carrying row's own state (its type, in its file), zero until the row starts the request. */
    _Alignas(max_align_t) unsigned char priv[COMM_REQ_PRIV_BYTES];
    void *adopted[2];   /* buffers of a timed-out call, freed once the call completes */
    int is_stale;       /* timed out: on c->stale, off the in-flight list */
    fsdp_status failed; /* a row's failure seen by fsdp_comm_progress, reported by test/wait */
    char errmsg[512];   /* its message, named by the label */
    struct fsdp_comm_req *next_stale;
    struct fsdp_comm_req *next_inflight;
};

/* A transport: one row of the table the front end runs collectives over. The front end checks the
 * arguments, keeps requests in start order, labels, times out and injects test faults; a row moves
 * bytes. Communicator-level entries (init .. abort) are used on the backend's row only (c->be: self
 * or mpi; shm is set up by mpi); NULL entries do nothing. A row keeps its communicator state in
 * c->state[id] and its request state in r->priv, both of types no other file sees. */
struct comm_transport {
    const char *name;
    int id;        /* its COMM_ROW_* slot */
    unsigned caps; /* COMM_CAP_* (comm_plan.h) */
    /* Bytes of category comm it holds for one collective of count elements per rank block (dtype t)
     * over w ranks, from the start to the completion: what the memory plan counts (shard/plan.c asks
     * through comm_plan_staging_bytes). NULL: none. */
    size_t (*staging_bytes)(comm_coll coll, int w, size_t count, fsdp_dtype t);
    fsdp_status (*init)(fsdp_comm_t *c, int *argc, char ***argv);
    /* c: fresh, backend/timeout/shm settings copied from parent; fills in the rest */
    fsdp_status (*split)(fsdp_comm_t *parent, int color, int key, fsdp_comm_t *c);
    void (*stop)(fsdp_comm_t *c); /* before shut-down: no thread moves requests after it */
    /* shut-down; drained 0: a timed-out request is still pending after grace seconds */
    void (*free)(fsdp_comm_t *c, int drained, double grace);
    void (*abort)(fsdp_comm_t *c, int code); /* does not return */
    /* Requests. takes: 1 if this row would carry r (NULL: every request). It reads r's collective,
     * dtype and count only (r->c is NULL when the memory plan asks). */
    int (*takes)(const fsdp_comm_req_t *r);
    /* Posts r's first step (arguments already checked); may complete it (r->done). */
    fsdp_status (*start)(fsdp_comm_req_t *r);
    /* Drives r: tests the posted step and posts the next ones; *done = 1 once all completed. */
    fsdp_status (*progress)(fsdp_comm_req_t *r, int *done);
    /* 1 when r has posted every step it will post: a later request of the same row is posted only
     * then, so every rank posts them in the program's order (comm.c, start_req). NULL: always 1. */
    int (*posted_all)(const fsdp_comm_req_t *r);
    void (*release)(fsdp_comm_req_t *r); /* what r holds (staging, types), once nothing uses it */
    /* Makes stream s of device d wait on the device for r's completion (lock held); the front end
     * gives r up afterwards (release: the row keeps past it what the device still needs). NULL: a
     * host-polled row, whose collective has written its buffers once the host saw it complete: the
     * front end waits on the host (timeouts included) and nothing remains to order. */
    fsdp_status (*wait_stream)(fsdp_comm_req_t *r, fsdp_device_t *d, fsdp_stream_t *s);
};

/* Puts tp before the rows already in c's ordered list (a backend's init, for the rows it set up). */
void comm_rows_prepend(fsdp_comm_t *c, const comm_transport *tp);

/* ---------------------------------------------------------------------------- comm_util.c */

const char *comm_coll_name(comm_coll k);

/* The process's MPI lock: held around MPI calls and the in-flight lists while any progress thread
 * runs (no-ops otherwise). */
extern pthread_mutex_t comm_mpi_mu;
extern int comm_mpi_threads;
void comm_lock(fsdp_comm_t *c);
void comm_unlock(fsdp_comm_t *c);

/* Reduces world contributions laid out at src + s*stride (elements, dtype t) for s = 0..world-1 into
 * dst[0..n): fp32 accumulation in rank order, AVG divides once, BF16 rounds once at the end; MAX
 * propagates NaN. I32/I64: exact integer SUM/MAX. dst must not overlap src. */
void comm_reduce_blocks(void *dst, const void *src, size_t stride, int world, size_t n, fsdp_dtype t,
                        fsdp_reduce_op op);
/* The same reduction with contribution s at src[s] (n elements each); dst may equal src[0] only if
 * nothing else aliases it. */
void comm_reduce_ptrs(void *dst, const void *const *src, int world, size_t n, fsdp_dtype t,
                      fsdp_reduce_op op);

/* The end of every reduce-scatter path: n elements of the result from world contributions at src[s],
 * into dst (comm_reduce_ptrs with r's dtype and op) or, for an accumulating request, added into the
 * accumulator at dst (scaled; nothing once it timed out). */
void comm_req_reduce(const fsdp_comm_req_t *r, void *dst, const void *const *src, size_t n);
/* The same with contribution s at src + s*stride (elements). */
void comm_req_reduce_blocks(const fsdp_comm_req_t *r, void *dst, const void *src, size_t stride, size_t n);

/* Test-only (comm.c): lowers the largest count passed to MPI as an int, so the chunked and derived-datatype
 * paths for counts above INT_MAX run with small buffers. limit 0 restores INT_MAX. */
void comm_test_set_int_limit(fsdp_comm_t *c, size_t limit);

#endif
