/* test_checkpoint.c — the checkpoint format without an engine: CRC32C, a world-1 save through the
 * commit protocol, a faked 3-rank checkpoint read back as 1, 2, 4 and 5 ranks would (re-slicing by
 * global offset, padding zeroed), every corruption case (flipped payload/header byte, truncated,
 * missing or foreign shard file, broken manifest, every single-bit flip of the manifest caught by its
 * checksum, a NaN/Inf behind right checksums) with a message naming the file, never-overwrite,
 * and a save that hits a full disk (file size limit) leaving the previous checkpoint loadable.
 * Values are a function of (unit, element), so every expectation is computed here. */
#include "test_util.h"

#include "fsdp.h"
#include "checkpoint/checkpoint.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];

static float val(int u, size_t e, int k) {
    return (float)(1000 * u + (int)e) * (k == 0 ? 1.0f : k == 1 ? -0.5f : 0.25f);
}

/* Two units: "a" with w (5,7) at 0, b (7) at 48, tied alias of w; "s" with x (2): smaller than any
 * world here, so most ranks hold only padding. */
static fsdp_ckpt_tensor ta[3] = {
    {"w", 2, {5, 7}, 0, 35, -1, 0}, {"b", 1, {7}, 48, 7, -1, 0}, {"tied", 2, {5, 7}, 0, 35, 0, 0}};
static fsdp_ckpt_tensor ts[1] = {{"x", 1, {2}, 0, 2, -1, 0}};
static fsdp_ckpt_unit units[2] = {{"a", 55, 0, 3, ta, 0, 0}, {"s", 2, 0, 1, ts, 0, 0}};

static size_t round_up(size_t n, int w) { return (n + (size_t)w - 1) / (size_t)w * (size_t)w; }

/* Full per-unit arrays (padded for world), padding zero. */
static float *full[2][3];
static int make_full_keep; /* 1: fake_ckpt keeps the arrays as they are (test_nonfinite's values) */
static void make_full(int world) {
    if (make_full_keep) return;
    for (int u = 0; u < 2; u++) {
        units[u].padded_numel = round_up(units[u].numel, world);
        for (int k = 0; k < 3; k++) {
            free(full[u][k]);
            full[u][k] = calloc(units[u].padded_numel, sizeof(float));
            for (size_t e = 0; e < units[u].numel; e++)
                full[u][k][e] = val(u, e, k);
        }
    }
}

static cJSON *config(void) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "layers", 1);
    return c;
}

/* Writes a faked world-W checkpoint into path (a step folder). */
static void fake_ckpt(const char *path, int world, const fsdp_ckpt_state *st) {
    make_full(world);
    mkdir(path, 0755);
    uint32_t crcs[8];
    uint64_t bytes[8];
    for (int q = 0; q < world; q++) {
        fsdp_ckpt_part parts[2];
        for (int u = 0; u < 2; u++) {
            size_t off, len;
            fsdp_shard_range(units[u].padded_numel, q, world, &off, &len);
            parts[u] = (fsdp_ckpt_part){.offset = off,
                                        .numel = len,
                                        .master = full[u][0] + off,
                                        .adam_m = full[u][1] + off,
                                        .adam_v = full[u][2] + off};
        }
        char *f = fsdp_strdupf("%s/rank_%05d.bin", path, q);
        unlink(f);
        CHECK_OK(fsdp_ckpt_write_shard(f, q, world, 2, units, parts, st, &crcs[q], &bytes[q]));
        free(f);
    }
    char *m = fsdp_strdupf("%s/manifest.json", path);
    cJSON *c = config();
    CHECK_OK(fsdp_ckpt_write_manifest(m, world, c, 2, units, st, crcs, bytes));
    cJSON_Delete(c);
    free(m);
}

/* Reads every rank's range as world W2 would and compares with val(); padding must read 0. */
static int check_reslice(fsdp_ckpt_reader *r, int w2) {
    int bad = 0;
    for (int u = 0; u < 2; u++) {
        size_t padded = round_up(units[u].numel, w2);
        for (int q = 0; q < w2; q++) {
            size_t off, len;
            fsdp_shard_range(padded, q, w2, &off, &len);
            float *a = malloc(4 * len + 4), *m = malloc(4 * len + 4), *v = malloc(4 * len + 4);
            if (fsdp_ckpt_read_range(r, u, off, len, a, m, v) != FSDP_OK) bad++;
            for (size_t i = 0; i < len; i++) {
                size_t e = off + i;
                float wa = e < units[u].numel ? val(u, e, 0) : 0, wm = e < units[u].numel ? val(u, e, 1) : 0,
                      wv = e < units[u].numel ? val(u, e, 2) : 0;
                bad += a[i] != wa || m[i] != wm || v[i] != wv;
            }
            free(a);
            free(m);
            free(v);
        }
    }
    return bad;
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    char *d = NULL;
    size_t n;
    if (fsdp_io_read_file(from, &d, &n) == FSDP_OK) {
        FILE *f = fopen(to, "wb");
        fwrite(d, 1, n, f);
        fclose(f);
    }
    fsdp_mem_free(d);
}

/* Writes json to path with its checksum (fsdp_ckpt_manifest_seal). */
static void write_sealed(const char *path, const char *json) {
    char *t = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_ckpt_manifest_seal(json, strlen(json), &t, &n));
    FILE *f = fopen(path, "wb");
    fwrite(t, 1, n, f);
    fclose(f);
    free(t);
}

static void write_bytes(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

/* Issue 28 item 2: every single-bit flip of the manifest m of step folder `step` is refused by its
 * checksum (before JSON parsing), naming the file; without the field (an older manifest) it is
 * refused too; resealed it opens again. */
static void test_manifest_checksum(const char *step, const char *m) {
    char *orig = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_io_read_file(m, &orig, &n));
    CHECK(n > 100 && strstr(orig, "\"manifest_crc32c\": \"") != NULL);
    char *t = malloc(n);
    fsdp_ckpt_reader *r = NULL;
    size_t refused = 0, named = 0;
    for (size_t bit = 0; bit < 8 * n; bit++) {
        memcpy(t, orig, n);
        t[bit / 8] ^= (char)(1 << (bit % 8));
        write_bytes(m, t, n);
        if (fsdp_ckpt_open(&r, step) == FSDP_EFORMAT)
            refused++;
        else
            fsdp_ckpt_close(r);
        named +=
            strstr(fsdp_last_error(), "manifest checksum") != NULL && strstr(fsdp_last_error(), m) != NULL;
    }
    CHECK(refused == 8 * n && named == 8 * n);
    if (refused != 8 * n || named != 8 * n)
        fprintf(stderr, "  %zu of %zu bit flips refused, %zu named\n", refused, 8 * n, named);
    /* cut off the checksum: valid JSON, no field */
    char *at = strstr(orig, ",\n\t\"manifest_crc32c\"");
    CHECK(at != NULL);
    if (at) {
        size_t k = (size_t)(at - orig);
        memcpy(t, orig, k);
        memcpy(t + k, "\n}\n", 4); /* with its NUL: write_sealed takes a string */
        write_bytes(m, t, k + 3);
        CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "manifest checksum missing");
        /* a changed value, resealed, opens: the checksum is what refused it */
        write_sealed(m, t);
        CHECK_OK(fsdp_ckpt_open(&r, step));
        fsdp_ckpt_close(r);
    }
    /* the seal's own input check */
    char *o = NULL;
    size_t on = 0;
    CHECK_ERR(fsdp_ckpt_manifest_seal("[1]", 3, &o, &on), FSDP_EINVAL, "ending in '}'");
    write_bytes(m, orig, n);
    CHECK_OK(fsdp_ckpt_open(&r, step));
    fsdp_ckpt_close(r);
    free(t);
    fsdp_mem_free(orig);
}

/* Issue 28 item 3a: a NaN or Inf in a shard whose checksums are right (the writer computed them) is
 * refused when read, naming the file, the tensor, the element's index in it and the array. */
static void test_nonfinite(void) {
    char *step = fsdp_strdupf("%s/nonfinite", dir);
    fsdp_ckpt_state st = {3, 0, 0, {1, 2}};
    make_full(1);
    full[0][0][48 + 3] = NAN;  /* unit a, tensor b (offset 48), element 3, master */
    full[1][2][1] = -INFINITY; /* unit s, tensor x, element 1, AdamW v */
    make_full_keep = 1;
    fake_ckpt(step, 1, &st);
    make_full_keep = 0;
    fsdp_ckpt_reader *r = NULL;
    CHECK_OK(fsdp_ckpt_open(&r, step)); /* the checksums pass */
    float buf[64];
    CHECK_ERR(fsdp_ckpt_read_range(r, 0, 0, 55, buf, NULL, NULL), FSDP_EFORMAT,
              "rank_00000.bin: tensor a.b element 3 of the master weights is NaN: non-finite");
    CHECK_ERR(fsdp_ckpt_read_range(r, 0, 50, 5, buf, NULL, NULL), FSDP_EFORMAT, "a.b element 3 of the");
    CHECK_OK(fsdp_ckpt_read_range(r, 0, 0, 50, buf, buf, buf)); /* before it: finite */
    CHECK_OK(fsdp_ckpt_read_range(r, 1, 0, 2, buf, buf, NULL));
    CHECK_ERR(fsdp_ckpt_read_range(r, 1, 0, 2, NULL, NULL, buf), FSDP_EFORMAT,
              "tensor s.x element 1 of the AdamW v is -Inf");
    fsdp_ckpt_close(r);
    /* in the gap between a.w and a.b (no tensor) */
    make_full(1);
    full[0][1][40] = INFINITY;
    make_full_keep = 1;
    free(step);
    step = fsdp_strdupf("%s/nonfinite_gap", dir);
    fake_ckpt(step, 1, &st);
    make_full_keep = 0;
    CHECK_OK(fsdp_ckpt_open(&r, step));
    CHECK_ERR(fsdp_ckpt_read_range(r, 0, 0, 55, NULL, buf, NULL), FSDP_EFORMAT,
              "unit a element 40 (padding, in no tensor) of the AdamW m is +Inf");
    fsdp_ckpt_close(r);
    make_full(1);
    free(step);
}

static void test_crc(void) {
    CHECK(fsdp_crc32c(0, "123456789", 9) == 0xE3069283u); /* the standard CRC-32C check value */
    char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (char)(i * 31);
    CHECK(fsdp_crc32c(fsdp_crc32c(0, buf, 333), buf + 333, 667) == fsdp_crc32c(0, buf, 1000));
}

static void test_reslice_and_corruption(void) {
    fsdp_ckpt_state st = {7, 1234, 2, {11, 22}};
    char *step = fsdp_strdupf("%s/w3", dir);
    fake_ckpt(step, 3, &st);
    fsdp_ckpt_reader *r = NULL;
    CHECK_OK(fsdp_ckpt_open(&r, step));
    if (!r) return;
    CHECK(fsdp_ckpt_world(r) == 3 && fsdp_ckpt_num_units(r) == 2);
    CHECK(fsdp_ckpt_unit_desc(r, 0)->tensors[2].alias_of == 0 &&
          fsdp_ckpt_unit_desc(r, 0)->tensors[1].offset == 48);
    fsdp_ckpt_state got;
    CHECK_OK(fsdp_ckpt_state_get(r, &got));
    CHECK(got.step == 7 && got.data_pos == 1234 && got.data_epoch == 2 && got.rng[0] == 11 &&
          got.rng[1] == 22);
    for (int w2 = 1; w2 <= 5; w2++)
        CHECKF(check_reslice(r, w2) == 0, "re-slice 3 -> %d ranks", w2);
    const cJSON *c = fsdp_ckpt_config(r);
    CHECK(cJSON_GetObjectItem(c, "layers") && cJSON_GetObjectItem(c, "layers")->valueint == 1);
    fsdp_ckpt_close(r);

    char *f1 = fsdp_strdupf("%s/rank_00001.bin", step), *save = fsdp_strdupf("%s/saved.bin", dir);
    copy_file(f1, save);
    /* flipped payload byte: the header is fine, the checksum catches it on read */
    flip_byte(f1, FSDP_CKPT_HEADER_BYTES + 60);
    CHECK_OK(fsdp_ckpt_open(&r, step));
    if (r) {
        float buf[64];
        CHECK_ERR(fsdp_ckpt_read_range(r, 0, 0, 57, buf, NULL, NULL), FSDP_EFORMAT,
                  "payload checksum mismatch");
        CHECK(strstr(fsdp_last_error(), f1) != NULL);
        fsdp_ckpt_close(r);
    }
    copy_file(save, f1);
    flip_byte(f1, 20); /* header: world */
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "header checksum mismatch");
    CHECK(strstr(fsdp_last_error(), f1) != NULL);
    copy_file(save, f1);
    flip_byte(f1, 0);
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "bad magic");
    copy_file(save, f1);
    CHECK(truncate(f1, 300) == 0);
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "truncated");
    CHECK(strstr(fsdp_last_error(), f1) != NULL);
    CHECK(truncate(f1, 100) == 0);
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "truncated");
    unlink(f1);
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EIO, "missing shard file");
    CHECK(strstr(fsdp_last_error(), f1) != NULL);
    /* rank 2's file in rank 1's place */
    char *f2 = fsdp_strdupf("%s/rank_00002.bin", step);
    copy_file(f2, f1);
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "another checkpoint");
    copy_file(save, f1);
    CHECK_OK(fsdp_ckpt_open(&r, step));
    fsdp_ckpt_close(r);
    /* manifest (sealed, so the checksum passes and what is behind it is tested): broken JSON, a
     * repeated key, a wrong version */
    char *m = fsdp_strdupf("%s/manifest.json", step), *msave = fsdp_strdupf("%s/manifest.save", dir);
    copy_file(m, msave);
    write_sealed(m, "{\"version\": 1, \"units\": [}");
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "not valid JSON");
    CHECK(strstr(fsdp_last_error(), m) != NULL);
    write_sealed(m, "{\"version\": 1, \"step\": 1, \"step\": 2}"); /* issue 28 item 5 */
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "the key \"step\" appears twice");
    write_sealed(m, "{\"version\": 9, \"world_size\": 3, \"step\": 7}");
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, "version");
    copy_file(msave, m);
    CHECK_OK(fsdp_ckpt_open(&r, step));
    fsdp_ckpt_close(r);
    test_manifest_checksum(step, m);
    copy_file(msave, m);
    char *none = fsdp_strdupf("%s/none", dir);
    CHECK_ERR(fsdp_ckpt_open(&r, none), FSDP_EIO, none);
    free(none);
    free(m);
    free(msave);
    free(f2);
    free(f1);
    free(save);
    free(step);
}

/* Saves one world-1 checkpoint for step `step` with values shifted by `shift`. */
static fsdp_status save1(const char *ckdir, int64_t step, char **out) {
    make_full(1);
    fsdp_ckpt_part parts[2];
    for (int u = 0; u < 2; u++)
        parts[u] = (fsdp_ckpt_part){
            .numel = units[u].padded_numel, .master = full[u][0], .adam_m = full[u][1], .adam_v = full[u][2]};
    fsdp_ckpt_state st = {step, 0, 0, {1, 2}};
    cJSON *c = config();
    fsdp_status s = fsdp_ckpt_save_parts(NULL, ckdir, c, 2, units, parts, &st, out);
    cJSON_Delete(c);
    return s;
}

static void test_commit(void) {
    char *ck = fsdp_strdupf("%s/ck", dir), *fin = NULL, *res = NULL;
    CHECK_OK(save1(ck, 1, &fin));
    CHECK(fin && strstr(fin, "step_000001"));
    CHECK(fsdp_ckpt_has_latest(ck));
    CHECK_OK(fsdp_ckpt_resolve(ck, &res));
    CHECK(res && fin && !strcmp(res, fin));
    free(res);
    CHECK_OK(fsdp_ckpt_resolve(fin, &res)); /* a step folder resolves to itself */
    free(res);
    char *empty = fsdp_strdupf("%s/empty", dir);
    mkdir(empty, 0755);
    CHECK_ERR(fsdp_ckpt_resolve(empty, &res), FSDP_EIO, "no checkpoint in");
    free(empty);
    /* never overwritten */
    char *m = fsdp_strdupf("%s/manifest.json", fin);
    struct stat before, after;
    stat(m, &before);
    CHECK_ERR(save1(ck, 1, NULL), FSDP_EIO, "already exists");
    stat(m, &after);
    CHECK(before.st_mtim.tv_nsec == after.st_mtim.tv_nsec && before.st_ino == after.st_ino);

    /* A full disk during the step-2 save (a child with a 200-byte file size limit): the save fails
     * cleanly, step 1 and `latest` stay as they were, no temporary folder is left. */
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {200, 200};
        setrlimit(RLIMIT_FSIZE, &rl);
        fsdp_status s = save1(ck, 2, NULL);
        _exit(s == FSDP_EIO && strstr(fsdp_last_error(), "disk full") ? 0 : 1);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    char *s2 = fsdp_strdupf("%s/step_000002", ck), *t2 = fsdp_strdupf("%s/.tmp_step_000002", ck);
    CHECK(access(s2, F_OK) != 0 && access(t2, F_OK) != 0);
    CHECK_OK(fsdp_ckpt_resolve(ck, &res));
    CHECK(res && !strcmp(res, fin));
    fsdp_ckpt_reader *r = NULL;
    CHECK_OK(fsdp_ckpt_open(&r, res));
    if (r) {
        CHECK(check_reslice(r, 1) == 0 && check_reslice(r, 2) == 0);
        fsdp_ckpt_close(r);
    }
    free(res);
    /* A crashed save's leftover temporary folder does not get in the way of the next save. */
    mkdir(t2, 0755);
    char *junk = fsdp_strdupf("%s/rank_00000.bin", t2);
    FILE *f = fopen(junk, "wb");
    fputs("junk", f);
    fclose(f);
    CHECK_OK(save1(ck, 2, NULL));
    CHECK(access(t2, F_OK) != 0);
    CHECK_OK(fsdp_ckpt_resolve(ck, &res));
    CHECK(res && strstr(res, "step_000002"));
    free(res);
    free(junk);
    free(s2);
    free(t2);
    free(m);
    free(fin);
    free(ck);
}

/* Frozen tensors in the manifest (issue 37): a unit's frozen tensor (its offset within the frozen region),
 * frozen_numel and frozen_digest round-trip through write and open; the shards hold the trainable region
 * alone; malformed frozen fields are refused naming the manifest. */
static void rewrite(const char *m, const char *step, void (*edit)(cJSON *), const char *want) {
    char *text = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_io_read_file(m, &text, &n));
    cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
    fsdp_mem_free(text);
    CHECK(j != NULL);
    if (!j) return;
    cJSON_DeleteItemFromObjectCaseSensitive(j, "manifest_crc32c");
    char *orig = cJSON_Print(j);
    edit(j);
    char *t = cJSON_Print(j);
    write_sealed(m, t);
    fsdp_ckpt_reader *r = NULL;
    CHECK_ERR(fsdp_ckpt_open(&r, step), FSDP_EFORMAT, want);
    write_sealed(m, orig);
    free(t);
    free(orig);
    cJSON_Delete(j);
}
static cJSON *unit1(cJSON *j) { return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "units"), 1); }
static void no_digest(cJSON *j) { cJSON_DeleteItemFromObjectCaseSensitive(unit1(j), "frozen_digest"); }
static void short_digest(cJSON *j) {
    cJSON_ReplaceItemInObjectCaseSensitive(unit1(j), "frozen_digest", cJSON_CreateString("12ab"));
}
static void past_region(cJSON *j) {
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(unit1(j), "tensors"), 1);
    cJSON_ReplaceItemInObjectCaseSensitive(t, "offset", cJSON_CreateNumber(4));
}
static void frozen_string(cJSON *j) {
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(unit1(j), "tensors"), 1);
    cJSON_ReplaceItemInObjectCaseSensitive(t, "frozen", cJSON_CreateString("yes"));
}

static void test_frozen_manifest(void) {
    static fsdp_ckpt_tensor tf[2] = {{"x", 1, {2}, 0, 2, -1, 0}, {"z", 2, {3, 4}, 0, 12, -1, 1}};
    fsdp_ckpt_unit keep = units[1];
    units[1].n_tensors = 2, units[1].tensors = tf;
    units[1].frozen_numel = 12, units[1].frozen_digest = 0x0123456789abcdefull;
    char *step = fsdp_strdupf("%s/frozen_step", dir), *m = fsdp_strdupf("%s/manifest.json", step);
    fsdp_ckpt_state st = {3, 0, 0, {0, 0}};
    fake_ckpt(step, 2, &st);
    fsdp_ckpt_reader *r = NULL;
    CHECK_OK(fsdp_ckpt_open(&r, step));
    if (r) {
        const fsdp_ckpt_unit *u = fsdp_ckpt_unit_desc(r, 1);
        CHECK(u->n_tensors == 2 && u->numel == 2 && u->frozen_numel == 12 &&
              u->frozen_digest == 0x0123456789abcdefull);
        CHECK(u->tensors[0].frozen == 0 && u->tensors[1].frozen == 1 && u->tensors[1].offset == 0 &&
              u->tensors[1].numel == 12);
        CHECK(fsdp_ckpt_unit_desc(r, 0)->frozen_numel == 0 &&
              fsdp_ckpt_unit_desc(r, 0)->tensors[0].frozen == 0);
        CHECK(check_reslice(r, 3) == 0); /* the trainable region, resliced as before */
        fsdp_ckpt_close(r);
    }
    rewrite(m, step, no_digest, "frozen_numel / frozen_digest are malformed");
    rewrite(m, step, short_digest, "frozen_numel / frozen_digest are malformed");
    rewrite(m, step, past_region, "tensor 1 is malformed");
    rewrite(m, step, frozen_string, "tensor 1 is malformed");
    units[1] = keep;
    free(m);
    free(step);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_ckpt_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    test_crc();
    test_reslice_and_corruption();
    test_commit();
    test_nonfinite();
    test_frozen_manifest();
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < 3; k++)
            free(full[u][k]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_MAIN_END();
}
