/* test_prof.c — the per-kernel-class time accounting (core/prof.h) over real training steps: every
 * class whose kernel ran in a step has calls and time, classes whose kernel did not run have none, the
 * classes never sum to more than the step's wall time (exclusive time: a nested scope is not counted
 * twice), and nested scopes split their time between the classes. No speed is asserted. */
#include "core/prof.h"
#include "kernels/kernels.h"
#include "model/gpt2/gpt.h"
#include "test_util.h"

#include <omp.h>

/* Busy work the compiler cannot remove, so a scope's time is not 0 at the clock's resolution. */
static volatile double sink;
static void spin(int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)i * 1e-9;
    sink = s;
}

static double sum_classes(const fsdp_prof_counts *pc) {
    double s = 0;
    for (int c = 0; c < FSDP_PROF_NCLASS; c++)
        s += pc->seconds[c];
    return s;
}

/* Nested scopes: the inner scope's time goes to its class only. */
static void test_nesting(void) {
    fsdp_prof_reset();
    double t0 = fsdp_time_s();
    {
        FSDP_PROF_SCOPE(FSDP_PROF_ADAMW);
        spin(200000);
        {
            FSDP_PROF_SCOPE(FSDP_PROF_COMM);
            spin(200000);
            {
                FSDP_PROF_SCOPE(FSDP_PROF_CAST);
                spin(200000);
            }
        }
        spin(200000);
    }
    double wall = fsdp_time_s() - t0;
    fsdp_prof_counts pc;
    fsdp_prof_get(&pc);
    CHECK(pc.calls[FSDP_PROF_ADAMW] == 1 && pc.calls[FSDP_PROF_COMM] == 1 && pc.calls[FSDP_PROF_CAST] == 1);
    CHECK(pc.seconds[FSDP_PROF_ADAMW] > 0 && pc.seconds[FSDP_PROF_COMM] > 0 &&
          pc.seconds[FSDP_PROF_CAST] > 0);
    CHECKF(sum_classes(&pc) <= wall, "classes %.9f s > wall %.9f s", sum_classes(&pc), wall);
    CHECK(pc.calls[FSDP_PROF_GEMM_F32] == 0 && pc.seconds[FSDP_PROF_GEMM_F32] == 0);
    fsdp_prof_reset();
    fsdp_prof_get(&pc);
    CHECK(sum_classes(&pc) == 0 && pc.calls[FSDP_PROF_ADAMW] == 0);
    CHECK(strcmp(fsdp_prof_class_name(FSDP_PROF_SOFTMAX_CE), "softmax_ce") == 0);
    CHECK(strcmp(fsdp_prof_class_name(FSDP_PROF_NCLASS), "?") == 0);
}

/* One training step of a tiny GPT at world 1 in precision dt. */
static void test_step(fsdp_dtype dt) {
    fsdp_comm_t *comm = NULL;
    fsdp_engine_t *e = NULL;
    gpt_model_t *m = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = dt;
    gpt_config gc = gpt_config_default();
    gc.n_layer = 2, gc.n_embd = 64, gc.n_head = 4, gc.vocab_size = 300, gc.padded_vocab_size = 0;
    gc.max_seq_len = 32;
    enum { B = 2, T = 16 };
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37) % 300, tgt[i] = (i * 53 + 1) % 300;
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    CHECK_OK(fsdp_comm_init(&comm, &cc, NULL, NULL));
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    CHECK_OK(gpt_init(&m, e, &gc));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!m) goto done;
    for (int s = 0; s < 2; s++) { /* the second step is the one checked (the first creates primitives) */
        float loss, norm;
        fsdp_prof_counts fwd, bwd, opt;
        double t0 = fsdp_time_s();
        CHECK_OK(fsdp_engine_begin_step(e, 1));
        CHECK_OK(fsdp_engine_begin_micro(e, 0));
        fsdp_prof_reset();
        CHECK_OK(gpt_forward(m, tok, tgt, B, T, &loss));
        fsdp_prof_get(&fwd);
        fsdp_prof_reset();
        CHECK_OK(gpt_backward(m, 1.0f));
        fsdp_prof_get(&bwd);
        fsdp_prof_reset();
        CHECK_OK(fsdp_engine_clip_grad_norm(e, 1.0f, &norm));
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
        fsdp_prof_get(&opt);
        double wall = fsdp_time_s() - t0;
        if (s == 0) continue;
        const char *dn = fsdp_dtype_name(dt);
        double sum = sum_classes(&fwd) + sum_classes(&bwd) + sum_classes(&opt);
        CHECKF(sum <= wall, "%s: classes %.9f s > step %.9f s", dn, sum, wall);
        /* fp32 runs every GEMM with f32 parameters; mixed precision with bf16 ones, or with f32 compute
         * copies where the engine upcasts the gathered units (either class, whichever path it chose) */
        const fsdp_prof_class gemm =
            fwd.calls[FSDP_PROF_GEMM_BF16] ? FSDP_PROF_GEMM_BF16 : FSDP_PROF_GEMM_F32;
        const fsdp_prof_class other = gemm == FSDP_PROF_GEMM_BF16 ? FSDP_PROF_GEMM_F32 : FSDP_PROF_GEMM_BF16;
        if (dt == FSDP_F32) CHECK(gemm == FSDP_PROF_GEMM_F32);
        /* the kernels every forward and every backward of this model runs (each entry point timed) */
        const fsdp_prof_class ran[] = {gemm, FSDP_PROF_ATTENTION, FSDP_PROF_LAYERNORM, FSDP_PROF_SOFTMAX_CE,
                                       FSDP_PROF_ENCODER};
        for (size_t k = 0; k < sizeof ran / sizeof ran[0]; k++) {
            const fsdp_prof_class c = ran[k];
            CHECKF(fwd.calls[c] > 0 && fwd.seconds[c] > 0, "%s forward: %s: %llu calls, %.9f s", dn,
                   fsdp_prof_class_name(c), (unsigned long long)fwd.calls[c], fwd.seconds[c]);
            CHECKF(bwd.calls[c] > 0 && bwd.seconds[c] > 0, "%s backward: %s: %llu calls, %.9f s", dn,
                   fsdp_prof_class_name(c), (unsigned long long)bwd.calls[c], bwd.seconds[c]);
        }
        /* every class that was called has time; none of the optimizer's classes ran in forward */
        for (int c = 0; c < FSDP_PROF_NCLASS; c++) {
            CHECKF(!fwd.calls[c] == !(fwd.seconds[c] > 0), "%s forward: %s: %llu calls, %.9f s", dn,
                   fsdp_prof_class_name((fsdp_prof_class)c), (unsigned long long)fwd.calls[c],
                   fwd.seconds[c]);
            CHECKF(!bwd.calls[c] == !(bwd.seconds[c] > 0), "%s backward: %s: %llu calls, %.9f s", dn,
                   fsdp_prof_class_name((fsdp_prof_class)c), (unsigned long long)bwd.calls[c],
                   bwd.seconds[c]);
        }
        CHECK(fwd.calls[FSDP_PROF_ADAMW] == 0 && bwd.calls[FSDP_PROF_ADAMW] == 0);
        /* 2 layers x 4 linear layers + the LM head: 9 GEMM calls forward and 9 backward */
        CHECKF(fwd.calls[gemm] >= 9 && bwd.calls[gemm] >= 9, "%s: %llu + %llu GEMM calls", dn,
               (unsigned long long)fwd.calls[gemm], (unsigned long long)bwd.calls[gemm]);
        CHECK(fwd.calls[other] == 0 && bwd.calls[other] == 0);
        /* clipping (its all-reduce: a wait, nothing to wait for at world 1) and AdamW */
        CHECK(opt.calls[FSDP_PROF_ADAMW] == 2 && opt.seconds[FSDP_PROF_ADAMW] > 0);
        CHECK(opt.calls[FSDP_PROF_COMM] > 0);
        CHECK(opt.calls[gemm] == 0 && opt.calls[FSDP_PROF_ATTENTION] == 0);
        /* casts: the bf16 gathers and GEMM operands in mixed precision; none in fp32 */
        if (dt == FSDP_BF16)
            CHECK(fwd.calls[FSDP_PROF_CAST] > 0 && fwd.seconds[FSDP_PROF_CAST] > 0);
        else
            CHECK(fwd.calls[FSDP_PROF_CAST] + bwd.calls[FSDP_PROF_CAST] + opt.calls[FSDP_PROF_CAST] == 0);
    }
done:
    gpt_free(m);
    fsdp_engine_free(e);
    fsdp_comm_free(comm);
}

int main(void) {
    omp_set_num_threads(2);
    test_nesting();
    test_step(FSDP_F32);
    test_step(FSDP_BF16);
    fsdp_kernels_shutdown();
    return TEST_MAIN_END();
}
