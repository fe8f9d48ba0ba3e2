/* fuzz_ckpt.h — the known-good checkpoint the manifest and shard fuzz targets start from: a world-1
 * save (src/checkpoint/checkpoint.h) of two small units, one with a tied tensor and padding, written once
 * per fuzzing process into the scratch folder. The targets then replace one file of it per input. */
#ifndef FSDP_FUZZ_CKPT_H
#define FSDP_FUZZ_CKPT_H

#include "fuzz_common.h"

#include "fsdp.h"
#include "checkpoint/checkpoint.h"
#include "io/io.h"
#include "train/config.h"

#include <cjson/cJSON.h>

#define FUZZ_STEP 7
static char fuzz_step_dir[512];

/* Unit 0 "root": wte (5, 3) and its alias lm_head; unit 1 "block0": w (2, 2), b (2). Padded by 2 and
 * 3 elements. Values: element e of array k of unit u is u + 0.25 e - k. */
static void fuzz_ckpt_make(void) {
    static fsdp_ckpt_tensor t0[2] = {{"wte", 2, {5, 3}, 0, 15, -1, 0}, {"lm_head", 2, {5, 3}, 0, 15, 0, 0}};
    static fsdp_ckpt_tensor t1[2] = {{"w", 2, {2, 2}, 0, 4, -1, 0}, {"b", 1, {2}, 4, 2, -1, 0}};
    fsdp_ckpt_unit units[2] = {{"root", 15, 17, 2, t0, 0, 0}, {"block0", 6, 9, 2, t1, 0, 0}};
    static float arr[2][3][17];
    fsdp_ckpt_part parts[2];
    for (int u = 0; u < 2; u++) {
        for (int k = 0; k < 3; k++)
            for (int e = 0; e < 17; e++)
                arr[u][k][e] = (float)u + 0.25f * (float)e - (float)k;
        parts[u] = (fsdp_ckpt_part){
            .numel = units[u].padded_numel, .master = arr[u][0], .adam_m = arr[u][1], .adam_v = arr[u][2]};
    }
    fsdp_ckpt_state st = {FUZZ_STEP, 24, 1, {11, 12}};
    fsdp_train_config cfg = fsdp_train_config_default();
    cfg.vocab = 257; /* as the trainer stores it: resolved, so fsdp_train_config_from_json accepts it */
    cfg.max_seq_len = cfg.seq_len;
    cJSON *cj = fsdp_train_config_to_json(&cfg);
    char ck[512];
    fuzz_path(ck, sizeof ck, "ck");
    char *fin = NULL;
    if (!cj || fsdp_ckpt_save_parts(NULL, ck, cj, 2, units, parts, &st, &fin) != FSDP_OK) {
        fprintf(stderr, "fuzz: cannot write the base checkpoint: %s\n", fsdp_last_error());
        abort();
    }
    snprintf(fuzz_step_dir, sizeof fuzz_step_dir, "%s", fin);
    free(fin);
    cJSON_Delete(cj);
    /* The base must read back completely, else the targets would only ever test error paths. */
    fsdp_ckpt_reader *r = NULL;
    fsdp_ckpt_state got;
    float m[17];
    fsdp_train_config back = fsdp_train_config_default();
    FUZZ_REQUIRE(fsdp_ckpt_open(&r, fuzz_step_dir) == FSDP_OK);
    FUZZ_REQUIRE(fsdp_ckpt_state_get(r, &got) == FSDP_OK && got.step == FUZZ_STEP && got.rng[1] == 12);
    FUZZ_REQUIRE(fsdp_ckpt_read_range(r, 1, 0, 9, m, NULL, NULL) == FSDP_OK && m[5] == arr[1][0][5]);
    FUZZ_REQUIRE(fsdp_train_config_from_json(&back, fsdp_ckpt_config(r), "base") == FSDP_OK);
    fsdp_ckpt_close(r);
}

/* Everything a reader of an opened checkpoint does: state, every unit's whole range (bounded), the
 * model settings of its config. Results are not trusted; only memory safety and clean errors are
 * checked (and that a success leaves a sane reader). */
static void fuzz_ckpt_exercise(fsdp_ckpt_reader *r) {
    FUZZ_REQUIRE(fsdp_ckpt_world(r) >= 1);
    fsdp_ckpt_state st;
    (void)fsdp_ckpt_state_get(r, &st);
    static float m[4096], a[4096], v[4096];
    for (int u = 0; u < fsdp_ckpt_num_units(r); u++) {
        const fsdp_ckpt_unit *U = fsdp_ckpt_unit_desc(r, u);
        FUZZ_REQUIRE(U != NULL && U->numel <= U->padded_numel);
        for (int t = 0; t < U->n_tensors; t++)
            FUZZ_REQUIRE(U->tensors[t].offset + U->tensors[t].numel <= U->numel);
        size_t n = U->padded_numel < 4096 ? U->padded_numel : 4096;
        (void)fsdp_ckpt_read_range(r, u, 0, n, m, a, v);
        if (U->padded_numel > 1) (void)fsdp_ckpt_read_range(r, u, U->padded_numel / 2, 1, m, NULL, v);
    }
    (void)fsdp_ckpt_read_range(r, fsdp_ckpt_num_units(r), 0, 1, m, a, v); /* a unit past the end */
    fsdp_train_config cfg = fsdp_train_config_default();
    (void)fsdp_train_config_from_json(&cfg, fsdp_ckpt_config(r), "fuzz manifest");
}

#endif
