/* comm.c — the communicator front end: backend choice, argument checks shared by every transport,
 * requests (start order, posting order, progress), labels, test faults, and waiting with a timeout.
 * The bytes move in the transports, one row each of comm_transport (comm_impl.h): self, shm, mpi.
 * Every collective, blocking ones too, runs as a request that is polled until done, so a collective
 * that never completes (a rank died, skipped or mis-ordered one) ends in FSDP_ETIMEOUT, not a hang. */
#include "comm/comm_mpi.h"
#include "comm/comm_plan.h"
#include "comm/comm_self.h"
#include "comm/comm_shm.h"
#include "comm/comm_watch.h"
#include "core/prof.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ config */

fsdp_comm_config fsdp_comm_config_default(void) {
    fsdp_comm_config c = {.version = 1, .backend = FSDP_COMM_AUTO, .timeout_s = 0.0, .shm = 1};
    return c;
}

/* A launcher (mpirun, srun with PMIx/PMI) leaves one of these in the environment. */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
           getenv("PMI_SIZE") != NULL;
}

/* FSDP_TEST_SKIP_COLLECTIVE=<rank>:<n>[:stall]: that rank returns FSDP_OK from its n-th collective
 * (0-based) without communicating, so the other ranks' timeout path can be tested. <rank>:@TEXT[:stall]
 * skips instead the first collective whose label contains TEXT (e.g. "@(prefetch)"). With ":stall" the
 * rank then posts no further collective either: each later one waits until its own timeout, as a rank
 * that went astray would (without it, the rank's next collective is mismatched against the others'
 * and MPI may fail the job first with a truncation error). <rank>:<n>:hang: that rank's n-th
 * collective never returns from its first progress call, holding the MPI lock as if MPI itself did
 * not return (the stuck_exit watchdog's test). Malformed values are an error rather than silently
 * ignored. */
static fsdp_status parse_skip(comm_fault *c) {
    c->skip_rank = -1;
    const char *v = getenv("FSDP_TEST_SKIP_COLLECTIVE");
    if (v == NULL || v[0] == '\0') return FSDP_OK;
    char *end = NULL;
    long r = strtol(v, &end, 10);
    if (end == v || *end != ':' || r < 0 || r > INT_MAX)
        return FSDP_ERR(FSDP_EINVAL,
                        "FSDP_TEST_SKIP_COLLECTIVE=\"%s\" is malformed; use <rank>:<n>[:stall|:hang]", v);
    const char *p = end + 1;
    c->skip_stall = 0;
    c->skip_label[0] = '\0';
    if (*p == '@') { /* by label: the text up to an optional ":stall" */
        size_t len = strlen(p + 1);
        if (len >= 6 && strcmp(p + 1 + len - 6, ":stall") == 0) {
            c->skip_stall = 1;
            len -= 6;
        }
        if (len == 0 || len >= sizeof c->skip_label)
            return FSDP_ERR(FSDP_EINVAL,
                            "FSDP_TEST_SKIP_COLLECTIVE=\"%s\": the label text after '@' must have 1..%zu "
                            "characters",
                            v, sizeof c->skip_label - 1);
        memcpy(c->skip_label, p + 1, len);
        c->skip_label[len] = '\0';
        c->skip_rank = (int)r;
        c->skip_seq = UINT64_MAX; /* set when a label matches */
        return FSDP_OK;
    }
    unsigned long long n = strtoull(p, &end, 10);
    c->skip_hang = 0;
    if (end != p && strcmp(end, ":stall") == 0) {
        c->skip_stall = 1;
        end += strlen(end);
    } else if (end != p && strcmp(end, ":hang") == 0) {
        c->skip_hang = 1;
        end += strlen(end);
    }
    if (end == p || *end != '\0' || p[0] == '-')
        return FSDP_ERR(FSDP_EINVAL,
                        "FSDP_TEST_SKIP_COLLECTIVE=\"%s\" is malformed; use <rank>:<n>[:stall|:hang]", v);
    c->skip_rank = (int)r;
    c->skip_seq = (uint64_t)n;
    return FSDP_OK;
}

static void poll_backend(fsdp_comm_t *c);
static int drain_stale(fsdp_comm_t *c, double grace);

fsdp_status fsdp_comm_init(fsdp_comm_t **out, const fsdp_comm_config *cfg, int *argc, char ***argv) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out is NULL; pass the address of an fsdp_comm_t *");
    *out = NULL;
    fsdp_comm_config def = fsdp_comm_config_default();
    if (cfg == NULL) cfg = &def;
    if (cfg->version != 1)
        return FSDP_ERR(FSDP_EINVAL, "config version %d is not 1; start from fsdp_comm_config_default()",
                        cfg->version);
    if (cfg->backend != FSDP_COMM_AUTO && cfg->backend != FSDP_COMM_SELF && cfg->backend != FSDP_COMM_MPI)
        return FSDP_ERR(FSDP_EINVAL, "backend %d is not AUTO, SELF or MPI", (int)cfg->backend);
    if (cfg->timeout_s != cfg->timeout_s)
        return FSDP_ERR(FSDP_EINVAL, "timeout_s is NaN; use a number of seconds, or <= 0 to wait forever");
    if (cfg->stuck_exit < 0 || cfg->stuck_exit > 255)
        return FSDP_ERR(FSDP_EINVAL, "stuck_exit %d is not an exit status in 1..255 (or 0: off)",
                        cfg->stuck_exit);

    /* Every FSDP_* knob, before anything is set up: a bad value fails every rank here alike. */
    FSDP_TRY(fsdp_env_check());

    fsdp_comm_t *c = calloc(1, sizeof *c);
    if (c == NULL) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the communicator (%zu bytes)", sizeof *c);
    c->backend = cfg->backend;
    if (c->backend == FSDP_COMM_AUTO) c->backend = launched_by_mpi() ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    c->timeout_s = cfg->timeout_s;
    c->stuck_exit = cfg->stuck_exit;
    c->shm_allowed = cfg->shm != 0;
    c->int_limit = INT_MAX;
    c->agreed_rank = -1;
    c->agreed_status = FSDP_OK;
    c->rank = 0;
    c->size = 1;
    c->local_size = 1;
    fsdp_status s = FSDP_OK;
    c->fault = calloc(1, sizeof *c->fault);
    if (c->fault == NULL) {
        s = FSDP_ERR(FSDP_ENOMEM, "cannot allocate the communicator's fault state");
        goto fail;
    }
    c->fault->refs = 1;
    s = parse_skip(c->fault);
    if (s != FSDP_OK) goto fail;
    c->be = c->backend == FSDP_COMM_MPI ? &comm_transport_mpi : &comm_transport_self;
    c->rows[0] = c->be;
    c->nrows = 1;
    c->poll = poll_backend;
    if (c->be->init != NULL) {
        s = c->be->init(c, argc, argv);
        if (s != FSDP_OK) goto fail;
    }
    c->fault->world_rank = c->rank;
    *out = c;
    return FSDP_OK;
fail:
    free(c->fault);
    free(c);
    return s;
}

fsdp_status fsdp_comm_split(fsdp_comm_t *c, int color, int key, fsdp_comm_t **out) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out is NULL; pass the address of an fsdp_comm_t *");
    *out = NULL;
    if (c == NULL) return FSDP_ERR(FSDP_EINVAL, "communicator is NULL");
    if (color < 0) return FSDP_ERR(FSDP_EINVAL, "color %d must be >= 0", color);
    fsdp_comm_t *n = calloc(1, sizeof *n);
    if (n == NULL) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate the communicator (%zu bytes)", sizeof *n);
    n->backend = c->backend;
    n->timeout_s = c->timeout_s;
    n->stuck_exit = c->stuck_exit; /* watched by the parent's watchdog (one per process) */
    n->shm_allowed = c->shm_allowed;
    n->int_limit = INT_MAX;
    n->rank = 0;
    n->size = 1;
    n->local_size = 1;
    n->be = c->be;
    n->rows[0] = n->be;
    n->nrows = 1;
    n->poll = poll_backend;
    if (n->be->split != NULL) {
        fsdp_status s = n->be->split(c, color, key, n);
        if (s != FSDP_OK) {
            free(n);
            return s;
        }
    }
    n->fault = c->fault; /* test faults reach the split communicator (counted with the parent's) */
    n->fault->refs++;
    *out = n;
    return FSDP_OK;
}

void fsdp_comm_free(fsdp_comm_t *c) {
    if (c == NULL) return;
    if (c->be->stop != NULL) c->be->stop(c); /* no thread moves requests from here */
    /* A timed-out collective a transport still owns would make its shut-down wait forever: give it a
     * grace period (the other ranks may still join). */
    double grace = c->timeout_s > 1.0 ? 2.0 * c->timeout_s : 2.0;
    int drained = c->stale == NULL || drain_stale(c, grace);
    if (c->be->free != NULL) c->be->free(c, drained, grace);
    if (c->fault != NULL && --c->fault->refs == 0) free(c->fault);
    free(c);
}

int fsdp_comm_rank(const fsdp_comm_t *c) { return c ? c->rank : 0; }
int fsdp_comm_size(const fsdp_comm_t *c) { return c ? c->size : 1; }
int fsdp_comm_local_size(const fsdp_comm_t *c) { return c ? c->local_size : 1; }
const char *fsdp_comm_backend_name(const fsdp_comm_t *c) {
    if (c == NULL) return "none";
    return c->backend == FSDP_COMM_MPI ? "mpi" : "self";
}

void fsdp_comm_set_label(fsdp_comm_t *c, const char *label) {
    if (c == NULL) return;
    snprintf(c->label, sizeof c->label, "%s", label ? label : "");
}

/* The abort's deadline: a detached thread that ends the process with the abort's status after
 * FSDP_ABORT_GRACE_S. MPI_Abort asks the launcher to kill every rank, and blocks until it does; a
 * launcher that cannot reach a lost host may never get there (Open MPI 4.1's mpirun waits for a daemon
 * behind a cut link for minutes), and flushing the output, or the program's last message, blocks for
 * as long as the launcher's daemon does not read it (a full pipe). The thread's own message is written
 * with a bound (fsdp_write_bounded), so nothing it does can block its _exit either. */
static atomic_int abort_armed;
static int abort_rank, abort_code;

static void *abort_deadline(void *arg) {
    (void)arg;
    struct timespec ts = {FSDP_ABORT_GRACE_S, 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
    char host[64] = "?", msg[256];
    gethostname(host, sizeof host - 1);
    int n = snprintf(msg, sizeof msg,
                     "fsdp_comm_abort: rank %d on host %s: the job has not ended %d s after the abort (the "
                     "launcher may have lost a host, or stopped reading this rank's output); exiting with "
                     "status %d\n",
                     abort_rank, host, (int)FSDP_ABORT_GRACE_S, abort_code);
    if (n > 0)
        fsdp_write_bounded(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, 200);
    _exit(abort_code);
}

void fsdp_comm_abort_arm(fsdp_comm_t *c, int code) {
    if (atomic_exchange(&abort_armed, 1)) return;
    abort_code = code;
    abort_rank = c ? c->rank : 0;
    pthread_t t;
    pthread_attr_t a;
    if (pthread_attr_init(&a) == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, abort_deadline, NULL) != 0) {
            static const char m[] = "fsdp_comm_abort: no deadline thread; the abort may wait for MPI\n";
            fsdp_write_bounded(STDERR_FILENO, m, sizeof m - 1, 200);
        }
        pthread_attr_destroy(&a);
    }
}

void fsdp_comm_abort(fsdp_comm_t *c, int code) {
    fsdp_comm_abort_arm(c, code); /* first: everything below may block */
    fflush(stdout);
    fflush(stderr);
    if (c != NULL && c->be->abort != NULL) c->be->abort(c, code);
    exit(code);
}

void comm_test_set_int_limit(fsdp_comm_t *c, size_t limit) {
    if (c != NULL) c->int_limit = (limit == 0 || limit > INT_MAX) ? (size_t)INT_MAX : limit;
}

/* -------------------------------------------------------------------------------- argument checks */

static int overlaps(const void *a, size_t abytes, const void *b, size_t bbytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bbytes && y < x + abytes;
}

/* Every dtype moves (all-gather, broadcast); reductions: F32/BF16 with SUM/AVG/MAX, I32/I64 with
 * SUM/MAX, U8 none (include/fsdp.h). */
static fsdp_status check_dtype_op(comm_coll k, fsdp_dtype t, fsdp_reduce_op op) {
    const char *name = comm_coll_name(k);
    if (k != COLL_BARRIER && fsdp_dtype_size(t) == 0)
        return FSDP_ERR(FSDP_EINVAL, "%s: dtype %d is not an fsdp_dtype (F32, BF16, I32, I64, U8)", name,
                        (int)t);
    if (k != COLL_REDUCE_SCATTER && k != COLL_ALL_REDUCE) return FSDP_OK;
    if (op != FSDP_SUM && op != FSDP_AVG && op != FSDP_MAX)
        return FSDP_ERR(FSDP_EINVAL, "%s: reduce op %d is not FSDP_SUM, FSDP_AVG or FSDP_MAX", name, (int)op);
    if (t == FSDP_U8)
        return FSDP_ERR(FSDP_EINVAL, "%s: U8 is bytes, not numbers, and has no reduction; use I32 or I64",
                        name);
    if (op == FSDP_AVG && (t == FSDP_I32 || t == FSDP_I64))
        return FSDP_ERR(FSDP_EINVAL, "%s: AVG of %s would not be an integer; use SUM and divide", name,
                        fsdp_dtype_name(t));
    return FSDP_OK;
}

/* Checks one collective's arguments (identical rules for every backend, so a bad call fails the same
 * way with or without a launcher) and fills *req. Wrong use is FSDP_EINVAL. A count that differs
 * between ranks cannot be detected without an extra collective and is not checked: it is undefined
 * (in practice a wrong result, an MPI error or a timeout). */
static fsdp_status check_args(fsdp_comm_t *c, comm_coll k, const void *send, void *recv, size_t count,
                              fsdp_dtype t, fsdp_reduce_op op, int root, fsdp_comm_req_t *req) {
    const char *name = comm_coll_name(k);
    if (c == NULL)
        return FSDP_ERR(FSDP_EINVAL, "%s: communicator is NULL; create one with fsdp_comm_init", name);
    if (c->broken)
        return FSDP_ERR(FSDP_ESTATE,
                        "%s on rank %d: an earlier collective timed out, so this communicator is out of "
                        "step with the other ranks; end the job with fsdp_comm_abort",
                        name, c->rank);
    FSDP_TRY(check_dtype_op(k, t, op));
    if (k == COLL_BROADCAST && (root < 0 || root >= c->size))
        return FSDP_ERR(FSDP_EINVAL, "broadcast: root %d is outside [0, %d) (world size %d)", root, c->size,
                        c->size);
    size_t es = k == COLL_BARRIER ? 1 : fsdp_dtype_size(t);
    /* Bytes of the larger side (world * count elements) must fit a size_t and a signed MPI_Aint. */
    size_t big;
    if (!fsdp_mul_ok(count, (size_t)c->size, &big) || !fsdp_mul_ok(big, es, &big) ||
        big > (size_t)PTRDIFF_MAX)
        return FSDP_ERR(FSDP_EINVAL,
                        "%s: count %zu x world %d x %zu bytes overflows; counts are elements per rank", name,
                        count, c->size, es);
    req->c = c;
    req->coll = k;
    req->send = send;
    req->recv = recv;
    req->count = count;
    req->t = t;
    req->op = op;
    req->root = root;
    if (k == COLL_BARRIER || count == 0) return FSDP_OK; /* count 0: a no-op, buffers may be NULL */

    size_t n = count * es, nw = big; /* bytes of one rank's block, of all blocks */
    switch (k) {
    case COLL_ALL_GATHER:
        if (send == NULL || recv == NULL)
            return FSDP_ERR(FSDP_EINVAL, "all-gather: %s is NULL with count %zu", send ? "recv" : "send",
                            count);
        req->in_place = (const char *)send == (const char *)recv + (size_t)c->rank * n;
        if (!req->in_place && overlaps(send, n, recv, nw))
            return FSDP_ERR(
                FSDP_EINVAL,
                "all-gather: send overlaps recv but is not the in-place position recv + rank*count "
                "(rank %d, count %zu); use separate buffers or exactly that position",
                c->rank, count);
        break;
    case COLL_REDUCE_SCATTER:
        if (send == NULL || recv == NULL)
            return FSDP_ERR(FSDP_EINVAL, "reduce-scatter: %s is NULL with count %zu", send ? "recv" : "send",
                            count);
        req->in_place = send == recv;
        /* recv == send + rank*count: the result stays in this rank's own block (nothing to move) */
        if (!req->in_place && (const char *)recv != (const char *)send + (size_t)c->rank * n &&
            overlaps(send, nw, recv, n))
            return FSDP_ERR(FSDP_EINVAL, "reduce-scatter: recv overlaps send but is neither send nor send + "
                                         "rank*count; use separate buffers or one of those positions");
        break;
    case COLL_ALL_REDUCE:
        if (send == NULL || recv == NULL)
            return FSDP_ERR(FSDP_EINVAL, "all-reduce: %s is NULL with count %zu", send ? "recv" : "send",
                            count);
        req->in_place = send == recv;
        if (!req->in_place && overlaps(send, n, recv, n))
            return FSDP_ERR(FSDP_EINVAL,
                            "all-reduce: recv overlaps send but is not equal to it; use separate "
                            "buffers or recv == send");
        break;
    case COLL_BROADCAST:
        if (recv == NULL) return FSDP_ERR(FSDP_EINVAL, "broadcast: buf is NULL with count %zu", count);
        break;
    case COLL_BARRIER: break;
    }
    return FSDP_OK;
}

/* ----------------------------------------------------------------------------- requests and waiting */

static void inflight_unlink(fsdp_comm_req_t *r) {
    for (fsdp_comm_req_t **p = &r->c->inflight; *p != NULL; p = &(*p)->next_inflight)
        if (*p == r) {
            *p = r->next_inflight;
            break;
        }
    r->next_inflight = NULL;
}

static void req_free(fsdp_comm_req_t *r) {
    if (r == NULL) return;
    fsdp_comm_t *c = r->c;
    comm_lock(c);
    inflight_unlink(r);
    if (r->tp != NULL && r->tp->release != NULL) r->tp->release(r);
    comm_unlock(c);
    for (int k = 0; k < 2; k++)
        fsdp_mem_free(r->adopted[k]);
    free(r);
}

/* A request its row still moves (started, not finished, not a test fault). */
static int live(const fsdp_comm_req_t *q) {
    return q->tp != NULL && !q->done && !q->stalled && !q->failed && !q->hang;
}

/* Every rank must post its MPI collectives on a communicator in the same order, or MPI matches one
 * collective's messages with another's (MPI_ERR_TRUNCATE, or silently mixed data when the sizes
 * agree). A request whose later steps are posted as earlier ones complete (the all-reduce: an
 * all-to-all, then an all-gather, per chunk) would post them at a moment that differs from rank to
 * rank, between the starts of later requests. So a request started while an earlier request of the
 * same row still has posts to make is deferred, and posted in start order once every earlier one has
 * made all of them: the posting order is then the program's on every rank. Found when a trial put the
 * trainer's loss all-reduce in flight beside the clipping norm's (tests/comm/mpi_comm_order.c). The
 * shared-memory row posts everything at its start, so nothing of it is ever deferred. */
static int posts_pending(const fsdp_comm_t *c, const comm_transport *tp) {
    for (const fsdp_comm_req_t *q = c->inflight; q != NULL; q = q->next_inflight)
        if (q->tp == tp && live(q) && (q->deferred || (tp->posted_all != NULL && !tp->posted_all(q))))
            return 1;
    return 0;
}

/* The first row of an ordered list that takes r. The backend's row, last, takes every request. */
static const comm_transport *row_for(const comm_transport *const *rows, int n, const fsdp_comm_req_t *r) {
    for (int i = 0; i < n - 1; i++)
        if (rows[i]->takes == NULL || rows[i]->takes(r)) return rows[i];
    return rows[n - 1];
}

/* Validates, then starts the collective. A count-0 call, the self backend and a fault-injected skip
 * give a request that is already done. Others join the communicator's in-flight list (start order). */
static fsdp_status start_req(fsdp_comm_req_t *tmp, fsdp_comm_req_t **out) {
    fsdp_comm_t *c = tmp->c;
    comm_coll k = tmp->coll;
    size_t count = tmp->count;
    fsdp_comm_req_t *r = malloc(sizeof *r);
    if (r == NULL) return FSDP_ERR(FSDP_ENOMEM, "%s: cannot allocate a request", comm_coll_name(k));
    *r = *tmp;
    r->t0 = fsdp_time_s();
    snprintf(r->label, sizeof r->label, "%s", c->label);
    comm_lock(c);
    c->coll_elems[k] += k == COLL_REDUCE_SCATTER ? (uint64_t)count * (uint64_t)c->size : (uint64_t)count;
    if (count == 0 && k != COLL_BARRIER) {
        r->done = 1;
    } else if (c->backend == FSDP_COMM_SELF) { /* no test faults alone */
        r->tp = row_for(c->rows, c->nrows, r);
        fsdp_status s = r->tp->start(r); /* the self row: done, a copy */
        if (s != FSDP_OK) {
            comm_unlock(c);
            req_free(r);
            return s;
        }
    } else {
        comm_fault *f = c->fault;
        uint64_t seq = f->seq++;
        int me = f->skip_rank == f->world_rank;
        if (me && f->skip_label[0] && f->skip_seq == UINT64_MAX && strstr(c->label, f->skip_label) != NULL)
            f->skip_seq = seq;
        if (me && f->skip_seq == seq && !f->skip_hang) {
            r->done = 1; /* test fault: this rank pretends the collective happened */
        } else if (me && f->skip_stall && seq > f->skip_seq) {
            r->stalled = 1; /* test fault: never posted, so it can only time out */
        } else if (me && f->skip_hang && seq == f->skip_seq) {
            r->hang = 1; /* test fault: its first progress call never returns */
        } else {
            const comm_transport *tp = row_for(c->rows, c->nrows, r);
            r->tp = tp;
            if (posts_pending(c, tp)) {
                r->deferred = 1; /* posted once every earlier request has made all its posts */
            } else {
                fsdp_status s = tp->start(r);
                if (s != FSDP_OK) {
                    comm_unlock(c);
                    req_free(r);
                    return s;
                }
            }
        }
    }
    if (!r->done) { /* append: the list stays in start order */
        fsdp_comm_req_t **p = &c->inflight;
        while (*p != NULL)
            p = &(*p)->next_inflight;
        *p = r;
    }
    comm_unlock(c);
    *out = r;
    return FSDP_OK;
}

static fsdp_status start(fsdp_comm_t *c, comm_coll k, const void *send, void *recv, size_t count,
                         fsdp_dtype t, fsdp_reduce_op op, int root, fsdp_comm_req_t **out) {
    fsdp_comm_req_t tmp = {0};
    FSDP_TRY(check_args(c, k, send, recv, count, t, op, root, &tmp));
    return start_req(&tmp, out);
}

/* Test fault (":hang"): as if the call into MPI never returned, holding the lock it holds. */
static void __attribute__((noreturn)) test_hang(const fsdp_comm_req_t *r) {
    comm_watch_enter(r);
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
}

/* Advances the in-flight requests of row tp in start order, up to and including upto (NULL: all):
 * posts a deferred one once nothing before it has posts left, tests the others. A failure stays with
 * its request, for its owner's test/wait. Shared-memory requests must advance in start order (their
 * rounds do), MPI requests are posted in it. hang: a ":hang" test fault met on the way hangs (never
 * on the progress thread). */
static void advance(fsdp_comm_t *c, const comm_transport *tp, const fsdp_comm_req_t *upto, int hang) {
    int pending = 0; /* an earlier request still has posts to make */
    for (fsdp_comm_req_t *q = c->inflight; q != NULL; q = q->next_inflight) {
        if (hang && q->hang) test_hang(q);
        if (q->tp == tp && live(q)) {
            fsdp_status s = FSDP_OK;
            int d = 0;
            if (q->deferred) {
                if (pending) break; /* and so is every later one */
                s = tp->start(q);
                q->deferred = 0;
            }
            if (s == FSDP_OK) s = tp->progress(q, &d);
            if (s != FSDP_OK) { /* named by the request's own label, as a timeout is */
                q->failed = s;
                snprintf(q->errmsg, sizeof q->errmsg, "%s (label \"%s\", %zu x %s) on %s: %s",
                         comm_coll_name(q->coll), q->label, q->count, fsdp_dtype_name(q->t), tp->name,
                         fsdp_last_error());
            } else if (d) {
                q->done = 1;
            } else if (tp->posted_all != NULL && !tp->posted_all(q)) {
                pending = 1;
            }
        }
        if (q == upto) break;
    }
}

/* Every in-flight request of the backend's row, once (the MPI progress thread's turn). */
static void poll_backend(fsdp_comm_t *c) { advance(c, c->be, NULL, 0); }

static fsdp_status progress_locked(fsdp_comm_req_t *r, int *done) {
    if (r->done) {
        *done = 1;
        return FSDP_OK;
    }
    if (r->stalled) {
        *done = 0;
        return FSDP_OK;
    }
    if (r->is_stale) { /* off the list: runs alone (the communicator is broken anyway) */
        fsdp_status s = r->tp->progress(r, done);
        if (s == FSDP_OK && *done) r->done = 1;
        return s;
    }
    /* Every row moves, whichever carries r: a peer may be waiting for this rank's part of another
     * request (it waits for them in its own order), and nothing else moves that part while this rank
     * waits here. A row ahead of the backend's (shared memory: its requests cost copies) up to r (a
     * later one's copies can wait), or all of its requests when r is another row's; the backend's row
     * every request (cheap tests; the progress thread, where it runs, does the same). Before this, a
     * rank waiting for an I64 all-reduce (MPI) and a peer waiting for a shared-memory all-reduce
     * started before it waited for each other forever. */
    fsdp_comm_t *c = r->c;
    for (int i = 0; i < c->nrows; i++) {
        const comm_transport *tp = c->rows[i];
        advance(c, tp, tp != c->be && r->tp == tp ? r : NULL, i == 0);
    }
    if (r->failed) return fsdp_set_error(r->failed, "%s", r->errmsg);
    *done = r->done;
    return FSDP_OK;
}

static fsdp_status progress(fsdp_comm_req_t *r, int *done) {
    comm_lock(r->c);
    fsdp_status s = progress_locked(r, done);
    comm_unlock(r->c);
    return s;
}

/* Past its deadline: the request stays with the communicator (MPI, or a late peer through the
 * shared-memory segment, may still write its buffers; a collective cannot be cancelled), the
 * communicator is marked broken. The message names this request's own label. */
static fsdp_status timed_out(fsdp_comm_req_t *r, double elapsed) {
    fsdp_comm_t *c = r->c;
    c->broken = 1;
    char host[64] = "?";
    gethostname(host, sizeof host - 1); /* many hosts: which one's rank is reporting */
    fsdp_status s =
        FSDP_ERR(FSDP_ETIMEOUT,
                 "rank %d of %d on host %s: %s (label \"%s\", %zu x %s) not complete after %.3f s (timeout_s "
                 "%.3f); another rank likely failed, stopped or called a different collective; end the job "
                 "with fsdp_comm_abort (the buffers of this call must stay valid until then)",
                 c->rank, c->size, host, comm_coll_name(r->coll), r->label, r->count, fsdp_dtype_name(r->t),
                 elapsed, c->timeout_s);
    comm_lock(c);
    inflight_unlink(r);
    r->acc_discard = 1; /* the accumulator is the caller's to free now: a late completion leaves it */
    comm_unlock(c);
    r->is_stale = 1;
    if (r->stalled || r->deferred) { /* nothing was posted: nothing else owns any of it */
        req_free(r);
    } else {
        r->next_stale = c->stale;
        c->stale = r;
    }
    return s;
}

void fsdp_comm_adopt_buffer(fsdp_comm_t *c, void *buf) {
    if (buf == NULL) return;
    if (c != NULL && c->stale != NULL) {
        for (int k = 0; k < 2; k++)
            if (c->stale->adopted[k] == NULL) {
                c->stale->adopted[k] = buf;
                return;
            }
        return; /* no room: kept for the life of the process, never reused */
    }
    fsdp_mem_free(buf); /* no timed-out call holds it */
}

static int past_deadline(const fsdp_comm_req_t *r, double *elapsed) {
    *elapsed = fsdp_time_s() - r->t0;
    return r->c->timeout_s > 0 && *elapsed > r->c->timeout_s;
}

fsdp_status fsdp_comm_test(fsdp_comm_req_t *req, int *done) {
    if (done == NULL) return FSDP_ERR(FSDP_EINVAL, "done is NULL");
    *done = 0;
    if (req == NULL) return FSDP_ERR(FSDP_EINVAL, "request is NULL");
    fsdp_status s = progress(req, done);
    if (s != FSDP_OK) {
        *done = 1;
        req_free(req);
        return s;
    }
    double el;
    if (*done) {
        req_free(req);
    } else if (past_deadline(req, &el)) {
        *done = 1;
        return timed_out(req, el);
    }
    return FSDP_OK;
}

/* Progress for every in-flight request, without waiting: what a program calls between kernels so
 * that started collectives move while it computes. Failures are left for the owner's test/wait. */

void fsdp_comm_progress(fsdp_comm_t *c) {
    if (c == NULL) return;
    c->progress_calls++;
    if (c->inflight == NULL) return;
    FSDP_PROF_SCOPE(FSDP_PROF_COMM);
    comm_lock(c);
    for (int i = 0; c->inflight != NULL && i < c->nrows; i++)
        if (c->rows[i] != c->be || !c->row_thread) /* the backend row's thread does it otherwise */
            advance(c, c->rows[i], NULL, i == 0);
    comm_unlock(c);
}

/* Polls MPI_Test (Open MPI progresses non-blocking collectives only inside MPI calls, so the poll
 * rate is the progress rate). For the first 50 ms it yields the core between polls — cheap for
 * oversubscribed ranks and no added latency; a longer wait (a straggler rank) backs off to sleeps
 * doubling from 1 us to 64 us so an idle rank does not burn a core. */
fsdp_status fsdp_comm_wait(fsdp_comm_req_t *req) {
    FSDP_PROF_SCOPE(FSDP_PROF_COMM);
    if (req == NULL) return FSDP_ERR(FSDP_EINVAL, "request is NULL");
    long sleep_ns = 0;
    double waited0 = fsdp_time_s() - req->t0; /* age of the request when this wait began */
    for (;;) {
        int done = 0;
        fsdp_status s = progress(req, &done);
        if (s != FSDP_OK) {
            req_free(req);
            return s;
        }
        if (done) break;
        double el;
        if (past_deadline(req, &el)) return timed_out(req, el);
        if (el - waited0 < 0.05) {
            sched_yield();
        } else {
            sleep_ns = sleep_ns == 0 ? 1000 : (sleep_ns < 64000 ? sleep_ns * 2 : sleep_ns);
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
    }
    req_free(req);
    return FSDP_OK;
}

/* Waits for the requests abandoned by timeouts before the communicator goes away; 0 if some are
 * still pending after `grace` seconds (then MPI must not be shut down: it would wait for them). */
static int drain_stale(fsdp_comm_t *c, double grace) {
    double t0 = fsdp_time_s();
    while (c->stale != NULL) {
        fsdp_comm_req_t *r = c->stale;
        int done = 0;
        if (progress(r, &done) != FSDP_OK) done = 1;
        if (done) {
            c->stale = r->next_stale;
            req_free(r);
            continue;
        }
        if (fsdp_time_s() - t0 > grace) return 0;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* ------------------------------------------------------------------------------------ public calls */

static fsdp_status run_blocking(fsdp_comm_t *c, comm_coll k, const void *send, void *recv, size_t count,
                                fsdp_dtype t, fsdp_reduce_op op, int root) {
    fsdp_comm_req_t *r = NULL;
    FSDP_PROF_SCOPE(FSDP_PROF_COMM);
    FSDP_TRY(start(c, k, send, recv, count, t, op, root, &r));
    return fsdp_comm_wait(r);
}

fsdp_status fsdp_comm_all_gather(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t) {
    return run_blocking(c, COLL_ALL_GATHER, send, recv, count, t, FSDP_SUM, 0);
}

fsdp_status fsdp_comm_reduce_scatter(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                     fsdp_reduce_op op) {
    return run_blocking(c, COLL_REDUCE_SCATTER, send, recv, count, t, op, 0);
}

fsdp_status fsdp_comm_all_reduce(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                 fsdp_reduce_op op) {
    return run_blocking(c, COLL_ALL_REDUCE, send, recv, count, t, op, 0);
}

fsdp_status fsdp_comm_broadcast(fsdp_comm_t *c, void *buf, size_t count, fsdp_dtype t, int root) {
    return run_blocking(c, COLL_BROADCAST, buf, buf, count, t, FSDP_SUM, root);
}

fsdp_status fsdp_comm_barrier(fsdp_comm_t *c) {
    return run_blocking(c, COLL_BARRIER, NULL, NULL, 0, FSDP_F32, FSDP_SUM, 0);
}

fsdp_status fsdp_comm_iall_gather(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                  fsdp_comm_req_t **req) {
    if (req == NULL) return FSDP_ERR(FSDP_EINVAL, "all-gather: req is NULL; pass the address of a request");
    *req = NULL;
    return start(c, COLL_ALL_GATHER, send, recv, count, t, FSDP_SUM, 0, req);
}

fsdp_status fsdp_comm_iall_reduce(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                  fsdp_reduce_op op, fsdp_comm_req_t **req) {
    if (req == NULL) return FSDP_ERR(FSDP_EINVAL, "all-reduce: req is NULL; pass the address of a request");
    *req = NULL;
    return start(c, COLL_ALL_REDUCE, send, recv, count, t, op, 0, req);
}

fsdp_status fsdp_comm_ireduce_scatter_acc(fsdp_comm_t *c, const float *send, float *acc, size_t count,
                                          float scale, fsdp_comm_req_t **req) {
    if (req == NULL)
        return FSDP_ERR(FSDP_EINVAL,
                        "reduce-scatter (accumulate): req is NULL; pass the address of a request");
    *req = NULL;
    fsdp_comm_req_t tmp = {0};
    FSDP_TRY(check_args(c, COLL_REDUCE_SCATTER, send, acc, count, FSDP_F32, FSDP_SUM, 0, &tmp));
    if (tmp.in_place)
        return FSDP_ERR(FSDP_EINVAL, "reduce-scatter (accumulate): acc must not be send (it adds into acc)");
    if (count > 0 && acc == send + (size_t)c->rank * count) /* allowed for the plain form only */
        return FSDP_ERR(FSDP_EINVAL,
                        "reduce-scatter (accumulate): acc overlaps send (it is this rank's block)");
    if (scale != scale) return FSDP_ERR(FSDP_EINVAL, "reduce-scatter (accumulate): scale is NaN");
    tmp.acc = 1;
    tmp.acc_scale = scale;
    return start_req(&tmp, req);
}

fsdp_status fsdp_comm_ireduce_scatter(fsdp_comm_t *c, const void *send, void *recv, size_t count,
                                      fsdp_dtype t, fsdp_reduce_op op, fsdp_comm_req_t **req) {
    if (req == NULL)
        return FSDP_ERR(FSDP_EINVAL, "reduce-scatter: req is NULL; pass the address of a request");
    *req = NULL;
    return start(c, COLL_REDUCE_SCATTER, send, recv, count, t, op, 0, req);
}

/* The row that would carry a collective over w ranks, picked from the ordered list a live communicator
 * of backend be would have (the shared-memory row first where it would be on: one host, peers),
 * exactly as start_req picks it, asked for its staging. */
size_t comm_plan_staging_bytes(fsdp_comm_backend be, int shm, comm_plan_coll coll, int w, size_t count,
                               fsdp_dtype t) {
    const comm_transport *rows[COMM_ROWS];
    int n = 0;
    if (be == FSDP_COMM_MPI && shm && w > 1) rows[n++] = &comm_transport_shm;
    rows[n++] = be == FSDP_COMM_MPI ? &comm_transport_mpi : &comm_transport_self;
    fsdp_comm_req_t q = {
        .coll = coll == COMM_PLAN_ALL_REDUCE ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER, .count = count, .t = t};
    const comm_transport *tp = row_for(rows, n, &q);
    return tp->staging_bytes == NULL ? 0 : tp->staging_bytes(q.coll, w, count, t);
}

/* The row that carries a floating-point collective of c: the engine's gathers and reductions. */
unsigned comm_caps(const fsdp_comm_t *c) {
    if (c == NULL) return 0;
    fsdp_comm_req_t q = {.coll = COLL_REDUCE_SCATTER, .t = FSDP_F32};
    unsigned caps = row_for(c->rows, c->nrows, &q)->caps;
    q.coll = COLL_ALL_GATHER;
    return caps & row_for(c->rows, c->nrows, &q)->caps;
}

/* ---------------------------------------------------------------------------------- stream waits */

fsdp_status fsdp_comm_wait_stream(fsdp_comm_req_t *req, fsdp_device_t *d, fsdp_stream_t *s) {
    if (req == NULL) return FSDP_ERR(FSDP_EINVAL, "request is NULL");
    if (d == NULL) d = fsdp_device_cpu();
    /* Not started on a row (count 0, a test fault's skip or stall): nothing of a row to order. */
    if (req->tp == NULL || req->tp->wait_stream == NULL || req->done || req->stalled || req->hang)
        return fsdp_comm_wait(req);
    comm_lock(req->c);
    fsdp_status st =
        req->failed ? fsdp_set_error(req->failed, "%s", req->errmsg) : req->tp->wait_stream(req, d, s);
    comm_unlock(req->c);
    req_free(req); /* the row keeps what the device still needs (its events) past its release */
    return st;
}
