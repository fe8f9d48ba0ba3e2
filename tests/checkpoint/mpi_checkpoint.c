/* mpi_checkpoint.c — checkpoints of a live engine under mpirun 1..4: every rank saves its shards of
 * two units (one smaller than the world, one with a tied alias), the files are read back as every
 * world size 1..5 would re-slice them, a second engine loads them (master, AdamW moments, step,
 * trainer state), and a corrupted shard makes the load fail on every rank, not just the one reading
 * it. Values are a function of (unit, global element), so each rank computes what it expects. */
#include "test_util.h"

#include "fsdp.h"
#include "checkpoint/checkpoint.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, world;

#define TRY_(expr)                                                                                           \
    do {                                                                                                     \
        fsdp_status s_ = (expr);                                                                             \
        if (s_ != FSDP_OK) return s_;                                                                        \
    } while (0)

static float val(int u, size_t e, int k) {
    return (float)(100 * u + (int)e + 1) * (k == 0 ? 1.0f : k == 1 ? 0.5f : 2.0f);
}

static fsdp_status build(fsdp_comm_t *comm, fsdp_engine_t **eng, uint64_t seed) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32;
    ec.seed = seed;
    TRY_(fsdp_engine_init(eng, comm, &ec));
    fsdp_tensor_spec a[] = {
        {.name = "w", .ndim = 2, .shape = {7, 3}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
        {.name = "b", .ndim = 1, .shape = {5}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
        {.name = "head", .ndim = 2, .shape = {7, 3}, .alias_of = "w"},
    };
    fsdp_tensor_spec s[] = {{.name = "x", .ndim = 1, .shape = {2}, .init = FSDP_INIT_ONES}};
    fsdp_unit_t *u;
    TRY_(fsdp_engine_add_unit(*eng, "root", a, 3, NULL, &u));
    TRY_(fsdp_engine_add_unit(*eng, "small", s, 1, NULL, &u));
    return fsdp_engine_init_params(*eng);
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) return 1;
    rank = fsdp_comm_rank(comm);
    world = fsdp_comm_size(comm);
    test_set_rank(rank);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tmp_mpi_ckpt_np%d", FSDP_BINARY_DIR, world);
    if (rank == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not clear %s\n", dir);
    }
    fsdp_comm_barrier(comm);

    fsdp_engine_t *eng = NULL, *eng2 = NULL;
    CHECK_OK(build(comm, &eng, 1));
    /* Give every element of every shard a known value (padding stays as init left it: 0). */
    for (int u = 0; u < fsdp_engine_num_units(eng); u++) {
        fsdp_unit_t *U = fsdp_engine_unit(eng, u);
        fsdp_shard_view v;
        CHECK_OK(fsdp_unit_shard(U, &v));
        for (size_t i = 0; i < v.numel; i++) {
            size_t e = v.offset + i;
            int real = e < fsdp_unit_numel(U);
            v.master[i] = real ? val(u, e, 0) : 0;
            v.adam_m[i] = real ? val(u, e, 1) : 0;
            v.adam_v[i] = real ? val(u, e, 2) : 0;
        }
    }
    fsdp_engine_set_step_count(eng, 42);
    fsdp_ckpt_state st = {42, 4096, 3, {7, 9}}, got = {0};
    cJSON *cfg = cJSON_CreateObject();
    char *fin = NULL;
    CHECK_OK(fsdp_ckpt_save(eng, dir, cfg, &st, &fin));
    CHECK(fin != NULL && strstr(fin, "step_000042") != NULL);

    /* Re-slice as every world size 1..5 would, through the engine-free reader. */
    fsdp_ckpt_reader *r = NULL;
    CHECK_OK(fsdp_ckpt_open(&r, fin));
    if (r) {
        CHECK(fsdp_ckpt_world(r) == world);
        int bad = 0;
        for (int w2 = 1; w2 <= 5; w2++)
            for (int u = 0; u < 2; u++) {
                size_t numel = fsdp_ckpt_unit_desc(r, u)->numel,
                       padded = (numel + (size_t)w2 - 1) / (size_t)w2 * (size_t)w2;
                for (int q = 0; q < w2; q++) {
                    size_t off, len;
                    fsdp_shard_range(padded, q, w2, &off, &len);
                    float a[64], m[64], v[64];
                    if (fsdp_ckpt_read_range(r, u, off, len, a, m, v) != FSDP_OK) bad++;
                    for (size_t i = 0; i < len; i++) {
                        size_t e = off + i;
                        bad += a[i] != (e < numel ? val(u, e, 0) : 0) ||
                               m[i] != (e < numel ? val(u, e, 1) : 0) ||
                               v[i] != (e < numel ? val(u, e, 2) : 0);
                    }
                }
            }
        CHECKF(bad == 0, "%d re-sliced elements differ", bad);
        fsdp_ckpt_close(r);
    }

    /* A second engine with other initial weights loads the checkpoint. */
    CHECK_OK(build(comm, &eng2, 99));
    CHECK_OK(fsdp_ckpt_load(eng2, fin, &got));
    CHECK(got.step == 42 && got.data_pos == 4096 && got.data_epoch == 3 && got.rng[0] == 7 &&
          got.rng[1] == 9);
    CHECK(fsdp_engine_step_count(eng2) == 42);
    int diff = 0;
    for (int u = 0; u < 2; u++) {
        fsdp_shard_view a, b;
        CHECK_OK(fsdp_unit_shard(fsdp_engine_unit(eng, u), &a));
        CHECK_OK(fsdp_unit_shard(fsdp_engine_unit(eng2, u), &b));
        diff += memcmp(a.master, b.master, 4 * a.numel) != 0 ||
                memcmp(a.adam_m, b.adam_m, 4 * a.numel) != 0 || memcmp(a.adam_v, b.adam_v, 4 * a.numel) != 0;
    }
    CHECK(diff == 0);
    /* Full tensors gathered from the loaded engine match the values (the tied alias included). */
    float full[21];
    CHECK_OK(fsdp_unit_gather_tensor(fsdp_engine_unit(eng2, 0), 2, full, -1));
    int fb = 0;
    for (int i = 0; i < 21; i++)
        fb += full[i] != val(0, (size_t)i, 0);
    CHECK(fb == 0);

    /* Corrupt the last rank's shard payload: only that rank reads it, yet every rank fails. */
    fsdp_comm_barrier(comm);
    if (rank == 0) {
        char *p = fsdp_strdupf("%s/rank_%05d.bin", fin, world - 1);
        FILE *f = fopen(p, "r+b");
        if (f) {
            fseek(f, -41, SEEK_END); /* inside the last unit's data, before the trainer state */
            int c = fgetc(f);
            fseek(f, -41, SEEK_END);
            fputc(c ^ 0x40, f);
            fclose(f);
        }
        free(p);
    }
    fsdp_comm_barrier(comm);
    fsdp_status s = fsdp_ckpt_load(eng2, fin, &got);
    CHECKF(s != FSDP_OK, "load of a corrupt checkpoint succeeded");
    if (rank == world - 1)
        CHECKF(strstr(fsdp_last_error(), "checksum mismatch") != NULL, "%s", fsdp_last_error());
    else
        CHECKF(strstr(fsdp_last_error(), "failed on rank") != NULL, "%s", fsdp_last_error());
    /* Saving the same step again is refused on every rank; the files stay as they are. */
    CHECK(fsdp_ckpt_save(eng, dir, cfg, &st, NULL) != FSDP_OK);

    fsdp_comm_barrier(comm);
    if (rank == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    free(fin);
    cJSON_Delete(cfg);
    fsdp_engine_free(eng2);
    fsdp_engine_free(eng);
    int rc = TEST_MAIN_END();
    fsdp_comm_free(comm);
    return rc;
}
