/* mpi_ckpt_device.c — checkpoints are the same files whatever device holds the shards (mpirun 1..4).
 * Three engines train the same two units for two steps, on the CPU, on the simulated device with host
 * memory (written in place after a synchronisation) and on the simulated device that claims memory the
 * host cannot address (FSDP_SIM_NO_HOST_ACCESS: initialisation, full tensors and checkpoints go
 * through host chunks and the device's copies). Each saves a checkpoint:
 *  - every shard file of the three checkpoints is the same bytes;
 *  - the CPU's checkpoint loads on the no-host device and the no-host device's on the CPU: masters and
 *    AdamW moments equal the saving engine's bit for bit, and one more step on the loaded engine gives
 *    the saving engine's next step exactly;
 *  - fsdp_unit_load_tensor / fsdp_unit_gather_tensor round-trip a tensor on the no-host device;
 *  - fsdp_unit_shard refuses the no-host device (FSDP_EUNSUPPORTED, naming it), fsdp_unit_shard_info
 *    gives its ranges with NULL pointers. */
#include "test_util.h"

#include "fsdp.h"
#include "checkpoint/checkpoint.h"
#include "core/device.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int rank, world;

#define ND 3

static fsdp_engine_t *build(fsdp_comm_t *comm, fsdp_device_t *dev, uint64_t seed) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_BF16;
    ec.seed = seed;
    ec.device = dev;
    fsdp_engine_t *e = NULL;
    CHECK_OK(fsdp_engine_init(&e, comm, &ec));
    if (e == NULL) return NULL;
    fsdp_tensor_spec a[] = {
        {.name = "w", .ndim = 2, .shape = {7, 3}, .init = FSDP_INIT_NORMAL, .std = 0.5f},
        {.name = "b", .ndim = 1, .shape = {5}, .init = FSDP_INIT_ONES, .no_decay = 1},
        {.name = "head", .ndim = 2, .shape = {7, 3}, .alias_of = "w"},
    };
    fsdp_tensor_spec s[] = {{.name = "x", .ndim = 1, .shape = {3}, .init = FSDP_INIT_NORMAL, .std = 1}};
    fsdp_unit_t *u;
    CHECK_OK(fsdp_engine_add_unit(e, "root", a, 3, NULL, &u));
    CHECK_OK(fsdp_engine_add_unit(e, "small", s, 1, NULL, &u));
    CHECK_OK(fsdp_engine_init_params(e));
    return e;
}

/* One step with gradients that depend on the rank, the step and the element (grad_from_f32: a device op
 * on the compute stream, reading its source when it runs, so each source lives until the step's clip
 * synchronised; the tied head's use accumulates). */
static float gbuf[2][3][32];
static void step(fsdp_engine_t *e, int s) {
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    CHECK_OK(fsdp_engine_begin_micro(e, 0));
    int n = fsdp_engine_num_units(e);
    for (int i = 0; i < n; i++) {
        CHECK_OK(fsdp_unit_pre_forward(fsdp_engine_unit(e, i)));
        CHECK_OK(fsdp_unit_post_forward(fsdp_engine_unit(e, i)));
    }
    for (int i = n - 1; i >= 0; i--) {
        fsdp_unit_t *u = fsdp_engine_unit(e, i);
        CHECK_OK(fsdp_unit_pre_backward(u));
        for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
            fsdp_tensor_info ti;
            CHECK_OK(fsdp_unit_tensor_info(u, t, &ti));
            if (strcmp(ti.name, "b") == 0) continue; /* never written: zero-filled */
            float *g = gbuf[i][t];
            for (size_t k = 0; k < ti.numel && k < 32; k++)
                g[k] = 0.01f * (float)(k + 1) * (float)(rank + 1) - 0.003f * (float)(s + t);
            CHECK_OK(fsdp_unit_grad_from_f32(u, t, g));
        }
        CHECK_OK(fsdp_unit_post_backward(u));
    }
    float norm;
    CHECK_OK(fsdp_engine_clip_grad_norm(e, 0.5f, &norm));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 0.05f;
    oc.weight_decay = 0.1f;
    CHECK_OK(fsdp_engine_adamw_step(e, &oc));
}

/* This rank's master and moments, through the copy API (any device). */
typedef struct {
    float a[3][2][64];
} state_t;
static void snapshot(fsdp_engine_t *e, state_t *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < fsdp_engine_num_units(e); i++) {
        fsdp_shard_view v;
        CHECK_OK(fsdp_unit_shard_info(fsdp_engine_unit(e, i), &v));
        for (int k = 0; k < 3 && v.numel <= 64; k++)
            CHECK_OK(fsdp_unit_shard_read(fsdp_engine_unit(e, i), (fsdp_shard_array)k, v.offset, v.numel,
                                          out->a[k][i]));
    }
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 16);
    *n = b ? fread(b, 1, 1 << 16, f) : 0;
    fclose(f);
    return b;
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) return 1;
    rank = fsdp_comm_rank(comm);
    world = fsdp_comm_size(comm);
    test_set_rank(rank);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tmp_mpi_ckpt_device_np%d", FSDP_BINARY_DIR, world);
    if (rank == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
        if (system(cmd) != 0) fprintf(stderr, "could not clear %s\n", dir);
    }
    fsdp_comm_barrier(comm);

    fsdp_device_t *devs[ND] = {NULL, NULL, NULL}; /* the CPU, sim, sim without host access */
    CHECK_OK(fsdp_device_sim_create(11 + (uint64_t)rank, 0, &devs[1]));
    CHECK_OK(fsdp_device_sim_create(23 + (uint64_t)rank, FSDP_SIM_NO_HOST_ACCESS, &devs[2]));
    fsdp_engine_t *e[ND];
    char *fin[ND] = {NULL, NULL, NULL};
    state_t saved[ND];
    fsdp_ckpt_state st = {2, 64, 0, {1, 2}}, got;
    cJSON *cfg = cJSON_CreateObject();
    for (int d = 0; d < ND; d++) {
        e[d] = build(comm, devs[d], 5);
        if (e[d] == NULL) return TEST_MAIN_END();
        step(e[d], 0);
        step(e[d], 1);
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/dev%d", dir, d);
        CHECK_OK(fsdp_ckpt_save(e[d], sub, cfg, &st, &fin[d]));
        snapshot(e[d], &saved[d]);
    }
    CHECKF(memcmp(&saved[0], &saved[1], sizeof saved[0]) == 0, "the simulated device trained otherwise");
    CHECKF(memcmp(&saved[0], &saved[2], sizeof saved[0]) == 0, "the no-host device trained otherwise");

    /* the same files: each rank compares its own shard file */
    for (int d = 1; d < ND && fin[0] && fin[d]; d++) {
        char pa[1200], pb[1200];
        snprintf(pa, sizeof pa, "%s/rank_%05d.bin", fin[0], rank);
        snprintf(pb, sizeof pb, "%s/rank_%05d.bin", fin[d], rank);
        size_t na = 0, nb = 0;
        char *a = slurp(pa, &na), *b = slurp(pb, &nb);
        CHECKF(a && b && na > 128 && na == nb && memcmp(a, b, na) == 0, "%s and %s differ (%zu, %zu bytes)",
               pa, pb, na, nb);
        free(a);
        free(b);
    }

    /* the CPU's checkpoint on the no-host device, and the other way */
    const int pairs[2][2] = {{0, 2}, {2, 0}}; /* {saved on, loaded on} */
    for (int p = 0; p < 2; p++) {
        int from = pairs[p][0], on = pairs[p][1];
        fsdp_engine_t *l = build(comm, devs[on], 77); /* other initial weights */
        if (l == NULL) continue;
        CHECK_OK(fsdp_ckpt_load(l, fin[from], &got));
        state_t loaded;
        snapshot(l, &loaded);
        CHECKF(memcmp(&loaded, &saved[from], sizeof loaded) == 0,
               "device %d's checkpoint loads otherwise on %d", from, on);
        CHECK(got.step == st.step && fsdp_engine_step_count(l) == 2);
        step(l, 2);
        step(e[from], 2);
        state_t a, b;
        snapshot(l, &a);
        snapshot(e[from], &b);
        CHECKF(memcmp(&a, &b, sizeof a) == 0, "a step after loading device %d's checkpoint on %d differs",
               from, on);
        fsdp_engine_free(l);
    }

    /* full tensors through copies on the no-host device; raw views refused there */
    fsdp_unit_t *root = fsdp_engine_unit(e[2], 0);
    float w[21], back[21] = {0};
    for (int k = 0; k < 21; k++)
        w[k] = 0.25f * (float)k - 1.0f;
    CHECK_OK(fsdp_unit_load_tensor(root, 0, w, -1));
    CHECK_OK(fsdp_unit_gather_tensor(root, 0, back, -1));
    CHECK(memcmp(w, back, sizeof w) == 0);
    fsdp_shard_view v;
    CHECK_ERR(fsdp_unit_shard(root, &v), FSDP_EUNSUPPORTED, "device 'sim'");
    CHECK_OK(fsdp_unit_shard_info(root, &v));
    CHECK(v.master == NULL && v.adam_m == NULL && v.numel == fsdp_unit_padded_numel(root) / (size_t)world);
    CHECK_ERR(fsdp_unit_shard_read(root, FSDP_SHARD_MASTER, v.offset + v.numel, 1, back), FSDP_EINVAL,
              "not inside this rank's shard");

    for (int d = 0; d < ND; d++) {
        fsdp_engine_free(e[d]);
        free(fin[d]);
    }
    fsdp_device_sim_destroy(devs[1]);
    fsdp_device_sim_destroy(devs[2]);
    cJSON_Delete(cfg);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
