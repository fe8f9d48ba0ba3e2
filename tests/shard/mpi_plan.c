/* mpi_plan.c — the memory plan against the real engine under mpirun 1..4: for every strategy, compute
 * dtype, reduce dtype, main_grad policy, accumulation mode and both hook schedules, a two-micro-batch
 * step (with a recompute forward and AdamW) must peak at exactly the predicted bytes in every category
 * and in total; the plan's layout must be the engine's; the NO_SHARD column must be what a NO_SHARD
 * engine measures; plus the exact max over ranks, the printer, the JSON report and bad input. */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

static int g_rank, g_world;

/* A root with a tied weight and three blocks of unequal, unaligned sizes (so alignment gaps, padding
 * to the world size and the largest unit all matter). */
static const fsdp_tensor_spec ROOT[] = {
    {.name = "wte", .ndim = 2, .shape = {13, 5}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "wpe", .ndim = 2, .shape = {7, 5}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "lnf_w", .ndim = 1, .shape = {5}, .init = FSDP_INIT_ONES, .no_decay = 1},
    {.name = "lnf_b", .ndim = 1, .shape = {5}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    {.name = "lm_head", .ndim = 2, .shape = {13, 5}, .alias_of = "wte"},
};
static const fsdp_tensor_spec BLK_A[] = {
    {.name = "w", .ndim = 2, .shape = {9, 11}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "b", .ndim = 1, .shape = {9}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    {.name = "w2", .ndim = 3, .shape = {2, 3, 7}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
};
static const fsdp_tensor_spec BLK_B[] = {
    {.name = "w", .ndim = 2, .shape = {31, 17}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "b", .ndim = 1, .shape = {3}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
};
static const fsdp_tensor_spec BLK_C[] = {
    {.name = "w", .ndim = 1, .shape = {1}, .init = FSDP_INIT_ONES},
};

#define NU 4
static fsdp_unit_config g_ucfg[NU];
static fsdp_plan_unit g_units[NU];

static void setup_units(void) {
    for (int i = 0; i < NU; i++)
        g_ucfg[i] = fsdp_unit_config_default();
    g_ucfg[0].reshard_after_forward = 0; /* the root keeps its parameters, as gpt does */
    g_ucfg[2].reshard_after_forward = 1; /* explicit: reshards even under SHARD_GRAD_OP / NO_SHARD */
    g_units[0] = (fsdp_plan_unit){.name = "root", .specs = ROOT, .n_specs = 5, .cfg = &g_ucfg[0]};
    g_units[1] = (fsdp_plan_unit){.name = "h0", .specs = BLK_A, .n_specs = 3, .cfg = NULL};
    g_units[2] = (fsdp_plan_unit){.name = "h1", .specs = BLK_B, .n_specs = 2, .cfg = &g_ucfg[2]};
    g_units[3] = (fsdp_plan_unit){.name = "h2", .specs = BLK_C, .n_specs = 1, .cfg = &g_ucfg[3]};
}

/* Independent of plan.c: parameter count from the shapes, aliases skipped. */
static size_t count_params(void) {
    size_t psi = 0;
    for (int i = 0; i < NU; i++)
        for (int t = 0; t < g_units[i].n_specs; t++) {
            const fsdp_tensor_spec *s = &g_units[i].specs[t];
            if (s->alias_of) continue;
            size_t n = 1;
            for (int d = 0; d < s->ndim; d++)
                n *= (size_t)s->shape[d];
            psi += n;
        }
    return psi;
}

/* Writes every tensor's main_grad (first touch overwrites, then accumulates): what a backward does. */
static void touch_all(fsdp_unit_t *u) {
    for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
        fsdp_tensor_info ti;
        float *g = NULL;
        int acc = -1;
        CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
        CHECK_OK(fsdp_unit_main_grad(u, t, &g, &acc));
        if (g == NULL) continue;
        for (size_t k = 0; k < ti.numel; k++)
            g[k] = (acc ? g[k] : 0.0f) + 0.001f * (float)(k % 7) - 0.002f * (float)t;
    }
}

/* One step with n_micro micro-batches in the plan's hook order; block 1 recomputes its forward. */
static void run_step(fsdp_engine_t *e, fsdp_unit_t **u, fsdp_plan_schedule sched, int n_micro) {
    int wrap = sched == FSDP_PLAN_ROOT_WRAPS;
    CHECK_OK(fsdp_engine_begin_step(e, n_micro));
    for (int m = 0; m < n_micro; m++) {
        CHECK_OK(fsdp_engine_begin_micro(e, m));
        if (wrap) CHECK_OK(fsdp_unit_pre_forward(u[0]));
        for (int i = wrap; i < NU; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        if (wrap) {
            CHECK_OK(fsdp_unit_post_forward(u[0]));
            CHECK_OK(fsdp_unit_pre_backward(u[0]));
        }
        for (int i = NU - 1; i >= wrap; i--) {
            CHECK_OK(fsdp_unit_pre_backward(u[i]));
            if (i == 1) { /* activation recompute: a forward inside the backward */
                CHECK_OK(fsdp_unit_pre_forward(u[i]));
                CHECK_OK(fsdp_unit_post_forward(u[i]));
            }
            touch_all(u[i]);
            CHECK_OK(fsdp_unit_post_backward(u[i]));
        }
        if (wrap) {
            touch_all(u[0]);
            CHECK_OK(fsdp_unit_post_backward(u[0]));
        }
    }
    float norm = 0;
    CHECK_OK(fsdp_engine_clip_grad_norm(e, 1.0f, &norm));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    CHECK_OK(fsdp_engine_adamw_step(e, &oc));
}

static const char *cfg_str(const fsdp_engine_config *ec, fsdp_plan_schedule sched, int n_micro) {
    static char buf[200];
    snprintf(buf, sizeof buf, "np%d strategy %d compute %s reduce %s %s %s %s micro %d max_inflight %d",
             g_world, (int)ec->strategy, fsdp_dtype_name(ec->compute_dtype),
             fsdp_dtype_name(ec->reduce_dtype), ec->main_grad ? "EAGER" : "LAZY",
             ec->accum ? "NO_SYNC" : "SHARDED", sched == FSDP_PLAN_ROOT_WRAPS ? "root-wraps" : "sequential",
             n_micro, ec->max_inflight);
    return buf;
}

/* Builds the real engine, runs `steps` steps (the first records the hook order, prefetch starts in the
 * second) and compares every peak with the plan. Returns the measured max-over-ranks peaks. */
static void check_config(fsdp_comm_t *comm, const fsdp_engine_config *ec, fsdp_plan_schedule sched,
                         int n_micro, int steps, fsdp_plan *plan_out, fsdp_mem_peaks *measured) {
    const char *what = cfg_str(ec, sched, n_micro);
    const size_t act_bytes = 4096 + 64 * (size_t)n_micro; /* the "model's" activations */
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.engine = *ec;
    pc.backend = strcmp(fsdp_comm_backend_name(comm), "mpi") == 0 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    pc.shm = fsdp_comm_shm_active(comm);
    pc.n_micro = n_micro;
    pc.steps = steps;
    pc.shard_group = ec->shard_group; /* HYBRID; the groups and replicas all share this host */
    pc.schedule = sched;
    pc.activation_bytes = act_bytes;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, plan_out));

    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        CHECKF(fsdp_mem_current((fsdp_mem_cat)c) == 0, "%s: category %s holds %zu bytes before the engine",
               what, fsdp_mem_cat_name((fsdp_mem_cat)c), fsdp_mem_current((fsdp_mem_cat)c));
    fsdp_mem_reset_peaks();

    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u[NU] = {0};
    CHECK_OK(fsdp_engine_init(&e, comm, ec));
    for (int i = 0; i < NU && e; i++)
        CHECK_OK(fsdp_engine_add_unit(e, g_units[i].name, g_units[i].specs, g_units[i].n_specs,
                                      g_units[i].cfg, &u[i]));
    void *act = NULL;
    CHECK_OK(fsdp_mem_alloc(&act, act_bytes, FSDP_MEM_ACTIVATION));
    if (e && u[NU - 1]) {
        CHECK_OK(fsdp_engine_init_params(e));
        /* The layout the plan computed is the engine's. */
        for (int i = 0; i < NU; i++) {
            size_t numel = 0, padded = 0;
            CHECK_OK(fsdp_plan_unit_layout(&g_units[i], ec->align, g_world, &numel, &padded));
            CHECKF(numel == fsdp_unit_numel(u[i]) && padded == fsdp_unit_padded_numel(u[i]),
                   "%s unit %d: plan numel %zu padded %zu, engine %zu %zu", what, i, numel, padded,
                   fsdp_unit_numel(u[i]), fsdp_unit_padded_numel(u[i]));
        }
        for (int k = 0; k < steps; k++)
            run_step(e, u, sched, n_micro);
    }
    fsdp_mem_peaks local;
    fsdp_mem_peaks_local(&local);
    *measured = local;
    CHECK_OK(fsdp_mem_peaks_max(comm, measured));
    for (int c = 0; c < FSDP_MEM_NCAT; c++) {
        CHECKF(local.peak[c] == plan_out->predicted.peak[c], "%s: %s measured %zu predicted %zu", what,
               fsdp_mem_cat_name((fsdp_mem_cat)c), local.peak[c], plan_out->predicted.peak[c]);
        CHECKF(measured->peak[c] == plan_out->predicted.peak[c], "%s: %s max over ranks %zu predicted %zu",
               what, fsdp_mem_cat_name((fsdp_mem_cat)c), measured->peak[c], plan_out->predicted.peak[c]);
    }
    CHECKF(local.total == plan_out->predicted.total, "%s: total measured %zu predicted %zu", what,
           local.total, plan_out->predicted.total);
    fsdp_mem_free(act);
    fsdp_engine_free(e);
}

static void test_against_engine(fsdp_comm_t *comm) {
    size_t psi = count_params();
    for (int sched = 0; sched < 2; sched++)
        for (int compute = 0; compute < 2; compute++)
            for (int reduce = 0; reduce < 2; reduce++)
                for (int mg = 0; mg < 2; mg++)
                    for (int accum = 0; accum < 2; accum++) {
                        fsdp_mem_peaks ns_predicted = {{0}, 0};
                        for (int strat = 0; strat < 4; strat++) {
                            fsdp_engine_config ec = fsdp_engine_config_default();
                            ec.strategy = (fsdp_strategy)strat;
                            /* HYBRID: groups of 2 at 4 ranks, of 1 (every rank a group) elsewhere */
                            ec.shard_group =
                                strat == FSDP_HYBRID_SHARD ? (g_world % 2 == 0 && g_world > 2 ? 2 : 1) : 0;
                            ec.compute_dtype = compute ? FSDP_BF16 : FSDP_F32;
                            ec.reduce_dtype = reduce ? FSDP_BF16 : FSDP_F32;
                            ec.main_grad = (fsdp_main_grad_policy)mg;
                            ec.accum = (fsdp_accum_mode)accum;
                            ec.align = sched ? 8 : 16;
                            fsdp_plan plan;
                            fsdp_mem_peaks meas;
                            check_config(comm, &ec, (fsdp_plan_schedule)sched, 2, 2, &plan, &meas);
                            CHECK(plan.n_params == psi);
                            CHECK(plan.zero_ref_bytes == (16 * psi + (size_t)g_world - 1) / (size_t)g_world);
                            if (strat == FSDP_FULL_SHARD) ns_predicted = plan.no_shard;
                            if (strat == FSDP_NO_SHARD) /* the plain-DP column is what NO_SHARD measures */
                                for (int c = 0; c < FSDP_MEM_NCAT; c++)
                                    CHECKF(meas.peak[c] == ns_predicted.peak[c], "%s: NO_SHARD %s %zu vs %zu",
                                           cfg_str(&ec, (fsdp_plan_schedule)sched, 2),
                                           fsdp_mem_cat_name((fsdp_mem_cat)c), meas.peak[c],
                                           ns_predicted.peak[c]);
                        }
                    }
}

/* Every overlap depth (0: synchronous, 1, 3) after one step (no prefetch yet) and after two. */
static void test_inflight(fsdp_comm_t *comm) {
    int depths[] = {0, 1, 3};
    for (int d = 0; d < 3; d++)
        for (int steps = 1; steps <= 2; steps++)
            for (int sched = 0; sched < 2; sched++)
                for (int reduce = 0; reduce < 2; reduce++)
                    for (int strat = 0; strat < 4; strat++) {
                        fsdp_engine_config ec = fsdp_engine_config_default();
                        ec.strategy = (fsdp_strategy)strat;
                        ec.shard_group =
                            strat == FSDP_HYBRID_SHARD ? (g_world % 2 == 0 && g_world > 2 ? 2 : 1) : 0;
                        ec.reduce_dtype = reduce ? FSDP_BF16 : FSDP_F32;
                        ec.accum = (fsdp_accum_mode)(sched ^ reduce);
                        ec.max_inflight = depths[d];
                        fsdp_plan plan;
                        fsdp_mem_peaks meas;
                        check_config(comm, &ec, (fsdp_plan_schedule)sched, 1 + reduce, steps, &plan, &meas);
                    }
}

/* Known-by-construction shape of the policies at this world size, on one config, without overlap:
 * LAZY FULL_SHARD holds at most root + the largest block of main_grad; EAGER and NO_SYNC (2
 * micro-batches) hold all units. With overlap depth 1 (from the second step): a block's reduction runs
 * during the next block's backward, and one block's gather runs ahead, so main_grad and param_full
 * both peak at root + the largest pair of neighbouring blocks. */
static void test_policy_shapes(void) {
    size_t pad[NU], sum = 0, maxblk = 0;
    for (int i = 0; i < NU; i++) {
        CHECK_OK(fsdp_plan_unit_layout(&g_units[i], 16, g_world, NULL, &pad[i]));
        sum += pad[i];
        if (i > 0 && pad[i] > maxblk) maxblk = pad[i];
    }
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.backend = FSDP_COMM_MPI;
    pc.engine.compute_dtype = FSDP_BF16;
    pc.n_micro = 2;
    fsdp_plan p;
    pc.engine.max_inflight = 1;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    size_t pair = 0;
    for (int i = 2; i < NU; i++)
        if (pad[i] + pad[i - 1] > pair) pair = pad[i] + pad[i - 1];
    CHECKF(p.predicted.peak[FSDP_MEM_MAIN_GRAD] == 4 * (pad[0] + pair), "overlap main_grad %zu want %zu",
           p.predicted.peak[FSDP_MEM_MAIN_GRAD], 4 * (pad[0] + pair));
    CHECKF(p.predicted.peak[FSDP_MEM_PARAM_FULL] == 2 * (pad[0] + pair), "overlap param_full %zu want %zu",
           p.predicted.peak[FSDP_MEM_PARAM_FULL], 2 * (pad[0] + pair));
    pc.steps = 1; /* a one-step run records the order and prefetches nothing */
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_PARAM_FULL] == 2 * (pad[0] + maxblk));
    pc.steps = 2;
    pc.engine.max_inflight = 0;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_MAIN_GRAD] == 4 * (pad[0] + maxblk));
    CHECK(p.predicted.peak[FSDP_MEM_PARAM_FULL] == 2 * (pad[0] + maxblk));
    CHECK(p.predicted.peak[FSDP_MEM_MASTER] == 4 * sum / (size_t)g_world);
    CHECK(p.predicted.peak[FSDP_MEM_OPTIM] == 8 * sum / (size_t)g_world);
    /* f32 on the wire: nothing staged on shared memory; one rank under MPI stages its all-to-all */
    CHECK(p.predicted.peak[FSDP_MEM_COMM] == (g_world > 1 ? 0 : 4 * (pad[0] > maxblk ? pad[0] : maxblk)));
    /* NO_SHARD keeps every unit but h1 (reshard_after_forward 1) from forward to backward; the peak is
     * during h1's forward (all but h2) or after it (all but h1), whichever drops the smaller unit. */
    size_t dropped = pad[2] < pad[3] ? pad[2] : pad[3];
    CHECK(p.no_shard.peak[FSDP_MEM_MASTER] == 4 * sum);
    CHECK(p.no_shard.peak[FSDP_MEM_PARAM_FULL] == 2 * (sum - dropped));
    pc.engine.main_grad = FSDP_MAIN_GRAD_EAGER;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_MAIN_GRAD] == 4 * sum);
    pc.engine.main_grad = FSDP_MAIN_GRAD_LAZY;
    pc.engine.accum = FSDP_ACCUM_NO_SYNC;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_MAIN_GRAD] == 4 * sum);
    pc.engine.reduce_dtype = FSDP_BF16; /* shared memory: the bf16 wire (2 B) alone */
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    size_t maxpad = pad[0] > maxblk ? pad[0] : maxblk;
    CHECK(p.predicted.peak[FSDP_MEM_COMM] == (g_world > 1 ? 2 : 4) * maxpad); /* world 1: MPI's staging */
    pc.shm = 0; /* Open MPI's all-to-all: the wire plus its staging (2 B) */
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_COMM] == 4 * maxpad);
    /* A unit whose full parameters the caller sizes itself. */
    fsdp_plan_unit own[NU];
    memcpy(own, g_units, sizeof own);
    own[3].param_full_bytes = 1000000;
    pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.engine.max_inflight = 0;
    CHECK_OK(fsdp_plan_compute(own, NU, &pc, &p));
    CHECK(p.predicted.peak[FSDP_MEM_PARAM_FULL] == 2 * pad[0] + 1000000);
}

static void test_peaks_max(fsdp_comm_t *comm) {
    /* Values far beyond float precision, different per rank and category: the max must be exact. */
    fsdp_mem_peaks p;
    const uint64_t big = (uint64_t)1 << 40;
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        p.peak[c] =
            (size_t)(big * (uint64_t)((g_rank + c) % g_world + 1) + (uint64_t)c * 3 + (uint64_t)g_rank);
    p.total = (size_t)(big * 7 + (uint64_t)g_rank);
    CHECK_OK(fsdp_mem_peaks_max(comm, &p));
    for (int c = 0; c < FSDP_MEM_NCAT; c++) { /* the rank r with (r + c) % world == world - 1 wins */
        uint64_t r = (uint64_t)((2 * g_world - 1 - c % g_world) % g_world);
        CHECKF(p.peak[c] == (size_t)(big * (uint64_t)g_world + (uint64_t)c * 3 + r), "peak[%d] = %zu", c,
               p.peak[c]);
    }
    CHECK(p.total == (size_t)(big * 7 + (uint64_t)(g_world - 1)));
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = calloc(1, 1 << 16);
    if (s) fread(s, 1, (1 << 16) - 1, f);
    fclose(f);
    return s;
}

static void test_print_and_json(void) {
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.activation_bytes = 12345;
    fsdp_plan p;
    CHECK_OK(fsdp_plan_compute(g_units, NU, &pc, &p));
    fsdp_mem_peaks m = p.predicted;
    m.peak[FSDP_MEM_ACTIVATION] = 12345 + 1234; /* 10% over */
    char path[256];
    snprintf(path, sizeof path, "%s/tests/plan_print_np%d_%d.txt", FSDP_BINARY_DIR, g_world, g_rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        CHECK_OK(fsdp_plan_print(f, &p, &m));
        fclose(f);
        char *s = slurp(path);
        CHECK(s && strstr(s, "master") && strstr(s, "exact") && strstr(s, "+10.0%") && strstr(s, "ZeRO"));
        char want[64];
        snprintf(want, sizeof want, "%zu", p.predicted.peak[FSDP_MEM_OPTIM]);
        CHECK(s && strstr(s, want));
        free(s);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/tests/plan_report_np%d_%d.json", FSDP_BINARY_DIR, g_world, g_rank);
    CHECK_OK(fsdp_plan_write_json(path, &p, &m));
    char *s = slurp(path);
    CHECK(s != NULL);
    if (s) {
        char want[128];
        snprintf(want, sizeof want, "\"predicted\": {\"master\": %zu, ", p.predicted.peak[FSDP_MEM_MASTER]);
        CHECKF(strstr(s, want) != NULL, "missing %s in %s", want, s);
        snprintf(want, sizeof want, "\"activation\": %d,", 12345 + 1234);
        CHECK(strstr(s, "\"measured\": {") && strstr(s, want));
        snprintf(want, sizeof want, "\"total\": %zu}", p.predicted.total);
        CHECK(strstr(s, want) != NULL);
        free(s);
    }
    CHECK_OK(fsdp_plan_write_json(path, &p, NULL)); /* --plan --report: prediction only */
    s = slurp(path);
    CHECK(s && strstr(s, "\"predicted\"") && !strstr(s, "\"measured\""));
    free(s);
    remove(path);
    CHECK_ERR(fsdp_plan_write_json("/nonexistent-dir/x.json", &p, NULL), FSDP_EIO, "/nonexistent-dir/x.json");
}

static void test_bad_input(void) {
    fsdp_plan p;
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = 0;
    CHECK_ERR(fsdp_plan_compute(g_units, NU, &pc, &p), FSDP_EINVAL, "world");
    pc = fsdp_plan_config_default();
    pc.world = 2;
    pc.backend = FSDP_COMM_SELF;
    CHECK_ERR(fsdp_plan_compute(g_units, NU, &pc, &p), FSDP_EINVAL, "self");
    pc = fsdp_plan_config_default();
    pc.n_micro = 0;
    CHECK_ERR(fsdp_plan_compute(g_units, NU, &pc, &p), FSDP_EINVAL, "n_micro");
    pc = fsdp_plan_config_default();
    fsdp_tensor_spec bad[] = {{.name = "x", .ndim = 2, .shape = {3, 0}}};
    fsdp_plan_unit bu = {.name = "u", .specs = bad, .n_specs = 1};
    CHECK_ERR(fsdp_plan_compute(&bu, 1, &pc, &p), FSDP_EINVAL, "'x'");
    fsdp_tensor_spec tie[] = {{.name = "x", .ndim = 1, .shape = {3}},
                              {.name = "y", .ndim = 1, .shape = {3}, .alias_of = "h0.w"}};
    fsdp_plan_unit tu = {.name = "u", .specs = tie, .n_specs = 2};
    /* the engine's own validation and message (layout.c): a tie into another unit */
    CHECK_ERR(fsdp_plan_compute(&tu, 1, &pc, &p), FSDP_EINVAL, "tied across units 'u' and 'h0'");
    tie[1].alias_of = "u.x"; /* "<own unit>.tensor" is a tie inside the unit */
    CHECK_OK(fsdp_plan_compute(&tu, 1, &pc, &p));
    CHECK(p.n_params == 3);
    /* a bare name that lives in an earlier planned unit: refused as fsdp_engine_add_unit refuses it */
    fsdp_tensor_spec first[] = {{.name = "w", .ndim = 1, .shape = {3}}};
    fsdp_tensor_spec second[] = {{.name = "v", .ndim = 1, .shape = {3}, .alias_of = "w"}};
    fsdp_plan_unit two[2] = {{.name = "a", .specs = first, .n_specs = 1},
                             {.name = "b", .specs = second, .n_specs = 1}};
    CHECK_ERR(fsdp_plan_compute(two, 2, &pc, &p), FSDP_EINVAL, "tied across units 'b' and 'a'");
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);
    setup_units();
    test_against_engine(comm);
    test_inflight(comm);
    test_policy_shapes();
    test_peaks_max(comm);
    test_print_and_json();
    test_bad_input();
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
