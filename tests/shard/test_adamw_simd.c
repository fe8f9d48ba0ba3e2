/* test_adamw_simd.c — the SIMD paths of the optimizer agree with the scalar reference: AdamW (decay
 * and no-decay tensors, lengths with vector tails, a tensor long enough for the OpenMP split) gives
 * the same bits on every path this CPU has; clip_grad_norm's norm matches a float64 sum and the
 * clipped gradients are exactly g * (max_norm / (norm + 1e-6f)); a NaN (Inf) gradient gives a NaN (Inf)
 * norm, never 0. */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

enum { NA = 100003, NB = 37, STEPS = 3 };

/* A deterministic value in about [-scale, scale] from (seed, i). */
static float val(uint32_t seed, size_t i, float scale) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 0x9e3779b9u;
    h ^= h >> 15;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return scale * ((float)(h % 200001u) / 100000.0f - 1.0f);
}

typedef struct {
    float *pa, *pb, *ma, *va; /* results after STEPS steps */
    float norm[STEPS];
    int clip_bad;
} result;

static void run(fsdp_simd path, result *r) {
    fsdp_comm_t *comm = NULL;
    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_simd_force(path));
    CHECK_OK(fsdp_comm_init(&comm, &cc, NULL, NULL));
    CHECK_OK(fsdp_engine_init(&e, comm, NULL));
    fsdp_tensor_spec sp[2] = {{.name = "a", .ndim = 1, .shape = {NA}},
                              {.name = "b", .ndim = 1, .shape = {NB}, .no_decay = 1}};
    CHECK_OK(fsdp_engine_add_unit(e, "u", sp, 2, NULL, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    fsdp_shard_view sv;
    fsdp_tensor_info ia, ib;
    CHECK_OK(fsdp_unit_shard(u, &sv));
    CHECK_OK(fsdp_unit_tensor_info(u, 0, &ia));
    CHECK_OK(fsdp_unit_tensor_info(u, 1, &ib));
    float *a = malloc(NA * 4), *b = malloc(NB * 4);
    for (size_t i = 0; i < NA; i++)
        a[i] = val(1, i, 0.1f);
    for (size_t i = 0; i < NB; i++)
        b[i] = val(2, i, 1.0f);
    CHECK_OK(fsdp_unit_load_tensor(u, 0, a, -1));
    CHECK_OK(fsdp_unit_load_tensor(u, 1, b, -1));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 1e-2f;
    r->clip_bad = 0;
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(fsdp_engine_zero_grad(e));
        float *ga = sv.grad + ia.offset, *gb = sv.grad + ib.offset;
        double ss = 0.0;
        for (size_t i = 0; i < NA; i++)
            ga[i] = val(10 + (uint32_t)s, i, 0.01f), ss += (double)ga[i] * ga[i];
        for (size_t i = 0; i < NB; i++)
            gb[i] = val(20 + (uint32_t)s, i, 0.5f), ss += (double)gb[i] * gb[i];
        memcpy(a, ga, NA * 4);
        /* steps 0, 2 clip (max_norm below the norm), step 1 only measures */
        float max_norm = s == 1 ? 0.0f : (float)(sqrt(ss) / 3), norm = 0;
        CHECK_OK(fsdp_engine_clip_grad_norm(e, max_norm, &norm));
        CHECKF(test_close(norm, sqrt(ss), 1e-6, 0), "%s: norm %.9g vs float64 %.9g", fsdp_simd_name(path),
               (double)norm, sqrt(ss));
        r->norm[s] = norm;
        float coef = max_norm > 0 ? max_norm / (norm + 1e-6f) : 1.0f;
        for (size_t i = 0; i < NA; i++) {
            float want = coef < 1.0f ? a[i] * coef : a[i];
            r->clip_bad += memcmp(&want, &ga[i], 4) != 0;
        }
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    }
    /* One NaN (then one Inf) gradient element: the norm is NaN (Inf), never 0, measured or clipping. */
    for (int k = 0; k < 4; k++) {
        const float bad = k < 2 ? NAN : INFINITY, max_norm = k % 2 ? 1.0f : 0.0f;
        float norm = 0;
        CHECK_OK(fsdp_engine_zero_grad(e));
        (sv.grad + ia.offset)[NA / 2] = bad;
        CHECK_OK(fsdp_engine_clip_grad_norm(e, max_norm, &norm));
        CHECKF(k < 2 ? isnan(norm) : isinf(norm) && norm > 0, "%s: gradient %g, max_norm %g: norm %g",
               fsdp_simd_name(path), (double)bad, (double)max_norm, (double)norm);
    }
    memcpy(r->pa, sv.master + ia.offset, NA * 4);
    memcpy(r->pb, sv.master + ib.offset, NB * 4);
    memcpy(r->ma, sv.adam_m + ia.offset, NA * 4);
    memcpy(r->va, sv.adam_v + ia.offset, NA * 4);
    free(b);
    free(a);
    fsdp_engine_free(e);
    fsdp_comm_free(comm);
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
}

static int diff(const float *x, const float *y, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&x[i], &y[i], 4) != 0;
    return d;
}

int main(void) {
    result res[3];
    const fsdp_simd paths[3] = {FSDP_SIMD_SCALAR, FSDP_SIMD_AVX2, FSDP_SIMD_AVX512};
    int ran = 0;
    for (int p = 0; p < 3; p++) {
        result *r = &res[p];
        r->pa = malloc(NA * 4), r->pb = malloc(NB * 4), r->ma = malloc(NA * 4), r->va = malloc(NA * 4);
        if (p > 0 && fsdp_simd_force(paths[p]) != FSDP_OK) { /* this CPU lacks the path */
            fsdp_clear_error();
            continue;
        }
        run(paths[p], r);
        ran |= 1 << p;
        CHECKF(r->clip_bad == 0, "%s: %d clipped gradients are not g * coef", fsdp_simd_name(paths[p]),
               r->clip_bad);
        if (p == 0) continue;
        int d = diff(r->pa, res[0].pa, NA) + diff(r->pb, res[0].pb, NB) + diff(r->ma, res[0].ma, NA) +
                diff(r->va, res[0].va, NA);
        CHECKF(d == 0, "%s: %d AdamW results differ from the scalar path", fsdp_simd_name(paths[p]), d);
    }
    fprintf(stderr, "paths run: scalar%s%s\n", ran & 2 ? " avx2" : "", ran & 4 ? " avx512" : "");
    for (int p = 0; p < 3; p++)
        free(res[p].pa), free(res[p].pb), free(res[p].ma), free(res[p].va);
    return TEST_MAIN_END();
}
