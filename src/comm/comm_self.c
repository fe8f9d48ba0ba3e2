/* comm_self.c — the `self` backend: world size 1, no launcher, never calls MPI. Every collective
 * completes when it starts. */
#include "comm/comm_self.h"

#include <string.h>

/* World size 1: every collective is a copy (or nothing, in place). SUM, AVG (divide by 1) and MAX of
 * one contribution are that contribution exactly, in both dtypes. */
static void self_run(fsdp_comm_req_t *r) {
    size_t n = r->count * fsdp_dtype_size(r->t);
    switch (r->coll) {
    case COLL_REDUCE_SCATTER:
        if (r->acc) {
            const void *one[1] = {r->send};
            comm_req_reduce(r, r->recv, one, r->count);
            break;
        }
        /* fall through */
    case COLL_ALL_GATHER:
    case COLL_ALL_REDUCE:
        if (!r->in_place) memcpy(r->recv, r->send, n);
        break;
    case COLL_BROADCAST:
    case COLL_BARRIER: break;
    }
}

static fsdp_status self_start(fsdp_comm_req_t *r) {
    self_run(r);
    r->done = 1;
    return FSDP_OK;
}

const comm_transport comm_transport_self = {.name = "self",
                                            .id = COMM_ROW_SELF,
                                            .caps = COMM_CAP_ACCUMULATE | COMM_CAP_HOST_POLL,
                                            .start = self_start};
