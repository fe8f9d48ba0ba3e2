/* mpi_device_sim.c — the engine on the simulated device (src/core/device_sim.c) under mpirun 1..4.
 *
 * The test plays the model: its "kernels" are host functions queued on the engine's compute stream
 * (what a GPU model's kernels would be): a forward kernel per unit that reads the gathered parameters,
 * a loss kernel, and backward kernels that read the parameters again and write main_grad with the
 * first-touch flag the engine gives on the host (a tied tensor's second use accumulates; one tensor is
 * never written, so the zero-fill runs). The host reads the loss once per micro-batch after an event.
 *
 * 1. For each engine configuration (strategies incl. HYBRID, fp32/bf16 compute, fp32/bf16 reduce,
 *    overlap on/off, NO_SYNC micro-batches) the CPU device gives the reference; the simulated device
 *    under many seeds must give the same losses, norms and final masters bit for bit, and must have run
 *    work out of queue order (else it tested nothing).
 * 2. Planted ordering faults must show as a wrong or NaN value for some seeds, the same one when a seed
 *    runs twice: the reduction posted before the compute stream ran the last weight-gradient kernel
 *    (required with more than one rank), the gathered buffer freed on the side stream before
 *    backward's kernels read it, the loss read (before backward, as a trainer logs it) without waiting
 *    for its kernel. */
#include "fsdp.h"
#include "shard/shard.h"
#include "test_util.h"

static int g_rank, g_world;

#define NU    3
#define STEPS 3
#define SEEDS 12

/* unit 0: w0 [40] (written) and b0 [8] (never written: zero-filled); unit 1: w1 [24]; unit 2: w2 [56]
 * and its tied alias w2t (two uses: the second accumulates). */
static const int NT[NU] = {2, 1, 2};
static const int NEL[NU] = {40, 24, 56};

typedef struct {
    fsdp_strategy strategy;
    fsdp_dtype compute, reduce;
    int max_inflight, n_micro;
    fsdp_accum_mode accum;
    const char *name;
} cfg_t;

typedef struct {
    float loss[STEPS * 2];
    float norm[STEPS];
    float master[NU][64];
} result_t;

/* ---------------------------------------------------------------- the model's kernels */

typedef struct {
    const void *p; /* gathered parameters (compute dtype) */
    int bf16, n, unit, rank, step, micro, acc;
    float *y; /* the activations buffer: y[unit], y[NU] = loss */
    float *g; /* main_grad view */
} kern_t;

static float param_at(const kern_t *k, int i) {
    if (!k->bf16) return ((const float *)k->p)[i];
    float f;
    fsdp_bf16_to_f32_n(&f, (const fsdp_bf16 *)k->p + i, 1);
    return f;
}
static float x_at(const kern_t *k, int i) {
    return 0.1f * (float)(k->rank + 1) + 0.01f * (float)i - 0.002f * (float)(k->step * 2 + k->micro);
}

static void k_forward(void *arg) {
    const kern_t *k = arg;
    float s = 0.0f;
    for (int i = 0; i < k->n; i++)
        s += param_at(k, i) * x_at(k, i);
    k->y[k->unit] = s;
}
static void k_loss(void *arg) {
    const kern_t *k = arg;
    float s = 0.0f;
    for (int i = 0; i < NU; i++)
        s += 0.5f * k->y[i] * k->y[i];
    k->y[NU] = s;
}
static void k_backward(void *arg) {
    const kern_t *k = arg;
    for (int i = 0; i < k->n; i++) {
        float v = k->y[k->unit] * x_at(k, i) + 0.5f * param_at(k, i);
        k->g[i] = k->acc ? k->g[i] + v : v;
    }
}

/* ---------------------------------------------------------------- one run */

/* Runs the configuration on a device (NULL: the CPU) with a planted fault; the results into r. */
static void run(fsdp_comm_t *comm, const cfg_t *c, fsdp_device_t *dev, int fault, int early_loss,
                result_t *r) {
    const size_t mem_before = fsdp_mem_total_current();
    memset(r, 0, sizeof *r);
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.strategy = c->strategy;
    ec.compute_dtype = c->compute;
    ec.reduce_dtype = c->reduce;
    ec.max_inflight = c->max_inflight;
    ec.accum = c->accum;
    ec.shard_group = c->strategy == FSDP_HYBRID_SHARD ? 2 : 0;
    ec.device = dev;
    ec.host_kernels = 0; /* this test queues its kernels on the compute stream */
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    if (e == NULL) return;
    fsdp_unit_t *u[NU] = {0};
    for (int i = 0; i < NU; i++) {
        char un[8], wn[8], bn[8];
        snprintf(un, sizeof un, "u%d", i);
        snprintf(wn, sizeof wn, "w%d", i);
        snprintf(bn, sizeof bn, i == 2 ? "w%dt" : "b%d", i);
        fsdp_tensor_spec sp[2] = {
            {.name = wn, .ndim = 1, .shape = {NEL[i]}, .init = FSDP_INIT_NORMAL, .std = 0.5f},
            {.name = bn, .ndim = 1, .shape = {8}, .init = FSDP_INIT_ONES, .no_decay = 1},
        };
        if (i == 2) sp[1] = (fsdp_tensor_spec){.name = bn, .ndim = 1, .shape = {NEL[i]}, .alias_of = wn};
        CHECK_OK(fsdp_engine_add_unit(e, un, sp, NT[i], NULL, &u[i]));
    }
    shard_plant_fault(e, fault);
    fsdp_device_t *d = dev ? dev : fsdp_device_cpu();
    fsdp_stream_t *cs = shard_compute_stream(e);
    fsdp_event_t *ev = NULL;
    float *y = NULL;
    CHECK_OK(d->event_create(d, &ev));
    CHECK_OK(d->alloc(d, (void **)&y, (NU + 1) * sizeof(float), FSDP_MEM_ACTIVATION, 0, cs));
    CHECK_OK(fsdp_engine_init_params(e));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 0.05f;
    oc.weight_decay = 0.1f;
    int bf16 = c->compute == FSDP_BF16;
    for (int s = 0; s < STEPS && y != NULL && u[NU - 1] != NULL; s++) {
        CHECK_OK(fsdp_engine_begin_step(e, c->n_micro));
        for (int m = 0; m < c->n_micro; m++) {
            CHECK_OK(fsdp_engine_begin_micro(e, m));
            kern_t k = {.rank = g_rank, .step = s, .micro = m, .y = y, .bf16 = bf16};
            for (int i = 0; i < NU; i++) {
                CHECK_OK(fsdp_unit_pre_forward(u[i]));
                void *p = NULL;
                CHECK_OK(fsdp_unit_param(u[i], 0, &p));
                k.p = p, k.n = NEL[i], k.unit = i;
                d->host_fn(d, cs, k_forward, &k, sizeof k);
                CHECK_OK(fsdp_unit_post_forward(u[i]));
            }
            d->host_fn(d, cs, k_loss, &k, sizeof k);
            d->record(d, ev, cs);
            if (!early_loss) CHECK_OK(d->event_sync(d, ev)); /* the loss's kernel ran */
            r->loss[s * 2 + m] = y[NU];                      /* logged before backward is queued */
            for (int i = NU - 1; i >= 0; i--) {
                CHECK_OK(fsdp_unit_pre_backward(u[i]));
                void *p = NULL;
                CHECK_OK(fsdp_unit_param(u[i], 0, &p));
                k.p = p, k.n = NEL[i], k.unit = i;
                for (int t = 0; t < (i == 2 ? 2 : 1); t++) { /* b0 never: zero-filled */
                    CHECK_OK(fsdp_unit_main_grad(u[i], t, &k.g, &k.acc));
                    d->host_fn(d, cs, k_backward, &k, sizeof k);
                }
                CHECK_OK(fsdp_unit_post_backward(u[i]));
            }
        }
        CHECK_OK(fsdp_engine_clip_grad_norm(e, 0.5f, &r->norm[s]));
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    }
    for (int i = 0; i < NU && u[i]; i++)
        CHECK_OK(fsdp_unit_gather_tensor(u[i], 0, r->master[i], -1));
    d->free(d, y, cs);
    CHECK_OK(d->sync(d));
    d->event_destroy(d, ev);
    fsdp_engine_free(e);
    /* every block of the device came back to the accounting (the side table on the simulated device) */
    CHECKF(fsdp_mem_total_current() == mem_before, "%s on %s: %zu bytes still counted after the engine went",
           c->name, d->name, fsdp_mem_total_current() - mem_before);
}

static int same(const result_t *a, const result_t *b) { return memcmp(a, b, sizeof *a) == 0; }

/* Whether any rank saw r differ from the reference (every rank takes the same branch). */
static int any_rank(fsdp_comm_t *comm, int v) {
    float f = (float)v;
    CHECK_OK(fsdp_comm_all_reduce(comm, &f, &f, 1, FSDP_F32, FSDP_SUM));
    return f > 0.0f;
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);

    const cfg_t cfgs[] = {
        {FSDP_FULL_SHARD, FSDP_F32, FSDP_F32, 2, 1, FSDP_ACCUM_SHARDED, "full-shard f32, overlap"},
        {FSDP_FULL_SHARD, FSDP_BF16, FSDP_BF16, 0, 1, FSDP_ACCUM_SHARDED, "full-shard bf16/bf16, sync"},
        {FSDP_SHARD_GRAD_OP, FSDP_BF16, FSDP_F32, 1, 2, FSDP_ACCUM_NO_SYNC, "grad-op bf16, no-sync x2"},
        {FSDP_NO_SHARD, FSDP_F32, FSDP_BF16, 2, 2, FSDP_ACCUM_SHARDED, "no-shard f32/bf16, micro x2"},
        {FSDP_HYBRID_SHARD, FSDP_BF16, FSDP_F32, 2, 1, FSDP_ACCUM_SHARDED, "hybrid bf16"},
    };
    long ran_total = 0, reordered_total = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const cfg_t *c = &cfgs[ci];
        if (c->strategy == FSDP_HYBRID_SHARD && g_world % 2 != 0) continue; /* groups of 2 */
        result_t ref, got;
        run(comm, c, NULL, SHARD_FAULT_NONE, 0, &ref);
        CHECKF(isfinite(ref.loss[0]) && isfinite(ref.norm[STEPS - 1]) && ref.norm[0] > 0.0f,
               "%s: reference loss %g norm %g", c->name, (double)ref.loss[0], (double)ref.norm[0]);
        int differ = 0;
        for (int seed = 1; seed <= SEEDS; seed++) {
            fsdp_device_t *dev = NULL;
            CHECK_OK(fsdp_device_sim_create((uint64_t)seed * 977 + (uint64_t)g_rank,
                                            seed % 2 ? FSDP_SIM_NO_HOST_ACCESS : 0, &dev));
            if (dev == NULL) continue;
            run(comm, c, dev, SHARD_FAULT_NONE, 0, &got);
            long ran, reord;
            fsdp_device_sim_counts(dev, &ran, &reord);
            ran_total += ran, reordered_total += reord;
            fsdp_device_sim_destroy(dev);
            if (!same(&got, &ref)) {
                differ++;
                fprintf(stderr, "[rank %d] %s seed %d: loss %.9g norm %.9g, reference %.9g %.9g\n", g_rank,
                        c->name, seed, (double)got.loss[0], (double)got.norm[0], (double)ref.loss[0],
                        (double)ref.norm[0]);
            }
        }
        CHECKF(differ == 0, "%s: %d of %d seeds differ from the CPU device", c->name, differ, SEEDS);
    }
    CHECKF(reordered_total > 0, "the simulated device ran %ld items, none out of queue order", ran_total);
    if (g_rank == 0)
        printf("simulated device: %ld items, %ld out of queue order\n", ran_total, reordered_total);

    /* 2. planted faults: each must be caught by some seed, the same way for the same seed */
    const cfg_t *fc = &cfgs[0];
    result_t ref;
    run(comm, fc, NULL, SHARD_FAULT_NONE, 0, &ref);
    const struct {
        int fault, early_loss;
        const char *name;
    } faults[] = {
        {SHARD_FAULT_REDUCE_EARLY, 0, "reduce-scatter before the last weight-gradient kernel"},
        {SHARD_FAULT_FREE_EARLY, 0, "gathered buffer freed before backward's kernels"},
        {SHARD_FAULT_NONE, 1, "loss read before its kernel ran"},
    };
    for (size_t fi = 0; fi < sizeof faults / sizeof faults[0]; fi++) {
        /* A seed's schedule is the same twice (the items run, and which ran early). So are the wrong
         * values, except where the fault is a race with another process: a reduction posted too
         * early reads a peer's main_grad whenever that peer's transport gets to it. */
        int caught = 0, repeat_ok = 1, sched_ok = 1;
        const int peer_race = faults[fi].fault == SHARD_FAULT_REDUCE_EARLY && g_world > 1;
        for (int seed = 1; seed <= SEEDS; seed++) {
            result_t got, again;
            long counts[2][2] = {{0}};
            for (int rep = 0; rep < 2; rep++) {
                fsdp_device_t *dev = NULL;
                CHECK_OK(fsdp_device_sim_create((uint64_t)seed * 7919 + (uint64_t)g_rank, 0, &dev));
                if (dev == NULL) continue;
                run(comm, fc, dev, faults[fi].fault, faults[fi].early_loss, rep ? &again : &got);
                fsdp_device_sim_counts(dev, &counts[rep][0], &counts[rep][1]);
                fsdp_device_sim_destroy(dev);
            }
            caught += any_rank(comm, !same(&got, &ref));
            if (!peer_race) repeat_ok &= same(&got, &again);
            sched_ok &= counts[0][0] == counts[1][0] && counts[0][1] == counts[1][1];
        }
        CHECKF(sched_ok, "%s: a seed run twice ran a different schedule", faults[fi].name);
        if (g_rank == 0)
            printf("planted fault '%s': caught by %d of %d seeds\n", faults[fi].name, caught, SEEDS);
        /* Alone, whether a rank's reduction reads main_grad at all is the transport's business (MPI's
         * in-place reduce-scatter of one rank does): counted, not required. */
        if (faults[fi].fault != SHARD_FAULT_REDUCE_EARLY || g_world > 1)
            CHECKF(caught > 0, "%s: no seed of %d caught it", faults[fi].name, SEEDS);
        CHECKF(repeat_ok, "%s: a seed run twice gave two different results", faults[fi].name);
    }
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
