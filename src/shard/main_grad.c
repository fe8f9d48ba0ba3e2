/* main_grad.c — the fp32 main_grad protocol of docs/DESIGN.md section 4: per-unit flat buffer allocated
 * uninitialised (LAZY in pre_backward, EAGER in pre_forward), a host bitmask of touched tensors that
 * drives first-touch overwrite/accumulate and the zero-fill before reduction, the reduction into the
 * fp32 sharded gradient (the one place averaging happens), and the step / micro-batch structure. */
#include "shard/shard.h"
#include "comm/comm_plan.h"

#include <string.h>

/* Quiet NaN with a recognisable payload: a freshly allocated or freed main_grad in debug builds. */
#define MAIN_GRAD_POISON 0x7FC0DEADu

static void poison(float *p, size_t n) {
#ifdef FSDP_DEBUG_CHECKS
    uint32_t bits = MAIN_GRAD_POISON;
    float v;
    memcpy(&v, &bits, sizeof v);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
#else
    (void)p;
    (void)n;
#endif
}

static int bit_get(const uint64_t *m, int k) { return (int)((m[k >> 6] >> (k & 63)) & 1u); }
static void bit_set(uint64_t *m, int k) { m[k >> 6] |= (uint64_t)1 << (k & 63); }

int shard_touched_any(const fsdp_unit_t *u) {
    for (int w = 0; w < (u->n_tensors + 63) / 64; w++)
        if (u->touched[w]) return 1;
    return 0;
}

static void clear_bits(fsdp_unit_t *u) {
    memset(u->touched, 0, ((size_t)u->n_tensors + 63) / 64 * sizeof(uint64_t));
}

/* Allocates the unit's flat main_grad uninitialised (poisoned in debug builds, so nothing can rely on
 * zeros) and re-points every tensor's view; the bitmask starts empty. */
fsdp_status shard_main_grad_alloc(fsdp_unit_t *u) {
    if (u->main_grad != NULL) return FSDP_OK;
    fsdp_engine_t *e = u->eng;
    fsdp_status st = e->dev->alloc(e->dev, (void **)&u->main_grad, u->padded * sizeof(float),
                                   FSDP_MEM_MAIN_GRAD, FSDP_ALLOC_SHARED, e->compute);
    if (st != FSDP_OK) return FSDP_WRAP(st, "unit '%s': main_grad of %zu fp32 elements", u->name, u->padded);
    if (!(e->dev->caps & FSDP_DEV_ASYNC)) poison(u->main_grad, u->padded); /* the device poisons its own */
    clear_bits(u);
    for (int t = 0; t < u->n_tensors; t++) /* a frozen tensor has none (its offset lies past main_grad) */
        u->tensors[t].grad_view = u->tensors[t].frozen ? NULL : u->main_grad + u->tensors[t].offset;
    return FSDP_OK;
}

void shard_main_grad_release(fsdp_unit_t *u) {
    if (u->main_grad == NULL) return;
    for (int t = 0; t < u->n_tensors; t++)
        u->tensors[t].grad_view = NULL;
    if (!(u->eng->dev->caps & FSDP_DEV_ASYNC)) poison(u->main_grad, u->padded); /* else when the free runs */
    u->eng->dev->free(u->eng->dev, u->main_grad, u->eng->compute);
    u->main_grad = NULL;
    u->life.mg = 0;
    clear_bits(u);
}

/* The window in which views may be handed out: between pre_backward and post_backward, and under EAGER
 * also from pre_forward (the buffer exists from then). Checked in every build, not only debug. */
static int in_window(const fsdp_unit_t *u, int frozen) {
    if (u->main_grad == NULL && !(frozen && u->life.no_grad)) return 0;
    if (u->life.state == UNIT_BACKWARD || u->life.state == UNIT_RECOMPUTE) return 1;
    return u->eng->cfg.main_grad == FSDP_MAIN_GRAD_EAGER &&
           (u->life.state == UNIT_FORWARD || u->life.state == UNIT_FORWARD_DONE);
}

static fsdp_status get_view(fsdp_unit_t *u, int t, float **view, int *accumulate, const char *call) {
    if (u == NULL) return fsdp_set_error(FSDP_EINVAL, "%s: unit must not be NULL", call);
    if (t < 0 || t >= u->n_tensors)
        return fsdp_set_error(FSDP_EINVAL, "%s: unit '%s': tensor index %d outside 0..%d", call, u->name, t,
                              u->n_tensors - 1);
    const int frozen = u->tensors[t].frozen;
    if (!in_window(u, frozen))
        return fsdp_set_error(
            FSDP_ESTATE,
            "%s: unit '%s' tensor '%s': main_grad is only available between pre_backward and "
            "post_backward (EAGER: from pre_forward); the unit is in state %s",
            call, u->name, u->tensors[t].name, shard_state_name(u->life.state));
    if (frozen) { /* no gradient: the caller skips it */
        *view = NULL;
        *accumulate = 0;
        return FSDP_OK;
    }
    FSDP_TRY(shard_host_catch_up(u->eng)); /* a host kernel writes it next */
    int k = u->tensors[t].alias_of >= 0 ? u->tensors[t].alias_of : t;
    *accumulate = bit_get(u->touched, k);
    bit_set(u->touched, k);
    *view = u->tensors[k].grad_view;
    return FSDP_OK;
}

fsdp_status fsdp_unit_main_grad(fsdp_unit_t *u, int t, float **view, int *accumulate) {
    if (view) *view = NULL;
    if (view == NULL || accumulate == NULL)
        return FSDP_ERR(FSDP_EINVAL, "view and accumulate must not be NULL");
    return get_view(u, t, view, accumulate, "fsdp_unit_main_grad");
}

fsdp_status fsdp_unit_grad_from_bf16(fsdp_unit_t *u, int t, const fsdp_bf16 *g) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "g must not be NULL");
    float *dst;
    int acc;
    FSDP_TRY(get_view(u, t, &dst, &acc, "fsdp_unit_grad_from_bf16"));
    if (dst == NULL) return FSDP_OK; /* frozen */
    FSDP_PROF_SCOPE(FSDP_PROF_CAST);
    u->eng->dev->bf16_to_f32(u->eng->dev, u->eng->compute, dst, g, u->tensors[t].numel, acc);
    return shard_host_catch_up(u->eng); /* the caller's g is free again */
}

fsdp_status fsdp_unit_grad_from_f32(fsdp_unit_t *u, int t, const float *g) {
    if (g == NULL) return FSDP_ERR(FSDP_EINVAL, "g must not be NULL");
    float *dst;
    int acc;
    FSDP_TRY(get_view(u, t, &dst, &acc, "fsdp_unit_grad_from_f32"));
    if (dst == NULL) return FSDP_OK; /* frozen */
    fsdp_device_t *d = u->eng->dev;
    size_t n = u->tensors[t].numel;
    if (acc)
        d->f32_add(d, u->eng->compute, dst, g, n);
    else
        d->copy(d, dst, g, n * sizeof(float), u->eng->compute);
    return shard_host_catch_up(u->eng); /* the caller's g is free again */
}

int fsdp_unit_grad_touched(const fsdp_unit_t *u, int t) {
    if (u == NULL || t < 0 || t >= u->n_tensors || u->main_grad == NULL || u->tensors[t].frozen) return 0;
    int k = u->tensors[t].alias_of >= 0 ? u->tensors[t].alias_of : t;
    return bit_get(u->touched, k);
}

/* ---------------------------------------------------------------- reduction */

/* post_backward's reduction, in two halves so that it can run while the previous unit's backward
 * computes (lifecycle.c decides when each half runs). It happens when this micro-batch reduces
 * (ACCUM_SHARDED: every one; ACCUM_NO_SYNC: the last of the step); otherwise lifecycle.c keeps
 * main_grad and its bitmask for the next one.
 * start:
 *  1. zero-fill, decided from the bitmask and the layout only: untouched non-alias tensors, the
 *     alignment gaps and the tail padding (never reading the buffer: no sync, a real zero stays right);
 *  2. start the reduce-scatter (SUM) of the whole flat buffer (NO_SHARD: all-reduce), in place on
 *     main_grad for fp32, or from one cast into a bf16 wire buffer.
 * finish:
 *  3. wait for it; bf16: upcast the result back into main_grad;
 *  4. grad_shard += reduced * 1 / (world * n_micro). This is the ONE place averaging happens: the
 *     model's loss is a mean over its own micro-batch on its own rank, so the sum over ranks and
 *     micro-batches divided by world * n_micro is the mean over the global batch of the step;
 *  5. free main_grad (poisoned first in debug builds) and the wire buffer. */
/* 1 / (world x n_micro): the one averaging factor (step 4). */
static float shard_grad_scale(const fsdp_engine_t *e) {
    return 1.0f / (float)((double)e->world * (double)e->n_micro);
}

/* The host hands main_grad to a host-polled transport: it waits for the compute stream first (the
 * weight-gradient GEMMs and the zero-fill above are queued there). */
static fsdp_status compute_done(fsdp_engine_t *e, fsdp_comm_t *c) {
    if (e->fault == SHARD_FAULT_REDUCE_EARLY) return FSDP_OK;
    return shard_handoff(e, c, e->ev_compute, e->compute);
}

fsdp_status shard_reduce_start(fsdp_unit_t *u) {
    fsdp_engine_t *e = u->eng;
    fsdp_device_t *d = e->dev;
    FSDP_INVARIANT(u->main_grad != NULL && u->reduce == NULL);
    float *mg = u->main_grad;
    for (int t = 0; t < u->n_tensors; t++)
        if (u->tensors[t].alias_of < 0 && !u->tensors[t].frozen && !bit_get(u->touched, t))
            d->memset0(d, mg + u->tensors[t].offset, u->tensors[t].numel * sizeof(float), e->compute);
    for (int g = 0; g < u->n_gaps; g++)
        d->memset0(d, mg + u->gaps[g].offset, u->gaps[g].len * sizeof(float), e->compute);

    int no_shard = e->cfg.strategy == FSDP_NO_SHARD;
    fsdp_status st;
    u->reduce_acc = 0;
    if (e->cfg.reduce_dtype == FSDP_F32 && !no_shard && e->rep_comm == NULL &&
        fsdp_comm_size(e->shard_comm) > 1 && (comm_caps(e->shard_comm) & COMM_CAP_ACCUMULATE)) {
        /* steps 2-4 in one pass: the reduction adds its scaled sum straight into the gradient shard
         * (the same bits as reducing into main_grad and adding it afterwards, without writing the
         * reduced block back and reading it again). Alone in its group, a rank has nothing to reduce:
         * step 4's loop below then runs on every OpenMP thread instead of in the communicator. */
        FSDP_TRY(compute_done(e, e->shard_comm));
        shard_set_label(u, "reduce-scatter grads");
        u->reduce_acc = 1;
        return fsdp_comm_ireduce_scatter_acc(e->shard_comm, mg, u->grad, u->shard_len, shard_grad_scale(e),
                                             &u->reduce);
    }
    if (e->cfg.reduce_dtype == FSDP_F32) {
        FSDP_TRY(compute_done(e, no_shard ? e->comm : e->shard_comm));
        shard_set_label(u, no_shard ? "all-reduce grads" : "reduce-scatter grads");
        st = no_shard ? fsdp_comm_iall_reduce(e->comm, mg, mg, u->padded, FSDP_F32, FSDP_SUM, &u->reduce)
                      : fsdp_comm_ireduce_scatter(e->shard_comm, mg, mg + u->shard_off, u->shard_len,
                                                  FSDP_F32, FSDP_SUM, &u->reduce);
        return st;
    }
    /* bf16 wire: one cast into a comm buffer, reduced in place; finish upcasts the result into mg. Both
     * reduce-scatters leave the result in this rank's own block (shard_off), where nothing moves. */
    FSDP_TRY(d->alloc(d, (void **)&u->wire, u->padded * sizeof(fsdp_bf16), FSDP_MEM_COMM, FSDP_ALLOC_SHARED,
                      e->compute));
    {
        FSDP_PROF_SCOPE(FSDP_PROF_CAST);
        d->f32_to_bf16(d, e->compute, u->wire, mg, u->padded);
    }
    st = compute_done(e, no_shard ? e->comm : e->shard_comm);
    if (st == FSDP_OK) {
        shard_set_label(u, no_shard ? "all-reduce grads (bf16)" : "reduce-scatter grads (bf16)");
        st = no_shard ? fsdp_comm_iall_reduce(e->comm, u->wire, u->wire, u->padded, FSDP_BF16, FSDP_SUM,
                                              &u->reduce)
                      : fsdp_comm_ireduce_scatter(e->shard_comm, u->wire, u->wire + u->shard_off,
                                                  u->shard_len, FSDP_BF16, FSDP_SUM, &u->reduce);
    }
    if (st != FSDP_OK) { /* refused before anything was posted */
        d->free(d, u->wire, e->compute);
        u->wire = NULL;
    }
    return st;
}

/* After a failed reduction on c: main_grad (fp32: the buffer reduced in place) and the wire may still
 * be written by the collective, so they are given up to c (shard_drop), never freed into reuse. */
static fsdp_status give_up_buffers(fsdp_unit_t *u, fsdp_comm_t *c, fsdp_status st) {
    for (int t = 0; t < u->n_tensors; t++)
        u->tensors[t].grad_view = NULL;
    shard_drop_device(u->eng, c, st, u->wire);
    shard_drop_device(u->eng, c, st, u->main_grad);
    u->wire = NULL;
    u->main_grad = NULL;
    clear_bits(u);
    return st;
}

fsdp_status shard_reduce_finish(fsdp_unit_t *u) {
    fsdp_engine_t *e = u->eng;
    int no_shard = e->cfg.strategy == FSDP_NO_SHARD;
    const char *phase = no_shard ? "all-reduce" : "reduce-scatter";
    fsdp_status st = FSDP_OK;
    if (u->reduce != NULL) { /* the exposed part: the trace span covers only the wait */
        fsdp_trace_unit_begin(u->name, phase);
        st = fsdp_comm_wait_stream(u->reduce, e->dev, e->compute); /* the upcast or add below reads it */
        fsdp_trace_unit_end(u->name, phase);
        u->reduce = NULL;
    }
    float *mg = u->main_grad;
    int added = u->reduce_acc;
    u->reduce_acc = 0;
    if (st != FSDP_OK) return give_up_buffers(u, no_shard ? e->comm : e->shard_comm, st);
    if (added) { /* the reduction already added into grad */
        shard_main_grad_release(u);
        return FSDP_OK;
    }
    size_t n_out = u->shard_len; /* NO_SHARD: padded (everything) */
    mg += u->shard_off;          /* the result: this rank's own block (NO_SHARD: offset 0) */
    fsdp_device_t *d = e->dev;
    if (u->wire != NULL) {
        FSDP_PROF_SCOPE(FSDP_PROF_CAST);
        d->bf16_to_f32(d, e->compute, mg, u->wire + u->shard_off, n_out, 0);
        d->free(d, u->wire, e->compute);
        u->wire = NULL;
    }
    if (e->rep_comm != NULL) { /* HYBRID: the groups' sums of this shard, added across groups in fp32 */
        if ((st = compute_done(e, e->rep_comm)) != FSDP_OK) return give_up_buffers(u, e->rep_comm, st);
        shard_set_label(u, "all-reduce grads across groups");
        fsdp_trace_unit_begin(u->name, "all-reduce");
        st = fsdp_comm_all_reduce(e->rep_comm, mg, mg, n_out, FSDP_F32, FSDP_SUM);
        fsdp_trace_unit_end(u->name, "all-reduce");
        if (st != FSDP_OK) return give_up_buffers(u, e->rep_comm, st);
    }
    d->axpy(d, e->compute, u->grad, mg, n_out, shard_grad_scale(e));
    shard_main_grad_release(u);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- step structure */

fsdp_status fsdp_engine_zero_grad(fsdp_engine_t *e) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    FSDP_TRY(shard_drain(e, 1));
    for (int i = 0; i < e->n_units; i++)
        e->dev->memset0(e->dev, e->units[i]->grad, e->units[i]->shard_len * sizeof(float), e->compute);
    return FSDP_OK;
}

fsdp_status fsdp_engine_begin_step(fsdp_engine_t *e, int n_micro) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    if (n_micro < 1) return FSDP_ERR(FSDP_EINVAL, "n_micro must be >= 1 (got %d)", n_micro);
    FSDP_TRY(shard_drain(e, 1));
    for (int i = 0; i < e->n_units; i++) {
        fsdp_unit_t *u = e->units[i];
        if (u->life.state == UNIT_FORWARD || u->life.state == UNIT_BACKWARD ||
            u->life.state == UNIT_RECOMPUTE)
            return fsdp_set_error(FSDP_ESTATE,
                                  "fsdp_engine_begin_step: unit '%s' is in state %s; finish its pass first",
                                  u->name, shard_state_name(u->life.state));
        if (u->main_grad != NULL && shard_touched_any(u))
            return fsdp_set_error(
                FSDP_ESTATE,
                "fsdp_engine_begin_step: unit '%s' holds main_grad accumulated under NO_SYNC but "
                "never reduced (micro-batch %d of %d was the last announced); run every "
                "micro-batch of the step",
                u->name, e->micro, e->n_micro);
    }
    e->n_micro = n_micro;
    e->micro = 0;
    life_begin_step(&e->sched, n_micro);
    return fsdp_engine_zero_grad(e);
}

fsdp_status fsdp_engine_begin_micro(fsdp_engine_t *e, int m) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    if (m < 0 || m >= e->n_micro)
        return FSDP_ERR(FSDP_EINVAL, "micro-batch %d outside 0..%d (begin_step fixed n_micro = %d)", m,
                        e->n_micro - 1, e->n_micro);
    e->micro = m;
    e->sched.micro = m;
    return FSDP_OK;
}
