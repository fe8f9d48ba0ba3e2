/* shard.h — internals of the shard layer: the engine, units with their flat layout, the lifecycle
 * state machine and the main_grad bookkeeping. Shared by unit.c (layout, hooks, full tensors),
 * main_grad.c (first-touch protocol, reduction, step structure) and optim.c (clipping, AdamW). */
#ifndef FSDP_SHARD_H
#define FSDP_SHARD_H

#include "core/core.h"
#include "core/device.h"
#include "core/prof.h"

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

const char *shard_state_name(unit_state s); /* lifecycle.c */

/* ---- lifecycle.c: the hook logic the engine runs for real and the memory plan replays ---- */

/* Where a unit's parameters are. */
typedef enum { LIFE_SHARDED = 0, LIFE_GATHERING, LIFE_UNSHARDED } life_res;

/* The lifecycle state of one unit (embedded in fsdp_unit and in the plan's simulated unit). */
typedef struct {
    int index;                 /* unit index: what the ops receive */
    unit_state state;          /* the hook state machine (checked by unit.c's public hooks) */
    life_res res;              /* residency of the unsharded parameters */
    int prefetched;            /* gathered ahead of its own hook, not yet used */
    int next_step;             /* prefetched after the optimizer updated it, for the next step */
    int mg;                    /* main_grad allocated */
    int reducing;              /* reduction started, not finished */
    int reshard_after_forward; /* resolved from the unit config and the strategy */
    int no_grad;               /* nothing trainable: no main_grad, no reduction */
} life_unit;

/* What the lifecycle does to one unit's buffers. Engine: allocate, communicate, free; plan: count. */
typedef struct {
    fsdp_status (*unshard_start)(void *ctx, int unit, int prefetch); /* allocate full params, start
                                                                         the all-gather */
    fsdp_status (*unshard_wait)(void *ctx, int unit);  /* complete it (on failure: buffer given up) */
    void (*reshard)(void *ctx, int unit);              /* free the full params */
    fsdp_status (*mg_alloc)(void *ctx, int unit);      /* allocate main_grad, uninitialised */
    fsdp_status (*reduce_start)(void *ctx, int unit);  /* zero-fill untouched, start the reduction */
    fsdp_status (*reduce_finish)(void *ctx, int unit); /* complete it, add into grad, free main_grad */
} life_ops;

/* A recorded execution order (unit indices), 0: pre_forward calls, 1: pre_backward calls. */
typedef struct {
    int *idx;
    int n, cap;
    int next;        /* position expected next */
    int closed;      /* recording saw a unit twice: the order is complete */
    long mismatches; /* calls that did not follow the order (after recording) */
} life_order;

typedef struct {
    const life_ops *ops;
    void *ctx;
    life_unit **units; /* (n) by index */
    int n;
    int max_inflight; /* prefetched gathers at most; 0: synchronous */
    fsdp_main_grad_policy policy;
    fsdp_accum_mode accum;
    int n_micro, micro;
    long steps;    /* begin_step calls */
    int recording; /* orders are recorded (before the second begin_step) */
    life_order order[2];
    int pending;     /* unit whose reduction is in flight, or -1 */
    int no_backward; /* forwards now are not followed by a backward (fsdp_engine_set_no_backward) */
} life_sched;

void life_init(life_sched *s, const life_ops *ops, void *ctx, life_unit **units, int n, int max_inflight);
void life_set_units(life_sched *s, life_unit **units, int n);
void life_free(life_sched *s);
void life_begin_step(life_sched *s, int n_micro);
fsdp_status life_pre_forward(life_sched *s, life_unit *u);
fsdp_status life_post_forward(life_sched *s, life_unit *u);
fsdp_status life_pre_backward(life_sched *s, life_unit *u);
fsdp_status life_post_backward(life_sched *s, life_unit *u);
/* keep_next: leave the next step's prefetched units (callers that only read shards or gradients). */
fsdp_status life_drain(life_sched *s, int keep_next);
fsdp_status life_after_update(life_sched *s, int unit);

typedef struct {
    char *name; /* copied from the spec */
    int ndim;
    int64_t shape[FSDP_MAX_DIMS];
    size_t numel;
    size_t offset; /* element offset in the flat buffer; an alias: its target's */
    int alias_of;  /* target index (always a non-alias tensor), or -1 */
    int no_decay;
    int frozen; /* in the frozen region (an alias: its target's) */
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
    size_t numel;   /* end of the last non-alias tensor (incl. alignment gaps) */
    size_t padded;  /* flat length: numel rounded up to a multiple of world */
    life_unit life; /* state, residency, main_grad and reduction flags (lifecycle.c) */

    /* This rank's shard [shard_off, shard_off + shard_len) of the flat buffer; under NO_SHARD the
     * whole buffer (shard_off 0, shard_len padded). All four are fp32, shard_len elements. */
    size_t shard_off, shard_len;
    float *master;          /* category master */
    float *grad;            /* category grad_shard */
    float *adam_m, *adam_v; /* category optim */

    /* The frozen region [padded, padded + fpad) of the flat buffer: this rank's shard of it, elements
     * [padded + fshard_off, + fshard_len) (NO_SHARD: all of it), in the compute dtype (category
     * master); NULL when nothing is frozen. */
    size_t fpad, fshard_off, fshard_len;
    void *frozen;

    void *full; /* (padded + fpad) compute dtype, category param_full; NULL when sharded */
    fsdp_comm_req_t *gather, *gather_f; /* the all-gathers of the two regions into full while life.res is
                                           GATHERING */

    float *main_grad;        /* (padded) fp32, category main_grad; NULL when not allocated */
    uint64_t *touched;       /* bitmask over tensors (non-alias indices), ceil(n/64) words */
    fsdp_comm_req_t *reduce; /* the reduction of main_grad while life.reducing */
    int reduce_acc;          /* it adds into grad itself (fsdp_comm_ireduce_scatter_acc) */
    fsdp_bf16 *wire;         /* (padded) its bf16 wire buffer (reduce dtype BF16), category comm */
};

struct fsdp_engine {
    fsdp_comm_t *comm;
    fsdp_comm_t *shard_comm; /* gathers and reduce-scatters: comm, or HYBRID's group (owned) */
    fsdp_comm_t *rep_comm;   /* HYBRID with groups > 1: ranks holding the same shard (owned), else NULL */
    int srank, sworld;       /* this rank in shard_comm, its size */
    int grp, ngrp;           /* HYBRID: this rank's group, the number of groups (else 0, 1) */
    fsdp_engine_config cfg;
    int rank, world;
    fsdp_unit_t **units; /* (n_units) registration order */
    int n_units, cap_units;
    int64_t step;      /* AdamW steps taken */
    int n_micro;       /* micro-batches in this step (begin_step), default 1 */
    int micro;         /* current micro-batch (begin_micro), default 0 */
    life_unit **lives; /* (cap_units) &units[i]->life */
    life_sched sched;  /* the lifecycle: order, prefetch, pending reduction */

    /* The device (docs/DESIGN.md "Devices"). compute: the model's kernels and every engine op on
     * master, grad, moments and main_grad, in the order the host issues them; side: the casts into
     * the all-gather's send slot, which wait for compute's updates to the master. ev_side / ev_compute:
     * the points the host or the other stream waits for. The transports today poll from the host on
     * host memory, so a buffer is handed to a collective only after the host synchronised on the
     * stream that wrote it. */
    fsdp_device_t *dev;
    fsdp_stream_t *compute, *side;
    fsdp_event_t *ev_side, *ev_compute;
    int fault; /* SHARD_FAULT_*: a planted ordering fault (tests of the simulated device only) */
};

/* Ordering faults the simulated device must catch (tests/shard/mpi_device_sim.c plants them with
 * shard_plant_fault). Never set outside those tests. */
enum {
    SHARD_FAULT_NONE = 0,
    SHARD_FAULT_REDUCE_EARLY, /* the reduction is posted without waiting for the compute stream */
    SHARD_FAULT_FREE_EARLY,   /* reshard frees the gathered buffer on the side stream, no wait */
};
void shard_plant_fault(fsdp_engine_t *e, int fault);
/* With host kernels (fsdp_engine_config.host_kernels) on an asynchronous device: the host waits until
 * the compute stream ran everything queued so far (a host kernel reads or writes a view next); else
 * nothing. */
fsdp_status shard_host_catch_up(fsdp_engine_t *e);
/* The engine's compute stream: where the model queues the kernels that read parameters and write
 * main_grad (NULL on the CPU). */
fsdp_stream_t *shard_compute_stream(const fsdp_engine_t *e);
/* The host waits until every op queued on the engine's streams ran: before it reads or writes shard
 * bytes itself (checkpoints, HF tensors, initialisation). */
fsdp_status shard_device_sync(fsdp_engine_t *e);

/* layout.c: one unit's specs validated and laid out flat (the engine and the plan both call it). */
typedef struct {
    size_t numel;  /* elements */
    size_t offset; /* in the flat buffer; an alias: its target's */
    int alias_of;  /* target index (a non-alias tensor), or -1 */
    int frozen;    /* in the frozen region (an alias: its target's) */
} layout_tensor;

/* One unit's flat sizes: the trainable region [0, padded) (tensors end at numel; psi elements of
 * them), then the frozen region [padded, padded + fpad) (its tensors end at padded + fnumel; fpsi
 * elements). padded and fpad are multiples of world. */
typedef struct {
    size_t numel, padded, psi;
    size_t fnumel, fpad, fpsi;
} layout_sizes;

/* What layout needs to know of the units before this one (ties across units are refused, naming
 * both). Either callback may be NULL. */
typedef struct {
    void *ctx;
    const char *(*unit_named)(void *ctx, const char *name, size_t len); /* that unit's name, or NULL */
    const char *(*unit_with_tensor)(void *ctx, const char *tensor);     /* a unit holding it, or NULL */
} layout_others;

/* freeze: fsdp_engine_config.freeze (tensors it names are frozen); lt: (n) out; gaps: (n + 1) out or
 * NULL: the trainable region's gaps (what main_grad's zero-fill
 * covers; the frozen region's are zero from initialisation). Trainable non-alias tensors in declaration
 * order from 0, then the frozen ones in declaration order from the padded trainable length. */
fsdp_status shard_layout(const char *unit, const fsdp_tensor_spec *specs, int n, size_t align, int world,
                         const char *freeze, const layout_others *others, layout_tensor *lt, shard_gap *gaps,
                         int *n_gaps, layout_sizes *sz);
/* fsdp_engine_config.freeze: NULL, "", or comma-separated non-empty globs of at most 255 characters. */
fsdp_status shard_freeze_check(const char *freeze);
/* 1 if "unit.tensor" matches one of the globs in freeze (NULL: none). */
int shard_freeze_match(const char *freeze, const char *unit, const char *tensor);

/* main_grad.c */
fsdp_status shard_main_grad_alloc(fsdp_unit_t *u); /* no-op if already allocated */
void shard_main_grad_release(fsdp_unit_t *u);      /* poison (debug builds), free, clear views/bits */
fsdp_status shard_reduce_start(fsdp_unit_t *u);    /* zero-fill untouched slices, start the reduction */
fsdp_status shard_reduce_finish(fsdp_unit_t *u);   /* wait, add into the grad shard, free main_grad */
int shard_touched_any(const fsdp_unit_t *u);

/* comms.c: the engine's communicators (world; HYBRID: shard and replica groups), one owner.
 * init: e->cfg set; splits the groups (freed again on failure). */
fsdp_status shard_comms_init(fsdp_engine_t *e, fsdp_comm_t *world);
void shard_comms_free(fsdp_engine_t *e);
/* A turn of progress on every communicator of the engine (what fsdp_engine_progress runs). */
void shard_progress(fsdp_engine_t *e);
void shard_comms_set_label(fsdp_engine_t *e, const char *label);
/* Labels every communicator of the engine "unit NAME / phase" (named by a timeout). */
void shard_set_label(fsdp_unit_t *u, const char *phase);
/* Gives up a buffer after its collective on c failed: adopted by c after a timeout (the collective
 * may still write it), else freed. c must be the communicator the collective ran on. */
void shard_drop(fsdp_comm_t *c, fsdp_status st, void *buf);
/* The same for a block of the engine's device (main_grad, the wire, the gathered parameters). */
void shard_drop_device(fsdp_engine_t *e, fsdp_comm_t *c, fsdp_status st, void *buf);
/* Before a buffer written by work queued on stream s goes to a collective on c: the row carrying c polls
 * from the host (comm_caps), so the host waits for s (an event ev recorded there) first. */
fsdp_status shard_handoff(fsdp_engine_t *e, fsdp_comm_t *c, fsdp_event_t *ev, fsdp_stream_t *s);

/* unit.c */
/* life_drain on the engine's units (every call that reads or writes shards starts with it);
 * keep_next 1 for calls that change no master. */
static inline fsdp_status shard_drain(fsdp_engine_t *e, int keep_next) {
    return life_drain(&e->sched, keep_next);
}

#endif
