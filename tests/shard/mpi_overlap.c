/* mpi_overlap.c — the overlapped lifecycle under mpirun 1..4 (lifecycle.c): the first step records the
 * hook order and prefetches nothing; from the second, each hook starts the all-gathers of the next
 * max_inflight units in that order (forward, and backward in backward's own order), the first units
 * of backward stay gathered from forward (and an optimizer step after an evaluation forward drops
 * them), a prefetched unit's parameters are not readable before its own hook, each unit's reduction stays
 * pending (main_grad held) until the next post_backward, fsdp_engine_drain completes everything; a call out
 * of the recorded order is counted and stops prefetching without changing any result; gradient shards and
 * parameters are bit-identical to the synchronous engine (max_inflight 0). Four units of different
 * sizes, hooks in sequence (forward 0..3, backward 3..0), FULL_SHARD, fp32 compute. */
#include "fsdp.h"
#include "test_util.h"

static int g_rank, g_world;

#define NU 4
static const int SIZES[NU] = {40, 24, 56, 32}; /* elements of each unit's one tensor */

/* Bytes of unit i's full fp32 parameters (its padded flat length x 4). */
static size_t full_bytes(fsdp_unit_t **u, int i) { return fsdp_unit_padded_numel(u[i]) * sizeof(float); }

static void build(fsdp_comm_t *comm, int max_inflight, fsdp_engine_t **e, fsdp_unit_t **u) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    ec.max_inflight = max_inflight;
    CHECK_OK(fsdp_engine_init(e, comm, &ec));
    for (int i = 0; i < NU && *e; i++) {
        char name[8];
        snprintf(name, sizeof name, "u%d", i);
        fsdp_tensor_spec sp = {
            .name = "w", .ndim = 1, .shape = {SIZES[i]}, .init = FSDP_INIT_NORMAL, .std = 1};
        CHECK_OK(fsdp_engine_add_unit(*e, name, &sp, 1, NULL, &u[i]));
    }
    CHECK_OK(fsdp_engine_init_params(*e));
}

/* A backward's gradient for unit i: depends on the gathered parameters, the rank and the step. */
static void backward_unit(fsdp_unit_t *u, int i, int step) {
    void *pv = NULL;
    float *g = NULL;
    int acc = -1;
    CHECK_OK(fsdp_unit_param(u, 0, &pv));
    CHECK_OK(fsdp_unit_main_grad(u, 0, &g, &acc));
    if (pv == NULL || g == NULL) return;
    const float *p = pv;
    for (int k = 0; k < SIZES[i]; k++)
        g[k] = p[k] * 0.5f + 0.01f * (float)(g_rank + 1) + 0.001f * (float)(step * 7 + k);
}

/* One step. order: the forward order (backward runs it in reverse). check: the memory assertions of
 * an in-order step with overlap depth 1 (from the second step). */
static void step(fsdp_engine_t *e, fsdp_unit_t **u, const int *order, int s, int check, size_t next_bytes) {
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    CHECK_OK(fsdp_engine_begin_micro(e, 0));
    for (int k = 0; k < NU; k++) {
        int i = order[k];
        CHECK_OK(fsdp_unit_pre_forward(u[i]));
        if (check && k + 1 < NU) { /* this unit's parameters, and the next unit's on the way */
            int n = order[k + 1];
            CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full_bytes(u, i) + full_bytes(u, n),
                   "step %d forward %d: param_full %zu, want own + prefetched next", s, i,
                   fsdp_mem_current(FSDP_MEM_PARAM_FULL));
            void *v = (void *)1;
            CHECK_ERR(fsdp_unit_param(u[n], 0, &v), FSDP_ESTATE, "sharded"); /* not before its hook */
            CHECK(v == NULL);
        }
        CHECK_OK(fsdp_unit_post_forward(u[i]));
    }
    if (check) /* the last unit of forward opens backward: kept gathered, not gathered again */
        CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full_bytes(u, order[NU - 1]),
               "step %d after forward: param_full %zu, want the last unit's %zu kept", s,
               fsdp_mem_current(FSDP_MEM_PARAM_FULL), full_bytes(u, order[NU - 1]));
    for (int k = NU - 1; k >= 0; k--) {
        int i = order[k];
        CHECK_OK(fsdp_unit_pre_backward(u[i]));
        if (check && k < NU - 1) /* the previous unit's reduction is still running */
            CHECKF(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) ==
                       (fsdp_unit_padded_numel(u[i]) + fsdp_unit_padded_numel(u[order[k + 1]])) * 4,
                   "step %d backward %d: main_grad %zu, want own + pending", s, i,
                   fsdp_mem_current(FSDP_MEM_MAIN_GRAD));
        backward_unit(u[i], i, s);
        CHECK_OK(fsdp_unit_post_backward(u[i]));
        if (check) /* own reduction pending: main_grad kept until the next post_backward */
            CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == fsdp_unit_padded_numel(u[i]) * 4);
    }
    if (check) {
        CHECK_OK(fsdp_engine_drain(e));
        CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0 && fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0);
    }
    float norm = 0;
    CHECK_OK(fsdp_engine_clip_grad_norm(e, 0.0f, &norm));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 0.1f;
    CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    /* after the update, the next step's first unit is already on its way (overlap, from step 2) */
    CHECKF(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0 && fsdp_mem_current(FSDP_MEM_PARAM_FULL) == next_bytes,
           "step %d after AdamW: param_full %zu, want %zu", s, fsdp_mem_current(FSDP_MEM_PARAM_FULL),
           next_bytes);
}

/* An evaluation forward (no backward), then an optimizer step: the first units backward would gather
 * (here u3, the last of forward) stay gathered after post_forward at depth >= 1, and AdamW must drop
 * them (their masters change) rather than let the next step use stale parameters; the bit-identity
 * with the synchronous engine below checks that it did. */
static void eval_then_update(fsdp_engine_t *e, fsdp_unit_t **u, int check) {
    for (int pass = 0; pass < 2; pass++) { /* two evaluation forwards back to back */
        for (int i = 0; i < NU; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            /* the second pass starts with u3 kept from the first: it does not hold back forward's
             * prefetch of the next unit */
            size_t kept = pass == 1 && i + 1 < NU - 1 ? full_bytes(u, NU - 1) : 0;
            if (check && i + 1 < NU)
                CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) ==
                           full_bytes(u, i) + full_bytes(u, i + 1) + kept,
                       "eval forward %d unit %d: param_full %zu, want own + prefetched next (+ kept u3)",
                       pass, i, fsdp_mem_current(FSDP_MEM_PARAM_FULL));
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        if (check) /* u3 opens backward: kept, not resharded */
            CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == full_bytes(u, NU - 1),
                   "after eval forward %d: param_full %zu, want u3's %zu", pass,
                   fsdp_mem_current(FSDP_MEM_PARAM_FULL), full_bytes(u, NU - 1));
    }
    float norm = 0;
    CHECK_OK(fsdp_engine_clip_grad_norm(e, 0.0f, &norm));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 0.1f;
    CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    /* u3 dropped (its master changed); nothing prefetched for the next step, whose first unit still
     * holds an abandoned forward */
    CHECKF(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0, "eval + AdamW: param_full %zu, want 0",
           fsdp_mem_current(FSDP_MEM_PARAM_FULL));
}

/* Every unit's full master values (gathered to all ranks). */
static void snapshot(fsdp_unit_t **u, float out[NU][64]) {
    for (int i = 0; i < NU; i++)
        CHECK_OK(fsdp_unit_gather_tensor(u[i], 0, out[i], -1));
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);
    const int in_order[NU] = {0, 1, 2, 3}, shuffled[NU] = {0, 2, 1, 3};
    static float sync_p[NU][64], over_p[NU][64];

    /* The synchronous engine: the reference. */
    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u[NU] = {0};
    build(comm, 0, &e, u);
    if (u[NU - 1]) {
        for (int s = 0; s < 3; s++)
            step(e, u, in_order, s, 0, 0);
        eval_then_update(e, u, 0);
        step(e, u, shuffled, 3, 0, 0);
        snapshot(u, sync_p);
        CHECK(fsdp_engine_order_mismatches(e) > 0); /* the order is checked at depth 0 too */
    }
    fsdp_engine_free(e);

    /* Depth 1: step 0 records, steps 1-2 prefetch and overlap (checked), step 3 leaves the order. */
    e = NULL;
    memset(u, 0, sizeof u);
    build(comm, 1, &e, u);
    if (u[NU - 1]) {
        size_t first = full_bytes(u, 0); /* u0 opens every forward */
        step(e, u, in_order, 0, 0, 0);   /* recording: nothing prefetched across the step */
        step(e, u, in_order, 1, 1, first);
        step(e, u, in_order, 2, 1, first);
        CHECK(fsdp_engine_order_mismatches(e) == 0);
        eval_then_update(e, u, 1);
        step(e, u, shuffled, 3, 0, first);
        CHECK(fsdp_engine_order_mismatches(e) > 0);
        snapshot(u, over_p);
        size_t diff = 0;
        for (int i = 0; i < NU; i++)
            for (int k = 0; k < SIZES[i]; k++)
                diff += memcmp(&sync_p[i][k], &over_p[i][k], sizeof(float)) != 0;
        CHECKF(diff == 0, "overlap changed %zu parameter values (must be bit-identical)", diff);
        /* An evaluation-style forward after the step: prefetched, then dropped by reshard_all. */
        for (int i = 0; i < NU; i++) {
            CHECK_OK(fsdp_unit_pre_forward(u[i]));
            CHECK_OK(fsdp_unit_post_forward(u[i]));
        }
        CHECK_OK(fsdp_engine_reshard_all(e));
        CHECK(fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0 && fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0);
    }
    fsdp_engine_free(e);
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
