/* llama_ref.c — the Llama family (and GPT-2 with LoRA: a fixture with a "gpt2" record) against PyTorch: one
 * fixture of tools/llama_reference.py (argv[1]:
 * transformers' LlamaForCausalLM / Qwen2 / Mistral in float64, or the tool's Qwen3 reference) — logits,
 * the loss over counted targets (FSDP_IGNORE_INDEX positions in the batch), every parameter gradient,
 * and the losses and pre-clip gradient norms of 10 torch.optim.AdamW steps with clipping; in fp32,
 * mixed bf16 and mixed f32-compute, with and without recompute, on any number of ranks (each rank a
 * disjoint slice of the batch, loss_scale making the engine's rank average the mean over all counted
 * targets). Registered by tests/model/llama.cmake at 1, 2 and 3 ranks; FSDP_TEST_VERBOSE=1 prints
 * every error. */
#include "kernels/kernels.h"
#include "llama_test_util.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

/* Tolerances: per-tensor relative error max|c - ref| / max|ref|, losses relative. Measured over the
 * five variants at 1-3 ranks (FSDP_TEST_VERBOSE=1 prints them):
 * fp32: gradients <= 1.3e-6 (qwen3), logits <= 5e-7, step losses <= 7.7e-7 — PyTorch's own fp32 run
 * sits as far from the float64 reference (the tool prints it). 1e-5, the bound the issue asks for,
 * leaves room for other summation orders; a real bug moves a gradient by >= 1e-3.
 * mixed bf16 GEMMs (activations rounded to bf16, 2^-9 relative each): logits 3.9e-3, loss 1.7e-5,
 * gradients 8.5e-3, step losses 1.4e-3, norms 1.2e-2. mixed f32-compute: step 0 is fp32 arithmetic
 * on the reference's own numbers (the fixture's weights are bf16 values), fp32's figures; from step 1
 * the gathered masters are rounded to bf16 while the reference keeps them: step losses 1.3e-3, norms
 * 1.5e-2. Mixed bounds are about 3x the measured worst of each class. */
typedef struct {
    double logits, loss, grad, grad_matrix, norm, steps;
} tolerances;
static const tolerances TOL_FP32 = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5};
static const tolerances TOL_MIXED = {1.2e-2, 5e-5, 2.5e-2, 2.5e-2, 4e-2, 4e-3};
static const tolerances TOL_F32C = {1e-5, 1e-5, 1e-5, 1e-5, 4.5e-2, 4e-3};

static int verbose;
static char fx_freeze[256]; /* the fixture's "freeze" record: fsdp_engine_config.freeze globs, or "" */

static void gt_rows(int B, int rank, int world, int *b0, int *b1) {
    *b0 = (int)((long long)B * rank / world);
    *b1 = (int)((long long)B * (rank + 1) / world);
}

/* Full fp32 sharded gradient of unit u on every rank. */
static fsdp_status gather_grad(fsdp_engine_t *e, fsdp_unit_t *u, float **out) {
    fsdp_shard_view sv;
    fsdp_status s = fsdp_unit_shard(u, &sv);
    if (s != FSDP_OK) return s;
    size_t padded = fsdp_unit_padded_numel(u);
    float *full = malloc((padded ? padded : 1) * sizeof(float));
    if (!full) return fsdp_set_error(FSDP_ENOMEM, "gather_grad: %zu floats", padded);
    fsdp_comm_t *c = fsdp_engine_comm(e);
    if (padded == 0) /* nothing trainable: no gradient */
        ;
    else if (fsdp_comm_size(c) == 1)
        memcpy(full, sv.grad, padded * sizeof(float));
    else if ((s = fsdp_comm_all_gather(c, sv.grad, full, sv.numel, FSDP_F32)) != FSDP_OK) {
        free(full);
        return s;
    }
    *out = full;
    return FSDP_OK;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double dmax = 0, bmax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > dmax) dmax = d;
        if (fabs((double)b[i]) > bmax) bmax = fabs((double)b[i]);
    }
    return bmax > 0 ? dmax / bmax : dmax;
}

static fsdp_status run(fsdp_comm_t *comm, const gpt_fixture *fx, const char *name, fsdp_dtype dt,
                       fsdp_mixed_compute mc, int recompute) {
    const int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm);
    const int f32c = mc == FSDP_MIXED_COMPUTE_F32;
    const tolerances *tol = dt == FSDP_F32 ? &TOL_FP32 : f32c ? &TOL_F32C : &TOL_MIXED;
    char mode[96];
    snprintf(mode, sizeof mode, "%s %s%s", name,
             dt == FSDP_F32 ? "fp32"
             : f32c         ? "mixed f32-compute"
                            : "mixed bf16",
             recompute ? " recompute" : "");
    CHECK_OK(fsdp_gemm_set_mixed_compute(mc));
    const int B = fx->B, T = fx->T, V = fx->V;
    int b0, b1;
    gt_rows(B, rank, world, &b0, &b1);
    const int nb = b1 - b0;
    fsdp_engine_t *e = NULL;
    void *m = NULL;
    const fsdp_model_family *fam = lt_fixture_gpt2(fx) ? fsdp_model_family_find("gpt2") : &fsdp_llama_family;
    int *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    float *ref_logits = malloc((size_t)B * T * V * sizeof(float));
    double *ref_losses = malloc((size_t)fx->steps * sizeof(double)),
           *ref_norms = malloc((size_t)fx->steps * 8);
    double ref_loss;
    fsdp_model_config mcfg;
    fsdp_status s = FSDP_ENOMEM;
    if (!tok || !tgt || !ref_logits || !ref_losses || !ref_norms || nb < 1) goto done;
    CHECK_OK(s = gpt_fixture_get_i32(fx, "tokens", (size_t)B * T, tok));
    CHECK_OK(s = gpt_fixture_get_i32(fx, "targets", (size_t)B * T, tgt));
    CHECK_OK(s = gpt_fixture_get_f32(fx, "logits", (size_t)B * T * V, ref_logits));
    CHECK_OK(s = gpt_fixture_get_f64(fx, "loss", 1, &ref_loss));
    CHECK_OK(s = gpt_fixture_get_f64(fx, "losses", (size_t)fx->steps, ref_losses));
    CHECK_OK(s = gpt_fixture_get_f64(fx, "norms", (size_t)fx->steps, ref_norms));
    CHECK_OK(s = lt_fixture_config(fx, &mcfg));
    if (s != FSDP_OK) goto done;
    mcfg.recompute = recompute;

    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = dt;
    ec.freeze = fx_freeze; /* the fixture's frozen tensors (requires_grad=False in PyTorch), or NULL */
    CHECK_OK(s = fsdp_engine_init(&e, comm, &ec));
    if (s != FSDP_OK) goto done;
    CHECK_OK(s = fam->init(&m, e, &mcfg));
    if (s != FSDP_OK) goto done;
    CHECK_OK(s = lt_load_weights(e, fx));
    if (s != FSDP_OK) goto done;

    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = fx->lr, oc.beta1 = fx->beta1, oc.beta2 = fx->beta2, oc.eps = fx->eps;
    oc.weight_decay = fx->weight_decay;
    const int n_all = lt_counted(tgt, (size_t)B * T),
              n_mine = lt_counted(tgt + (size_t)b0 * T, (size_t)nb * T);
    /* the engine averages over ranks: rank r's share of the mean over all counted targets */
    const float loss_scale = (float)world * (float)n_mine / (float)n_all;
    double worst_grad = 0, worst_step = 0;
    int n_frozen = 0;
    for (int step = 0; step < fx->steps; step++) {
        float loss_local = 0;
        CHECK_OK(s = fsdp_engine_begin_step(e, 1));
        CHECK_OK(s = fsdp_engine_begin_micro(e, 0));
        fsdp_model_batch bt = {tok + (size_t)b0 * T, tgt + (size_t)b0 * T, NULL, nb, T};
        CHECK_OK(s = fam->forward(m, &bt, &loss_local));
        if (s != FSDP_OK) goto done;
        float wl = loss_local * (float)n_mine / (float)n_all;
        CHECK_OK(s = fsdp_comm_all_reduce(comm, &wl, &wl, 1, FSDP_F32, FSDP_SUM));
        if (step == 0) {
            const float *lg;
            int lb, lt, lvp;
            CHECK_OK(s = fam->logits(m, &lg, &lb, &lt, &lvp));
            if (s != FSDP_OK) goto done;
            CHECK(lb == nb && lt == T && lvp == fx->Vp);
            double el = 0, bmax = 0, dmax = 0;
            for (size_t r = 0; r < (size_t)nb * T; r++)
                for (int v = 0; v < V; v++) {
                    double a = lg[r * lvp + v], b = ref_logits[((size_t)b0 * T + r) * V + v];
                    if (fabs(a - b) > dmax || isnan(a)) dmax = isnan(a) ? INFINITY : fabs(a - b);
                    if (fabs(b) > bmax) bmax = fabs(b);
                }
            el = dmax / bmax;
            double eloss = fabs(wl - ref_loss) / ref_loss;
            CHECKF(el <= tol->logits, "%s: logits rel err %.3g > %.3g", mode, el, tol->logits);
            CHECKF(eloss <= tol->loss, "%s: loss %.8f vs %.8f, rel err %.3g > %.3g", mode, wl, ref_loss,
                   eloss, tol->loss);
            if (verbose && rank == 0) printf("%s: logits %.3g loss %.3g\n", mode, el, eloss);
        }
        CHECK_OK(s = fam->backward(m, loss_scale));
        if (s != FSDP_OK) goto done;
        if (step == 0)
            for (int ui = 0; ui < fsdp_engine_num_units(e); ui++) {
                fsdp_unit_t *u = fsdp_engine_unit(e, ui);
                float *full = NULL;
                CHECK_OK(s = gather_grad(e, u, &full));
                if (s != FSDP_OK) goto done;
                for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
                    fsdp_tensor_info ti;
                    CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
                    if (ti.alias_of >= 0) continue;
                    char nm[64];
                    snprintf(nm, sizeof nm, "g.%s.%s", fsdp_unit_name(u), ti.name);
                    const gpt_fixture_record *rec = NULL;
                    for (int k = 0; k < fx->n_records; k++)
                        if (!strcmp(fx->recs[k].name, nm)) rec = &fx->recs[k];
                    /* frozen here exactly where PyTorch had no gradient (the fixture has none) */
                    CHECKF(ti.frozen == (rec == NULL), "%s: %s frozen %d but the fixture %s a gradient", mode,
                           nm, ti.frozen, rec ? "has" : "lacks");
                    if (ti.frozen) {
                        n_frozen++;
                        continue;
                    }
                    float *ref = malloc(ti.numel * sizeof(float));
                    CHECK(ref != NULL);
                    if (!ref) continue;
                    CHECK_OK(gpt_fixture_get_f32(fx, nm, ti.numel, ref));
                    double err = rel_err(full + ti.offset, ref, ti.numel);
                    double bound = ti.ndim == 2 ? tol->grad_matrix : tol->grad;
                    CHECKF(err <= bound, "%s: gradient %s rel err %.3g > %.3g", mode, nm, err, bound);
                    if (err > worst_grad) worst_grad = err;
                    if (verbose && rank == 0) printf("%s: %-26s %.3g\n", mode, nm, err);
                    free(ref);
                }
                free(full);
            }
        float norm = 0;
        CHECK_OK(s = fsdp_engine_clip_grad_norm(e, fx->grad_clip, &norm));
        CHECK_OK(s = fsdp_engine_adamw_step(e, &oc));
        if (s != FSDP_OK) goto done;
        double es = fabs(wl - ref_losses[step]) / ref_losses[step];
        double en = fabs(norm - ref_norms[step]) / ref_norms[step];
        CHECKF(es <= tol->steps, "%s: step %d loss %.8f vs %.8f, rel err %.3g > %.3g", mode, step, wl,
               ref_losses[step], es, tol->steps);
        CHECKF(en <= tol->norm, "%s: step %d grad norm %.6f vs %.6f, rel err %.3g > %.3g", mode, step, norm,
               ref_norms[step], en, tol->norm);
        if (es > worst_step) worst_step = es;
        if (verbose && rank == 0)
            printf("%s: step %d loss %.8f ref %.8f (%.3g) norm %.3g\n", mode, step, wl, ref_losses[step], es,
                   en);
    }
    if (rank == 0)
        printf("%s, %d ranks: worst gradient rel err %.3g, worst step-loss rel err %.3g%s\n", mode, world,
               worst_grad, worst_step,
               fx_freeze[0] ? " (frozen tensors as PyTorch's requires_grad=False)" : "");
    if (fx_freeze[0]) CHECKF(n_frozen > 0, "%s: --freeze %s froze no tensor", mode, fx_freeze);
done:
    if (m) fam->free(m);
    fsdp_engine_free(e);
    free(ref_norms);
    free(ref_losses);
    free(ref_logits);
    free(tgt);
    free(tok);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: llama_ref FIXTURE.bin (tools/llama_reference.py fixture writes it)\n");
        return 2;
    }
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (!comm) return 1;
    verbose = getenv("FSDP_TEST_VERBOSE") != NULL;
    const char *name = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    gpt_fixture fx;
    fsdp_status s = gpt_fixture_load(argv[1], &fx);
    CHECK_OK(s);
    for (int k = 0; s == FSDP_OK && k < fx.n_records; k++)
        if (!strcmp(fx.recs[k].name, "freeze") && fx.recs[k].dtype == FX_I32 &&
            fx.recs[k].numel < sizeof fx_freeze)
            for (size_t i = 0; i < fx.recs[k].numel; i++) {
                int32_t ch;
                memcpy(&ch, (const char *)fx.recs[k].data + 4 * i, 4);
                fx_freeze[i] = (char)ch;
            }
    if (s == FSDP_OK) {
        CHECKF(fx.B >= fsdp_comm_size(comm), "world %d is larger than the fixture batch %d",
               fsdp_comm_size(comm), fx.B);
        run(comm, &fx, name, FSDP_F32, FSDP_MIXED_COMPUTE_AUTO, 0);
        run(comm, &fx, name, FSDP_F32, FSDP_MIXED_COMPUTE_AUTO, 1);
        run(comm, &fx, name, FSDP_BF16, FSDP_MIXED_COMPUTE_BF16, 0);
        run(comm, &fx, name, FSDP_BF16, FSDP_MIXED_COMPUTE_F32, 0);
    }
    gpt_fixture_free(&fx);
    int rc = TEST_MAIN_END();
    fsdp_comm_free(comm);
    return rc;
}
