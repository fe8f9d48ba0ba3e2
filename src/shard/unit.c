/* unit.c — the engine and its FSDP units: flat layout (computed once per unit), fp32 master shards,
 * world-size-independent initialisation, the unshard/reshard lifecycle with its state machine, and
 * gathering/loading full tensors for export, checkpoints and tests. main_grad lives in main_grad.c. */
#include "shard/shard.h"
#include "comm/comm_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- small helpers */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- configs, engine */

static const life_ops engine_ops; /* the engine's lifecycle operations, defined with the hooks */

fsdp_engine_config fsdp_engine_config_default(void) {
    fsdp_engine_config c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    c.strategy = FSDP_FULL_SHARD;
    c.compute_dtype = FSDP_BF16;
    c.reduce_dtype = FSDP_F32;
    c.main_grad = FSDP_MAIN_GRAD_LAZY;
    c.accum = FSDP_ACCUM_SHARDED;
    c.seed = 1234;
    c.align = 16;
    c.max_inflight = 2;
    c.host_kernels = 1;
    return c;
}

fsdp_unit_config fsdp_unit_config_default(void) {
    fsdp_unit_config c = {.version = 1, .reshard_after_forward = -1};
    return c;
}

/* The engine's two streams and two events (NULL on the CPU). */
static fsdp_status engine_streams_init(fsdp_engine_t *e) {
    fsdp_device_t *d = e->dev;
    FSDP_TRY(d->stream_create(d, &e->compute));
    FSDP_TRY(d->stream_create(d, &e->side));
    FSDP_TRY(d->event_create(d, &e->ev_side));
    return d->event_create(d, &e->ev_compute);
}

static void engine_streams_free(fsdp_engine_t *e) {
    fsdp_device_t *d = e->dev;
    if (d == NULL) return;
    (void)d->sync(d);
    d->event_destroy(d, e->ev_compute);
    d->event_destroy(d, e->ev_side);
    d->stream_destroy(d, e->side);
    d->stream_destroy(d, e->compute);
}

void shard_plant_fault(fsdp_engine_t *e, int fault) { e->fault = fault; }

fsdp_stream_t *shard_compute_stream(const fsdp_engine_t *e) { return e->compute; }

fsdp_status shard_device_sync(fsdp_engine_t *e) {
    fsdp_status st = e->dev->sync(e->dev);
    return st == FSDP_OK ? FSDP_OK : FSDP_WRAP(st, "engine on device '%s'", e->dev->name);
}

fsdp_status fsdp_engine_init(fsdp_engine_t **out, fsdp_comm_t *comm, const fsdp_engine_config *cfg) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    *out = NULL;
    if (comm == NULL) return FSDP_ERR(FSDP_EINVAL, "comm must not be NULL; create one with fsdp_comm_init");
    fsdp_engine_config c = cfg ? *cfg : fsdp_engine_config_default();
    if (c.version != 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "engine config version %d unsupported; start from fsdp_engine_config_default()",
                        c.version);
    if ((unsigned)c.strategy > FSDP_HYBRID_SHARD)
        return FSDP_ERR(FSDP_EINVAL, "unknown strategy %d", (int)c.strategy);
    if (c.shard_group < 0) return FSDP_ERR(FSDP_EINVAL, "shard_group must be >= 0 (got %d)", c.shard_group);
    if (c.compute_dtype != FSDP_F32 && c.compute_dtype != FSDP_BF16)
        return FSDP_ERR(FSDP_EINVAL, "compute_dtype must be FSDP_F32 or FSDP_BF16 (got %d)",
                        (int)c.compute_dtype);
    if (c.reduce_dtype != FSDP_F32 && c.reduce_dtype != FSDP_BF16)
        return FSDP_ERR(FSDP_EINVAL, "reduce_dtype must be FSDP_F32 or FSDP_BF16 (got %d)",
                        (int)c.reduce_dtype);
    if ((unsigned)c.main_grad > FSDP_MAIN_GRAD_EAGER)
        return FSDP_ERR(FSDP_EINVAL, "unknown main_grad policy %d", (int)c.main_grad);
    if ((unsigned)c.accum > FSDP_ACCUM_NO_SYNC)
        return FSDP_ERR(FSDP_EINVAL, "unknown accum mode %d", (int)c.accum);
    if (c.max_inflight < 0 || c.max_inflight > 64)
        return FSDP_ERR(FSDP_EINVAL, "max_inflight must be 0..64 (got %d); 0 turns overlap off",
                        c.max_inflight);
    if (c.align == 0 || c.align > 4096)
        return FSDP_ERR(FSDP_EINVAL, "align must be 1..4096 elements (got %zu); 16 suits AVX-512", c.align);

    FSDP_TRY(shard_freeze_check(c.freeze));

    fsdp_engine_t *e = calloc(1, sizeof *e);
    if (e == NULL) return FSDP_ERR(FSDP_ENOMEM, "engine struct");
    if (c.freeze && c.freeze[0] && (c.freeze = dup_str(c.freeze)) == NULL) {
        free(e);
        return FSDP_ERR(FSDP_ENOMEM, "engine freeze list");
    }
    if (c.freeze && !c.freeze[0]) c.freeze = NULL;
    e->cfg = c;
    e->n_micro = 1;
    e->dev = c.device ? c.device : fsdp_device_cpu();
    fsdp_status st = engine_streams_init(e);
    if (st == FSDP_OK) st = shard_comms_init(e, comm);
    if (st != FSDP_OK) {
        engine_streams_free(e);
        free((char *)e->cfg.freeze);
        free(e);
        return st;
    }
    life_init(&e->sched, &engine_ops, e, NULL, 0, c.max_inflight);
    e->sched.policy = c.main_grad;
    e->sched.accum = c.accum;
    *out = e;
    return FSDP_OK;
}

static void unit_free(fsdp_unit_t *u) {
    if (u == NULL) return;
    fsdp_device_t *d = u->eng->dev;
    shard_main_grad_release(u);
    d->free(d, u->wire, u->eng->compute);
    d->free(d, u->full, u->eng->compute);
    d->free(d, u->frozen, u->eng->compute);
    d->free(d, u->adam_v, u->eng->compute);
    d->free(d, u->adam_m, u->eng->compute);
    d->free(d, u->grad, u->eng->compute);
    d->free(d, u->master, u->eng->compute);
    free(u->touched);
    free(u->gaps);
    for (int t = 0; t < u->n_tensors; t++)
        free(u->tensors[t].name);
    free(u->tensors);
    free(u->name);
    free(u);
}

void fsdp_engine_free(fsdp_engine_t *e) {
    if (e == NULL) return;
    (void)shard_drain(e, 0); /* nothing may be in flight when the buffers go (failures leave them adopted) */
    for (int i = e->n_units - 1; i >= 0; i--)
        unit_free(e->units[i]);
    engine_streams_free(e); /* runs the frees */
    life_free(&e->sched);
    shard_comms_free(e);
    free(e->lives);
    free(e->units);
    free((char *)e->cfg.freeze);
    free(e);
}

int fsdp_engine_num_units(const fsdp_engine_t *e) { return e ? e->n_units : 0; }
fsdp_unit_t *fsdp_engine_unit(fsdp_engine_t *e, int i) {
    return (e && i >= 0 && i < e->n_units) ? e->units[i] : NULL;
}
const fsdp_engine_config *fsdp_engine_get_config(const fsdp_engine_t *e) { return e ? &e->cfg : NULL; }
fsdp_comm_t *fsdp_engine_comm(fsdp_engine_t *e) { return e ? e->comm : NULL; }
fsdp_comm_t *fsdp_engine_shard_comm(fsdp_engine_t *e) { return e ? e->shard_comm : NULL; }
fsdp_comm_t *fsdp_engine_replica_comm(fsdp_engine_t *e) { return e ? e->rep_comm : NULL; }

/* ---------------------------------------------------------------- unit creation and layout */

static fsdp_unit_t *engine_find_unit(fsdp_engine_t *e, const char *name, size_t name_len) {
    for (int i = 0; i < e->n_units; i++)
        if (strlen(e->units[i]->name) == name_len && strncmp(e->units[i]->name, name, name_len) == 0)
            return e->units[i];
    return NULL;
}

/* What the layout needs of the units registered before this one (ties across units are refused). */
static const char *engine_unit_named(void *ctx, const char *name, size_t len) {
    fsdp_unit_t *u = engine_find_unit(ctx, name, len);
    return u ? u->name : NULL;
}
static const char *engine_unit_with_tensor(void *ctx, const char *tensor) {
    fsdp_engine_t *e = ctx;
    for (int i = 0; i < e->n_units; i++)
        if (fsdp_unit_find(e->units[i], tensor) >= 0) return e->units[i]->name;
    return NULL;
}

/* Validates and lays out the specs (layout.c, the plan's arithmetic too), then fills u->tensors. */
static fsdp_status unit_read_specs(fsdp_engine_t *e, fsdp_unit_t *u, const fsdp_tensor_spec *specs, int n) {
    layout_tensor *lt = calloc((size_t)n, sizeof *lt);
    u->gaps = calloc((size_t)n + 1, sizeof *u->gaps);
    if (lt == NULL || u->gaps == NULL) {
        free(lt);
        return FSDP_ERR(FSDP_ENOMEM, "unit '%s' tensor tables", u->name);
    }
    layout_others others = {e, engine_unit_named, engine_unit_with_tensor};
    layout_sizes sz;
    fsdp_status st = shard_layout(u->name, specs, n, e->cfg.align, e->world, e->cfg.freeze, &others, lt,
                                  u->gaps, &u->n_gaps, &sz);
    u->numel = sz.numel;
    u->padded = sz.padded;
    u->fpad = sz.fpad;
    for (int t = 0; st == FSDP_OK && t < n; t++) {
        const fsdp_tensor_spec *s = &specs[t];
        shard_tensor *ts = &u->tensors[t];
        if ((ts->name = dup_str(s->name)) == NULL) {
            st = FSDP_ERR(FSDP_ENOMEM, "tensor name");
            break;
        }
        ts->ndim = s->ndim;
        memcpy(ts->shape, s->shape, sizeof ts->shape);
        for (int d = s->ndim; d < FSDP_MAX_DIMS; d++)
            ts->shape[d] = 0;
        ts->numel = lt[t].numel;
        ts->offset = lt[t].offset;
        ts->alias_of = lt[t].alias_of;
        ts->no_decay = s->no_decay ? 1 : 0;
        ts->frozen = lt[t].frozen;
        ts->init = s->init;
        ts->std = s->std;
    }
    free(lt);
    if (st != FSDP_OK) return st;
    if (e->cfg.strategy == FSDP_NO_SHARD) {
        u->shard_off = 0;
        u->shard_len = u->padded;
        u->fshard_off = 0;
        u->fshard_len = u->fpad;
    } else { /* padded and fpad are multiples of world, so of the shard group too */
        fsdp_shard_range(u->padded, e->srank, e->sworld, &u->shard_off, &u->shard_len);
        fsdp_shard_range(u->fpad, e->srank, e->sworld, &u->fshard_off, &u->fshard_len);
    }
    u->life.no_grad = u->padded == 0;
    return FSDP_OK;
}

fsdp_status fsdp_engine_add_unit(fsdp_engine_t *e, const char *name, const fsdp_tensor_spec *specs, int n,
                                 const fsdp_unit_config *cfg, fsdp_unit_t **out) {
    if (out) *out = NULL;
    if (e == NULL || name == NULL || name[0] == '\0' || specs == NULL || n < 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "need an engine, a non-empty unit name and n >= 1 tensor specs (got n = %d)", n);
    fsdp_unit_config uc = cfg ? *cfg : fsdp_unit_config_default();
    if (uc.version != 1)
        return FSDP_ERR(FSDP_EINVAL,
                        "unit '%s': config version %d unsupported; use fsdp_unit_config_default()", name,
                        uc.version);
    if (uc.reshard_after_forward < -1 || uc.reshard_after_forward > 1)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': reshard_after_forward must be -1, 0 or 1 (got %d)", name,
                        uc.reshard_after_forward);
    if (engine_find_unit(e, name, strlen(name)) != NULL)
        return FSDP_ERR(FSDP_EINVAL, "unit name '%s' is already registered; unit names must be unique", name);

    fsdp_status st = FSDP_OK;
    if (e->n_units == e->cap_units) {
        int cap = e->cap_units ? 2 * e->cap_units : 8;
        fsdp_unit_t **nu = realloc(e->units, (size_t)cap * sizeof *nu);
        if (nu == NULL) return FSDP_ERR(FSDP_ENOMEM, "unit table");
        e->units = nu;
        life_unit **nl = realloc(e->lives, (size_t)cap * sizeof *nl);
        if (nl == NULL) return FSDP_ERR(FSDP_ENOMEM, "unit table");
        e->lives = nl;
        e->cap_units = cap;
    }
    fsdp_unit_t *u = calloc(1, sizeof *u);
    if (u == NULL) return FSDP_ERR(FSDP_ENOMEM, "unit struct");
    u->eng = e;
    u->index = e->n_units;
    u->life.index = u->index;
    u->life.state = UNIT_IDLE;
    u->life.res = LIFE_SHARDED;
    if ((u->name = dup_str(name)) == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "unit name");
        goto fail;
    }
    u->tensors = calloc((size_t)n, sizeof *u->tensors);
    u->touched = calloc(((size_t)n + 63) / 64, sizeof *u->touched);
    if (u->tensors == NULL || u->touched == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "unit '%s' tensor table", name);
        goto fail;
    }
    u->n_tensors = n;
    if ((st = unit_read_specs(e, u, specs, n)) != FSDP_OK) goto fail;
    u->life.reshard_after_forward = uc.reshard_after_forward >= 0 ? uc.reshard_after_forward
                                                                  : (e->cfg.strategy == FSDP_FULL_SHARD ||
                                                                     e->cfg.strategy == FSDP_HYBRID_SHARD);

    size_t bytes;
    if (!fsdp_mul_ok(u->shard_len, sizeof(float), &bytes)) {
        st = FSDP_ERR(FSDP_EINVAL, "unit '%s': shard too large", name);
        goto fail;
    }
    fsdp_device_t *d = e->dev;
    if ((st = d->alloc(d, (void **)&u->master, bytes, FSDP_MEM_MASTER, 0, e->compute)) != FSDP_OK) goto fail;
    if ((st = d->alloc(d, (void **)&u->grad, bytes, FSDP_MEM_GRAD_SHARD, FSDP_ALLOC_ZERO, e->compute)) !=
        FSDP_OK)
        goto fail;
    if ((st = d->alloc(d, (void **)&u->adam_m, bytes, FSDP_MEM_OPTIM, FSDP_ALLOC_ZERO, e->compute)) !=
        FSDP_OK)
        goto fail;
    if ((st = d->alloc(d, (void **)&u->adam_v, bytes, FSDP_MEM_OPTIM, FSDP_ALLOC_ZERO, e->compute)) !=
        FSDP_OK)
        goto fail;
    /* the frozen shard: zero (gaps and padding stay so) until init_params or a load */
    if ((st = d->alloc(d, &u->frozen, u->fshard_len * fsdp_dtype_size(e->cfg.compute_dtype), FSDP_MEM_MASTER,
                       FSDP_ALLOC_ZERO, e->compute)) != FSDP_OK)
        goto fail;

    e->units[e->n_units] = u;
    e->lives[e->n_units] = &u->life;
    e->n_units++;
    life_set_units(&e->sched, e->lives, e->n_units);
    if (out) *out = u;
    return FSDP_OK;
fail:
    unit_free(u);
    return st;
}

/* ---------------------------------------------------------------- initialisation */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Standard normal for element j of a stream: counter-based (a pure function of key and j), so any
 * shard computes exactly the values the 1-rank run has at those indices. Box-Muller, cosine branch. */
static float normal_at(uint64_t key, uint64_t j) {
    uint64_t r = splitmix64(key ^ splitmix64(j + 0x632BE59BD9B4E019ull));
    double u1 = ((double)(r >> 32) + 1.0) * (1.0 / 4294967296.0); /* (0, 1] */
    double u2 = (double)(uint32_t)r * (1.0 / 4294967296.0);       /* [0, 1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The host writes or reads shard bytes itself (initialisation in place, a shard view): the device's
 * memory must be the host's, and nothing queued may still touch it. */
static fsdp_status host_access(fsdp_engine_t *e, const char *call) {
    if (!(e->dev->caps & FSDP_DEV_HOST_MEMORY))
        return fsdp_set_error(FSDP_EUNSUPPORTED,
                              "%s: device '%s' keeps its memory from the host; this call needs host "
                              "memory (copies through staging come with the device's own backend)",
                              call, e->dev->name);
    return shard_device_sync(e);
}

/* Elements of one host staging chunk (a device whose memory the host cannot address). */
#define STAGE_CHUNK ((size_t)1 << 20)

/* Uniform on [-1, 1) for element j of a stream (as normal_at: a pure function of key and j). */
static float uniform_at(uint64_t key, uint64_t j) {
    uint64_t r = splitmix64(key ^ splitmix64(j + 0x2545F4914F6CDD1Dull));
    return (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Writes the initial values of flat elements [c0, c1) of unit u's shard into dst (c1 - c0 elements);
 * only >= 0: that tensor's elements alone (the rest of dst untouched). */
static void init_range(const fsdp_engine_t *e, const fsdp_unit_t *u, size_t c0, size_t c1, float *dst,
                       int only) {
    if (c1 <= c0) return; /* nothing here (a unit with nothing trainable: dst may be NULL) */
    if (only < 0) memset(dst, 0, (c1 - c0) * sizeof(float)); /* gaps and padding are zero */
    for (int t = 0; t < u->n_tensors; t++) {
        const shard_tensor *ts = &u->tensors[t];
        if (ts->alias_of >= 0 || (only >= 0 && t != only)) continue;
        size_t a = ts->offset > c0 ? ts->offset : c0,
               b = ts->offset + ts->numel < c1 ? ts->offset + ts->numel : c1;
        if (a >= b) continue;
        /* stream key: (seed, unit index, tensor index) */
        uint64_t key =
            splitmix64(e->cfg.seed ^ splitmix64(((uint64_t)(uint32_t)u->index << 32) | (uint32_t)t));
        float *d = dst + (a - c0);
        size_t j0 = a - ts->offset, cnt = b - a;
        switch (ts->init) {
        case FSDP_INIT_ZEROS:
            for (size_t k = 0; k < cnt; k++)
                d[k] = 0.0f;
            break;
        case FSDP_INIT_ONES:
            for (size_t k = 0; k < cnt; k++)
                d[k] = 1.0f;
            break;
        case FSDP_INIT_NORMAL: {
            float sd = ts->std;
#pragma omp parallel for schedule(static) if (cnt > SHARD_OMP_MIN)
            for (size_t k = 0; k < cnt; k++)
                d[k] = sd * normal_at(key, j0 + k);
            break;
        }
        case FSDP_INIT_UNIFORM: {
            float bound = ts->std;
#pragma omp parallel for schedule(static) if (cnt > SHARD_OMP_MIN)
            for (size_t k = 0; k < cnt; k++)
                d[k] = bound * uniform_at(key, j0 + k);
            break;
        }
        }
    }
}

/* Flat elements [lo, lo + len) of one of the unit's shards through a host chunk and
 * fsdp_unit_shard_write (a device whose memory the host cannot address; the frozen region anywhere). */
static fsdp_status init_staged(fsdp_unit_t *u, fsdp_shard_array which, size_t lo, size_t len, float *stage) {
    fsdp_status st = FSDP_OK;
    for (size_t c0 = lo; c0 < lo + len && st == FSDP_OK; c0 += STAGE_CHUNK) {
        size_t c1 = lo + len - c0 < STAGE_CHUNK ? lo + len : c0 + STAGE_CHUNK;
        init_range(u->eng, u, c0, c1, stage, -1);
        st = fsdp_unit_shard_write(u, which, c0, c1 - c0, stage);
    }
    return st;
}

/* Where the host may address the device's memory the master values are written in place; elsewhere,
 * and for the frozen region (held in the compute dtype), through a host chunk and the device's copy. */
fsdp_status fsdp_engine_init_params(fsdp_engine_t *e) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    int in_place = (e->dev->caps & FSDP_DEV_HOST_MEMORY) != 0;
    if (in_place) {
        FSDP_TRY(host_access(e, "fsdp_engine_init_params"));
        for (int i = 0; i < e->n_units; i++)
            init_range(e, e->units[i], e->units[i]->shard_off,
                       e->units[i]->shard_off + e->units[i]->shard_len, e->units[i]->master, -1);
    }
    float *stage = NULL;
    fsdp_status st = FSDP_OK;
    for (int i = 0; i < e->n_units && st == FSDP_OK; i++) {
        fsdp_unit_t *u = e->units[i];
        if ((in_place || u->shard_len == 0) && u->fshard_len == 0) continue;
        if (stage == NULL && (stage = malloc(STAGE_CHUNK * sizeof(float))) == NULL)
            return FSDP_ERR(FSDP_ENOMEM, "init staging chunk of %zu elements", STAGE_CHUNK);
        if (!in_place) st = init_staged(u, FSDP_SHARD_MASTER, u->shard_off, u->shard_len, stage);
        if (st == FSDP_OK)
            st = init_staged(u, FSDP_SHARD_FROZEN, u->padded + u->fshard_off, u->fshard_len, stage);
    }
    free(stage);
    return st;
}

fsdp_status fsdp_unit_init_tensor(fsdp_unit_t *u, int t) {
    if (u == NULL || t < 0 || t >= u->n_tensors)
        return FSDP_ERR(FSDP_EINVAL, "fsdp_unit_init_tensor: no tensor %d in unit '%s'", t,
                        u ? u->name : "?");
    const shard_tensor *ts = &u->tensors[t];
    if (ts->alias_of >= 0) return FSDP_OK; /* its target's values */
    /* this rank's part of the tensor's elements, in the region that holds it */
    const int frozen = ts->frozen;
    const size_t lo = frozen ? u->padded + u->fshard_off : u->shard_off;
    const size_t hi = lo + (frozen ? u->fshard_len : u->shard_len);
    size_t a = ts->offset > lo ? ts->offset : lo,
           b = ts->offset + ts->numel < hi ? ts->offset + ts->numel : hi;
    if (a >= b) return FSDP_OK;
    float *stage = malloc((b - a) * sizeof(float));
    if (!stage) return FSDP_ERR(FSDP_ENOMEM, "init of %zu elements", b - a);
    init_range(u->eng, u, a, b, stage, t);
    fsdp_status st =
        fsdp_unit_shard_write(u, frozen ? FSDP_SHARD_FROZEN : FSDP_SHARD_MASTER, a, b - a, stage);
    free(stage);
    return st;
}

/* ---------------------------------------------------------------- introspection */

const char *fsdp_unit_name(const fsdp_unit_t *u) { return u ? u->name : ""; }
int fsdp_unit_index(const fsdp_unit_t *u) { return u ? u->index : -1; }
int fsdp_unit_num_tensors(const fsdp_unit_t *u) { return u ? u->n_tensors : 0; }
size_t fsdp_unit_numel(const fsdp_unit_t *u) { return u ? u->numel : 0; }
size_t fsdp_unit_padded_numel(const fsdp_unit_t *u) { return u ? u->padded : 0; }
size_t fsdp_unit_frozen_padded_numel(const fsdp_unit_t *u) { return u ? u->fpad : 0; }

int fsdp_unit_find(const fsdp_unit_t *u, const char *name) {
    if (u == NULL || name == NULL) return -1;
    for (int t = 0; t < u->n_tensors; t++)
        if (strcmp(u->tensors[t].name, name) == 0) return t;
    return -1;
}

fsdp_status fsdp_unit_tensor_info(const fsdp_unit_t *u, int t, fsdp_tensor_info *out) {
    if (u == NULL || out == NULL) return FSDP_ERR(FSDP_EINVAL, "unit and out must not be NULL");
    if (t < 0 || t >= u->n_tensors)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': tensor index %d outside 0..%d", u->name, t,
                        u->n_tensors - 1);
    const shard_tensor *ts = &u->tensors[t];
    out->name = ts->name;
    out->ndim = ts->ndim;
    memcpy(out->shape, ts->shape, sizeof out->shape);
    out->numel = ts->numel;
    out->offset = ts->offset;
    out->alias_of = ts->alias_of;
    out->no_decay = ts->no_decay;
    out->frozen = ts->frozen;
    return FSDP_OK;
}

static void shard_ranges(const fsdp_unit_t *u, fsdp_shard_view *out) {
    out->offset = u->shard_off;
    out->numel = u->shard_len;
    const fsdp_engine_t *e = u->eng;
    out->replica = e->cfg.strategy == FSDP_NO_SHARD ? e->rank : e->grp;
    out->replicas = e->cfg.strategy == FSDP_NO_SHARD ? e->world : e->ngrp;
    out->frozen_offset = u->padded + u->fshard_off;
    out->frozen_numel = u->fshard_len;
}

fsdp_status fsdp_unit_shard_info(fsdp_unit_t *u, fsdp_shard_view *out) {
    if (u == NULL || out == NULL) return FSDP_ERR(FSDP_EINVAL, "unit and out must not be NULL");
    if (u->eng->dev->caps & FSDP_DEV_HOST_MEMORY) return fsdp_unit_shard(u, out);
    *out = (fsdp_shard_view){0};
    shard_ranges(u, out);
    return FSDP_OK;
}

static float *shard_array(fsdp_unit_t *u, fsdp_shard_array which) {
    switch (which) {
    case FSDP_SHARD_MASTER: return u->master;
    case FSDP_SHARD_ADAM_M: return u->adam_m;
    case FSDP_SHARD_ADAM_V: return u->adam_v;
    case FSDP_SHARD_GRAD: return u->grad;
    case FSDP_SHARD_FROZEN: break; /* compute dtype: frozen_copy */
    }
    return NULL;
}

/* The frozen shard in the compute dtype: a bf16 region goes through a host chunk of bf16 converted
 * on the host (round to nearest even on the way in, exact on the way out); an f32 one is copied. */
static fsdp_status frozen_copy(fsdp_unit_t *u, size_t at, size_t count, float *dst, const float *src) {
    fsdp_engine_t *e = u->eng;
    fsdp_device_t *d = e->dev;
    char *a = (char *)u->frozen + at * fsdp_dtype_size(e->cfg.compute_dtype);
    if (e->cfg.compute_dtype == FSDP_F32) {
        d->copy(d, dst ? (void *)dst : (void *)a, dst ? (const void *)a : (const void *)src,
                count * sizeof(float), e->compute);
        d->record(d, e->ev_compute, e->compute);
        return d->event_sync(d, e->ev_compute);
    }
    fsdp_bf16 *tmp = malloc(count * sizeof *tmp);
    if (tmp == NULL) return FSDP_ERR(FSDP_ENOMEM, "unit '%s': a bf16 chunk of %zu elements", u->name, count);
    if (src) fsdp_f32_to_bf16_n(tmp, src, count);
    d->copy(d, src ? (void *)a : (void *)tmp, src ? (const void *)tmp : (const void *)a,
            count * sizeof(fsdp_bf16), e->compute);
    d->record(d, e->ev_compute, e->compute);
    fsdp_status st = d->event_sync(d, e->ev_compute);
    if (st == FSDP_OK && dst) fsdp_bf16_to_f32_n(dst, tmp, count);
    free(tmp);
    return st;
}

static fsdp_status shard_copy(fsdp_unit_t *u, fsdp_shard_array which, size_t offset, size_t count, float *dst,
                              const float *src, const char *call) {
    if (u == NULL || (dst == NULL && src == NULL && count > 0))
        return fsdp_set_error(FSDP_EINVAL, "%s: unit and buffer must not be NULL", call);
    if ((unsigned)which > FSDP_SHARD_FROZEN)
        return fsdp_set_error(FSDP_EINVAL, "%s: unknown shard array %d", call, (int)which);
    int frozen = which == FSDP_SHARD_FROZEN;
    float *a = frozen ? NULL : shard_array(u, which); /* NULL for an empty shard */
    size_t lo = frozen ? u->padded + u->fshard_off : u->shard_off,
           len = frozen ? u->fshard_len : u->shard_len;
    if (offset < lo || count > len || offset - lo > len - count)
        return fsdp_set_error(
            FSDP_EINVAL, "%s: unit '%s': elements [%zu, +%zu) are not inside this rank's %sshard [%zu, +%zu)",
            call, u->name, offset, count, frozen ? "frozen " : "", lo, len);
    fsdp_engine_t *e = u->eng;
    FSDP_TRY(shard_drain(e, dst != NULL)); /* a write changes the master: nothing stays prefetched */
    if (count == 0) return FSDP_OK;
    if (frozen) return frozen_copy(u, offset - lo, count, dst, src);
    a += offset - u->shard_off;
    e->dev->copy(e->dev, dst ? (void *)dst : (void *)a, dst ? (const void *)a : (const void *)src,
                 count * sizeof(float), e->compute);
    e->dev->record(e->dev, e->ev_compute, e->compute);
    return e->dev->event_sync(e->dev, e->ev_compute);
}

fsdp_status fsdp_unit_shard_read(fsdp_unit_t *u, fsdp_shard_array which, size_t offset, size_t count,
                                 float *dst) {
    return shard_copy(u, which, offset, count, dst, NULL, "fsdp_unit_shard_read");
}

fsdp_status fsdp_unit_shard_write(fsdp_unit_t *u, fsdp_shard_array which, size_t offset, size_t count,
                                  const float *src) {
    return shard_copy(u, which, offset, count, NULL, src, "fsdp_unit_shard_write");
}

fsdp_status fsdp_unit_shard(fsdp_unit_t *u, fsdp_shard_view *out) {
    if (u == NULL || out == NULL) return FSDP_ERR(FSDP_EINVAL, "unit and out must not be NULL");
    FSDP_TRY(
        shard_drain(u->eng, 0)); /* the caller reads or writes the shards next (a load: masters change) */
    FSDP_TRY(host_access(u->eng, "fsdp_unit_shard"));
    out->master = u->master;
    out->grad = u->grad;
    out->adam_m = u->adam_m;
    out->adam_v = u->adam_v;
    shard_ranges(u, out);
    out->frozen = u->frozen;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- unshard / reshard */

/* Cast the fp32 shard to the compute dtype straight into this rank's slot of the full buffer, then
 * start the in-place all-gather. NO_SHARD: every rank has everything, so the cast is the whole
 * unshard. The cast runs on the side stream after the compute stream's updates of the master (the
 * optimizer's, a load's); the host waits for it before the host-polled transport reads the slot. */
static fsdp_status op_unshard_start(void *ctx, int i, int prefetch) {
    fsdp_engine_t *e = ctx;
    fsdp_unit_t *u = e->units[i];
    fsdp_device_t *d = e->dev;
    fsdp_dtype dt = e->cfg.compute_dtype;
    size_t esz = fsdp_dtype_size(dt);
    FSDP_TRY(
        d->alloc(d, &u->full, (u->padded + u->fpad) * esz, FSDP_MEM_PARAM_FULL, FSDP_ALLOC_SHARED, e->side));
    char *slot = (char *)u->full + u->shard_off * esz;
    char *fslot = (char *)u->full + (u->padded + u->fshard_off) * esz,
         *fregion = (char *)u->full + u->padded * esz;
    d->record(d, e->ev_compute, e->compute);
    d->wait(d, e->side, e->ev_compute);
    if (dt == FSDP_BF16) {
        FSDP_PROF_SCOPE(FSDP_PROF_CAST);
        d->f32_to_bf16(d, e->side, (fsdp_bf16 *)slot, u->master, u->shard_len);
    } else if (u->shard_len > 0) {
        d->copy(d, slot, u->master, u->shard_len * sizeof(float), e->side);
    }
    if (u->fshard_len > 0) /* frozen: already in the compute dtype */
        d->copy(d, fslot, u->frozen, u->fshard_len * esz, e->side);
    u->gather = u->gather_f = NULL;
    if (e->cfg.strategy == FSDP_NO_SHARD) { /* the cast is the unshard: compute waits for it (unshard_wait) */
        d->record(d, e->ev_side, e->side);
        return FSDP_OK;
    }
    fsdp_status st = shard_handoff(e, e->shard_comm, e->ev_side, e->side);
    if (st == FSDP_OK) {
        shard_set_label(u, prefetch ? "all-gather params (prefetch)" : "all-gather params");
        st = fsdp_comm_iall_gather(e->shard_comm, slot, u->full, u->shard_len, dt, &u->gather);
    }
    if (st == FSDP_OK && u->fshard_len > 0) {
        shard_set_label(u, prefetch ? "all-gather frozen params (prefetch)" : "all-gather frozen params");
        st = fsdp_comm_iall_gather(e->shard_comm, fslot, fregion, u->fshard_len, dt, &u->gather_f);
        if (st != FSDP_OK && u->gather != NULL) { /* the first one was posted: it must end first */
            fsdp_status w = fsdp_comm_wait(u->gather);
            u->gather = NULL;
            if (w != FSDP_OK) {
                shard_drop_device(e, e->shard_comm, w, u->full);
                u->full = NULL;
                return st;
            }
        }
    }
    if (st != FSDP_OK) { /* refused before anything was posted */
        d->free(d, u->full, e->side);
        u->full = NULL;
    }
    return st;
}

/* The exposed part of the all-gather: the trace span covers only the wait. */
static fsdp_status op_unshard_wait(void *ctx, int i) {
    fsdp_engine_t *e = ctx;
    fsdp_unit_t *u = e->units[i];
    if (u->gather != NULL || u->gather_f != NULL) {
        fsdp_trace_unit_begin(u->name, "all-gather");
        /* the kernels on compute read what the gathers wrote */
        fsdp_status st = u->gather ? fsdp_comm_wait_stream(u->gather, e->dev, e->compute) : FSDP_OK;
        fsdp_status st_f = u->gather_f ? fsdp_comm_wait_stream(u->gather_f, e->dev, e->compute) : FSDP_OK;
        fsdp_trace_unit_end(u->name, "all-gather");
        u->gather = u->gather_f = NULL;
        if (st == FSDP_OK) st = st_f;
        if (st != FSDP_OK) {
            shard_drop_device(e, e->shard_comm, st, u->full); /* the gather's communicator */
            u->full = NULL;
            return st;
        }
    }
    /* NO_SHARD: the kernels read what the side stream cast (elsewhere the host waited for it) */
    e->dev->wait(e->dev, e->compute, e->ev_side);
    size_t esz = fsdp_dtype_size(e->cfg.compute_dtype);
    for (int t = 0; t < u->n_tensors; t++)
        u->tensors[t].param_view = (char *)u->full + u->tensors[t].offset * esz;
    return FSDP_OK;
}

static void op_reshard(void *ctx, int i) {
    fsdp_engine_t *e = ctx;
    fsdp_unit_t *u = e->units[i];
    for (int t = 0; t < u->n_tensors; t++)
        u->tensors[t].param_view = NULL;
    /* after every kernel queued so far on compute has read it */
    e->dev->free(e->dev, u->full, e->fault == SHARD_FAULT_FREE_EARLY ? e->side : e->compute);
    u->full = NULL;
}

static fsdp_status op_mg_alloc(void *ctx, int i) {
    return shard_main_grad_alloc(((fsdp_engine_t *)ctx)->units[i]);
}
static fsdp_status op_reduce_start(void *ctx, int i) {
    return shard_reduce_start(((fsdp_engine_t *)ctx)->units[i]);
}
static fsdp_status op_reduce_finish(void *ctx, int i) {
    return shard_reduce_finish(((fsdp_engine_t *)ctx)->units[i]);
}

static const life_ops engine_ops = {op_unshard_start, op_unshard_wait, op_reshard,
                                    op_mg_alloc,      op_reduce_start, op_reduce_finish};

fsdp_status fsdp_engine_drain(fsdp_engine_t *e) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    return shard_drain(e, 0);
}

long fsdp_engine_order_mismatches(const fsdp_engine_t *e) {
    return e ? e->sched.order[0].mismatches + e->sched.order[1].mismatches : 0;
}

static fsdp_status bad_state(const fsdp_unit_t *u, const char *call, const char *hint) {
    return fsdp_set_error(FSDP_ESTATE, "%s: unit '%s' is in state %s; %s", call, u->name,
                          shard_state_name(u->life.state), hint);
}

/* The public hooks check the state machine, then run the lifecycle (lifecycle.c). Each also gives
 * started collectives a turn of progress. */
fsdp_status fsdp_unit_pre_forward(fsdp_unit_t *u) {
    if (u == NULL) return FSDP_ERR(FSDP_EINVAL, "unit must not be NULL");
    unit_state st = u->life.state;
    if (st != UNIT_IDLE && st != UNIT_FORWARD_DONE && st != UNIT_BACKWARD)
        return bad_state(u, "fsdp_unit_pre_forward", "call post_forward before the next pre_forward");
    /* FORWARD_DONE: evaluation, the earlier forward is abandoned; BACKWARD: activation recompute */
    shard_progress(u->eng);
    FSDP_TRY(life_pre_forward(&u->eng->sched, &u->life));
    fsdp_trace_unit_begin(u->name, "forward");
    return FSDP_OK;
}

fsdp_status fsdp_unit_post_forward(fsdp_unit_t *u) {
    if (u == NULL) return FSDP_ERR(FSDP_EINVAL, "unit must not be NULL");
    if (u->life.state != UNIT_FORWARD && u->life.state != UNIT_RECOMPUTE)
        return bad_state(u, "fsdp_unit_post_forward", "post_forward must follow pre_forward");
    fsdp_trace_unit_end(u->name, "forward");
    shard_progress(u->eng);
    return life_post_forward(&u->eng->sched, &u->life);
}

fsdp_status fsdp_unit_pre_backward(fsdp_unit_t *u) {
    if (u == NULL) return FSDP_ERR(FSDP_EINVAL, "unit must not be NULL");
    if (u->life.state != UNIT_FORWARD_DONE)
        return bad_state(u, "fsdp_unit_pre_backward",
                         "pre_backward must follow post_forward (and come once per backward)");
    shard_progress(u->eng);
    if (u->eng->sched.no_backward)
        return bad_state(u, "fsdp_unit_pre_backward",
                         "the engine runs forwards without backward (fsdp_engine_set_no_backward)");
    FSDP_TRY(life_pre_backward(&u->eng->sched, &u->life));
    fsdp_trace_unit_begin(u->name, "backward");
    return FSDP_OK;
}

fsdp_status fsdp_unit_post_backward(fsdp_unit_t *u) {
    if (u == NULL) return FSDP_ERR(FSDP_EINVAL, "unit must not be NULL");
    if (u->life.state != UNIT_BACKWARD)
        return bad_state(u, "fsdp_unit_post_backward",
                         u->life.state == UNIT_RECOMPUTE
                             ? "finish the recompute forward with post_forward first"
                             : "post_backward must follow pre_backward, once per backward");
    fsdp_trace_unit_end(u->name, "backward");
    return life_post_backward(&u->eng->sched, &u->life);
}

fsdp_status fsdp_engine_set_no_backward(fsdp_engine_t *e, int on) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    e->sched.no_backward = on != 0;
    return FSDP_OK;
}

int fsdp_engine_no_backward(const fsdp_engine_t *e) { return e ? e->sched.no_backward : 0; }

fsdp_status fsdp_engine_reshard_all(fsdp_engine_t *e) {
    if (e == NULL) return FSDP_ERR(FSDP_EINVAL, "engine must not be NULL");
    for (int i = 0; i < e->n_units; i++) {
        fsdp_unit_t *u = e->units[i];
        if (u->life.state != UNIT_IDLE && u->life.state != UNIT_FORWARD_DONE)
            return bad_state(u, "fsdp_engine_reshard_all", "finish the unit's forward or backward first");
    }
    for (int i = 0; i < e->n_units; i++)
        if (e->units[i]->life.state == UNIT_FORWARD_DONE) e->units[i]->life.state = UNIT_IDLE;
    FSDP_TRY(shard_drain(e, 0)); /* drops every idle unit's parameters */
    for (int i = 0; i < e->n_units; i++) {
        fsdp_unit_t *u = e->units[i];
        /* EAGER buffers from evaluation forwards hold nothing; NO_SYNC accumulations are kept. */
        if (u->main_grad != NULL && !shard_touched_any(u)) {
            shard_main_grad_release(u);
            u->life.mg = 0;
        }
    }
    return FSDP_OK;
}

void fsdp_engine_progress(fsdp_engine_t *e) {
    if (e != NULL) shard_progress(e); /* every communicator: HYBRID's groups move during compute too */
}

fsdp_status fsdp_unit_param(fsdp_unit_t *u, int t, void **view) {
    if (view) *view = NULL;
    if (u == NULL || view == NULL) return FSDP_ERR(FSDP_EINVAL, "unit and view must not be NULL");
    if (t < 0 || t >= u->n_tensors)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': tensor index %d outside 0..%d", u->name, t,
                        u->n_tensors - 1);
    if (u->life.res != LIFE_UNSHARDED)
        return fsdp_set_error(
            FSDP_ESTATE,
            "fsdp_unit_param: unit '%s' tensor '%s': parameters are sharded (state %s); call "
            "pre_forward or pre_backward first",
            u->name, u->tensors[t].name, shard_state_name(u->life.state));
    FSDP_TRY(shard_host_catch_up(u->eng)); /* a host kernel reads it next */
    *view = u->tensors[t].param_view;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- full tensors */

static fsdp_status check_tensor_arg(const fsdp_unit_t *u, int t, const char *call) {
    if (u == NULL) return fsdp_set_error(FSDP_EINVAL, "%s: unit must not be NULL", call);
    if (t < 0 || t >= u->n_tensors)
        return fsdp_set_error(FSDP_EINVAL, "%s: unit '%s': tensor index %d outside 0..%d", call, u->name, t,
                              u->n_tensors - 1);
    return FSDP_OK;
}

fsdp_status fsdp_unit_gather_tensor(fsdp_unit_t *u, int t, float *out, int root) {
    FSDP_TRY(check_tensor_arg(u, t, "fsdp_unit_gather_tensor"));
    fsdp_engine_t *e = u->eng;
    FSDP_TRY(shard_drain(e, 1));
    if (root >= e->world)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': root %d outside 0..%d (or < 0 for all ranks)", u->name, root,
                        e->world - 1);
    int want = root < 0 || root == e->rank;
    if (want && out == NULL)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': out must not be NULL on rank %d", u->name,
                        u->tensors[t].name, e->rank);
    const shard_tensor *ts = &u->tensors[t];
    /* the tensor's region: [base, base + len), this rank's shard of it at base + off (fp32 copies) */
    fsdp_shard_array which = ts->frozen ? FSDP_SHARD_FROZEN : FSDP_SHARD_MASTER;
    size_t base = ts->frozen ? u->padded : 0, len = ts->frozen ? u->fpad : u->padded;
    size_t off = ts->frozen ? u->fshard_off : u->shard_off, n = ts->frozen ? u->fshard_len : u->shard_len;
    if (e->cfg.strategy == FSDP_NO_SHARD)
        return want ? fsdp_unit_shard_read(u, which, ts->offset, ts->numel, out) : FSDP_OK;
    /* All-gather the region as fp32 (transient, category other), then slice: bit-exact. */
    float *flat;
    FSDP_TRY(fsdp_mem_alloc((void **)&flat, len * sizeof(float), FSDP_MEM_OTHER));
    fsdp_status rs = fsdp_unit_shard_read(u, which, base + off, n, flat + off);
    if (rs != FSDP_OK) {
        fsdp_mem_free(flat);
        return rs;
    }
    shard_set_label(u, "gather tensor");
    fsdp_status st = fsdp_comm_all_gather(e->shard_comm, flat + off, flat, n, FSDP_F32);
    if (st == FSDP_OK && want) memcpy(out, flat + (ts->offset - base), ts->numel * sizeof(float));
    shard_drop(e->shard_comm, st, flat);
    return st;
}

fsdp_status fsdp_unit_load_tensor(fsdp_unit_t *u, int t, const float *full, int root) {
    FSDP_TRY(check_tensor_arg(u, t, "fsdp_unit_load_tensor"));
    fsdp_engine_t *e = u->eng;
    FSDP_TRY(shard_drain(e, 0));
    if (root >= e->world)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': root %d outside 0..%d (or < 0: every rank passes the data)",
                        u->name, root, e->world - 1);
    const shard_tensor *ts = &u->tensors[t];
    if ((root < 0 || root == e->rank) && full == NULL)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': full must not be NULL on rank %d", u->name,
                        ts->name, e->rank);
    const float *src = full;
    float *tmp = NULL;
    if (root >= 0) {
        FSDP_TRY(fsdp_mem_alloc((void **)&tmp, ts->numel * sizeof(float), FSDP_MEM_OTHER));
        if (root == e->rank) memcpy(tmp, full, ts->numel * sizeof(float));
        shard_set_label(u, "load tensor broadcast");
        fsdp_status st = fsdp_comm_broadcast(e->comm, tmp, ts->numel, FSDP_F32, root);
        if (st != FSDP_OK) {
            shard_drop(e->comm, st, tmp);
            return st;
        }
        src = tmp;
    }
    size_t lo = ts->frozen ? u->padded + u->fshard_off : u->shard_off;
    size_t hi = lo + (ts->frozen ? u->fshard_len : u->shard_len);
    size_t a = ts->offset > lo ? ts->offset : lo,
           b = ts->offset + ts->numel < hi ? ts->offset + ts->numel : hi;
    fsdp_status st = a < b ? fsdp_unit_shard_write(u, ts->frozen ? FSDP_SHARD_FROZEN : FSDP_SHARD_MASTER, a,
                                                   b - a, src + (a - ts->offset))
                           : FSDP_OK;
    fsdp_mem_free(tmp);
    return st;
}
