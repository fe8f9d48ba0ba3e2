/* test_adamw_torch.c — fsdp_engine_adamw_step against torch.optim.AdamW (fixture written by
 * gen_adamw_fixture.py with torch 1.13): 5 steps on a decayed tensor and a no-decay tensor must give
 * the fixture's parameters bit for bit. Also checks clip_grad_norm's coefficient rule on one rank. */
#include "fsdp.h"
#include "test_util.h"

#include <stdint.h>

static int read_all(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

int main(void) {
    const char *path = FSDP_SOURCE_DIR "/tests/shard/adamw_torch.bin";
    FILE *f = fopen(path, "rb");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return TEST_MAIN_END();
    int32_t hdr[4];
    CHECK(read_all(f, hdr, sizeof hdr) && hdr[0] == 0x41444D57);
    const int na = hdr[1], nb = hdr[2], steps = hdr[3];
    CHECK(na > 0 && na < 100000 && nb > 0 && nb < 100000 && steps > 0 && steps < 100);
    float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *ga = malloc((size_t)na * steps * 4),
          *gb = malloc((size_t)nb * steps * 4), *fa = malloc((size_t)na * 4), *fb = malloc((size_t)nb * 4),
          *oa = malloc((size_t)na * 4), *ob = malloc((size_t)nb * 4);
    int ok = read_all(f, a, (size_t)na * 4) && read_all(f, b, (size_t)nb * 4);
    for (int s = 0; s < steps; s++)
        ok = ok && read_all(f, ga + (size_t)s * na, (size_t)na * 4) &&
             read_all(f, gb + (size_t)s * nb, (size_t)nb * 4);
    ok = ok && read_all(f, fa, (size_t)na * 4) && read_all(f, fb, (size_t)nb * 4);
    fclose(f);
    CHECKF(ok, "fixture %s truncated", path);

    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_comm_init(&comm, &cc, NULL, NULL));
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, NULL));
    fsdp_tensor_spec sp[2] = {{.name = "a", .ndim = 1, .shape = {na}},
                              {.name = "b", .ndim = 1, .shape = {nb}, .no_decay = 1}};
    fsdp_unit_t *u = NULL;
    CHECK_OK(fsdp_engine_add_unit(e, "u", sp, 2, NULL, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    if (!ok || !u) goto done;
    CHECK_OK(fsdp_unit_load_tensor(u, 0, a, -1));
    CHECK_OK(fsdp_unit_load_tensor(u, 1, b, -1));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 1e-3f;
    oc.beta1 = 0.9f;
    oc.beta2 = 0.95f;
    oc.eps = 1e-8f;
    oc.weight_decay = 0.1f;
    fsdp_shard_view sv;
    fsdp_tensor_info ia, ib;
    CHECK_OK(fsdp_unit_shard(u, &sv));
    CHECK_OK(fsdp_unit_tensor_info(u, 0, &ia));
    CHECK_OK(fsdp_unit_tensor_info(u, 1, &ib));
    for (int s = 0; s < steps; s++) {
        CHECK_OK(fsdp_engine_zero_grad(e));
        memcpy(sv.grad + ia.offset, ga + (size_t)s * na, (size_t)na * 4);
        memcpy(sv.grad + ib.offset, gb + (size_t)s * nb, (size_t)nb * 4);
        CHECK_OK(fsdp_engine_adamw_step(e, &oc));
    }
    CHECK(fsdp_engine_step_count(e) == steps);
    CHECK_OK(fsdp_unit_gather_tensor(u, 0, oa, -1));
    CHECK_OK(fsdp_unit_gather_tensor(u, 1, ob, -1));
    int da = 0, db = 0;
    for (int k = 0; k < na; k++)
        da += memcmp(&oa[k], &fa[k], 4) != 0;
    for (int k = 0; k < nb; k++)
        db += memcmp(&ob[k], &fb[k], 4) != 0;
    CHECKF(da == 0, "%d of %d decayed elements differ from torch", da, na);
    CHECKF(db == 0, "%d of %d no-decay elements differ from torch", db, nb);

    /* clipping on one rank: norm = float64 norm; scaled by max/(norm+1e-6) only when that is < 1 */
    double ss = 0;
    for (int k = 0; k < na; k++)
        ss += (double)ga[k] * ga[k];
    for (int k = 0; k < nb; k++)
        ss += (double)gb[k] * gb[k];
    for (int pass = 0; pass < 2; pass++) {
        float max_norm = pass == 0 ? (float)(sqrt(ss) * 2) : (float)(sqrt(ss) / 4);
        CHECK_OK(fsdp_engine_zero_grad(e));
        memcpy(sv.grad + ia.offset, ga, (size_t)na * 4);
        memcpy(sv.grad + ib.offset, gb, (size_t)nb * 4);
        float norm = 0;
        CHECK_OK(fsdp_engine_clip_grad_norm(e, max_norm, &norm));
        CHECKF(test_close(norm, sqrt(ss), 1e-6, 0), "norm %g vs %g", (double)norm, sqrt(ss));
        float coef = max_norm / (norm + 1e-6f);
        int bad = 0;
        for (int k = 0; k < na; k++)
            bad += sv.grad[ia.offset + k] != (pass == 0 ? ga[k] : ga[k] * coef);
        CHECKF(bad == 0, "pass %d: %d clipped gradients wrong", pass, bad);
    }
    CHECK_ERR(fsdp_engine_clip_grad_norm(e, 1.0f, NULL), FSDP_EINVAL, NULL);
    oc.beta1 = 1.0f;
    CHECK_ERR(fsdp_engine_adamw_step(e, &oc), FSDP_EINVAL, "beta1");
done:
    fsdp_engine_free(e);
    fsdp_comm_free(comm);
    free(a);
    free(b);
    free(ga);
    free(gb);
    free(fa);
    free(fb);
    free(oa);
    free(ob);
    return TEST_MAIN_END();
}
