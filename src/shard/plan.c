/* plan.c — the memory plan: predicts each allocator category's per-rank peak for a set of units, a
 * world size and the engine's policies, without allocating the model. It computes the engine's flat
 * layout and replays one training step's allocations in the order unit.c, main_grad.c and the comm
 * backends perform them; plus the table printer and the JSON report (the measured peaks they compare
 * with come from src/comm/comm_peaks.c). */
#include "shard/shard.h"
#include "comm/comm_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- layout (the engine's own) */

/* The units planned before the current one, for the layout's cross-unit tie check. */
typedef struct {
    const fsdp_plan_unit *units;
    int n;
} plan_before;
static const char *plan_unit_named(void *ctx, const char *name, size_t len) {
    const plan_before *b = ctx;
    for (int i = 0; i < b->n; i++) {
        const char *un = b->units[i].name ? b->units[i].name : "";
        if (strlen(un) == len && strncmp(un, name, len) == 0) return un;
    }
    return NULL;
}
static const char *plan_unit_with_tensor(void *ctx, const char *tensor) {
    const plan_before *b = ctx;
    for (int i = 0; i < b->n; i++)
        for (int t = 0; t < b->units[i].n_specs; t++)
            if (b->units[i].specs[t].name && strcmp(b->units[i].specs[t].name, tensor) == 0)
                return b->units[i].name ? b->units[i].name : "";
    return NULL;
}

/* Unit ui of units[0..ui] laid out exactly as fsdp_engine_add_unit would (layout.c, the same
 * validation and messages). */
static fsdp_status plan_layout(const fsdp_plan_unit *units, int ui, size_t align, int world,
                               const char *freeze, layout_sizes *sz) {
    const fsdp_plan_unit *u = &units[ui];
    if (u->specs == NULL || u->n_specs < 1)
        return FSDP_ERR(FSDP_EINVAL, "unit %d ('%s'): needs specs and n_specs >= 1 (got %d)", ui,
                        u->name ? u->name : "", u->n_specs);
    layout_tensor *lt = calloc((size_t)u->n_specs, sizeof *lt);
    if (lt == NULL) return FSDP_ERR(FSDP_ENOMEM, "plan: tensor table of %d", u->n_specs);
    plan_before before = {units, ui};
    layout_others others = {&before, plan_unit_named, plan_unit_with_tensor};
    fsdp_status st =
        shard_layout(u->name, u->specs, u->n_specs, align, world, freeze, &others, lt, NULL, NULL, sz);
    free(lt);
    return st;
}

fsdp_status fsdp_plan_unit_layout(const fsdp_plan_unit *u, size_t align, int world, size_t *numel,
                                  size_t *padded) {
    if (u == NULL) return FSDP_ERR(FSDP_EINVAL, "unit must not be NULL");
    if (world < 1) return FSDP_ERR(FSDP_EINVAL, "world must be >= 1 (got %d)", world);
    layout_sizes sz;
    FSDP_TRY(plan_layout(u, 0, align, world, NULL, &sz));
    if (numel) *numel = sz.numel;
    if (padded) *padded = sz.padded;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- replaying one step */

/* Per-category current and peak bytes plus the peak of the sum: the allocator's accounting, on paper. */
typedef struct {
    size_t cur[FSDP_MEM_NCAT], cur_total;
    fsdp_mem_peaks pk;
} sim_mem;

static void sim_add(sim_mem *m, fsdp_mem_cat c, size_t bytes) {
    m->cur[c] += bytes;
    m->cur_total += bytes;
    if (m->cur[c] > m->pk.peak[c]) m->pk.peak[c] = m->cur[c];
    if (m->cur_total > m->pk.total) m->pk.total = m->cur_total;
}

static void sim_sub(sim_mem *m, fsdp_mem_cat c, size_t bytes) {
    m->cur[c] -= bytes;
    m->cur_total -= bytes;
}

/* One unit as the engine holds it: its lifecycle state (lifecycle.c) and its sizes. */
typedef struct {
    life_unit life;
    size_t padded, shard_len; /* elements: the trainable region */
    size_t fshard_len;        /* elements: the frozen region's shard (compute dtype) */
    size_t full_bytes;        /* param_full buffer while unsharded */
    size_t stage_bytes;       /* comm staging of its reduction */
} sim_unit;

typedef struct {
    sim_mem mem;
    sim_unit *u;
    int world;
    fsdp_strategy strategy;
    fsdp_dtype reduce;
    fsdp_comm_backend backend;
    int shm;         /* the gathers' and reduce-scatters' communicator runs on shared memory */
    int ngrp;        /* HYBRID: groups (else 1) */
    int replica_shm; /* HYBRID: the across-group all-reduce runs on shared memory */
} sim;

/* Staging (category comm) of the gradient reduction of one unit, from its start to its wait, as the
 * row that will carry it states it (comm_plan.h): MPI's all-to-all staging, none on shared memory
 * (ranks of one host reduce straight from their buffers) or alone. */
static size_t sim_stage_bytes(const sim *s, const sim_unit *u) {
    int w = s->strategy == FSDP_HYBRID_SHARD ? s->world / s->ngrp : s->world;
    if (s->strategy == FSDP_NO_SHARD)
        return comm_plan_staging_bytes(s->backend, s->shm, COMM_PLAN_ALL_REDUCE, w, u->padded, s->reduce);
    return comm_plan_staging_bytes(s->backend, s->shm, COMM_PLAN_REDUCE_SCATTER, w, u->shard_len, s->reduce);
}

/* The lifecycle's operations, counting bytes in the order unit.c / main_grad.c / the comm backend
 * allocate and free them. */
static fsdp_status sim_unshard_start(void *ctx, int i, int prefetch) {
    sim *s = ctx;
    (void)prefetch;
    sim_add(&s->mem, FSDP_MEM_PARAM_FULL, s->u[i].full_bytes); /* the all-gather is in place */
    return FSDP_OK;
}
static fsdp_status sim_unshard_wait(void *ctx, int i) {
    (void)ctx;
    (void)i;
    return FSDP_OK;
}
static void sim_reshard(void *ctx, int i) {
    sim *s = ctx;
    sim_sub(&s->mem, FSDP_MEM_PARAM_FULL, s->u[i].full_bytes);
}
static fsdp_status sim_mg_alloc(void *ctx, int i) {
    sim *s = ctx;
    sim_add(&s->mem, FSDP_MEM_MAIN_GRAD, s->u[i].padded * sizeof(float));
    return FSDP_OK;
}
static size_t sim_wire_bytes(const sim *s, const sim_unit *u) {
    return s->reduce == FSDP_BF16 ? u->padded * sizeof(fsdp_bf16) : 0;
}
static fsdp_status sim_reduce_start(void *ctx, int i) {
    sim *s = ctx;
    sim_add(&s->mem, FSDP_MEM_COMM, sim_wire_bytes(s, &s->u[i]));
    sim_add(&s->mem, FSDP_MEM_COMM, s->u[i].stage_bytes);
    return FSDP_OK;
}
/* HYBRID: the across-group all-reduce of the fp32 shard (after the group's reduce-scatter). */
static size_t sim_replica_stage(const sim *s, const sim_unit *u) {
    if (s->ngrp < 2) return 0;
    return comm_plan_staging_bytes(s->backend, s->replica_shm, COMM_PLAN_ALL_REDUCE, s->ngrp, u->shard_len,
                                   FSDP_F32);
}

static fsdp_status sim_reduce_finish(void *ctx, int i) {
    sim *s = ctx;
    sim_sub(&s->mem, FSDP_MEM_COMM, s->u[i].stage_bytes);
    sim_sub(&s->mem, FSDP_MEM_COMM, sim_wire_bytes(s, &s->u[i]));
    size_t rs = sim_replica_stage(s, &s->u[i]);
    sim_add(&s->mem, FSDP_MEM_COMM, rs);
    sim_sub(&s->mem, FSDP_MEM_COMM, rs);
    sim_sub(&s->mem, FSDP_MEM_MAIN_GRAD, s->u[i].padded * sizeof(float));
    return FSDP_OK;
}
static const life_ops sim_ops = {sim_unshard_start, sim_unshard_wait, sim_reshard,
                                 sim_mg_alloc,      sim_reduce_start, sim_reduce_finish};

/* `steps` training steps in the hook order of `sched`, each as the trainer runs it: begin_step (a
 * drain), the micro-batches, then clip + AdamW (a drain). The first step records the order; prefetch
 * starts with the second. */
static fsdp_status sim_steps(life_sched *ls, int n, fsdp_plan_schedule sched, int n_micro, int steps) {
    life_unit **L = ls->units;
    int wrap = sched == FSDP_PLAN_ROOT_WRAPS && n > 1;
    for (int st = 0; st < steps; st++) {
        FSDP_TRY(life_drain(ls, 1)); /* begin_step */
        life_begin_step(ls, n_micro);
        for (int m = 0; m < n_micro; m++) {
            ls->micro = m;
            if (wrap) FSDP_TRY(life_pre_forward(ls, L[0]));
            for (int i = wrap; i < n; i++) {
                FSDP_TRY(life_pre_forward(ls, L[i]));
                FSDP_TRY(life_post_forward(ls, L[i]));
            }
            if (wrap) {
                FSDP_TRY(life_post_forward(ls, L[0]));
                FSDP_TRY(life_pre_backward(ls, L[0]));
            }
            for (int i = n - 1; i >= wrap; i--) {
                FSDP_TRY(life_pre_backward(ls, L[i]));
                FSDP_TRY(life_post_backward(ls, L[i]));
            }
            if (wrap) FSDP_TRY(life_post_backward(ls, L[0]));
        }
        FSDP_TRY(life_drain(ls, 1)); /* clip */
        FSDP_TRY(life_drain(ls, 0)); /* AdamW, then the next step's first gathers after the updates */
        for (int i = 0; i < n; i++)
            FSDP_TRY(life_after_update(ls, i));
    }
    return FSDP_OK;
}

/* Predicts the peaks of one configuration. sizes: per unit (computed for cfg->world). */
static fsdp_status plan_run(const fsdp_plan_unit *units, const layout_sizes *sizes, int n,
                            const fsdp_plan_config *cfg, fsdp_strategy strategy, fsdp_mem_peaks *out) {
    sim s;
    memset(&s, 0, sizeof s);
    s.u = calloc((size_t)n, sizeof *s.u);
    life_unit **lives = calloc((size_t)n, sizeof *lives);
    if (s.u == NULL || lives == NULL) {
        free(s.u);
        free(lives);
        return FSDP_ERR(FSDP_ENOMEM, "plan: table of %d units", n);
    }
    s.world = cfg->world;
    s.strategy = strategy;
    s.reduce = cfg->engine.reduce_dtype;
    s.backend = cfg->backend;
    s.shm = cfg->shm;
    int group = strategy == FSDP_HYBRID_SHARD && cfg->shard_group > 0 ? cfg->shard_group : cfg->world;
    s.ngrp = strategy == FSDP_HYBRID_SHARD ? cfg->world / group : 1;
    s.replica_shm = cfg->replica_shm;
    size_t esz = fsdp_dtype_size(cfg->engine.compute_dtype);
    for (int i = 0; i < n; i++) {
        sim_unit *u = &s.u[i];
        u->padded = sizes[i].padded;
        if (strategy == FSDP_NO_SHARD) {
            u->shard_len = u->padded;
            u->fshard_len = sizes[i].fpad;
        } else {
            size_t off; /* equal on every rank; HYBRID: over the shard group */
            int w = strategy == FSDP_HYBRID_SHARD ? group : cfg->world;
            fsdp_shard_range(u->padded, 0, w, &off, &u->shard_len);
            fsdp_shard_range(sizes[i].fpad, 0, w, &off, &u->fshard_len);
        }
        u->full_bytes =
            units[i].param_full_bytes ? units[i].param_full_bytes : (u->padded + sizes[i].fpad) * esz;
        u->stage_bytes = sim_stage_bytes(&s, u);
        int raf = units[i].cfg ? units[i].cfg->reshard_after_forward : -1;
        u->life.index = i;
        u->life.no_grad = u->padded == 0;
        u->life.reshard_after_forward =
            raf >= 0 ? raf : strategy == FSDP_FULL_SHARD || strategy == FSDP_HYBRID_SHARD;
        lives[i] = &u->life;
        /* fsdp_engine_add_unit: master, grad_shard, the two AdamW moments, then the frozen shard (in the
         * compute dtype, category master), kept for good. */
        sim_add(&s.mem, FSDP_MEM_MASTER, u->shard_len * sizeof(float));
        sim_add(&s.mem, FSDP_MEM_GRAD_SHARD, u->shard_len * sizeof(float));
        sim_add(&s.mem, FSDP_MEM_OPTIM, 2 * u->shard_len * sizeof(float));
        sim_add(&s.mem, FSDP_MEM_MASTER, u->fshard_len * esz);
    }
    /* The model's activations and the program's other buffers: held across the step. */
    sim_add(&s.mem, FSDP_MEM_ACTIVATION, cfg->activation_bytes);
    sim_add(&s.mem, FSDP_MEM_OTHER, cfg->other_bytes);
    life_sched ls;
    life_init(&ls, &sim_ops, &s, lives, n, cfg->engine.max_inflight);
    ls.policy = cfg->engine.main_grad;
    ls.accum = cfg->engine.accum;
    fsdp_status st = sim_steps(&ls, n, cfg->schedule, cfg->n_micro, cfg->steps);
    life_free(&ls);
    *out = s.mem.pk;
    free(lives);
    free(s.u);
    return st;
}

/* ---------------------------------------------------------------- public entry points */

fsdp_plan_config fsdp_plan_config_default(void) {
    fsdp_plan_config c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    c.world = 1;
    c.engine = fsdp_engine_config_default();
    c.backend = FSDP_COMM_AUTO;
    c.shm = 1;
    c.replica_shm = 1;
    c.n_micro = 1;
    c.steps = 2;
    c.schedule = FSDP_PLAN_ROOT_WRAPS;
    return c;
}

fsdp_status fsdp_plan_compute(const fsdp_plan_unit *units, int n_units, const fsdp_plan_config *cfg,
                              fsdp_plan *out) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    memset(out, 0, sizeof *out);
    if (units == NULL || n_units < 1 || cfg == NULL)
        return FSDP_ERR(FSDP_EINVAL, "need units (n_units >= 1, got %d) and a config", n_units);
    fsdp_plan_config c = *cfg;
    if (c.version != 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "plan config version %d unsupported; start from fsdp_plan_config_default()",
                        c.version);
    if (c.world < 1) return FSDP_ERR(FSDP_EINVAL, "world must be >= 1 (got %d)", c.world);
    if (c.n_micro < 1) return FSDP_ERR(FSDP_EINVAL, "n_micro must be >= 1 (got %d)", c.n_micro);
    if (c.steps < 1 || c.steps > 2)
        return FSDP_ERR(FSDP_EINVAL, "steps must be 1 (a one-step run) or 2 (any longer run; got %d)",
                        c.steps);
    if (c.engine.max_inflight < 0 || c.engine.max_inflight > 64)
        return FSDP_ERR(FSDP_EINVAL, "engine max_inflight must be 0..64 (got %d)", c.engine.max_inflight);
    if ((unsigned)c.schedule > FSDP_PLAN_SEQUENTIAL)
        return FSDP_ERR(FSDP_EINVAL, "unknown schedule %d", (int)c.schedule);
    const fsdp_engine_config *ec = &c.engine;
    if (ec->version != 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "engine config version %d unsupported; start from fsdp_engine_config_default()",
                        ec->version);
    if ((unsigned)ec->strategy > FSDP_HYBRID_SHARD ||
        (ec->compute_dtype != FSDP_F32 && ec->compute_dtype != FSDP_BF16) ||
        (ec->reduce_dtype != FSDP_F32 && ec->reduce_dtype != FSDP_BF16) ||
        (unsigned)ec->main_grad > FSDP_MAIN_GRAD_EAGER || (unsigned)ec->accum > FSDP_ACCUM_NO_SYNC)
        return FSDP_ERR(
            FSDP_EINVAL,
            "engine config: strategy %d, compute dtype %d, reduce dtype %d, main_grad %d or accum %d "
            "is out of range",
            (int)ec->strategy, (int)ec->compute_dtype, (int)ec->reduce_dtype, (int)ec->main_grad,
            (int)ec->accum);
    if (c.shard_group < 0 || (c.shard_group > 0 && c.world % c.shard_group != 0))
        return FSDP_ERR(FSDP_EINVAL, "shard_group %d does not divide world %d (0: the whole world)",
                        c.shard_group, c.world);
    if (c.backend == FSDP_COMM_AUTO) c.backend = c.world > 1 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    if (c.backend != FSDP_COMM_SELF && c.backend != FSDP_COMM_MPI)
        return FSDP_ERR(FSDP_EINVAL, "backend %d is not AUTO, SELF or MPI", (int)c.backend);
    if (c.backend == FSDP_COMM_SELF && c.world != 1)
        return FSDP_ERR(FSDP_EINVAL, "the self backend has world 1 (got world %d); use FSDP_COMM_MPI",
                        c.world);

    FSDP_TRY(shard_freeze_check(ec->freeze));
    layout_sizes *sizes = calloc((size_t)n_units, sizeof *sizes);
    if (sizes == NULL) return FSDP_ERR(FSDP_ENOMEM, "plan: table of %d units", n_units);
    fsdp_status st = FSDP_OK;
    size_t psi = 0, fpsi = 0, padded_sum = 0;
    for (int i = 0; i < n_units; i++) {
        const fsdp_plan_unit *u = &units[i];
        if (u->cfg != NULL && (u->cfg->version != 1 || u->cfg->reshard_after_forward < -1 ||
                               u->cfg->reshard_after_forward > 1)) {
            st = FSDP_ERR(FSDP_EINVAL,
                          "unit %d ('%s'): unit config version %d / reshard_after_forward %d invalid", i,
                          u->name ? u->name : "", u->cfg->version, u->cfg->reshard_after_forward);
            goto done;
        }
        if ((st = plan_layout(units, i, ec->align, c.world, ec->freeze, &sizes[i])) != FSDP_OK) goto done;
        psi += sizes[i].psi;
        fpsi += sizes[i].fpsi;
        padded_sum += sizes[i].padded + sizes[i].fpad;
    }
    if ((st = plan_run(units, sizes, n_units, &c, ec->strategy, &out->predicted)) != FSDP_OK) goto done;
    if ((st = plan_run(units, sizes, n_units, &c, FSDP_NO_SHARD, &out->no_shard)) != FSDP_OK) goto done;
    out->cfg = c;
    out->n_params = psi + fpsi;
    out->n_frozen = fpsi;
    out->padded_params = padded_sum;
    out->zero_ref_bytes =
        (16 * psi + fsdp_dtype_size(ec->compute_dtype) * fpsi + (size_t)c.world - 1) / (size_t)c.world;
    out->n_units = n_units;
done:
    free(sizes);
    return st;
}

/* ---------------------------------------------------------------- printing and JSON */

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static const char *strategy_name(fsdp_strategy s) {
    return s == FSDP_FULL_SHARD      ? "FULL_SHARD"
           : s == FSDP_SHARD_GRAD_OP ? "SHARD_GRAD_OP"
           : s == FSDP_HYBRID_SHARD  ? "HYBRID_SHARD"
                                     : "NO_SHARD";
}

fsdp_status fsdp_plan_print(FILE *f, const fsdp_plan *p, const fsdp_mem_peaks *measured) {
    if (f == NULL || p == NULL) return FSDP_ERR(FSDP_EINVAL, "stream and plan must not be NULL");
    const fsdp_plan_config *c = &p->cfg;
    fprintf(f,
            "memory plan: %d units, %zu parameters, world %d, %s, compute %s, reduce %s, main_grad %s, %s, "
            "%d micro-batch%s, backend %s\n",
            p->n_units, p->n_params, c->world, strategy_name(c->engine.strategy),
            fsdp_dtype_name(c->engine.compute_dtype), fsdp_dtype_name(c->engine.reduce_dtype),
            c->engine.main_grad == FSDP_MAIN_GRAD_EAGER ? "EAGER" : "LAZY",
            c->engine.accum == FSDP_ACCUM_NO_SYNC ? "ACCUM_NO_SYNC" : "ACCUM_SHARDED", c->n_micro,
            c->n_micro == 1 ? "" : "es", c->backend == FSDP_COMM_MPI ? "mpi" : "self");
    fprintf(f, "%-11s %15s %11s", "category", "predicted B", "MiB");
    if (measured) fprintf(f, " %15s %11s %8s", "measured B", "MiB", "diff");
    fprintf(f, " %14s\n", "NO_SHARD MiB");
    for (int k = 0; k <= FSDP_MEM_NCAT; k++) {
        size_t pv = k < FSDP_MEM_NCAT ? p->predicted.peak[k] : p->predicted.total;
        size_t ns = k < FSDP_MEM_NCAT ? p->no_shard.peak[k] : p->no_shard.total;
        fprintf(f, "%-11s %15zu %11.2f", k < FSDP_MEM_NCAT ? fsdp_mem_cat_name((fsdp_mem_cat)k) : "total", pv,
                mib(pv));
        if (measured) {
            size_t mv = k < FSDP_MEM_NCAT ? measured->peak[k] : measured->total;
            char d[16];
            if (mv == pv)
                snprintf(d, sizeof d, "exact");
            else if (pv == 0)
                snprintf(d, sizeof d, "n/a");
            else
                snprintf(d, sizeof d, "%+.1f%%", 100.0 * ((double)mv - (double)pv) / (double)pv);
            fprintf(f, " %15zu %11.2f %8s", mv, mib(mv), d);
        }
        fprintf(f, " %14.2f\n", mib(ns));
    }
    size_t states = p->predicted.peak[FSDP_MEM_MASTER] + p->predicted.peak[FSDP_MEM_OPTIM] +
                    p->predicted.peak[FSDP_MEM_GRAD_SHARD];
    if (p->n_frozen)
        fprintf(
            f,
            "ZeRO-3 model states ((2+2+12)*psi_trainable + %zu*psi_frozen)/N = %zu B (%.2f MiB; %zu of %zu "
            "parameters frozen); this plan's master+optim+grad_shard = %zu B (%.2f MiB, %.3fx)\n",
            fsdp_dtype_size(p->cfg.engine.compute_dtype), p->zero_ref_bytes, mib(p->zero_ref_bytes),
            p->n_frozen, p->n_params, states, mib(states),
            p->zero_ref_bytes ? (double)states / (double)p->zero_ref_bytes : 0.0);
    else
        fprintf(
            f,
            "ZeRO-3 model states (2+2+12)*psi/N = %zu B (%.2f MiB); this plan's master+optim+grad_shard = "
            "%zu B (%.2f MiB, %.3fx)\n",
            p->zero_ref_bytes, mib(p->zero_ref_bytes), states, mib(states),
            p->zero_ref_bytes ? (double)states / (double)p->zero_ref_bytes : 0.0);
    fprintf(f, "plain data parallel (NO_SHARD) would need %zu B (%.2f MiB) per rank, %.2fx this plan\n",
            p->no_shard.total, mib(p->no_shard.total),
            p->predicted.total ? (double)p->no_shard.total / (double)p->predicted.total : 0.0);
    return FSDP_OK;
}

static void json_peaks(FILE *f, const char *key, const fsdp_mem_peaks *pk) {
    fprintf(f, "  \"%s\": {", key);
    for (int k = 0; k < FSDP_MEM_NCAT; k++)
        fprintf(f, "\"%s\": %zu, ", fsdp_mem_cat_name((fsdp_mem_cat)k), pk->peak[k]);
    fprintf(f, "\"total\": %zu},\n", pk->total);
}

/* Hand-formatted (cJSON is linked only in the train layer): every value is a number or a fixed name,
 * so nothing needs escaping. */
fsdp_status fsdp_plan_write_json(const char *path, const fsdp_plan *p, const fsdp_mem_peaks *measured) {
    if (path == NULL || p == NULL) return FSDP_ERR(FSDP_EINVAL, "path and plan must not be NULL");
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return FSDP_ERR(FSDP_EIO,
                        "cannot open '%s' for writing: %s; check the directory exists and is writable", path,
                        strerror(errno));
    const fsdp_plan_config *c = &p->cfg;
    fprintf(f, "{\n");
    json_peaks(f, "predicted", &p->predicted);
    if (measured) json_peaks(f, "measured", measured);
    json_peaks(f, "no_shard", &p->no_shard);
    fprintf(
        f,
        "  \"zero_ref_bytes\": %zu,\n  \"n_params\": %zu,\n  \"n_frozen\": %zu,\n  \"padded_params\": %zu,\n"
        "  \"n_units\": %d,\n"
        "  \"world\": %d,\n  \"strategy\": \"%s\",\n  \"compute_dtype\": \"%s\",\n  \"reduce_dtype\": "
        "\"%s\",\n"
        "  \"main_grad\": \"%s\",\n  \"accum\": \"%s\",\n  \"n_micro\": %d,\n  \"backend\": \"%s\"\n}\n",
        p->zero_ref_bytes, p->n_params, p->n_frozen, p->padded_params, p->n_units, c->world,
        strategy_name(c->engine.strategy), fsdp_dtype_name(c->engine.compute_dtype),
        fsdp_dtype_name(c->engine.reduce_dtype),
        c->engine.main_grad == FSDP_MAIN_GRAD_EAGER ? "EAGER" : "LAZY",
        c->engine.accum == FSDP_ACCUM_NO_SYNC ? "ACCUM_NO_SYNC" : "ACCUM_SHARDED", c->n_micro,
        c->backend == FSDP_COMM_MPI ? "mpi" : "self");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return FSDP_ERR(FSDP_EIO, "writing '%s' failed: %s; check free space", path, strerror(errno));
    return FSDP_OK;
}
