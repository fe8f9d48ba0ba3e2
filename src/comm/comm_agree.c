/* comm_agree.c — agreement between ranks on a step that can fail on some of them only: one all-reduce
 * (MAX) tells every rank the lowest failing rank and its status, so the ranks that were fine return
 * FSDP_EPEER instead of waiting in a collective the failed rank will never join. */
#include "comm/comm_impl.h"

#include <stdint.h>

fsdp_status fsdp_comm_agree(fsdp_comm_t *c, fsdp_status s, const char *what) {
    if (c == NULL || c->size == 1) return s;
    c->agreed_rank = -1;
    c->agreed_status = FSDP_OK;
    /* (world - rank) in the high 32 bits, the status in the low ones, 0 where the step went fine: the
     * maximum is the lowest failing rank with its own status. */
    int64_t mine = s == FSDP_OK ? 0 : (int64_t)(c->size - c->rank) << 32 | (int64_t)(uint32_t)s, all = 0;
    /* The label is left alone: a timeout here names the step the ranks were last in. */
    fsdp_status cs = fsdp_comm_all_reduce(c, &mine, &all, 1, FSDP_I64, FSDP_MAX);
    if (cs != FSDP_OK) return cs; /* nothing was agreed: the communicator itself failed */
    if (all == 0) return s;
    int64_t hi = all >> 32, st = all & 0xffffffff;
    if (hi < 1 || hi > c->size || st <= FSDP_OK || st > FSDP_EPEER)
        return FSDP_ERR(FSDP_EFORMAT, "rank %d: the agreement after %s gave 0x%llx, which no rank sends",
                        c->rank, what ? what : "a step", (unsigned long long)all);
    c->agreed_rank = c->size - (int)hi;
    c->agreed_status = (fsdp_status)st;
    if (s != FSDP_OK) return s;
    return fsdp_set_error(FSDP_EPEER, "%s failed on rank %d (its message says why)", what ? what : "a step",
                          c->agreed_rank);
}

int fsdp_comm_agreed_failure(const fsdp_comm_t *c, fsdp_status *status) {
    if (status != NULL) *status = c != NULL && c->agreed_rank >= 0 ? c->agreed_status : FSDP_OK;
    return c != NULL ? c->agreed_rank : -1;
}
