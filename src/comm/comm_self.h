/* comm_self.h — the `self` backend (comm_self.c): world size 1, never calls MPI. */
#ifndef FSDP_COMM_SELF_H
#define FSDP_COMM_SELF_H

#include "comm/comm_impl.h"

extern const comm_transport comm_transport_self;

#endif
