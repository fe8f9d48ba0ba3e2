/* mpi_unit.c — flat parameters and units under mpirun 1..4: layout and shard memory, initial weights
 * bit-identical to a 1-rank engine (awkward shapes, a unit smaller than the world), parameter views
 * after unshard (f32 and bf16), aliases, cross-unit ties refused, gather/load, and the lifecycle state
 * machine with its FSDP_ESTATE refusals. */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

static int g_rank, g_world;

/* Awkward shapes: primes, 1-element tensors, an alias; a unit of one element (smaller than world). */
static const fsdp_tensor_spec SPEC_A[] = {
    {.name = "w", .ndim = 2, .shape = {7, 13}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "one", .ndim = 1, .shape = {1}, .init = FSDP_INIT_ONES, .no_decay = 1},
    {.name = "p97", .ndim = 1, .shape = {97}, .init = FSDP_INIT_NORMAL, .std = 1.0f},
    {.name = "tied", .ndim = 2, .shape = {13, 7}, .init = FSDP_INIT_ZEROS, .alias_of = "w"},
    {.name = "z", .ndim = 3, .shape = {3, 5, 2}, .init = FSDP_INIT_ZEROS},
    {.name = "n1", .ndim = 1, .shape = {1}, .init = FSDP_INIT_NORMAL, .std = 3.0f},
};
static const fsdp_tensor_spec SPEC_B[] = {
    {.name = "b", .ndim = 1, .shape = {1}, .init = FSDP_INIT_NORMAL, .std = 0.5f},
};
static const fsdp_tensor_spec SPEC_C[] = {
    {.name = "big", .ndim = 2, .shape = {31, 37}, .init = FSDP_INIT_NORMAL, .std = 0.1f},
    {.name = "bias", .ndim = 1, .shape = {37}, .init = FSDP_INIT_ONES},
};
#define NA (int)(sizeof SPEC_A / sizeof SPEC_A[0])

static size_t spec_numel(const fsdp_tensor_spec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= (size_t)s->shape[d];
    return n;
}

/* Expected layout, from the documented rule: non-alias tensors in order at multiples of align. */
static size_t expected_numel(const fsdp_tensor_spec *s, int n, size_t align, size_t *offsets) {
    size_t cur = 0;
    for (int t = 0; t < n; t++) {
        if (s[t].alias_of) continue;
        size_t off = (cur + align - 1) / align * align;
        offsets[t] = off;
        cur = off + spec_numel(&s[t]);
    }
    return cur;
}

typedef struct {
    fsdp_engine_t *e;
    fsdp_unit_t *u[3];
} model3;

static int build(model3 *m, fsdp_comm_t *comm, const fsdp_engine_config *ec) {
    fsdp_status s = fsdp_engine_init(&m->e, comm, ec);
    if (s != FSDP_OK) return 0;
    int ok = fsdp_engine_add_unit(m->e, "A", SPEC_A, NA, NULL, &m->u[0]) == FSDP_OK &&
             fsdp_engine_add_unit(m->e, "B", SPEC_B, 1, NULL, &m->u[1]) == FSDP_OK &&
             fsdp_engine_add_unit(m->e, "C", SPEC_C, 2, NULL, &m->u[2]) == FSDP_OK &&
             fsdp_engine_init_params(m->e) == FSDP_OK;
    return ok;
}

/* Layout, shard memory, init vs a 1-rank engine, gather (root and all), views after unshard. */
static void test_layout_init_views(fsdp_comm_t *comm, fsdp_comm_t *self, fsdp_strategy strat, fsdp_dtype cdt,
                                   size_t align) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.max_inflight = 0; /* the synchronous lifetimes (mpi_overlap tests the overlapped ones) */
    ec.strategy = strat;
    ec.compute_dtype = cdt;
    ec.align = align;
    ec.seed = 20240520;
    model3 m = {0}, r = {0};
    size_t master0 = fsdp_mem_current(FSDP_MEM_MASTER);
    CHECK(build(&m, comm, &ec));
    size_t master_bytes = fsdp_mem_current(FSDP_MEM_MASTER) - master0;
    CHECK(build(&r, self, &ec)); /* the 1-rank reference: same seed, world 1 */
    if (!m.e || !r.e || !m.u[2] || !r.u[2]) goto done;

    const fsdp_tensor_spec *specs[3] = {SPEC_A, SPEC_B, SPEC_C};
    int counts[3] = {NA, 1, 2};
    size_t want_master = 0;
    for (int i = 0; i < 3; i++) {
        fsdp_unit_t *u = m.u[i];
        size_t offs[8] = {0};
        size_t numel = expected_numel(specs[i], counts[i], align, offs);
        size_t padded = fsdp_unit_padded_numel(u);
        CHECK(fsdp_unit_numel(u) == numel);
        CHECKF(padded % (size_t)g_world == 0 && padded >= numel && padded - numel < (size_t)g_world,
               "unit %d padded %zu numel %zu", i, padded, numel);
        size_t per_rank = (padded + (size_t)g_world - 1) / (size_t)g_world;
        want_master += 4 * (strat == FSDP_NO_SHARD ? padded : per_rank);
        fsdp_shard_view sv;
        CHECK_OK(fsdp_unit_shard(u, &sv));
        if (strat == FSDP_NO_SHARD)
            CHECK(sv.offset == 0 && sv.numel == padded);
        else
            CHECK(sv.offset == (size_t)g_rank * per_rank && sv.numel == per_rank);
        for (int t = 0; t < counts[i]; t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
            CHECK(ti.numel == spec_numel(&specs[i][t]));
            if (specs[i][t].alias_of) {
                int tgt = fsdp_unit_find(u, specs[i][t].alias_of);
                CHECK(ti.alias_of == tgt && ti.offset == offs[tgt]);
            } else {
                CHECK(ti.alias_of == -1 && ti.offset == offs[t]);
            }
        }
    }
    CHECKF(master_bytes == want_master, "master bytes %zu, want %zu", master_bytes, want_master);

    /* Gathered == 1-rank init, bit for bit; to all ranks and to a root. */
    for (int i = 0; i < 3; i++) {
        for (int t = 0; t < counts[i]; t++) {
            size_t n = spec_numel(&specs[i][t]);
            float *got = calloc(n, sizeof(float)), *want = calloc(n, sizeof(float)), *rooted = calloc(n, 4);
            CHECK_OK(fsdp_unit_gather_tensor(m.u[i], t, got, -1));
            CHECK_OK(fsdp_unit_gather_tensor(r.u[i], t, want, -1));
            int root = g_world - 1;
            CHECK_OK(fsdp_unit_gather_tensor(m.u[i], t, g_rank == root ? rooted : NULL, root));
            CHECKF(memcmp(got, want, n * 4) == 0, "unit %d tensor %d differs from the 1-rank init", i, t);
            if (g_rank == root) CHECK(memcmp(rooted, want, n * 4) == 0);
            /* values follow the initialiser (not all zeros, right constant) */
            double ss = 0;
            for (size_t k = 0; k < n; k++)
                ss += (double)want[k] * want[k];
            const fsdp_tensor_spec *s = &specs[i][t];
            const fsdp_tensor_spec *tg = s->alias_of ? &specs[i][fsdp_unit_find(m.u[i], s->alias_of)] : s;
            if (tg->init == FSDP_INIT_ONES) CHECK(ss == (double)n);
            if (tg->init == FSDP_INIT_ZEROS) CHECK(ss == 0.0);
            if (tg->init == FSDP_INIT_NORMAL && n > 50)
                CHECKF(fabs(sqrt(ss / n) / tg->std - 1.0) < 0.25, "rms %g std %g", sqrt(ss / n),
                       (double)tg->std);
            free(got);
            free(want);
            free(rooted);
        }
    }

    /* Views after unshard point at the right elements (checked against gathered values). */
    for (int i = 0; i < 3; i++) {
        fsdp_unit_t *u = m.u[i];
        CHECK_OK(fsdp_unit_pre_forward(u));
        size_t esz = fsdp_dtype_size(cdt);
        CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == fsdp_unit_padded_numel(u) * esz);
        for (int t = 0; t < counts[i]; t++) {
            size_t n = spec_numel(&specs[i][t]);
            float *want = calloc(n, sizeof(float));
            CHECK_OK(fsdp_unit_gather_tensor(u, t, want, -1));
            void *v = NULL;
            CHECK_OK(fsdp_unit_param(u, t, &v));
            int bad = 0;
            for (size_t k = 0; v && k < n; k++) {
                if (cdt == FSDP_F32)
                    bad += memcmp(&((float *)v)[k], &want[k], 4) != 0;
                else
                    bad += ((fsdp_bf16 *)v)[k] != fsdp_f32_to_bf16(want[k]);
            }
            CHECKF(v && bad == 0, "unit %d tensor %d: %d view elements wrong", i, t, bad);
            if (specs[i][t].alias_of) { /* an alias shares its target's view */
                void *tv = NULL;
                CHECK_OK(fsdp_unit_param(u, fsdp_unit_find(u, specs[i][t].alias_of), &tv));
                CHECK(tv == v);
            }
            free(want);
        }
        CHECK_OK(fsdp_unit_post_forward(u));
        size_t want_full = strat == FSDP_FULL_SHARD ? 0 : fsdp_unit_padded_numel(u) * esz;
        CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == want_full);
        CHECK_OK(fsdp_engine_reshard_all(m.e));
        CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0);
    }

    /* Load: root 0's data reaches every shard; root -1: every rank passes the same data. */
    {
        size_t n = spec_numel(&SPEC_C[0]);
        float *src = calloc(n, 4), *back = calloc(n, 4);
        for (size_t k = 0; k < n; k++)
            src[k] = (float)k * 0.5f - 3.0f;
        CHECK_OK(fsdp_unit_load_tensor(m.u[2], 0, g_rank == 0 ? src : NULL, 0));
        CHECK_OK(fsdp_unit_gather_tensor(m.u[2], 0, back, -1));
        CHECK(memcmp(src, back, n * 4) == 0);
        for (size_t k = 0; k < n; k++)
            src[k] = -(float)k;
        CHECK_OK(fsdp_unit_load_tensor(m.u[2], 0, src, -1));
        CHECK_OK(fsdp_unit_gather_tensor(m.u[2], 0, back, -1));
        CHECK(memcmp(src, back, n * 4) == 0);
        /* the neighbour tensor is untouched */
        float bias[37];
        CHECK_OK(fsdp_unit_gather_tensor(m.u[2], 1, bias, -1));
        int ones = 0;
        for (int k = 0; k < 37; k++)
            ones += bias[k] == 1.0f;
        CHECK(ones == 37);
        free(src);
        free(back);
    }
done:
    fsdp_engine_free(m.e);
    fsdp_engine_free(r.e);
    CHECK(fsdp_mem_current(FSDP_MEM_MASTER) == master0);
}

static void test_bad_specs(fsdp_comm_t *comm) {
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, NULL));
    fsdp_unit_t *a = NULL, *b = NULL;
    fsdp_tensor_spec root[] = {
        {.name = "wte", .ndim = 2, .shape = {5, 3}, .init = FSDP_INIT_NORMAL, .std = 1}};
    CHECK_OK(fsdp_engine_add_unit(e, "embed", root, 1, NULL, &a));
    size_t m0 = fsdp_mem_current(FSDP_MEM_MASTER);
    fsdp_tensor_spec cross[] = {
        {.name = "w", .ndim = 1, .shape = {4}},
        {.name = "lm_head", .ndim = 2, .shape = {5, 3}, .alias_of = "embed.wte"},
    };
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "'embed'");
    CHECK(strstr(fsdp_last_error(), "'head'") != NULL && strstr(fsdp_last_error(), "one unit") != NULL);
    CHECK(b == NULL && fsdp_engine_num_units(e) == 1 && fsdp_mem_current(FSDP_MEM_MASTER) == m0);
    cross[1].alias_of = "wte"; /* bare name that lives in another unit */
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "'embed'");
    CHECK(strstr(fsdp_last_error(), "'head'") != NULL);
    cross[1].alias_of = "nothere";
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "nothere");
    cross[1].alias_of = "w"; /* wrong size for its target */
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "elements");
    cross[1].alias_of = NULL;
    cross[1].name = "w";
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "twice");
    cross[1].name = "x";
    cross[1].ndim = 0;
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "ndim");
    cross[1].ndim = 2;
    cross[1].shape[1] = 0;
    CHECK_ERR(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b), FSDP_EINVAL, "shape");
    cross[1].shape[1] = 3;
    CHECK_ERR(fsdp_engine_add_unit(e, "embed", cross, 2, NULL, &b), FSDP_EINVAL, "already");
    CHECK_OK(fsdp_engine_add_unit(e, "head", cross, 2, NULL, &b));
    CHECK(fsdp_engine_num_units(e) == 2 && fsdp_engine_unit(e, 1) == b && fsdp_unit_index(b) == 1);
    fsdp_engine_config bad = fsdp_engine_config_default();
    bad.align = 0;
    fsdp_engine_t *e2 = NULL;
    CHECK_ERR(fsdp_engine_init(&e2, comm, &bad), FSDP_EINVAL, "align");
    CHECK(e2 == NULL);
    fsdp_engine_free(e);
    fsdp_engine_free(NULL);
}

#define EST(expr, needle) CHECK_ERR(expr, FSDP_ESTATE, needle)

/* Every wrong-order call is FSDP_ESTATE with the unit, its state and the call in the message. */
static void test_state_machine(fsdp_comm_t *comm, fsdp_strategy strat, fsdp_main_grad_policy pol, int raf) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.max_inflight = 0; /* the synchronous lifetimes (mpi_overlap tests the overlapped ones) */
    ec.strategy = strat;
    ec.main_grad = pol;
    ec.compute_dtype = FSDP_F32;
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    fsdp_unit_config uc = fsdp_unit_config_default();
    uc.reshard_after_forward = raf;
    fsdp_unit_t *u = NULL;
    CHECK_OK(fsdp_engine_add_unit(e, "blk7", SPEC_C, 2, &uc, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!u) goto done;
    size_t full_bytes = fsdp_unit_padded_numel(u) * 4;
    int resharded = raf >= 0 ? raf : strat == FSDP_FULL_SHARD;
    void *v;
    float *g;
    int acc;

    EST(fsdp_unit_post_forward(u), "blk7");
    CHECK(strstr(fsdp_last_error(), "IDLE") && strstr(fsdp_last_error(), "post_forward"));
    EST(fsdp_unit_pre_backward(u), "pre_backward");
    EST(fsdp_unit_post_backward(u), "post_backward");
    EST(fsdp_unit_param(u, 0, &v), "sharded");
    CHECK(v == NULL);
    EST(fsdp_unit_main_grad(u, 0, &g, &acc), "blk7");
    CHECK(g == NULL);

    CHECK_OK(fsdp_unit_pre_forward(u));
    EST(fsdp_unit_pre_forward(u), "FORWARD");
    CHECK(strstr(fsdp_last_error(), "blk7") && strstr(fsdp_last_error(), "fsdp_unit_pre_forward"));
    EST(fsdp_unit_pre_backward(u), "FORWARD");
    EST(fsdp_unit_post_backward(u), "FORWARD");
    if (pol == FSDP_MAIN_GRAD_LAZY) {
        EST(fsdp_unit_main_grad(u, 0, &g, &acc), "pre_backward");
        CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
    } else {
        CHECK_OK(fsdp_unit_main_grad(u, 0, &g, &acc));
        CHECK(g != NULL && acc == 0);
        CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == full_bytes);
        for (size_t k = 0; k < 31 * 37; k++)
            g[k] = 0.0f;
    }
    CHECK_OK(fsdp_unit_post_forward(u));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == (resharded ? 0 : full_bytes));
    EST(fsdp_unit_post_forward(u), "FORWARD_DONE");
    EST(fsdp_unit_post_backward(u), "FORWARD_DONE");
    if (resharded) EST(fsdp_unit_param(u, 0, &v), "pre_forward");

    CHECK_OK(fsdp_unit_pre_backward(u));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full_bytes);
    CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == full_bytes);
    EST(fsdp_unit_pre_backward(u), "BACKWARD");
    CHECK_OK(fsdp_unit_main_grad(u, 1, &g, &acc));
    CHECK(g != NULL && acc == 0);
    for (int k = 0; k < 37; k++)
        g[k] = 1.0f;
    /* recompute inside backward keeps the parameters and main_grad */
    CHECK_OK(fsdp_unit_pre_forward(u));
    EST(fsdp_unit_post_backward(u), "RECOMPUTE");
    CHECK_OK(fsdp_unit_param(u, 0, &v));
    CHECK(v != NULL);
    CHECK_OK(fsdp_unit_post_forward(u));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full_bytes);
    CHECK_OK(fsdp_unit_main_grad(u, 1, &g, &acc));
    CHECK(acc == 1);
    CHECK_OK(fsdp_unit_post_backward(u));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0 && fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
    EST(fsdp_unit_post_backward(u), "IDLE");
    EST(fsdp_unit_main_grad(u, 1, &g, &acc), "post_backward");
    CHECK(g == NULL);

    /* evaluation: a new pre_forward after post_forward abandons that forward */
    CHECK_OK(fsdp_unit_pre_forward(u));
    CHECK_OK(fsdp_unit_post_forward(u));
    CHECK_OK(fsdp_unit_pre_forward(u));
    EST(fsdp_engine_reshard_all(e), "FORWARD");
    CHECK_OK(fsdp_unit_post_forward(u));
    CHECK_OK(fsdp_engine_reshard_all(e));
    CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0 && fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
    EST(fsdp_unit_pre_backward(u), "IDLE");

    /* the gradient reached the shard: b (all ones, summed over ranks, averaged) == 1 */
    fsdp_shard_view sv;
    CHECK_OK(fsdp_unit_shard(u, &sv));
    size_t boff = 31 * 37 + (16 - (31 * 37) % 16) % 16;
    int bad = 0;
    for (size_t k = 0; k < sv.numel; k++) {
        size_t gi = sv.offset + k;
        float want = (gi >= boff && gi < boff + 37) ? 1.0f : 0.0f;
        bad += sv.grad[k] != want;
    }
    CHECKF(bad == 0, "%d grad shard elements wrong", bad);
done:
    fsdp_engine_free(e);
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv), *self = NULL;
    if (comm == NULL) return 1;
    fsdp_comm_config sc = fsdp_comm_config_default();
    sc.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_comm_init(&self, &sc, NULL, NULL));
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);

    for (int w = 1; w <= 5; w++) { /* the one shard function: equal contiguous pieces that tile */
        size_t next = 0;
        for (int r = 0; r < w; r++) {
            size_t o, l;
            fsdp_shard_range((size_t)w * 6, r, w, &o, &l);
            CHECK(o == next && l == 6);
            next = o + l;
        }
    }

    const fsdp_strategy strats[] = {FSDP_FULL_SHARD, FSDP_SHARD_GRAD_OP, FSDP_NO_SHARD};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            test_layout_init_views(comm, self, strats[s], d ? FSDP_BF16 : FSDP_F32, 16);
    test_layout_init_views(comm, self, FSDP_FULL_SHARD, FSDP_F32, 1);
    test_layout_init_views(comm, self, FSDP_FULL_SHARD, FSDP_BF16, 5);
    test_bad_specs(comm);
    for (int s = 0; s < 3; s++) {
        test_state_machine(comm, strats[s], FSDP_MAIN_GRAD_LAZY, -1);
        test_state_machine(comm, strats[s], FSDP_MAIN_GRAD_EAGER, -1);
    }
    test_state_machine(comm, FSDP_FULL_SHARD, FSDP_MAIN_GRAD_LAZY, 0); /* a root unit */
    test_state_machine(comm, FSDP_SHARD_GRAD_OP, FSDP_MAIN_GRAD_LAZY, 1);

    fsdp_comm_free(self);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
