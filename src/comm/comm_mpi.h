/* comm_mpi.h — the Open MPI backend (comm_mpi.c): MPI start-up and shut-down, the progress thread
 * across hosts, and each collective as a sequence of non-blocking MPI steps. */
#ifndef FSDP_COMM_MPI_H
#define FSDP_COMM_MPI_H

#include "comm/comm_impl.h"

#include <mpi.h> /* private to the MPI-backed rows (mpi, shm); not in comm_impl.h */

/* Open MPI's TCP transport flags set at MPI_Init when the user set none: its defaults without RDMA
 * emulation ("put", "hetero-rdma"); comm_mpi.c says why. */
#define FSDP_TCP_FLAGS "send,inplace,need-ack,need-csum"

extern const comm_transport comm_transport_mpi;

/* Test-only: 1 if fsdp_comm_init called MPI_Init_thread (so fsdp_comm_free finalises). */
int comm_mpi_inited_here(const fsdp_comm_t *c);

#endif
