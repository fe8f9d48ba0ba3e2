/* shard.h — internals of the shard layer: the engine, units with their flat layout, the lifecycle
 * state machine and the main_grad bookkeeping. Shared by unit.c (layout, hooks, full tensors),
 * main_grad.c (first-touch protocol, reduction, step structure) and optim.c (clipping, AdamW). */
#ifndef FSDP_SHARD_H
#define FSDP_SHARD_H

#include "core/core.h"

#include <stdint.h>

/* Element loops shorter than this run on one thread: a parallel region costs more than it saves, and
 * with ranks oversubscribing the cores idle OpenMP threads spin against the other ranks. */
#define SHARD_OMP_MIN 32768

/* Lifecycle states of a unit. Transitions (anything else is FSDP_ESTATE):
 *   IDLE         --pre_forward-->   FORWARD
 *   FORWARD      --post_forward-->  FORWARD_DONE
 *   FORWARD_DONE --pre_backward-->  BACKWARD
 *   FORWARD_DONE --pre_forward-->   FORWARD        (evaluation: the previous forward is abandoned)
 *   BACKWARD     --pre_forward-->   RECOMPUTE      (activation recompute; params stay)
 *   RECOMPUTE    --post_forward-->  BACKWARD
 *   BACKWARD     --post_backward--> IDLE
 *   FORWARD_DONE --engine_reshard_all--> IDLE */
typedef enum { UNIT_IDLE = 0, UNIT_FORWARD, UNIT_FORWARD_DONE, UNIT_BACKWARD, UNIT_RECOMPUTE } unit_state;

const char *shard_state_name(unit_state s);

typedef struct {
    char *name; /* copied from the spec */
    int ndim;
    int64_t shape[FSDP_MAX_DIMS];
    size_t numel;
    size_t offset; /* element offset in the flat buffer; an alias: its target's */
    int alias_of;  /* target index (always a non-alias tensor), or -1 */
    int no_decay;
    fsdp_init_kind init;
    float std;
    void *param_view; /* into u->full (compute dtype) while unsharded, else NULL */
    float *grad_view; /* into u->main_grad while allocated, else NULL */
} shard_tensor;

/* A gap of the flat layout that holds no tensor (alignment between tensors, tail padding). */
typedef struct {
    size_t offset, len;
} shard_gap;

struct fsdp_unit {
    fsdp_engine_t *eng;
    char *name;
    int index; /* registration order */
    int n_tensors;
    shard_tensor *tensors; /* (n_tensors) */
    shard_gap *gaps;       /* (n_gaps) sorted by offset */
    int n_gaps;
    size_t numel;              /* end of the last non-alias tensor (incl. alignment gaps) */
    size_t padded;             /* flat length: numel rounded up to a multiple of world */
    int reshard_after_forward; /* resolved from the unit config and the strategy */

    /* This rank's shard [shard_off, shard_off + shard_len) of the flat buffer; under NO_SHARD the
     * whole buffer (shard_off 0, shard_len padded). All four are fp32, shard_len elements. */
    size_t shard_off, shard_len;
    float *master;          /* category master */
    float *grad;            /* category grad_shard */
    float *adam_m, *adam_v; /* category optim */

    unit_state state;
    void *full; /* (padded) compute dtype, category param_full; NULL when sharded */

    float *main_grad;  /* (padded) fp32, category main_grad; NULL when not allocated */
    uint64_t *touched; /* bitmask over tensors (non-alias indices), ceil(n/64) words */
};

struct fsdp_engine {
    fsdp_comm_t *comm;
    fsdp_engine_config cfg;
    int rank, world;
    fsdp_unit_t **units; /* (n_units) registration order */
    int n_units, cap_units;
    int64_t step; /* AdamW steps taken */
    int n_micro;  /* micro-batches in this step (begin_step), default 1 */
    int micro;    /* current micro-batch (begin_micro), default 0 */
};

/* main_grad.c */
fsdp_status shard_main_grad_alloc(fsdp_unit_t *u); /* no-op if already allocated */
void shard_main_grad_release(fsdp_unit_t *u);      /* poison (debug builds), free, clear views/bits */
fsdp_status shard_reduce(fsdp_unit_t *u);          /* post_backward's reduction if this micro reduces */
int shard_touched_any(const fsdp_unit_t *u);

/* unit.c */
void shard_set_label(fsdp_unit_t *u, const char *phase);

#endif
