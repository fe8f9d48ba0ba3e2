/* comm_plan.h — what the shard layer asks of the communicator's transport rows without their internals:
 * what the row carrying a communicator's collectives can do (comm_caps: the engine decides from it how
 * device work is ordered before a collective), and for the memory plan (shard/plan.c), without a
 * communicator at hand, the staging a collective would hold (comm.c picks the row as a live
 * communicator does; each row states its own bytes, comm_transport.staging_bytes). */
#ifndef FSDP_COMM_PLAN_H
#define FSDP_COMM_PLAN_H

#include "core/device.h"
#include "fsdp.h"

/* What a row can do (comm_transport.caps). */
enum {
    COMM_CAP_ACCUMULATE = 1u << 0, /* a reduce-scatter may add its scaled sum into an accumulator */
    COMM_CAP_HOST_POLL = 1u << 1,  /* moved by host calls on host memory: a buffer is handed over only
                                      once the device work that wrote it ran (shard/main_grad.c) */
    COMM_CAP_DEVICE_MEM = 1u << 2, /* reads and writes device memory in place, ordered on a stream */
};

/* The capabilities of the rows that carry c's floating-point gathers and reductions (the first row of
 * c's ordered list that takes them: shared memory when it is on, else the backend's row), both. */
unsigned comm_caps(const fsdp_comm_t *c);

/* Waits for req as fsdp_comm_wait does, as far as stream s of device d (NULL: the CPU) needs: later
 * work queued on s runs after the collective wrote its buffers, and req is given up. A host-polled row
 * (COMM_CAP_HOST_POLL: every row today) completes it on the host first, with the timeout; a
 * stream-ordered row (COMM_CAP_DEVICE_MEM) makes s wait for it on the device and returns at once. */
fsdp_status fsdp_comm_wait_stream(fsdp_comm_req_t *req, fsdp_device_t *d, fsdp_stream_t *s);

typedef enum { COMM_PLAN_REDUCE_SCATTER = 0, COMM_PLAN_ALL_REDUCE } comm_plan_coll;

/* Bytes of category comm held from the start to the completion of one collective over w ranks of
 * backend be, with the shared-memory transport on (shm) or not: count elements of dtype t per rank
 * block (reduce-scatter) or in all (all-reduce). */
size_t comm_plan_staging_bytes(fsdp_comm_backend be, int shm, comm_plan_coll coll, int w, size_t count,
                               fsdp_dtype t);

#endif
