/* bench_memory.c — per-rank peak bytes by memory category for a GPT-2-124M-shaped stack of FSDP units
 * (root: wte, wpe, ln_f; 12 blocks) through one forward/backward of hooks only (no compute; every
 * main_grad is written as a kernel would), for main_grad LAZY vs EAGER vs ACCUM_NO_SYNC (2 micro-batches).
 * Run: tests/mpirun.sh 2 build/bench/bench_memory   (and 4). Prints a markdown table from rank 0. */
#include "fsdp.h"

#include <stdio.h>
#include <string.h>

#define C  768
#define L  12
#define NV 50304 /* padded GPT-2 vocabulary */
#define NT 1024  /* context length */

static fsdp_comm_t *comm;
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((x) != FSDP_OK) {                                                                                \
            fprintf(stderr, "%s failed: %s\n", #x, fsdp_last_error());                                       \
            fsdp_comm_abort(comm, 1);                                                                        \
        }                                                                                                    \
    } while (0)

#define VEC(n, s)                                                                                            \
    { .name = n, .ndim = 1, .shape = {s}, .no_decay = 1 }
#define MAT(n, r, c_)                                                                                        \
    { .name = n, .ndim = 2, .shape = {r, c_}, .init = FSDP_INIT_NORMAL, .std = 0.02f }

static const fsdp_tensor_spec ROOT[] = {
    MAT("wte", NV, C),
    MAT("wpe", NT, C),
    VEC("lnf.w", C),
    VEC("lnf.b", C),
    {.name = "lm_head", .ndim = 2, .shape = {NV, C}, .alias_of = "wte"},
};
static const fsdp_tensor_spec BLOCK[] = {
    VEC("ln1.w", C),       VEC("ln1.b", C),    MAT("qkv.w", 3 * C, C),    VEC("qkv.b", 3 * C),
    MAT("proj.w", C, C),   VEC("proj.b", C),   VEC("ln2.w", C),           VEC("ln2.b", C),
    MAT("fc.w", 4 * C, C), VEC("fc.b", 4 * C), MAT("fcproj.w", C, 4 * C), VEC("fcproj.b", C),
};
#define NB (int)(sizeof BLOCK / sizeof BLOCK[0])

/* Writes tensor t's main_grad as a kernel would: overwrite on first touch, else accumulate. */
static void touch(fsdp_unit_t *u, int t) {
    float *g;
    int acc;
    TRY(fsdp_unit_main_grad(u, t, &g, &acc));
    fsdp_tensor_info ti;
    TRY(fsdp_unit_tensor_info(u, t, &ti));
    if (!acc)
        memset(g, 0, ti.numel * sizeof(float));
    else
        for (size_t k = 0; k < ti.numel; k += 1024)
            g[k] += 0.0f;
}

typedef struct {
    const char *name;
    fsdp_main_grad_policy pol;
    fsdp_accum_mode accum;
    int n_micro;
} bench_case;

int main(int argc, char **argv) {
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "comm: %s\n", fsdp_last_error());
        return 1;
    }
    int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm);
    const bench_case cases[] = {
        {"LAZY", FSDP_MAIN_GRAD_LAZY, FSDP_ACCUM_SHARDED, 1},
        {"EAGER", FSDP_MAIN_GRAD_EAGER, FSDP_ACCUM_SHARDED, 1},
        {"NO_SYNC x2", FSDP_MAIN_GRAD_LAZY, FSDP_ACCUM_NO_SYNC, 2},
    };
    const fsdp_mem_cat cats[] = {FSDP_MEM_MASTER,     FSDP_MEM_OPTIM,     FSDP_MEM_GRAD_SHARD,
                                 FSDP_MEM_PARAM_FULL, FSDP_MEM_MAIN_GRAD, FSDP_MEM_COMM};
    const int ncat = (int)(sizeof cats / sizeof cats[0]);
    size_t n_params = 0;
    if (rank == 0) {
        printf("GPT-2 124M-shaped units (root + %d blocks), world %d, compute bf16, reduce fp32; per-rank "
               "peak MiB\n\n",
               L, world);
        printf("| policy | ");
        for (int c = 0; c < ncat; c++)
            printf("%s | ", fsdp_mem_cat_name(cats[c]));
        printf("total peak | main_grad predicted | time s |\n|---|");
        for (int c = 0; c < ncat + 3; c++)
            printf("---|");
        printf("\n");
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const bench_case *bc = &cases[k];
        fsdp_engine_config ec = fsdp_engine_config_default();
        ec.main_grad = bc->pol;
        ec.accum = bc->accum;
        fsdp_engine_t *e;
        TRY(fsdp_engine_init(&e, comm, &ec));
        fsdp_unit_config rc = fsdp_unit_config_default();
        rc.reshard_after_forward = 0;
        fsdp_unit_t *root, *blk[L];
        TRY(fsdp_engine_add_unit(e, "root", ROOT, 5, &rc, &root));
        for (int l = 0; l < L; l++) {
            char name[16];
            snprintf(name, sizeof name, "h%d", l);
            TRY(fsdp_engine_add_unit(e, name, BLOCK, NB, NULL, &blk[l]));
        }
        TRY(fsdp_engine_init_params(e));
        fsdp_mem_reset_peaks();
        double t0 = fsdp_time_s();
        TRY(fsdp_engine_begin_step(e, bc->n_micro));
        for (int m = 0; m < bc->n_micro; m++) {
            TRY(fsdp_engine_begin_micro(e, m));
            TRY(fsdp_unit_pre_forward(root));
            for (int l = 0; l < L; l++) {
                TRY(fsdp_unit_pre_forward(blk[l]));
                TRY(fsdp_unit_post_forward(blk[l]));
            }
            TRY(fsdp_unit_post_forward(root));
            TRY(fsdp_unit_pre_backward(root));
            touch(root, 4); /* lm_head (the tie: wte's slice, first touch) */
            touch(root, 2);
            touch(root, 3);
            for (int l = L - 1; l >= 0; l--) {
                TRY(fsdp_unit_pre_backward(blk[l]));
                for (int t = NB - 1; t >= 0; t--)
                    touch(blk[l], t);
                TRY(fsdp_unit_post_backward(blk[l]));
            }
            touch(root, 1);
            touch(root, 0); /* wte: accumulates onto lm_head's gradient */
            TRY(fsdp_unit_post_backward(root));
        }
        float norm;
        TRY(fsdp_engine_clip_grad_norm(e, 1.0f, &norm));
        double dt = fsdp_time_s() - t0;
        size_t root_b = fsdp_unit_padded_numel(root) * 4, blk_b = fsdp_unit_padded_numel(blk[0]) * 4;
        /* LAZY: the root's window spans the whole backward (lm_head first, wte last) -> root + 1 block */
        size_t predicted = (bc->pol == FSDP_MAIN_GRAD_EAGER || bc->accum == FSDP_ACCUM_NO_SYNC)
                               ? root_b + (size_t)L * blk_b
                               : root_b + blk_b;
        if (rank == 0) {
            printf("| %s | ", bc->name);
            for (int c = 0; c < ncat; c++)
                printf("%.1f | ", fsdp_mem_peak(cats[c]) / 1048576.0);
            printf("%.1f | %.1f%s | %.2f |\n", fsdp_mem_total_peak() / 1048576.0, predicted / 1048576.0,
                   predicted == fsdp_mem_peak(FSDP_MEM_MAIN_GRAD) ? " (exact)" : " (MISMATCH)", dt);
        }
        n_params = 0;
        for (int i = 0; i < fsdp_engine_num_units(e); i++) {
            fsdp_unit_t *u = fsdp_engine_unit(e, i);
            for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
                fsdp_tensor_info ti;
                TRY(fsdp_unit_tensor_info(u, t, &ti));
                if (ti.alias_of < 0) n_params += ti.numel;
            }
        }
        fsdp_engine_free(e);
    }
    if (rank == 0) printf("\nparameters: %zu (wte tied to lm_head)\n", n_params);
    fsdp_comm_free(comm);
    return 0;
}
