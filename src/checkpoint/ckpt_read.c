/* ckpt_read.c — reading a checkpoint: the manifest (sealed, every unit and shard file described), each
 * rank's shard files verified (header CRC, version, rank and step, payload CRC), ranges of any unit
 * read across the files that hold them (resharding to any world size), and finding the latest step.
 * Writing is checkpoint.c. */
#include "checkpoint/checkpoint.h"
#include "checkpoint/ckpt_format.h"

#include "core/core.h"
#include "io/io.h"
#include "io/json.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- reader */

typedef struct {
    char *path;
    int fd;
    uint64_t payload_bytes;
    uint32_t crc;
    int verified;
    uint64_t *off, *numel; /* per unit: this file's shard range */
} shard_file;

struct fsdp_ckpt_reader {
    char *dir, *manifest_path;
    cJSON *manifest;
    int world, n_units;
    int64_t step;
    fsdp_ckpt_unit *units;
    shard_file *files;
    uint64_t *unit_data_off; /* [world * n_units]: byte offset of unit u's master in file q */
};

static void units_free(fsdp_ckpt_unit *units, int n) {
    for (int u = 0; units && u < n; u++) {
        for (int t = 0; t < units[u].n_tensors; t++)
            free(units[u].tensors[t].name);
        free(units[u].tensors);
        free(units[u].name);
    }
    free(units);
}

void fsdp_ckpt_close(fsdp_ckpt_reader *r) {
    if (!r) return;
    for (int q = 0; r->files && q < r->world; q++) {
        if (r->files[q].fd >= 0) close(r->files[q].fd);
        free(r->files[q].path);
        free(r->files[q].off);
        free(r->files[q].numel);
    }
    free(r->files);
    free(r->unit_data_off);
    units_free(r->units, r->n_units);
    cJSON_Delete(r->manifest);
    free(r->manifest_path);
    free(r->dir);
    free(r);
}

/* A non-negative integer JSON number (exact in a double), or -1. */
static double json_uint(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    return v->valuedouble;
}

static fsdp_status parse_units(fsdp_ckpt_reader *r, const cJSON *uj) {
    const char *mp = r->manifest_path;
    if (!cJSON_IsArray(uj)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"units\" is missing or not a list", mp);
    r->n_units = cJSON_GetArraySize(uj);
    r->units = calloc((size_t)r->n_units + 1, sizeof *r->units);
    if (!r->units) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d units", r->n_units);
    for (int u = 0; u < r->n_units; u++) {
        const cJSON *x = cJSON_GetArrayItem(uj, u);
        fsdp_ckpt_unit *U = &r->units[u];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name");
        double numel = json_uint(x, "numel"), padded = json_uint(x, "padded_numel");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(x, "tensors");
        if (!cJSON_IsString(nm) || numel < 0 || padded < numel || !cJSON_IsArray(ts) ||
            (uint64_t)padded % (uint64_t)r->world != 0)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: unit %d is malformed (name, numel, padded_numel, tensors)", mp, u);
        const cJSON *fd = cJSON_GetObjectItemCaseSensitive(x, "frozen_digest");
        double fnumel =
            cJSON_GetObjectItemCaseSensitive(x, "frozen_numel") ? json_uint(x, "frozen_numel") : 0;
        char *end = NULL;
        unsigned long long dg = cJSON_IsString(fd) ? strtoull(fd->valuestring, &end, 16) : 0;
        if (fnumel < 0 || (fnumel > 0) != (fd != NULL) ||
            (fd && (!cJSON_IsString(fd) || strlen(fd->valuestring) != 16 || !end || *end)))
            return fsdp_set_error(FSDP_EFORMAT, "%s: unit %d's frozen_numel / frozen_digest are malformed",
                                  mp, u);
        U->frozen_numel = (size_t)fnumel;
        U->frozen_digest = (uint64_t)dg;
        U->name = fsdp_strdupf("%s", nm->valuestring);
        U->numel = (size_t)numel;
        U->padded_numel = (size_t)padded;
        U->n_tensors = cJSON_GetArraySize(ts);
        U->tensors = calloc((size_t)U->n_tensors + 1, sizeof *U->tensors);
        if (!U->name || !U->tensors) return FSDP_ERR(FSDP_ENOMEM, "no memory for unit %d", u);
        for (int t = 0; t < U->n_tensors; t++) {
            const cJSON *tj = cJSON_GetArrayItem(ts, t);
            fsdp_ckpt_tensor *T = &U->tensors[t];
            T->alias_of = -1;
            const cJSON *tn = cJSON_GetObjectItemCaseSensitive(tj, "name");
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(tj, "shape");
            const cJSON *al = cJSON_GetObjectItemCaseSensitive(tj, "alias_of");
            const cJSON *fz = cJSON_GetObjectItemCaseSensitive(tj, "frozen");
            T->frozen = cJSON_IsTrue(fz);
            double off = json_uint(tj, "offset"), n = json_uint(tj, "numel");
            if (!cJSON_IsString(tn) || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) < 1 ||
                cJSON_GetArraySize(sh) > FSDP_MAX_DIMS || off < 0 || n < 0 ||
                off + n > (T->frozen ? fnumel : numel) || (fz && !cJSON_IsBool(fz)))
                return fsdp_set_error(FSDP_EFORMAT, "%s: unit %s tensor %d is malformed", mp, U->name, t);
            T->name = fsdp_strdupf("%s", tn->valuestring);
            if (!T->name) return FSDP_ERR(FSDP_ENOMEM, "no memory for a name");
            T->ndim = cJSON_GetArraySize(sh);
            size_t prod = 1;
            for (int d = 0; d < T->ndim; d++) {
                const cJSON *dv = cJSON_GetArrayItem(sh, d);
                /* A whole number in [0, 2^53] before any cast (casting 1e300 is undefined behaviour:
                 * found by fuzz_manifest), and a product that does not wrap (else [2^32, 2^32] would
                 * pass as 0 elements). */
                if (!cJSON_IsNumber(dv) || !(dv->valuedouble >= 0 && dv->valuedouble <= 9007199254740992.0) ||
                    dv->valuedouble != (double)(uint64_t)dv->valuedouble ||
                    !fsdp_mul_ok(prod, (size_t)dv->valuedouble, &prod))
                    return fsdp_set_error(FSDP_EFORMAT, "%s: tensor %s.%s has a bad shape", mp, U->name,
                                          T->name);
                T->shape[d] = (int64_t)dv->valuedouble;
            }
            T->offset = (size_t)off;
            T->numel = (size_t)n;
            if (prod != T->numel)
                return fsdp_set_error(FSDP_EFORMAT, "%s: tensor %s.%s: shape and numel disagree", mp, U->name,
                                      T->name);
            if (cJSON_IsString(al)) {
                for (int k = 0; k < t; k++)
                    if (!strcmp(U->tensors[k].name, al->valuestring)) T->alias_of = k;
                if (T->alias_of < 0)
                    return fsdp_set_error(FSDP_EFORMAT, "%s: tensor %s.%s aliases unknown \"%s\"", mp,
                                          U->name, T->name, al->valuestring);
            }
        }
    }
    return FSDP_OK;
}

/* Opens shard file q and checks its header against the manifest; reads its unit table. */
static fsdp_status open_shard(fsdp_ckpt_reader *r, int q, const cJSON *entry) {
    shard_file *f = &r->files[q];
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.bin", q);
    f->path = fsdp_strdupf("%s/%s", r->dir, name);
    f->off = calloc((size_t)r->n_units + 1, 8);
    f->numel = calloc((size_t)r->n_units + 1, 8);
    if (!f->path || !f->off || !f->numel) return FSDP_ERR(FSDP_ENOMEM, "no memory for shard %d", q);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(entry, "file");
    double mbytes = json_uint(entry, "bytes"), mcrc = json_uint(entry, "crc32c");
    if (!cJSON_IsString(fn) || strcmp(fn->valuestring, name) != 0 || mbytes < 0 || mcrc < 0)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: shard entry %d is malformed (want file \"%s\", bytes, crc32c)",
                              r->manifest_path, q, name);
    if (fsdp_io_open_input(f->path, &f->fd) != FSDP_OK) {
        if (errno != ENOENT) return FSDP_EIO; /* its message names the file and what it is */
        return fsdp_set_error(FSDP_EIO,
                              "missing shard file %s (%s): the checkpoint is incomplete; use an earlier one",
                              f->path, strerror(ENOENT));
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return fsdp_set_error(FSDP_EIO, "cannot stat %s: %s", f->path, strerror(errno));
    unsigned char h[FSDP_CKPT_HEADER_BYTES];
    if ((uint64_t)st.st_size < FSDP_CKPT_HEADER_BYTES)
        return fsdp_set_error(FSDP_EFORMAT, "%s is truncated: %lld bytes, shorter than its %d-byte header",
                              f->path, (long long)st.st_size, FSDP_CKPT_HEADER_BYTES);
    FSDP_TRY(fsdp_io_pread_all(f->fd, h, sizeof h, 0, f->path));
    if (memcmp(h + H_MAGIC, FSDP_CKPT_MAGIC, 8) != 0)
        return fsdp_set_error(FSDP_EFORMAT, "%s: bad magic (want \"%s\"): not an fsdp.c shard file", f->path,
                              FSDP_CKPT_MAGIC);
    if (get32(h, H_HCRC) != fsdp_crc32c(0, h, H_HCRC))
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: header checksum mismatch: the file is corrupt; use an earlier checkpoint",
                              f->path);
    if (get32(h, H_VERSION) != FSDP_CKPT_VERSION)
        return fsdp_set_error(FSDP_EFORMAT, "%s: shard format version %u is not supported (want %d)", f->path,
                              get32(h, H_VERSION), FSDP_CKPT_VERSION);
    if ((int)get32(h, H_RANK) != q || (int)get32(h, H_WORLD) != r->world ||
        (int)get32(h, H_NUNITS) != r->n_units || (int64_t)get64(h, H_STEP) != r->step)
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: header (rank %u, world %u, units %u, step %lld) disagrees with %s (rank %d, world "
            "%d, units %d, step %lld): a file from another checkpoint",
            f->path, get32(h, H_RANK), get32(h, H_WORLD), get32(h, H_NUNITS), (long long)get64(h, H_STEP),
            r->manifest_path, q, r->world, r->n_units, (long long)r->step);
    f->payload_bytes = get64(h, H_PBYTES);
    f->crc = get32(h, H_PCRC);
    if ((uint64_t)st.st_size != FSDP_CKPT_HEADER_BYTES + f->payload_bytes)
        return fsdp_set_error(FSDP_EFORMAT, "%s is truncated or padded: %lld bytes, its header says %llu",
                              f->path, (long long)st.st_size,
                              (unsigned long long)(FSDP_CKPT_HEADER_BYTES + f->payload_bytes));
    /* mcrc compared as a double: casting a recorded value above 2^32 to uint32_t is undefined
     * (found by fuzz_manifest). */
    if ((uint64_t)mbytes != (uint64_t)st.st_size || mcrc != (double)f->crc)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: size or checksum differs from %s's record: a file from another checkpoint",
                              f->path, r->manifest_path);
    size_t tb = (size_t)TABLE_ENTRY * (size_t)r->n_units;
    unsigned char *table = malloc(tb ? tb : 1);
    if (!table) return FSDP_ERR(FSDP_ENOMEM, "no memory for a shard table");
    fsdp_status s = fsdp_io_pread_all(f->fd, table, tb, FSDP_CKPT_HEADER_BYTES, f->path);
    uint64_t expect = tb + STATE_BYTES;
    for (int u = 0; s == FSDP_OK && u < r->n_units; u++) {
        f->off[u] = get64(table, u * TABLE_ENTRY);
        f->numel[u] = get64(table, u * TABLE_ENTRY + 8);
        uint64_t padded = get64(table, u * TABLE_ENTRY + 16);
        if (padded != r->units[u].padded_numel || f->off[u] > padded || f->numel[u] > padded - f->off[u])
            s = fsdp_set_error(FSDP_EFORMAT, "%s: unit %s's range [%llu, +%llu) of %llu disagrees with %s",
                               f->path, r->units[u].name, (unsigned long long)f->off[u],
                               (unsigned long long)f->numel[u], (unsigned long long)padded, r->manifest_path);
        expect += 12 * f->numel[u];
    }
    free(table);
    FSDP_TRY(s);
    if (expect != f->payload_bytes)
        return fsdp_set_error(FSDP_EFORMAT, "%s: payload of %llu bytes does not match its unit table (%llu)",
                              f->path, (unsigned long long)f->payload_bytes, (unsigned long long)expect);
    uint64_t off = FSDP_CKPT_HEADER_BYTES + tb;
    for (int u = 0; u < r->n_units; u++) {
        r->unit_data_off[(size_t)q * (size_t)r->n_units + (size_t)u] = off;
        off += 12 * f->numel[u];
    }
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_open(fsdp_ckpt_reader **out, const char *step_dir) {
    *out = NULL;
    fsdp_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return FSDP_ERR(FSDP_ENOMEM, "no memory for a checkpoint reader");
    char *text = NULL;
    size_t len;
    fsdp_status s = FSDP_OK;
    r->dir = fsdp_strdupf("%s", step_dir);
    r->manifest_path = fsdp_strdupf("%s/manifest.json", step_dir);
    if (!r->dir || !r->manifest_path) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for paths");
        goto fail;
    }
    s = fsdp_io_read_file(r->manifest_path, &text, &len);
    if (s == FSDP_OK) s = fsdp_ckpt_manifest_verify(text, len, r->manifest_path);
    if (s != FSDP_OK) goto fail;
    s = fsdp_json_parse(text, len, r->manifest_path, &r->manifest);
    if (s != FSDP_OK) goto fail;
    double ver = json_uint(r->manifest, "version"), world = json_uint(r->manifest, "world_size");
    double step = json_uint(r->manifest, "step");
    if (ver != FSDP_CKPT_VERSION || world < 1 || world > 1e6 || step < 0) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: bad or missing version (want %d), world_size or step",
                           r->manifest_path, FSDP_CKPT_VERSION);
        goto fail;
    }
    r->world = (int)world;
    r->step = (int64_t)step;
    s = parse_units(r, cJSON_GetObjectItemCaseSensitive(r->manifest, "units"));
    if (s != FSDP_OK) goto fail;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(r->manifest, "shards");
    if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) != r->world) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: \"shards\" must list %d files", r->manifest_path, r->world);
        goto fail;
    }
    r->files = calloc((size_t)r->world, sizeof *r->files);
    r->unit_data_off = calloc((size_t)r->world * (size_t)r->n_units + 1, 8);
    if (!r->files || !r->unit_data_off) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d shard files", r->world);
        goto fail;
    }
    for (int q = 0; q < r->world; q++)
        r->files[q].fd = -1;
    for (int q = 0; q < r->world; q++) {
        s = open_shard(r, q, cJSON_GetArrayItem(shards, q));
        if (s != FSDP_OK) goto fail;
    }
    fsdp_mem_free(text);
    *out = r;
    return FSDP_OK;
fail:
    fsdp_mem_free(text);
    fsdp_ckpt_close(r);
    return s;
}

int fsdp_ckpt_world(const fsdp_ckpt_reader *r) { return r->world; }
int fsdp_ckpt_num_units(const fsdp_ckpt_reader *r) { return r->n_units; }
const fsdp_ckpt_unit *fsdp_ckpt_unit_desc(const fsdp_ckpt_reader *r, int u) {
    return u >= 0 && u < r->n_units ? &r->units[u] : NULL;
}
const cJSON *fsdp_ckpt_config(const fsdp_ckpt_reader *r) {
    return cJSON_GetObjectItemCaseSensitive(r->manifest, "config");
}
const char *fsdp_ckpt_dir(const fsdp_ckpt_reader *r) { return r->dir; }

/* Streams file q's payload once and compares its CRC32C with the header's. */
static fsdp_status verify(fsdp_ckpt_reader *r, int q) {
    shard_file *f = &r->files[q];
    if (f->verified) return FSDP_OK;
    const size_t chunk = (size_t)1 << 20;
    unsigned char *buf = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&buf, chunk, FSDP_MEM_OTHER));
    uint32_t crc = 0;
    fsdp_status s = FSDP_OK;
    for (uint64_t done = 0; done < f->payload_bytes && s == FSDP_OK;) {
        size_t n = f->payload_bytes - done < chunk ? (size_t)(f->payload_bytes - done) : chunk;
        s = fsdp_io_pread_all(f->fd, buf, n, FSDP_CKPT_HEADER_BYTES + done, f->path);
        crc = fsdp_crc32c(crc, buf, n);
        done += n;
    }
    fsdp_mem_free(buf);
    FSDP_TRY(s);
    if (crc != f->crc)
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: payload checksum mismatch (CRC32C stored %08x, computed %08x): the file is "
            "corrupt; use an earlier checkpoint",
            f->path, f->crc, crc);
    f->verified = 1;
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_state_get(fsdp_ckpt_reader *r, fsdp_ckpt_state *st) {
    FSDP_TRY(verify(r, 0));
    unsigned char b[STATE_BYTES];
    FSDP_TRY(fsdp_io_pread_all(r->files[0].fd, b, sizeof b,
                               FSDP_CKPT_HEADER_BYTES + r->files[0].payload_bytes - STATE_BYTES,
                               r->files[0].path));
    state_unpack(b, st);
    if (st->step != r->step)
        return fsdp_set_error(FSDP_EFORMAT, "%s: state step %lld differs from the manifest's %lld",
                              r->files[0].path, (long long)st->step, (long long)r->step);
    return FSDP_OK;
}

/* A NaN or Inf at element e of unit u's array k (what a checksum cannot catch: a diverged run's, or
 * a file rewritten with a matching checksum): names the file, the tensor holding e and e's index in it. */
static fsdp_status nonfinite_error(const fsdp_ckpt_reader *r, int u, const char *path, int k, size_t e,
                                   float v) {
    static const char *const arrays[3] = {"master weights", "AdamW m", "AdamW v"};
    const fsdp_ckpt_unit *U = &r->units[u];
    for (int t = 0; t < U->n_tensors; t++) {
        const fsdp_ckpt_tensor *T = &U->tensors[t];
        if (T->alias_of < 0 && !T->frozen && e >= T->offset && e - T->offset < T->numel)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: tensor %s.%s element %zu of the %s is %s: non-finite values are "
                                  "refused; use an earlier checkpoint",
                                  path, U->name, T->name, e - T->offset, arrays[k], fsdp_nonfinite_name(v));
    }
    return fsdp_set_error(FSDP_EFORMAT,
                          "%s: unit %s element %zu (padding, in no tensor) of the %s is %s: non-finite "
                          "values are refused; use an earlier checkpoint",
                          path, U->name, e, arrays[k], fsdp_nonfinite_name(v));
}

fsdp_status fsdp_ckpt_read_range(fsdp_ckpt_reader *r, int u, size_t start, size_t n, float *master,
                                 float *adam_m, float *adam_v) {
    if (u < 0 || u >= r->n_units) return FSDP_ERR(FSDP_EINVAL, "unit %d is outside 0..%d", u, r->n_units - 1);
    size_t numel = r->units[u].numel;
    float *dst[3] = {master, adam_m, adam_v};
    for (int k = 0; k < 3; k++)
        if (dst[k]) memset(dst[k], 0, 4 * n);
    size_t want_end = start + n < numel ? start + n : numel; /* past numel stays 0 */
    size_t covered = 0;
    for (int q = 0; q < r->world && start < want_end; q++) {
        shard_file *f = &r->files[q];
        size_t a = start > f->off[u] ? start : (size_t)f->off[u];
        size_t b = want_end < f->off[u] + f->numel[u] ? want_end : (size_t)(f->off[u] + f->numel[u]);
        if (a >= b) continue;
        FSDP_TRY(verify(r, q));
        uint64_t base = r->unit_data_off[(size_t)q * (size_t)r->n_units + (size_t)u];
        for (int k = 0; k < 3; k++) {
            if (!dst[k]) continue;
            uint64_t off = base + 4 * ((uint64_t)k * f->numel[u] + (a - f->off[u]));
            FSDP_TRY(fsdp_io_pread_all(f->fd, dst[k] + (a - start), 4 * (b - a), off, f->path));
            size_t j = fsdp_first_nonfinite(dst[k] + (a - start), b - a);
            if (j < b - a) return nonfinite_error(r, u, f->path, k, a + j, dst[k][a - start + j]);
        }
        covered += b - a;
    }
    if (start < want_end && covered != want_end - start)
        return fsdp_set_error(FSDP_EFORMAT, "%s: the shard files do not cover unit %s's elements [%zu, %zu)",
                              r->dir, r->units[u].name, start, want_end);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- locating checkpoints */

int fsdp_ckpt_has_latest(const char *ckpt_dir) {
    char *p = fsdp_strdupf("%s/latest", ckpt_dir);
    int ok = p && access(p, F_OK) == 0;
    free(p);
    return ok;
}

fsdp_status fsdp_ckpt_resolve(const char *dir, char **step_dir) {
    *step_dir = NULL;
    char *m = fsdp_strdupf("%s/manifest.json", dir), *l = fsdp_strdupf("%s/latest", dir);
    fsdp_status s = FSDP_OK;
    if (!m || !l) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for paths");
    } else if (access(m, F_OK) == 0) {
        *step_dir = fsdp_strdupf("%s", dir);
    } else if (access(l, F_OK) == 0) {
        char *text = NULL;
        size_t len;
        s = fsdp_io_read_file(l, &text, &len);
        if (s == FSDP_OK) {
            while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
                text[--len] = 0;
            if (len == 0 || strchr(text, '/') || !strcmp(text, "..") || !strcmp(text, "."))
                s = fsdp_set_error(FSDP_EFORMAT, "%s does not name a step folder", l);
            else
                *step_dir = fsdp_strdupf("%s/%s", dir, text);
        }
        fsdp_mem_free(text);
    } else {
        s = fsdp_set_error(FSDP_EIO, "no checkpoint in %s: it has neither manifest.json nor latest", dir);
    }
    if (s == FSDP_OK && !*step_dir) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    free(l);
    free(m);
    return s;
}

int fsdp_ckpt_managed_name(const char *name) {
    static const char *const prefixes[] = {
        ".tmp_step_",   ".uncommitted_step_", ".lock.rank_", ".write-test.",
        ".shared-test", "latest.tmp.",        NULL};
    long long step;
    if (!strcmp(name, "latest") || !strcmp(name, ".committed") || step_name(name, &step)) return 1;
    for (int i = 0; prefixes[i]; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return 1;
    return 0;
}
