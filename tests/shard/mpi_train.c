/* mpi_train.c — end-to-end training under mpirun 1..4 of a tiny model written here: a tied
 * embedding / output matrix in a root unit and a two-layer MLP block with a sometimes-unused bias,
 * hand-written forward and backward through the unit hooks and main_grad (with activation recompute).
 * Every strategy x accumulation mode x main_grad policy must give the parameters of an independent
 * float64 reference of the same training (plain arrays, no library code), the reported gradient norm
 * must equal the float64 norm, the unused tensor's gradient must be exactly zero, and the tied matrix
 * must get the sum of both uses. BF16 compute and BF16 reduce are run against looser tolerances. */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

enum { V = 11, D = 6, H = 13, G = 12, NMICRO = 2, STEPS = 4 };
#define MAX_NORM 0.5f
#define LR       0.01f

static int g_rank, g_world;

/* Data: token and target of sample i of micro-batch m of step s; the global micro-batch has G samples
 * and rank r takes [r*G/world, (r+1)*G/world). */
static int tok_of(int s, int m, int i) { return (s * 7 + m * 5 + i * 3 + (i * i) % 5) % V; }
static int tgt_of(int s, int m, int i) { return (tok_of(s, m, i) * 3 + i + s) % V; }
/* The "extra" bias is added to y only in some micro-batches; step 2 never uses it. */
static const int EXTRA_USED[STEPS][NMICRO] = {{1, 1}, {0, 1}, {0, 0}, {1, 0}};

/* Parameters of the model (row-major): E [V,D] (tied: embedding and output head), W1 [H,D], b1 [H],
 * W2 [D,H], b2 [D], u [D]. */
enum { P_E, P_W1, P_B1, P_W2, P_B2, P_U, NP };
static const size_t P_N[NP] = {V * D, H *D, H, D *H, D, D};
static const int P_DECAY[NP] = {1, 1, 0, 1, 0, 1};

/* ------------------------------------------------------------------ float64 reference */

typedef struct {
    double p[NP][V * H], m[NP][V * H], v[NP][V * H];
    double norm[STEPS], loss[STEPS];
    double gE_step0[V * D], gE_head_step0[V * D]; /* pre-clip grad of E at step 0, and its head part */
} reference;

static void ref_train(reference *R, const float *init[NP]) {
    memset(R, 0, sizeof *R);
    for (int q = 0; q < NP; q++)
        for (size_t k = 0; k < P_N[q]; k++)
            R->p[q][k] = init[q][k];
    double *E = R->p[P_E], *W1 = R->p[P_W1], *b1 = R->p[P_B1], *W2 = R->p[P_W2], *b2 = R->p[P_B2],
           *u = R->p[P_U];
    for (int s = 0; s < STEPS; s++) {
        static double g[NP][V * H], gEhead[V * D];
        memset(g, 0, sizeof g);
        memset(gEhead, 0, sizeof gEhead);
        double loss = 0;
        for (int m = 0; m < NMICRO; m++) {
            for (int i = 0; i < G; i++) {
                int tk = tok_of(s, m, i), tg = tgt_of(s, m, i);
                double x[D], z[H], h[H], y[D], l[V], dl[V], dy[D], dh[H], dz[H];
                for (int d = 0; d < D; d++)
                    x[d] = E[tk * D + d];
                for (int j = 0; j < H; j++) {
                    z[j] = b1[j];
                    for (int d = 0; d < D; d++)
                        z[j] += W1[j * D + d] * x[d];
                    h[j] = z[j] > 0 ? z[j] : 0;
                }
                for (int d = 0; d < D; d++) {
                    y[d] = b2[d] + (EXTRA_USED[s][m] ? u[d] : 0);
                    for (int j = 0; j < H; j++)
                        y[d] += W2[d * H + j] * h[j];
                }
                double mx = -1e300, se = 0;
                for (int c = 0; c < V; c++) {
                    l[c] = 0;
                    for (int d = 0; d < D; d++)
                        l[c] += E[c * D + d] * y[d];
                    mx = l[c] > mx ? l[c] : mx;
                }
                for (int c = 0; c < V; c++)
                    se += exp(l[c] - mx);
                loss += (log(se) + mx - l[tg]) / (G * NMICRO);
                for (int c = 0; c < V; c++)
                    dl[c] = (exp(l[c] - mx) / se - (c == tg)) / (G * NMICRO);
                for (int d = 0; d < D; d++) {
                    dy[d] = 0;
                    for (int c = 0; c < V; c++) {
                        g[P_E][c * D + d] += dl[c] * y[d];
                        gEhead[c * D + d] += dl[c] * y[d];
                        dy[d] += E[c * D + d] * dl[c];
                    }
                    g[P_B2][d] += dy[d];
                    if (EXTRA_USED[s][m]) g[P_U][d] += dy[d];
                    for (int j = 0; j < H; j++)
                        g[P_W2][d * H + j] += dy[d] * h[j];
                }
                for (int j = 0; j < H; j++) {
                    dh[j] = 0;
                    for (int d = 0; d < D; d++)
                        dh[j] += W2[d * H + j] * dy[d];
                    dz[j] = z[j] > 0 ? dh[j] : 0;
                    g[P_B1][j] += dz[j];
                    for (int d = 0; d < D; d++)
                        g[P_W1][j * D + d] += dz[j] * x[d];
                }
                for (int d = 0; d < D; d++) {
                    double dx = 0;
                    for (int j = 0; j < H; j++)
                        dx += W1[j * D + d] * dz[j];
                    g[P_E][tk * D + d] += dx;
                }
            }
        }
        if (s == 0) {
            memcpy(R->gE_step0, g[P_E], sizeof R->gE_step0);
            memcpy(R->gE_head_step0, gEhead, sizeof gEhead);
        }
        double ss = 0;
        for (int q = 0; q < NP; q++)
            for (size_t k = 0; k < P_N[q]; k++)
                ss += g[q][k] * g[q][k];
        R->norm[s] = sqrt(ss);
        R->loss[s] = loss;
        double coef = MAX_NORM / (R->norm[s] + 1e-6);
        if (coef < 1)
            for (int q = 0; q < NP; q++)
                for (size_t k = 0; k < P_N[q]; k++)
                    g[q][k] *= coef;
        double lr = 0.01, b1c = 0.9, b2c = 0.95, eps = 1e-8, wd = 0.1;
        double bc1 = 1 - pow(b1c, s + 1), bc2 = 1 - pow(b2c, s + 1);
        for (int q = 0; q < NP; q++)
            for (size_t k = 0; k < P_N[q]; k++) {
                double *p = &R->p[q][k], *mm = &R->m[q][k], *vv = &R->v[q][k];
                if (P_DECAY[q]) *p *= 1 - lr * wd;
                *mm = b1c * *mm + (1 - b1c) * g[q][k];
                *vv = b2c * *vv + (1 - b2c) * g[q][k] * g[q][k];
                *p -= lr / bc1 * *mm / (sqrt(*vv) / sqrt(bc2) + eps);
            }
    }
}

/* ------------------------------------------------------------------ the library run */

static const fsdp_tensor_spec ROOT[] = {
    {.name = "emb", .ndim = 2, .shape = {V, D}, .init = FSDP_INIT_NORMAL, .std = 0.5f},
    {.name = "head", .ndim = 2, .shape = {V, D}, .alias_of = "emb"},
};
static const fsdp_tensor_spec BLOCK[] = {
    {.name = "w1", .ndim = 2, .shape = {H, D}, .init = FSDP_INIT_NORMAL, .std = 0.4f},
    {.name = "b1", .ndim = 1, .shape = {H}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    {.name = "w2", .ndim = 2, .shape = {D, H}, .init = FSDP_INIT_NORMAL, .std = 0.3f},
    {.name = "b2", .ndim = 1, .shape = {D}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    {.name = "extra", .ndim = 1, .shape = {D}, .init = FSDP_INIT_NORMAL, .std = 0.1f},
};
enum { T_EMB = 0, T_HEAD = 1, T_W1 = 0, T_B1, T_W2, T_B2, T_EXTRA };

/* Reads tensor t of unit u (compute dtype) into fp32 dst. */
static void read_param(fsdp_unit_t *u, int t, float *dst, size_t n, fsdp_dtype cdt) {
    void *v = NULL;
    CHECK_OK(fsdp_unit_param(u, t, &v));
    if (v == NULL) return;
    if (cdt == FSDP_F32)
        memcpy(dst, v, n * sizeof(float));
    else
        fsdp_bf16_to_f32_n(dst, v, n);
}

/* dst (=)+= src per the first-touch flag. */
static void put(float *dst, int acc, const float *src, size_t n) {
    for (size_t k = 0; dst && k < n; k++)
        dst[k] = acc ? dst[k] + src[k] : src[k];
}

/* Fills two freed blocks of n floats with NaN so the allocator likely hands garbage to main_grad
 * (debug builds poison main_grad themselves); the unused tensor must still come out exactly zero. */
static void dirty_heap(size_t n) {
    float *a = NULL, *b = NULL;
    if (fsdp_mem_alloc((void **)&a, n * 4, FSDP_MEM_OTHER) != FSDP_OK) return;
    if (fsdp_mem_alloc((void **)&b, n * 4, FSDP_MEM_OTHER) == FSDP_OK) {
        for (size_t k = 0; k < n; k++)
            a[k] = b[k] = NAN;
    }
    fsdp_mem_free(b);
    fsdp_mem_free(a);
}

typedef struct {
    float p[NP][V * H];
    float norm[STEPS], loss[STEPS];
} lib_result;

static int lib_train(fsdp_comm_t *comm, const fsdp_engine_config *ec, const reference *R, lib_result *out,
                     float *init_out[NP], const char *what) {
    fsdp_engine_t *e = NULL;
    fsdp_unit_t *root = NULL, *blk = NULL;
    fsdp_unit_config rc = fsdp_unit_config_default();
    rc.reshard_after_forward = 0; /* the root stays unsharded between its forward and backward */
    int ok = 0;
    CHECK_OK(fsdp_engine_init(&e, comm, ec));
    CHECK_OK(fsdp_engine_add_unit(e, "root", ROOT, 2, &rc, &root));
    CHECK_OK(fsdp_engine_add_unit(e, "block", BLOCK, 5, NULL, &blk));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!root || !blk) goto done;
    fsdp_unit_t *unit_of[NP] = {root, blk, blk, blk, blk, blk};
    const int t_of[NP] = {T_EMB, T_W1, T_B1, T_W2, T_B2, T_EXTRA};
    if (init_out) {
        for (int q = 0; q < NP; q++)
            CHECK_OK(fsdp_unit_gather_tensor(unit_of[q], t_of[q], init_out[q], -1));
        ok = 1;
        goto done;
    }
    const fsdp_dtype cdt = ec->compute_dtype;
    const int B = G / g_world, i0 = g_rank * B;
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = LR;
    oc.weight_decay = 0.1f;
    oc.beta2 = 0.95f;
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(fsdp_engine_begin_step(e, NMICRO));
        double loss = 0;
        for (int m = 0; m < NMICRO; m++) {
            CHECK_OK(fsdp_engine_begin_micro(e, m));
            float E[V * D], W1[H * D], b1[H], W2[D * H], b2[D], u[D];
            float x[G][D], z[G][H], h[G][H], y[G][D], dl[G][V], dy[G][D];
            CHECK_OK(fsdp_unit_pre_forward(root));
            read_param(root, T_EMB, E, V * D, cdt);
            for (int i = 0; i < B; i++)
                for (int d = 0; d < D; d++)
                    x[i][d] = E[tok_of(s, m, i0 + i) * D + d];
            CHECK_OK(fsdp_unit_pre_forward(blk));
            read_param(blk, T_W1, W1, H * D, cdt);
            read_param(blk, T_B1, b1, H, cdt);
            read_param(blk, T_W2, W2, D * H, cdt);
            read_param(blk, T_B2, b2, D, cdt);
            read_param(blk, T_EXTRA, u, D, cdt);
            for (int i = 0; i < B; i++) {
                for (int j = 0; j < H; j++) {
                    float a = b1[j];
                    for (int d = 0; d < D; d++)
                        a += W1[j * D + d] * x[i][d];
                    z[i][j] = a;
                    h[i][j] = a > 0 ? a : 0;
                }
                for (int d = 0; d < D; d++) {
                    float a = b2[d] + (EXTRA_USED[s][m] ? u[d] : 0.0f);
                    for (int j = 0; j < H; j++)
                        a += W2[d * H + j] * h[i][j];
                    y[i][d] = a;
                }
            }
            CHECK_OK(fsdp_unit_post_forward(blk));
            void *head_view = NULL, *emb_view = NULL; /* the tie: one view */
            CHECK_OK(fsdp_unit_param(root, T_HEAD, &head_view));
            CHECK_OK(fsdp_unit_param(root, T_EMB, &emb_view));
            CHECK(head_view == emb_view && head_view != NULL);
            for (int i = 0; i < B; i++) {
                float l[V], mx = -1e30f;
                double se = 0;
                int tg = tgt_of(s, m, i0 + i);
                for (int c = 0; c < V; c++) {
                    float a = 0;
                    for (int d = 0; d < D; d++)
                        a += E[c * D + d] * y[i][d];
                    l[c] = a;
                    mx = a > mx ? a : mx;
                }
                for (int c = 0; c < V; c++)
                    se += exp((double)(l[c] - mx));
                loss += (log(se) + mx - l[tg]) / B;
                for (int c = 0; c < V; c++)
                    dl[i][c] = (float)((exp((double)(l[c] - mx)) / se - (c == tg)) / B);
            }
            CHECK_OK(fsdp_unit_post_forward(root));

            /* backward: head, block (with recompute), embedding */
            CHECK_OK(fsdp_unit_pre_backward(root));
            float *gv;
            int acc;
            float gE[V * D] = {0};
            for (int i = 0; i < B; i++)
                for (int c = 0; c < V; c++)
                    for (int d = 0; d < D; d++)
                        gE[c * D + d] += dl[i][c] * y[i][d];
            CHECK_OK(fsdp_unit_main_grad(root, T_HEAD, &gv, &acc));
            CHECK(acc == (ec->accum == FSDP_ACCUM_NO_SYNC && m > 0));
            put(gv, acc, gE, V * D);
            for (int i = 0; i < B; i++)
                for (int d = 0; d < D; d++) {
                    float a = 0;
                    for (int c = 0; c < V; c++)
                        a += E[c * D + d] * dl[i][c];
                    dy[i][d] = a;
                }
            dirty_heap(fsdp_unit_padded_numel(blk));
            CHECK_OK(fsdp_unit_pre_backward(blk));
            CHECK_OK(fsdp_unit_pre_forward(blk)); /* activation recompute inside backward */
            read_param(blk, T_W1, W1, H * D, cdt);
            read_param(blk, T_B1, b1, H, cdt);
            read_param(blk, T_W2, W2, D * H, cdt);
            for (int i = 0; i < B; i++)
                for (int j = 0; j < H; j++) {
                    float a = b1[j];
                    for (int d = 0; d < D; d++)
                        a += W1[j * D + d] * x[i][d];
                    z[i][j] = a;
                    h[i][j] = a > 0 ? a : 0;
                }
            CHECK_OK(fsdp_unit_post_forward(blk));
            float gW1[H * D] = {0}, gb1[H] = {0}, gW2[D * H] = {0}, gb2[D] = {0}, dx[G][D];
            memset(dx, 0, sizeof dx);
            for (int i = 0; i < B; i++) {
                float dz[H];
                for (int d = 0; d < D; d++) {
                    gb2[d] += dy[i][d];
                    for (int j = 0; j < H; j++)
                        gW2[d * H + j] += dy[i][d] * h[i][j];
                }
                for (int j = 0; j < H; j++) {
                    float a = 0;
                    for (int d = 0; d < D; d++)
                        a += W2[d * H + j] * dy[i][d];
                    dz[j] = z[i][j] > 0 ? a : 0;
                    gb1[j] += dz[j];
                    for (int d = 0; d < D; d++)
                        gW1[j * D + d] += dz[j] * x[i][d];
                }
                for (int d = 0; d < D; d++)
                    for (int j = 0; j < H; j++)
                        dx[i][d] += W1[j * D + d] * dz[j];
            }
            CHECK_OK(fsdp_unit_main_grad(blk, T_W2, &gv, &acc));
            put(gv, acc, gW2, D * H);
            CHECK_OK(fsdp_unit_grad_from_f32(blk, T_B2, gb2));
            if (EXTRA_USED[s][m]) CHECK_OK(fsdp_unit_grad_from_f32(blk, T_EXTRA, gb2)); /* du == db2 */
            CHECK_OK(fsdp_unit_main_grad(blk, T_W1, &gv, &acc));
            put(gv, acc, gW1, H * D);
            if (cdt == FSDP_BF16) { /* the non-fused low-precision path */
                fsdp_bf16 gb1h[H];
                fsdp_f32_to_bf16_n(gb1h, gb1, H);
                CHECK_OK(fsdp_unit_grad_from_bf16(blk, T_B1, gb1h));
            } else {
                CHECK_OK(fsdp_unit_grad_from_f32(blk, T_B1, gb1));
            }
            int used_so_far =
                EXTRA_USED[s][m] || (ec->accum == FSDP_ACCUM_NO_SYNC && m > 0 && EXTRA_USED[s][0]);
            CHECK(fsdp_unit_grad_touched(blk, T_EXTRA) == used_so_far);
            CHECK_OK(fsdp_unit_post_backward(blk));
            CHECK_OK(fsdp_unit_main_grad(root, T_EMB, &gv, &acc));
            CHECK(acc == 1); /* the head already wrote the tied slice: accumulate */
            if (gv && !acc)
                for (int k = 0; k < V * D; k++)
                    gv[k] = 0.0f;
            for (int i = 0; gv && i < B; i++)
                for (int d = 0; d < D; d++)
                    gv[tok_of(s, m, i0 + i) * D + d] += dx[i][d];
            CHECK_OK(fsdp_unit_post_backward(root));
        }
        if (ec->max_inflight > 0) { /* overlap: the root's reduction is still running */
            CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) > 0);
            CHECK_OK(fsdp_engine_drain(e));
        }
        CHECK(fsdp_mem_current(FSDP_MEM_MAIN_GRAD) == 0 && fsdp_mem_current(FSDP_MEM_PARAM_FULL) == 0);

        fsdp_shard_view rs, bs;
        CHECK_OK(fsdp_unit_shard(root, &rs));
        CHECK_OK(fsdp_unit_shard(blk, &bs));
        fsdp_tensor_info ti;
        CHECK_OK(fsdp_unit_tensor_info(blk, T_EXTRA, &ti));
        if (s == 2) { /* never used this step: exactly zero although main_grad was never memset up front */
            int nz = 0;
            for (size_t k = 0; k < bs.numel; k++) {
                size_t gi = bs.offset + k;
                if (gi >= ti.offset && gi < ti.offset + ti.numel) nz += bs.grad[k] != 0.0f;
            }
            CHECKF(nz == 0, "%s: unused tensor has %d non-zero gradient elements", what, nz);
        }
        if (s == 0 && R && cdt == FSDP_F32 && ec->reduce_dtype == FSDP_F32) {
            /* the tie: E's gradient is the sum of the head use and the embedding use */
            int bad = 0, differs = 0;
            for (size_t k = 0; k < rs.numel; k++) {
                size_t gi = rs.offset + k;
                if (gi >= V * D) continue;
                bad += !test_close(rs.grad[k], R->gE_step0[gi], 1e-5, 1e-7);
                differs += fabs(R->gE_step0[gi] - R->gE_head_step0[gi]) > 1e-4;
            }
            CHECKF(bad == 0, "%s: %d elements of the tied gradient differ from head + embedding", what, bad);
            float dsum = (float)differs;
            CHECK_OK(fsdp_comm_all_reduce(comm, &dsum, &dsum, 1, FSDP_F32, FSDP_SUM));
            CHECK(dsum > 0); /* the embedding use contributes, so the sum is really checked */
        }
        float lossf = (float)(loss / NMICRO);
        CHECK_OK(fsdp_comm_all_reduce(comm, &lossf, &lossf, 1, FSDP_F32, FSDP_SUM));
        out->loss[s] = lossf / (float)g_world;
        CHECK_OK(fsdp_engine_clip_grad_norm(e, MAX_NORM, &out->norm[s]));
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    }
    CHECK(fsdp_engine_step_count(e) == STEPS);
    for (int q = 0; q < NP; q++)
        CHECK_OK(fsdp_unit_gather_tensor(unit_of[q], t_of[q], out->p[q], -1));
    ok = 1;
done:
    fsdp_engine_free(e);
    return ok;
}

/* max over parameters of |a - b| / (|b| + floor) */
static double max_rel(const float a[NP][V * H], const double b[NP][V * H], double floor_) {
    double mx = 0;
    for (int q = 0; q < NP; q++)
        for (size_t k = 0; k < P_N[q]; k++) {
            double r = fabs(a[q][k] - b[q][k]) / (fabs(b[q][k]) + floor_);
            mx = r > mx ? r : mx;
        }
    return mx;
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    g_rank = fsdp_comm_rank(comm);
    g_world = fsdp_comm_size(comm);

    /* initial weights (world-independent; mpi_unit checks that) feed the float64 reference */
    static float init[NP][V * H];
    float *init_p[NP];
    for (int q = 0; q < NP; q++)
        init_p[q] = init[q];
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    static lib_result res, first;
    CHECK(lib_train(comm, &ec, NULL, &res, init_p, "init"));
    static reference R;
    const float *ci[NP];
    for (int q = 0; q < NP; q++)
        ci[q] = init[q];
    ref_train(&R, ci);
    int clipped = 0;
    for (int s = 0; s < STEPS; s++)
        clipped += R.norm[s] > MAX_NORM;
    CHECKF(clipped > 0 && clipped < STEPS, "reference norms should straddle max_norm (%d of %d clipped)",
           clipped, STEPS);
    CHECK(R.loss[STEPS - 1] < R.loss[0]);

    const char *sn[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
    int have_first = 0;
    static lib_result sync_res;
    /* HYBRID_SHARD: groups of 2 at 4 ranks (2 groups), of 1 elsewhere (every rank a group: world
     * replicas of an unsharded model, through the split communicators) */
    const int group = g_world % 2 == 0 && g_world > 2 ? 2 : 1;
    for (int st = 0; st < 4; st++)
        for (int ac = 0; ac < 2; ac++)
            for (int po = 0; po < 2; po++) {
                ec = fsdp_engine_config_default();
                ec.compute_dtype = FSDP_F32;
                ec.strategy = (fsdp_strategy)st;
                ec.shard_group = st == FSDP_HYBRID_SHARD ? group : 0;
                ec.accum = (fsdp_accum_mode)ac;
                ec.main_grad = (fsdp_main_grad_policy)po;
                char what[96];
                snprintf(what, sizeof what, "%s/%s/%s", sn[st], ac ? "NO_SYNC" : "SHARDED",
                         po ? "EAGER" : "LAZY");
                /* Overlap (prefetch, reductions during the next backward) changes when collectives
                 * run, never what they compute: bit-identical to the synchronous run. */
                ec.max_inflight = 0;
                memset(&sync_res, 0, sizeof sync_res);
                CHECK(lib_train(comm, &ec, &R, &sync_res, NULL, what));
                ec.max_inflight = 2;
                memset(&res, 0, sizeof res);
                CHECK(lib_train(comm, &ec, &R, &res, NULL, what));
                CHECKF(memcmp(&res, &sync_res, sizeof res) == 0, "%s: overlap changed the results", what);
                double rel = max_rel((const float(*)[V * H]) res.p, (const double(*)[V * H]) R.p, 1e-2);
                double nrel = 0;
                for (int s = 0; s < STEPS; s++) {
                    double r = fabs(res.norm[s] - R.norm[s]) / R.norm[s];
                    nrel = r > nrel ? r : nrel;
                    CHECKF(test_close(res.loss[s], R.loss[s], 1e-5, 0), "%s step %d loss %.9g vs %.9g", what,
                           s, (double)res.loss[s], R.loss[s]);
                }
                CHECKF(rel < 5e-6, "%s: parameters differ from float64 reference by %.3g (relative)", what,
                       rel);
                CHECKF(nrel < 1e-6, "%s: gradient norm differs from float64 by %.3g", what, nrel);
                double xrel = 0;
                if (have_first)
                    for (int q = 0; q < NP; q++)
                        for (size_t k = 0; k < P_N[q]; k++) {
                            double r = fabs(res.p[q][k] - first.p[q][k]) / (fabs(first.p[q][k]) + 1e-2);
                            xrel = r > xrel ? r : xrel;
                        }
                CHECKF(xrel < 5e-6, "%s: parameters differ from FULL_SHARD/SHARDED/LAZY by %.3g", what, xrel);
                if (!have_first) {
                    first = res;
                    have_first = 1;
                }
                if (g_rank == 0)
                    printf("world %d %-32s loss %.5f -> %.5f  max rel diff vs float64: params %.2e norm "
                           "%.2e; vs "
                           "first config %.2e\n",
                           g_world, what, (double)res.loss[0], (double)res.loss[STEPS - 1], rel, nrel, xrel);
            }

    /* bf16 compute (params gathered in bf16) and bf16 on the wire: same training, looser tolerance */
    for (int v = 0; v < 2; v++) {
        ec = fsdp_engine_config_default();
        ec.compute_dtype = v == 0 ? FSDP_BF16 : FSDP_F32;
        ec.reduce_dtype = v == 0 ? FSDP_F32 : FSDP_BF16;
        ec.accum = v == 0 ? FSDP_ACCUM_SHARDED : FSDP_ACCUM_NO_SYNC;
        const char *what =
            v == 0 ? "FULL_SHARD/SHARDED/LAZY compute=bf16" : "FULL_SHARD/NO_SYNC/LAZY reduce=bf16";
        memset(&res, 0, sizeof res);
        CHECK(lib_train(comm, &ec, &R, &res, NULL, what));
        double mx = 0;
        for (int q = 0; q < NP; q++)
            for (size_t k = 0; k < P_N[q]; k++)
                mx = fmax(mx, fabs(res.p[q][k] - R.p[q][k]));
        CHECKF(mx < 4 * LR, "%s: parameters differ from float64 by %g (abs)", what, mx);
        CHECKF(test_close(res.norm[0], R.norm[0], 2e-2, 0), "%s: norm %g vs %g", what, (double)res.norm[0],
               R.norm[0]);
        CHECK(res.loss[STEPS - 1] < res.loss[0]);
        for (int s = 0; s < STEPS; s++)
            CHECKF(test_close(res.loss[s], R.loss[s], 2e-3, 0), "%s step %d loss %g vs %g", what, s,
                   (double)res.loss[s], R.loss[s]);
        if (g_rank == 0)
            printf("world %d %-32s loss %.5f -> %.5f  max abs diff vs float64 params %.2e\n", g_world, what,
                   (double)res.loss[0], (double)res.loss[STEPS - 1], mx);
    }
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
