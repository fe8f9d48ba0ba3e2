/* comm_watch.c — the stuck watchdog: one thread per process that ends the process when a single call
 * into a transport (MPI) does not return within its communicator's timeout. Below every transport and
 * the front end, which both mark their calls with comm_watch_enter/leave. */
#include "comm/comm_watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A collective's timeout is checked by the waiting thread between its calls into MPI. When one of
 * those calls does not return, nothing is ever reported: seen across namespace hosts with a frozen
 * Open MPI daemon (tests/hosts/hosts_fail.sh, "frozen"), where a rank's MPI_Test met a TCP connection
 * error and waited inside Open MPI's error reporting for that daemon, holding comm_mpi_mu, so the
 * progress thread waited too and the rank never ended. With stuck_exit set, one watchdog thread per
 * process looks every STUCK_POLL_NS at the call in progress (comm_watch_enter/leave, at most one at a
 * time: they hold comm_mpi_mu whenever a second thread makes MPI calls) and, once a single call has
 * lasted longer than its communicator's timeout_s, writes which collective it was and _exits with
 * stuck_exit: MPI cannot be asked to abort from a thread while another is stuck inside it. It never
 * takes a lock, so it is not held up by the stuck thread. */
enum { STUCK_POLL_NS = 100 * 1000 * 1000 };

typedef struct {
    int rank, size, status;
    double timeout_s;
    comm_coll coll;
    size_t count;
    fsdp_dtype t;
    char label[128];
} stuck_info;

static stuck_info stuck_cur;           /* the call in progress; written before stuck_since is set */
static _Atomic int64_t stuck_since_ns; /* when it began (fsdp_time_s in ns); 0: no call in progress */
static _Atomic int stuck_refs;         /* communicators that asked for the watchdog */
static _Atomic int stuck_stop;
static pthread_t stuck_thr;

void comm_watch_enter(const fsdp_comm_req_t *r) {
    if (atomic_load_explicit(&stuck_refs, memory_order_relaxed) == 0) return;
    const fsdp_comm_t *c = r->c;
    stuck_cur.rank = c->rank;
    stuck_cur.size = c->size;
    stuck_cur.status = c->stuck_exit;
    stuck_cur.timeout_s = c->timeout_s;
    stuck_cur.coll = r->coll;
    stuck_cur.count = r->count;
    stuck_cur.t = r->t;
    memcpy(stuck_cur.label, r->label, sizeof stuck_cur.label);
    int64_t t = (int64_t)(fsdp_time_s() * 1e9);
    atomic_store_explicit(&stuck_since_ns, t > 0 ? t : 1, memory_order_release);
}

void comm_watch_leave(void) {
    if (atomic_load_explicit(&stuck_refs, memory_order_relaxed) == 0) return;
    atomic_store_explicit(&stuck_since_ns, 0, memory_order_release);
}

static void *stuck_watchdog(void *arg) {
    (void)arg;
    while (!atomic_load(&stuck_stop)) {
        struct timespec ts = {0, STUCK_POLL_NS};
        nanosleep(&ts, NULL);
        int64_t since = atomic_load_explicit(&stuck_since_ns, memory_order_acquire);
        if (since == 0) continue;
        stuck_info in = stuck_cur;
        /* The same call still in progress: the copy is the one written before it began. */
        if (atomic_load_explicit(&stuck_since_ns, memory_order_acquire) != since) continue;
        double el = fsdp_time_s() - (double)since * 1e-9;
        if (in.status <= 0 || in.timeout_s <= 0 || el <= in.timeout_s) continue;
        char host[64] = "?", msg[512];
        gethostname(host, sizeof host - 1);
        in.label[sizeof in.label - 1] = '\0';
        int n =
            snprintf(msg, sizeof msg,
                     "fsdp_comm: rank %d of %d on host %s: %s (label \"%s\", %zu x %s) has been inside one "
                     "call into MPI for %.3f s (timeout_s %.3f): MPI does not return (a lost launcher daemon "
                     "or peer host can hold it there), so no timeout can be reported; ending the process "
                     "with status %d\n",
                     in.rank, in.size, host, comm_coll_name(in.coll), in.label, in.count,
                     fsdp_dtype_name(in.t), el, in.timeout_s, in.status);
        /* bounded: a full pipe to a stuck launcher daemon must not hold the exit */
        if (n > 0)
            fsdp_write_bounded(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, 200);
        _exit(in.status);
    }
    return NULL;
}

/* Called on the caller's thread only (init and free). */
void comm_watch_start(fsdp_comm_t *c) {
    if (c->stuck_exit <= 0 || c->timeout_s <= 0 || c->size < 2) return;
    if (atomic_load(&stuck_refs) == 0) {
        atomic_store(&stuck_stop, 0);
        if (pthread_create(&stuck_thr, NULL, stuck_watchdog, NULL) != 0) {
            fprintf(stderr,
                    "fsdp_comm_init: rank %d: no stuck watchdog thread; a call stuck inside MPI "
                    "will not end the process\n",
                    c->rank);
            return;
        }
    }
    atomic_fetch_add(&stuck_refs, 1);
    c->stuck_watch = 1;
}

void comm_watch_stop(fsdp_comm_t *c) {
    if (!c->stuck_watch) return;
    c->stuck_watch = 0;
    if (atomic_fetch_sub(&stuck_refs, 1) == 1) {
        atomic_store(&stuck_stop, 1);
        pthread_join(stuck_thr, NULL);
        atomic_store(&stuck_since_ns, 0);
    }
}
