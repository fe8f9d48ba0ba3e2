/* mpi_frozen.c — frozen parameters (fsdp_tensor_spec.frozen) under mpirun 1..4: the two regions of a
 * unit's layout, initial values equal to an engine with nothing frozen (bf16 regions: their rounding),
 * frozen views in the gathered parameters, NULL main_grad views, frozen weights bit-identical after
 * AdamW steps while the trainable ones follow a float64 AdamW recomputed here from the gradients the
 * test wrote, the reduce-scatter moving only trainable elements (counted on the communicator), the
 * frozen shard's copies, and the memory plan equal to the measured peaks per category. */
#include "comm/comm_impl.h"
#include "fsdp.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>

static int g_rank, g_world;

/* A: mixed (an alias of a frozen tensor is frozen); F: nothing trainable; T: nothing frozen. */
static const fsdp_tensor_spec SPEC_A[] = {
    {.name = "w", .ndim = 2, .shape = {7, 13}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "f1", .ndim = 2, .shape = {5, 11}, .init = FSDP_INIT_NORMAL, .std = 1.0f, .frozen = 1},
    {.name = "b", .ndim = 1, .shape = {13}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    {.name = "f2", .ndim = 1, .shape = {3}, .init = FSDP_INIT_ONES, .frozen = 1},
    {.name = "tied", .ndim = 2, .shape = {11, 5}, .alias_of = "f1"},
};
static const fsdp_tensor_spec SPEC_F[] = {
    {.name = "e", .ndim = 2, .shape = {9, 4}, .init = FSDP_INIT_NORMAL, .std = 0.5f, .frozen = 1},
};
static const fsdp_tensor_spec SPEC_T[] = {
    {.name = "t", .ndim = 1, .shape = {17}, .init = FSDP_INIT_NORMAL, .std = 0.1f},
};
#define NU 3
static const fsdp_plan_unit UNITS[NU] = {
    {.name = "A", .specs = SPEC_A, .n_specs = 5},
    {.name = "F", .specs = SPEC_F, .n_specs = 1},
    {.name = "T", .specs = SPEC_T, .n_specs = 1},
};

static size_t numel_of(const fsdp_tensor_info *ti) {
    size_t n = 1;
    for (int d = 0; d < ti->ndim; d++)
        n *= (size_t)ti->shape[d];
    return n;
}

static int build(fsdp_comm_t *comm, const fsdp_engine_config *ec, int unfreeze, fsdp_engine_t **e,
                 fsdp_unit_t **u) {
    fsdp_tensor_spec copy[5];
    if (fsdp_engine_init(e, comm, ec) != FSDP_OK) return 0;
    for (int i = 0; i < NU; i++) {
        memcpy(copy, UNITS[i].specs, (size_t)UNITS[i].n_specs * sizeof *copy);
        for (int t = 0; t < UNITS[i].n_specs; t++)
            if (unfreeze) copy[t].frozen = 0;
        if (fsdp_engine_add_unit(*e, UNITS[i].name, copy, UNITS[i].n_specs, NULL, &u[i]) != FSDP_OK) return 0;
    }
    return fsdp_engine_init_params(*e) == FSDP_OK;
}

static float round_bf16(float x) { return fsdp_bf16_to_f32(fsdp_f32_to_bf16(x)); }

/* Layout, initial values against a 1-rank engine with nothing frozen, views, shard memory, copies. */
static void test_layout_init(fsdp_comm_t *comm, fsdp_comm_t *self, fsdp_strategy strat, fsdp_dtype cdt) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.strategy = strat;
    ec.compute_dtype = cdt;
    ec.max_inflight = 0;
    ec.seed = 777;
    fsdp_engine_t *e = NULL, *r = NULL;
    fsdp_unit_t *u[NU] = {0}, *ru[NU] = {0};
    size_t master0 = fsdp_mem_current(FSDP_MEM_MASTER), grad0 = fsdp_mem_current(FSDP_MEM_GRAD_SHARD);
    CHECK(build(comm, &ec, 0, &e, u));
    size_t master = fsdp_mem_current(FSDP_MEM_MASTER) - master0,
           grad = fsdp_mem_current(FSDP_MEM_GRAD_SHARD) - grad0;
    CHECK(build(self, &ec, 1, &r, ru));
    if (!u[NU - 1] || !ru[NU - 1]) goto done;
    const size_t esz = fsdp_dtype_size(cdt), W = (size_t)g_world;
    /* the documented layout: A's trainable w at 0, b at 96 (align 16); then the frozen region */
    size_t pa = (96 + 13 + W - 1) / W * W;
    CHECKF(fsdp_unit_numel(u[0]) == 109 && fsdp_unit_padded_numel(u[0]) == pa, "A numel %zu padded %zu",
           fsdp_unit_numel(u[0]), fsdp_unit_padded_numel(u[0]));
    size_t f1 = (pa + 15) / 16 * 16, f2 = (f1 + 55 + 15) / 16 * 16;
    size_t fa = (f2 + 3 - pa + W - 1) / W * W;
    CHECKF(fsdp_unit_frozen_padded_numel(u[0]) == fa, "A frozen padded %zu want %zu",
           fsdp_unit_frozen_padded_numel(u[0]), fa);
    CHECK(fsdp_unit_padded_numel(u[1]) == 0 && fsdp_unit_frozen_padded_numel(u[1]) == (36 + W - 1) / W * W);
    CHECK(fsdp_unit_frozen_padded_numel(u[2]) == 0);
    const size_t want_off[5] = {0, f1, 96, f2, f1};
    const int want_frozen[5] = {0, 1, 0, 1, 1};
    for (int t = 0; t < 5; t++) {
        fsdp_tensor_info ti;
        CHECK_OK(fsdp_unit_tensor_info(u[0], t, &ti));
        CHECKF(ti.offset == want_off[t] && ti.frozen == want_frozen[t], "A.%s offset %zu frozen %d", ti.name,
               ti.offset, ti.frozen);
    }
    size_t want_master = 0, want_grad = 0;
    for (int i = 0; i < NU; i++) {
        fsdp_shard_view sv;
        CHECK_OK(fsdp_unit_shard(u[i], &sv));
        CHECK(sv.frozen_offset >= fsdp_unit_padded_numel(u[i]));
        want_master += sv.numel * 4 + sv.frozen_numel * esz;
        want_grad += sv.numel * 4;
        CHECK((sv.frozen != NULL) == (sv.frozen_numel > 0));
    }
    CHECKF(master == want_master && grad == want_grad, "master %zu (want %zu) grad %zu (want %zu)", master,
           want_master, grad, want_grad);

    /* every tensor's values: the unfrozen 1-rank engine's (frozen ones in the compute dtype) */
    float a[128], b[128];
    for (int i = 0; i < NU; i++)
        for (int t = 0; t < fsdp_unit_num_tensors(u[i]); t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u[i], t, &ti));
            size_t n = numel_of(&ti);
            CHECK_OK(fsdp_unit_gather_tensor(u[i], t, a, -1));
            CHECK_OK(fsdp_unit_gather_tensor(ru[i], t, b, -1));
            int bad = 0;
            for (size_t k = 0; k < n; k++) {
                float want = ti.frozen && cdt == FSDP_BF16 ? round_bf16(b[k]) : b[k];
                bad += memcmp(&a[k], &want, 4) != 0;
            }
            CHECKF(bad == 0, "%s.%s: %d of %zu values differ from the unfrozen engine's", UNITS[i].name,
                   ti.name, bad, n);
        }

    /* the gathered parameters hold the frozen values */
    CHECK_OK(fsdp_unit_pre_forward(u[0]));
    void *v = NULL;
    CHECK_OK(fsdp_unit_param(u[0], 1, &v));
    CHECK_OK(fsdp_unit_gather_tensor(ru[0], 1, b, -1));
    int bad = 0;
    for (int k = 0; v && k < 55; k++) {
        float x = cdt == FSDP_BF16 ? fsdp_bf16_to_f32(((fsdp_bf16 *)v)[k]) : ((float *)v)[k];
        float want = cdt == FSDP_BF16 ? round_bf16(b[k]) : b[k];
        bad += memcmp(&x, &want, 4) != 0;
    }
    CHECKF(bad == 0, "f1's gathered view: %d of 55 differ", bad);
    void *vt = NULL;
    CHECK_OK(fsdp_unit_param(u[0], 4, &vt)); /* the alias shares its target's view */
    CHECK(vt == v);
    CHECK_OK(fsdp_unit_post_forward(u[0]));
    CHECK_OK(fsdp_engine_reshard_all(e));

    /* the frozen shard's copies: a write, a read back, a load and a gather of a frozen tensor */
    fsdp_shard_view sv;
    CHECK_OK(fsdp_unit_shard_info(u[1], &sv));
    for (size_t k = 0; k < sv.frozen_numel && k < 128; k++)
        a[k] = 1.0f + (float)(sv.frozen_offset + k) / 3.0f;
    size_t n = sv.frozen_numel < 128 ? sv.frozen_numel : 128;
    CHECK_OK(fsdp_unit_shard_write(u[1], FSDP_SHARD_FROZEN, sv.frozen_offset, n, a));
    CHECK_OK(fsdp_unit_shard_read(u[1], FSDP_SHARD_FROZEN, sv.frozen_offset, n, b));
    bad = 0;
    for (size_t k = 0; k < n; k++) {
        float want = cdt == FSDP_BF16 ? round_bf16(a[k]) : a[k];
        bad += memcmp(&b[k], &want, 4) != 0;
    }
    CHECKF(bad == 0, "frozen shard write/read: %d of %zu differ", bad, n);
    CHECK_ERR(fsdp_unit_shard_read(u[0], FSDP_SHARD_FROZEN, 0, 1, b), FSDP_EINVAL, "frozen shard");
    CHECK_ERR(fsdp_unit_shard_read(u[1], FSDP_SHARD_MASTER, sv.frozen_offset, 1, b), FSDP_EINVAL, "shard");
    for (int k = 0; k < 36; k++)
        a[k] = (float)k - 17.25f;
    CHECK_OK(fsdp_unit_load_tensor(u[1], 0, a, 0));
    CHECK_OK(fsdp_unit_gather_tensor(u[1], 0, b, -1));
    CHECK(memcmp(a, b, 36 * sizeof(float)) == 0); /* exact in bf16 too */
done:
    fsdp_engine_free(r);
    fsdp_engine_free(e);
}

/* The gradient the test writes for flat element gi of a unit on rank r in step s. */
static float grad_at(int r, int s, size_t gi) {
    return (float)(((int)(gi * 7 + 3 * (size_t)r + 5 * (size_t)s) % 23) - 11) / 16.0f;
}

/* Three AdamW steps; every trainable tensor against float64 AdamW on the rank-averaged gradients, every
 * frozen one unchanged; reduce-scatters counted; the plan against the measured peaks. */
static void test_steps(fsdp_comm_t *comm, fsdp_strategy strat, fsdp_dtype cdt, int inflight) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.strategy = strat;
    ec.compute_dtype = cdt;
    ec.max_inflight = inflight;
    ec.seed = 99;
    char what[96];
    snprintf(what, sizeof what, "strategy %d %s inflight %d", (int)strat, fsdp_dtype_name(cdt), inflight);
    const int steps = 3;
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.engine = ec;
    pc.backend = strcmp(fsdp_comm_backend_name(comm), "mpi") == 0 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    pc.shm = fsdp_comm_shm_active(comm);
    pc.schedule = FSDP_PLAN_SEQUENTIAL;
    fsdp_plan plan;
    CHECK_OK(fsdp_plan_compute(UNITS, NU, &pc, &plan));
    CHECKF(plan.n_params == 91 + 13 + 17 + 55 + 3 + 36 && plan.n_frozen == 55 + 3 + 36,
           "%s: plan psi %zu frozen %zu", what, plan.n_params, plan.n_frozen);
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        CHECKF(fsdp_mem_current((fsdp_mem_cat)c) == 0, "%s: %s holds %zu bytes before the engine", what,
               fsdp_mem_cat_name((fsdp_mem_cat)c), fsdp_mem_current((fsdp_mem_cat)c));
    fsdp_mem_reset_peaks();

    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u[NU] = {0};
    CHECK(build(comm, &ec, 0, &e, u));
    if (!u[NU - 1]) {
        fsdp_engine_free(e);
        return;
    }
    /* initial values of every tensor (a: A's w, f1, b, f2; F's e; T's t), flat by (unit, tensor) */
    float init[NU][5][128], got[128];
    double m[NU][5][128] = {{{0}}}, vv[NU][5][128] = {{{0}}}, p[NU][5][128];
    for (int i = 0; i < NU; i++)
        for (int t = 0; t < UNITS[i].n_specs; t++) {
            CHECK_OK(fsdp_unit_gather_tensor(u[i], t, init[i][t], -1));
            for (int k = 0; k < 128; k++)
                p[i][t][k] = init[i][t][k];
        }
    fsdp_comm_t *sc = fsdp_engine_shard_comm(e);
    uint64_t rs0 = sc->coll_elems[COLL_REDUCE_SCATTER], ar0 = sc->coll_elems[COLL_ALL_REDUCE];
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 0.01f;
    for (int s = 0; s < steps; s++) {
        CHECK_OK(fsdp_engine_begin_step(e, 1));
        CHECK_OK(fsdp_engine_begin_micro(e, 0));
        for (int i = 0; i < NU; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        for (int i = NU - 1; i >= 0; i--) {
            CHECK_OK(fsdp_unit_pre_backward(u[i]));
            for (int t = 0; t < UNITS[i].n_specs; t++) {
                fsdp_tensor_info ti;
                CHECK_OK(fsdp_unit_tensor_info(u[i], t, &ti));
                float *g = (float *)1;
                int acc = -1;
                CHECK_OK(fsdp_unit_main_grad(u[i], t, &g, &acc));
                if (ti.frozen) {
                    CHECKF(g == NULL && acc == 0, "%s: %s.%s main_grad %p acc %d", what, UNITS[i].name,
                           ti.name, (void *)g, acc);
                    CHECK_OK(fsdp_unit_grad_from_f32(u[i], t, got)); /* does nothing */
                    continue;
                }
                for (size_t k = 0; g && k < numel_of(&ti); k++)
                    g[k] = (acc ? g[k] : 0.0f) + grad_at(g_rank, s, ti.offset + k);
            }
            CHECK_OK(fsdp_unit_post_backward(u[i]));
        }
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
        /* the reference: torch.optim.AdamW's formula in float64 on the mean over ranks */
        double b1 = oc.beta1, b2 = oc.beta2, bc1 = 1.0 - pow(b1, s + 1), bc2 = 1.0 - pow(b2, s + 1);
        for (int i = 0; i < NU; i++)
            for (int t = 0; t < UNITS[i].n_specs; t++) {
                fsdp_tensor_info ti;
                CHECK_OK(fsdp_unit_tensor_info(u[i], t, &ti));
                if (ti.frozen) continue;
                double wd = ti.no_decay ? 0.0 : oc.weight_decay;
                for (size_t k = 0; k < numel_of(&ti); k++) {
                    double gm = 0.0;
                    for (int r = 0; r < g_world; r++)
                        gm += grad_at(r, s, ti.offset + k);
                    gm /= g_world;
                    p[i][t][k] *= 1.0 - oc.lr * wd;
                    m[i][t][k] = b1 * m[i][t][k] + (1.0 - b1) * gm;
                    vv[i][t][k] = b2 * vv[i][t][k] + (1.0 - b2) * gm * gm;
                    p[i][t][k] -= oc.lr * (m[i][t][k] / bc1) / (sqrt(vv[i][t][k] / bc2) + oc.eps);
                }
            }
    }
    uint64_t moved = sc->coll_elems[COLL_REDUCE_SCATTER] - rs0 + sc->coll_elems[COLL_ALL_REDUCE] - ar0;
    uint64_t want = 0;
    for (int i = 0; i < NU; i++)
        want += (uint64_t)steps * fsdp_unit_padded_numel(u[i]);
    CHECKF(moved == want, "%s: the gradient reductions moved %llu elements, want %llu (trainable only)", what,
           (unsigned long long)moved, (unsigned long long)want);
    fsdp_mem_peaks local;
    fsdp_mem_peaks_local(&local);
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        if (c != FSDP_MEM_OTHER) /* the gathers of the initial values above use category other */
            CHECKF(local.peak[c] == plan.predicted.peak[c], "%s: %s measured %zu predicted %zu", what,
                   fsdp_mem_cat_name((fsdp_mem_cat)c), local.peak[c], plan.predicted.peak[c]);
    for (int i = 0; i < NU; i++)
        for (int t = 0; t < UNITS[i].n_specs; t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u[i], t, &ti));
            CHECK_OK(fsdp_unit_gather_tensor(u[i], t, got, -1));
            size_t n = numel_of(&ti);
            int bad = 0;
            for (size_t k = 0; k < n; k++)
                bad += ti.frozen ? memcmp(&got[k], &init[i][t][k], 4) != 0
                                 : !test_close(got[k], p[i][t][k], 1e-5, 1e-6);
            CHECKF(bad == 0, "%s: %s.%s (%s): %d of %zu elements wrong", what, UNITS[i].name, ti.name,
                   ti.frozen ? "frozen, must be unchanged" : "trainable, float64 AdamW", bad, n);
        }
    /* outside the backward window a frozen tensor's main_grad is refused like any other */
    float *g;
    int acc;
    CHECK_ERR(fsdp_unit_main_grad(u[1], 0, &g, &acc), FSDP_ESTATE, "main_grad");
    fsdp_engine_free(e);
}

/* fsdp_engine_config.freeze: globs over unit.tensor freeze what the spec flags froze above, with the
 * same layout, in the engine and in the plan; malformed lists are refused. */
static void test_freeze_globs(fsdp_comm_t *comm) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    fsdp_engine_t *e = NULL, *g = NULL;
    fsdp_unit_t *u[NU] = {0}, *gu[NU] = {0};
    CHECK(build(comm, &ec, 0, &e, u));
    char list[] = "A.f?,F.*"; /* the engine keeps its own copy */
    ec.freeze = list;
    CHECK(build(comm, &ec, 1, &g, gu)); /* spec flags cleared: the globs alone freeze */
    list[0] = 'X';
    for (int i = 0; i < NU && gu[NU - 1]; i++) {
        CHECK(fsdp_unit_padded_numel(u[i]) == fsdp_unit_padded_numel(gu[i]) &&
              fsdp_unit_frozen_padded_numel(u[i]) == fsdp_unit_frozen_padded_numel(gu[i]));
        for (int t = 0; t < UNITS[i].n_specs; t++) {
            fsdp_tensor_info a, b;
            CHECK_OK(fsdp_unit_tensor_info(u[i], t, &a));
            CHECK_OK(fsdp_unit_tensor_info(gu[i], t, &b));
            CHECKF(a.frozen == b.frozen && a.offset == b.offset, "%s.%s: flag %d/%zu, glob %d/%zu",
                   UNITS[i].name, a.name, a.frozen, a.offset, b.frozen, b.offset);
        }
    }
    fsdp_engine_free(g);
    fsdp_engine_free(e);
    fsdp_plan_unit pu[NU];
    fsdp_tensor_spec copies[NU][5];
    for (int i = 0; i < NU; i++) {
        pu[i] = UNITS[i];
        memcpy(copies[i], UNITS[i].specs, (size_t)UNITS[i].n_specs * sizeof copies[i][0]);
        for (int t = 0; t < UNITS[i].n_specs; t++)
            copies[i][t].frozen = 0;
        pu[i].specs = copies[i];
    }
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = g_world;
    pc.backend = g_world > 1 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    fsdp_plan a, b;
    CHECK_OK(fsdp_plan_compute(UNITS, NU, &pc, &a));
    pc.engine.freeze = "A.f?,F.*";
    CHECK_OK(fsdp_plan_compute(pu, NU, &pc, &b));
    CHECK(a.n_frozen == b.n_frozen && a.n_frozen == 94 &&
          memcmp(&a.predicted, &b.predicted, sizeof a.predicted) == 0);
    const char *bad[] = {",", "A.w,", ",A.w", "A.w,,T.t"};
    for (int k = 0; k < 4; k++) {
        ec.freeze = bad[k];
        CHECK_ERR(fsdp_engine_init(&e, comm, &ec), FSDP_EINVAL, "empty pattern");
        pc.engine.freeze = bad[k];
        CHECK_ERR(fsdp_plan_compute(pu, NU, &pc, &b), FSDP_EINVAL, "empty pattern");
    }
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv), *self = NULL;
    if (comm == NULL) return 1;
    fsdp_comm_config sc = fsdp_comm_config_default();
    sc.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_comm_init(&self, &sc, NULL, NULL));
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);
    test_set_rank(g_rank);
    const fsdp_strategy strats[] = {FSDP_FULL_SHARD, FSDP_SHARD_GRAD_OP, FSDP_NO_SHARD};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            test_layout_init(comm, self, strats[s], d ? FSDP_BF16 : FSDP_F32);
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            test_steps(comm, strats[s], d ? FSDP_BF16 : FSDP_F32, 2);
    test_steps(comm, FSDP_FULL_SHARD, FSDP_BF16, 0);
    test_freeze_globs(comm);
    fsdp_comm_free(self);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
