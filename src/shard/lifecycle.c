/* lifecycle.c — the one description of a unit's lifecycle: what each hook does to the unit's
 * residency (sharded / gathering / unsharded), its main_grad and its pending reduction, which units
 * it prefetches, and when pending work is drained. The engine runs it with real operations (unit.c,
 * main_grad.c); the memory plan runs the very same code with operations that only count bytes
 * (plan.c), so a change here changes both and the plan stays exact by construction.
 *
 * Overlap (max_inflight > 0):
 * - The first step records the order of pre_forward and of pre_backward calls. Later steps check
 *   each call against it; on a match the hook starts the all-gathers of up to max_inflight units
 *   that come next in that order (forward prefetch, and backward prefetch in backward's own order),
 *   so they run while this unit computes. A call out of order stops prefetching for that pass.
 * - post_forward keeps the parameters of a unit that backward needs among its first max_inflight
 *   gathers (in the recorded backward order; the last blocks of a transformer) instead of resharding
 *   them: gathering them again a moment later would be what the prefetch does next anyway, into the
 *   same memory, plus the bytes on the wire. Kept units count against backward's prefetch limit, not
 *   forward's (an evaluation loop runs forwards back to back with no backward in between).
 * - post_backward starts the unit's reduce-scatter and returns; it is finished (waited, added into
 *   the gradient shard, main_grad freed) at the next post_backward, i.e. it runs while the previous
 *   unit's backward computes; at most one reduction is pending.
 * - Everything that reads or writes shards (clip, AdamW, begin_step, gather/load tensor, reshard_all,
 *   free) calls life_drain first: pending reductions finish, prefetched parameters nobody used are
 *   dropped (AdamW is about to change the masters they came from) — except, for the calls that change
 *   no master, the next step's first units, which AdamW starts gathering once it has updated them
 *   (life_after_update).
 * max_inflight 0 is the synchronous behaviour: gather and wait in the hook, reduce and wait in
 * post_backward. */
#include "shard/shard.h"

const char *shard_state_name(unit_state s) {
    switch (s) {
    case UNIT_IDLE: return "IDLE (sharded, no pass in progress)";
    case UNIT_FORWARD: return "FORWARD (between pre_forward and post_forward)";
    case UNIT_FORWARD_DONE: return "FORWARD_DONE (after post_forward, before pre_backward)";
    case UNIT_BACKWARD: return "BACKWARD (between pre_backward and post_backward)";
    case UNIT_RECOMPUTE: return "RECOMPUTE (forward inside backward)";
    }
    return "unknown";
}

#include <stdlib.h>
#include <string.h>

void life_init(life_sched *s, const life_ops *ops, void *ctx, life_unit **units, int n, int max_inflight) {
    memset(s, 0, sizeof *s);
    s->ops = ops;
    s->ctx = ctx;
    s->units = units;
    s->n = n;
    s->max_inflight = max_inflight;
    s->pending = -1;
    s->recording = 1; /* until the second begin_step */
    s->n_micro = 1;
}

void life_free(life_sched *s) {
    free(s->order[0].idx);
    free(s->order[1].idx);
    memset(s->order, 0, sizeof s->order);
}

/* Units may be added after life_init (the engine registers them one by one). */
void life_set_units(life_sched *s, life_unit **units, int n) {
    s->units = units;
    s->n = n;
}

static fsdp_status order_push(life_order *o, int idx) {
    for (int k = 0; k < o->n; k++)
        if (o->idx[k] == idx) {
            o->closed = 1; /* a unit again: the pass repeats (micro-batches); the order is complete */
            return FSDP_OK;
        }
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        int *p = realloc(o->idx, (size_t)cap * sizeof *p);
        if (p == NULL) return FSDP_ERR(FSDP_ENOMEM, "execution order of %d units", cap);
        o->idx = p;
        o->cap = cap;
    }
    o->idx[o->n++] = idx;
    return FSDP_OK;
}

/* Where unit idx stands in the recorded order o: its position when it is the expected next one (or
 * the first, which starts a new pass), else -1 (out of order: no prefetch until the next pass). */
static int order_locate(life_order *o, int idx) {
    if (o->n == 0) return -1;
    if (o->next < o->n && o->idx[o->next] == idx) return o->next++;
    if (o->idx[0] == idx) {
        o->next = 1;
        return 0;
    }
    o->next = o->n; /* off the recorded path: stop until a new pass starts */
    o->mismatches++;
    return -1;
}

/* A unit post_forward kept gathered for backward: prefetched, yet no gather in flight (a prefetch
 * gathers until its own hook waits, and that wait clears prefetched). */
static int is_kept(const life_unit *u) { return u->prefetched && u->res == LIFE_UNSHARDED; }

/* Starts the gathers of the units after position p of order `which`, while fewer than max_inflight
 * prefetched units wait to be used (units kept for backward count in backward only). Units already
 * unsharded (kept from forward) are passed over. */
static fsdp_status prefetch(life_sched *s, int which, int p) {
    life_order *o = &s->order[which];
    int inflight = 0;
    for (int i = 0; i < s->n; i++)
        inflight += s->units[i]->prefetched && !(which == 0 && is_kept(s->units[i]));
    for (int k = p + 1; k < o->n && inflight < s->max_inflight; k++) {
        life_unit *v = s->units[o->idx[k]];
        if (v->res != LIFE_SHARDED) continue;
        FSDP_TRY(s->ops->unshard_start(s->ctx, v->index, 1));
        v->res = LIFE_GATHERING;
        v->prefetched = 1;
        inflight++;
    }
    return FSDP_OK;
}

/* Records (first step) or checks (later steps) the call, then prefetches along the order. */
static fsdp_status follow_order(life_sched *s, int which, life_unit *u) {
    life_order *o = &s->order[which];
    if (s->recording) {
        if (!o->closed) FSDP_TRY(order_push(o, u->index));
        return FSDP_OK;
    }
    int p = order_locate(o, u->index);
    if (p >= 0 && s->max_inflight > 0) FSDP_TRY(prefetch(s, which, p));
    return FSDP_OK;
}

/* The unit's parameters, unsharded: started here if nobody prefetched them, then waited for. */
static fsdp_status need_params(life_sched *s, life_unit *u) {
    if (u->res == LIFE_SHARDED) {
        FSDP_TRY(s->ops->unshard_start(s->ctx, u->index, 0));
        u->res = LIFE_GATHERING;
    }
    if (u->res == LIFE_GATHERING) {
        fsdp_status st = s->ops->unshard_wait(s->ctx, u->index);
        if (st != FSDP_OK) {
            u->res = LIFE_SHARDED; /* the op gave the buffer up (freed, or adopted after a timeout) */
            u->prefetched = 0;
            return st;
        }
        u->res = LIFE_UNSHARDED;
    }
    u->prefetched = 0;
    u->next_step = 0;
    return FSDP_OK;
}

static void reshard(life_sched *s, life_unit *u) {
    if (u->res != LIFE_UNSHARDED) return;
    s->ops->reshard(s->ctx, u->index);
    u->res = LIFE_SHARDED;
}

/* Finishes the pending reduction, if any. */
static fsdp_status finish_pending(life_sched *s) {
    if (s->pending < 0) return FSDP_OK;
    life_unit *u = s->units[s->pending];
    s->pending = -1;
    u->reducing = 0;
    fsdp_status st = s->ops->reduce_finish(s->ctx, u->index);
    u->mg = 0; /* freed, or adopted by the communicator after a timeout */
    return st;
}

static fsdp_status mg_alloc(life_sched *s, life_unit *u) {
    if (u->no_grad) return FSDP_OK;               /* nothing trainable: no buffer */
    if (u->reducing) FSDP_TRY(finish_pending(s)); /* its buffer is still on the wire */
    if (u->mg) return FSDP_OK;
    FSDP_TRY(s->ops->mg_alloc(s->ctx, u->index));
    u->mg = 1;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- the hooks */

fsdp_status life_pre_forward(life_sched *s, life_unit *u) {
    if (u->state == UNIT_BACKWARD) { /* activation recompute: parameters are already unsharded */
        u->state = UNIT_RECOMPUTE;
        return FSDP_OK;
    }
    FSDP_TRY(need_params(s, u));
    if (s->policy == FSDP_MAIN_GRAD_EAGER && !s->no_backward) FSDP_TRY(mg_alloc(s, u));
    FSDP_TRY(follow_order(s, 0, u));
    u->state = UNIT_FORWARD;
    return FSDP_OK;
}

/* 1 when backward's prefetch would gather u among its first max_inflight gathers: fewer than
 * max_inflight units before it in the recorded backward order get resharded after forward. Never in
 * a forward no backward follows (evaluation, sampling): keeping would only hold memory the plan does
 * not count. */
static int keep_for_backward(const life_sched *s, const life_unit *u) {
    if (s->no_backward || s->recording || s->max_inflight == 0 || u->res != LIFE_UNSHARDED) return 0;
    const life_order *o = &s->order[1];
    int before = 0;
    for (int k = 0; k < o->n && before < s->max_inflight; k++) {
        if (o->idx[k] == u->index) return 1;
        before += s->units[o->idx[k]]->reshard_after_forward;
    }
    return 0;
}

fsdp_status life_post_forward(life_sched *s, life_unit *u) {
    if (u->state == UNIT_RECOMPUTE) { /* backward needs the parameters next: keep them */
        u->state = UNIT_BACKWARD;
        return FSDP_OK;
    }
    if (u->reshard_after_forward && keep_for_backward(s, u))
        u->prefetched = 1; /* as if backward's prefetch had gathered it already */
    else if (u->reshard_after_forward)
        reshard(s, u);
    u->state = UNIT_FORWARD_DONE;
    return FSDP_OK;
}

fsdp_status life_pre_backward(life_sched *s, life_unit *u) {
    FSDP_TRY(need_params(s, u));
    FSDP_TRY(mg_alloc(s, u));
    FSDP_TRY(follow_order(s, 1, u));
    u->state = UNIT_BACKWARD;
    return FSDP_OK;
}

fsdp_status life_post_backward(life_sched *s, life_unit *u) {
    int reduces = !u->no_grad && !(s->accum == FSDP_ACCUM_NO_SYNC && s->micro != s->n_micro - 1);
    if (reduces) {
        FSDP_TRY(finish_pending(s)); /* the previous unit's, which ran during this backward */
        FSDP_TRY(s->ops->reduce_start(s->ctx, u->index));
        u->reducing = 1;
        s->pending = u->index;
        if (s->max_inflight == 0) FSDP_TRY(finish_pending(s));
    }
    reshard(s, u);
    u->state = UNIT_IDLE;
    return FSDP_OK;
}

/* Pending reductions finished; gathers in flight waited for; parameters of idle units (prefetched and
 * never used, or left by an abandoned pass) dropped. Returns the first failure, after trying all. */
fsdp_status life_drain(life_sched *s, int keep_next) {
    fsdp_status first = finish_pending(s);
    for (int i = 0; i < s->n; i++) {
        life_unit *u = s->units[i];
        if (keep_next && u->next_step) continue; /* gathered from the current masters: still good */
        if (u->res == LIFE_GATHERING) {
            fsdp_status st = need_params(s, u);
            if (st != FSDP_OK && first == FSDP_OK) first = st;
        }
        /* a forward whose backward did not come (evaluation), its parameters kept (a unit kept for
         * backward, or one that never reshards after forward): its masters may change now */
        if (u->state == UNIT_IDLE || (!keep_next && u->state == UNIT_FORWARD_DONE)) reshard(s, u);
        u->prefetched = 0;
        u->next_step = 0;
    }
    return first;
}

/* After the optimizer has updated unit i's masters: if the next step's forward opens with it (one
 * of the first max_inflight units of the recorded forward order), its all-gather starts now and runs
 * while the optimizer updates the other units — the gather that would otherwise open the step with
 * nothing to overlap. Drains that only read shards keep it (keep_next); any that may change the
 * masters drop it. */
fsdp_status life_after_update(life_sched *s, int i) {
    if (s->recording || s->max_inflight == 0) return FSDP_OK;
    const life_order *o = &s->order[0];
    int k = 0;
    while (k < o->n && k < s->max_inflight && o->idx[k] != i)
        k++;
    if (k >= o->n || k >= s->max_inflight) return FSDP_OK;
    life_unit *u = s->units[i];
    if (u->res != LIFE_SHARDED || u->state != UNIT_IDLE) return FSDP_OK;
    FSDP_TRY(s->ops->unshard_start(s->ctx, i, 1));
    u->res = LIFE_GATHERING;
    u->prefetched = 1;
    u->next_step = 1;
    return FSDP_OK;
}

/* A new step: the first one records the orders, the ones after follow them. */
void life_begin_step(life_sched *s, int n_micro) {
    s->steps++;
    s->recording = s->steps <= 1;
    s->n_micro = n_micro;
    s->micro = 0;
    s->order[0].next = s->order[0].n;
    s->order[1].next = s->order[1].n;
}
