/* comm_shm.h — the shared-memory transport (comm_shm.c): collectives between the ranks of one host
 * through a shared window, set up by the MPI backend. */
#ifndef FSDP_COMM_SHM_H
#define FSDP_COMM_SHM_H

#include "comm/comm_impl.h"

#include <mpi.h> /* private to the MPI-backed rows (mpi, shm); not in comm_impl.h */

extern const comm_transport comm_transport_shm;

/* After the MPI communicator exists: puts the row first in c's ordered list, or leaves it off where it
 * does not apply (several hosts, one rank, FSDP_COMM_SHM=0, or the window was refused). */
fsdp_status comm_shm_init(fsdp_comm_t *c, MPI_Comm node, int node_size);
void comm_shm_free(fsdp_comm_t *c);

/* Test-only: whether the single-copy path and the direct heap reads are on (0 when the row is off). */
void comm_shm_test_info(const fsdp_comm_t *c, int *cma, int *heap);

#endif
