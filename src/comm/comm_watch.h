/* comm_watch.h — the stuck watchdog (comm_watch.c). */
#ifndef FSDP_COMM_WATCH_H
#define FSDP_COMM_WATCH_H

#include "comm/comm_impl.h"

/* Enter before a call into MPI for r that should return at once (posting a step, testing one), leave
 * after it. While a watchdog runs, a thread that stays between the two longer than r's communicator's
 * timeout_s has the process ended with its stuck_exit status, after a message naming r. No-ops while
 * no watchdog runs. */
void comm_watch_enter(const fsdp_comm_req_t *r);
void comm_watch_leave(void);
/* A reference on the process's watchdog for c (stuck_exit set, a timeout, world > 1), and its release.
 * Caller's thread only (communicator init and free). */
void comm_watch_start(fsdp_comm_t *c);
void comm_watch_stop(fsdp_comm_t *c);

#endif
