/* checkpoint.c — writing the checkpoint format and its crash-safe commit protocol, independent of the
 * engine: shard files (header + CRC32C-checked payload, layout in ckpt_format.h), manifest.json
 * (cJSON), the temporary-folder / fsync / rename / `latest` sequence, locks and retention. The reader,
 * which serves any element range of any unit from whichever shard files hold it (how a different world
 * size re-slices), is ckpt_read.c. Layout: checkpoint.h. */
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

#define STAGE_CHUNK ((size_t)1 << 20) /* elements of the host chunk a part read by callback goes through */

/* Writes n bytes and folds them into *crc. */
static fsdp_status write_crc(int fd, const void *p, size_t n, uint32_t *crc, const char *path) {
    *crc = fsdp_crc32c(*crc, p, n);
    return fsdp_io_write_all(fd, p, n, path);
}

fsdp_status fsdp_ckpt_write_shard(const char *path, int rank, int world, int n_units,
                                  const fsdp_ckpt_unit *units, const fsdp_ckpt_part *parts,
                                  const fsdp_ckpt_state *st, uint32_t *crc_out, uint64_t *bytes_out) {
    uint64_t payload = (uint64_t)TABLE_ENTRY * (uint64_t)n_units + STATE_BYTES;
    for (int u = 0; u < n_units; u++) {
        if (parts[u].offset + parts[u].numel > units[u].padded_numel)
            return FSDP_ERR(FSDP_EINVAL, "unit %s: shard [%zu, +%zu) is outside its %zu elements",
                            units[u].name, parts[u].offset, parts[u].numel, units[u].padded_numel);
        payload += 12 * (uint64_t)parts[u].numel;
    }
    unsigned char *table = calloc((size_t)n_units ? (size_t)n_units : 1, TABLE_ENTRY);
    if (!table) return FSDP_ERR(FSDP_ENOMEM, "no memory for a shard table of %d units", n_units);
    for (int u = 0; u < n_units; u++) {
        put64(table, u * TABLE_ENTRY, parts[u].offset);
        put64(table, u * TABLE_ENTRY + 8, parts[u].numel);
        put64(table, u * TABLE_ENTRY + 16, units[u].padded_numel);
    }
    fsdp_status s;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = fsdp_set_error(FSDP_EIO, "cannot create %s: %s", path, strerror(errno));
        free(table);
        return s;
    }
    unsigned char hdr[FSDP_CKPT_HEADER_BYTES] = {0}, state[STATE_BYTES];
    uint32_t crc = 0;
    s = fsdp_io_write_all(fd, hdr, sizeof hdr, path); /* placeholder; the real header goes last */
    if (s == FSDP_OK) s = write_crc(fd, table, (size_t)TABLE_ENTRY * (size_t)n_units, &crc, path);
    float *stage = NULL; /* parts that are read through their callback go through this chunk */
    for (int u = 0; u < n_units && s == FSDP_OK; u++) {
        const float *arr[3] = {parts[u].master, parts[u].adam_m, parts[u].adam_v};
        for (int k = 0; k < 3 && s == FSDP_OK; k++) {
            if (parts[u].numel && !arr[k] && !parts[u].read) {
                s = FSDP_ERR(FSDP_EINVAL, "unit %s: array %d of the shard is NULL", units[u].name, k);
                break;
            }
            if (arr[k] || !parts[u].numel) {
                s = write_crc(fd, arr[k], 4 * parts[u].numel, &crc, path);
                continue;
            }
            if (!stage && !(stage = malloc(STAGE_CHUNK * sizeof(float)))) {
                s = FSDP_ERR(FSDP_ENOMEM, "no memory for a staging chunk of %zu elements", STAGE_CHUNK);
                break;
            }
            for (size_t c = 0; c < parts[u].numel && s == FSDP_OK; c += STAGE_CHUNK) {
                size_t n = parts[u].numel - c < STAGE_CHUNK ? parts[u].numel - c : STAGE_CHUNK;
                s = parts[u].read(parts[u].ctx, k, parts[u].offset + c, n, stage);
                if (s == FSDP_OK) s = write_crc(fd, stage, 4 * n, &crc, path);
            }
        }
    }
    free(stage);
    state_pack(state, st);
    if (s == FSDP_OK) s = write_crc(fd, state, sizeof state, &crc, path);
    if (s == FSDP_OK) {
        memcpy(hdr + H_MAGIC, FSDP_CKPT_MAGIC, 8);
        put32(hdr, H_VERSION, FSDP_CKPT_VERSION);
        put32(hdr, H_HBYTES, FSDP_CKPT_HEADER_BYTES);
        put32(hdr, H_RANK, (uint32_t)rank);
        put32(hdr, H_WORLD, (uint32_t)world);
        put32(hdr, H_NUNITS, (uint32_t)n_units);
        put32(hdr, H_PCRC, crc);
        put64(hdr, H_PBYTES, payload);
        put64(hdr, H_STEP, (uint64_t)st->step);
        put32(hdr, H_HCRC, fsdp_crc32c(0, hdr, H_HCRC));
        if (pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
            s = fsdp_set_error(FSDP_EIO, "cannot write the header of %s: %s", path, strerror(errno));
    }
    fsdp_status s2 = fsdp_io_close_sync(fd, path);
    if (s == FSDP_OK) s = s2;
    free(table);
    if (s != FSDP_OK) return s;
    *crc_out = crc;
    *bytes_out = FSDP_CKPT_HEADER_BYTES + payload;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- manifest */

static cJSON *unit_json(const fsdp_ckpt_unit *u) {
    cJSON *j = cJSON_CreateObject(), *ts;
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "name", u->name);
    cJSON_AddNumberToObject(j, "numel", (double)u->numel);
    cJSON_AddNumberToObject(j, "padded_numel", (double)u->padded_numel);
    if (u->frozen_numel) { /* only with frozen tensors: other manifests are as before */
        char hex[20];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)u->frozen_digest);
        cJSON_AddNumberToObject(j, "frozen_numel", (double)u->frozen_numel);
        cJSON_AddStringToObject(j, "frozen_digest", hex);
    }
    ts = cJSON_AddArrayToObject(j, "tensors");
    for (int t = 0; ts && t < u->n_tensors; t++) {
        const fsdp_ckpt_tensor *x = &u->tensors[t];
        cJSON *tj = cJSON_CreateObject();
        if (!tj) break;
        cJSON_AddStringToObject(tj, "name", x->name);
        cJSON *sh = cJSON_AddArrayToObject(tj, "shape");
        for (int d = 0; sh && d < x->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)x->shape[d]));
        cJSON_AddNumberToObject(tj, "offset", (double)x->offset);
        cJSON_AddNumberToObject(tj, "numel", (double)x->numel);
        if (x->alias_of >= 0)
            cJSON_AddStringToObject(tj, "alias_of", u->tensors[x->alias_of].name);
        else
            cJSON_AddNullToObject(tj, "alias_of");
        if (x->frozen) cJSON_AddTrueToObject(tj, "frozen"); /* absent: trainable (manifests before it) */
        cJSON_AddItemToArray(ts, tj);
    }
    return j;
}

fsdp_status fsdp_ckpt_write_manifest(const char *path, int world, const cJSON *config, int n_units,
                                     const fsdp_ckpt_unit *units, const fsdp_ckpt_state *st,
                                     const uint32_t *crcs, const uint64_t *bytes) {
    fsdp_status s = FSDP_OK;
    char *text = NULL;
    cJSON *j = cJSON_CreateObject();
    if (!j) return FSDP_ERR(FSDP_ENOMEM, "no memory for %s", path);
    cJSON_AddStringToObject(j, "format", "fsdp.c sharded checkpoint");
    cJSON_AddNumberToObject(j, "version", FSDP_CKPT_VERSION);
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "world_size", world);
    cJSON *sj = cJSON_AddObjectToObject(j, "state");
    if (sj) {
        cJSON_AddNumberToObject(sj, "data_pos", (double)st->data_pos);
        cJSON_AddNumberToObject(sj, "data_epoch", (double)st->data_epoch);
    }
    cJSON_AddItemToObject(j, "config", config ? cJSON_Duplicate(config, 1) : cJSON_CreateObject());
    /* the FSDP_* knobs set when it was written (docs/ENV.md); readers ignore it, so manifests without it
     * (written before it existed) load as before */
    cJSON *ej = cJSON_AddObjectToObject(j, "env");
    for (int i = 0; ej != NULL && i < fsdp_env_count(); i++) {
        const char *v = fsdp_env_value(fsdp_env_at(i)->name);
        if (v != NULL) cJSON_AddStringToObject(ej, fsdp_env_at(i)->name, v);
    }
    cJSON *uj = cJSON_AddArrayToObject(j, "units");
    for (int u = 0; uj && u < n_units; u++)
        cJSON_AddItemToArray(uj, unit_json(&units[u]));
    cJSON *shj = cJSON_AddArrayToObject(j, "shards");
    for (int r = 0; shj && r < world; r++) {
        cJSON *x = cJSON_CreateObject();
        char name[32];
        snprintf(name, sizeof name, "rank_%05d.bin", r);
        cJSON_AddNumberToObject(x, "rank", r);
        cJSON_AddStringToObject(x, "file", name);
        cJSON_AddNumberToObject(x, "bytes", (double)bytes[r]);
        cJSON_AddNumberToObject(x, "crc32c", (double)crcs[r]);
        cJSON_AddItemToArray(shj, x);
    }
    text = cJSON_Print(j);
    char *sealed = NULL;
    size_t sealed_len = 0;
    if (!text) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory to print %s", path);
    } else {
        s = fsdp_ckpt_manifest_seal(text, strlen(text), &sealed, &sealed_len);
        if (s == FSDP_OK) s = fsdp_io_write_file_atomic(path, sealed, sealed_len, 0);
    }
    free(sealed);
    free(text);
    cJSON_Delete(j);
    return s;
}

/* The manifest's checksum is its last field, over every byte before it (checkpoint.h). */
#define SEAL_KEY "\"manifest_crc32c\": \""
#define SEAL_END "\"\n}\n"

fsdp_status fsdp_ckpt_manifest_seal(const char *json, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    while (len > 0 && strchr(" \t\r\n", json[len - 1]) != NULL && json[len - 1] != '\0')
        len--;
    if (len == 0 || json[len - 1] != '}')
        return FSDP_ERR(FSDP_EINVAL, "a manifest to seal must be a JSON object ending in '}'");
    len--; /* the closing brace; the checksum field goes before a new one */
    while (len > 0 && strchr(" \t\r\n", json[len - 1]) != NULL && json[len - 1] != '\0')
        len--;
    const char *sep = len > 0 && json[len - 1] == '{' ? "\n\t" : ",\n\t";
    size_t pre = len + strlen(sep), total = pre + strlen(SEAL_KEY) + 8 + strlen(SEAL_END);
    char *t = malloc(total + 1);
    if (!t) return FSDP_ERR(FSDP_ENOMEM, "no memory for a manifest of %zu bytes", len);
    memcpy(t, json, len);
    memcpy(t + len, sep, strlen(sep));
    snprintf(t + pre, total + 1 - pre, SEAL_KEY "%08x" SEAL_END, (unsigned)fsdp_crc32c(0, t, pre));
    *out = t;
    *out_len = total;
    return FSDP_OK;
}

/* Checks a manifest's last field, "manifest_crc32c": 8 hex digits, the CRC32C of every byte before the
 * field's key. Errors name the file; every one says "manifest checksum". */
fsdp_status fsdp_ckpt_manifest_verify(const char *text, size_t len, const char *path) {
    const size_t kl = strlen(SEAL_KEY), el = strlen(SEAL_END);
    size_t pos = len; /* the last occurrence of the key */
    for (size_t i = len >= kl ? len - kl + 1 : 0; i-- > 0;)
        if (memcmp(text + i, SEAL_KEY, kl) == 0) {
            pos = i;
            break;
        }
    if (pos == len)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: manifest checksum missing (no \"manifest_crc32c\" field): the file is "
                              "damaged or was written before manifests were checksummed; this version "
                              "cannot verify it, so it is not read",
                              path);
    unsigned stored = 0;
    int good = len == pos + kl + 8 + el && memcmp(text + pos + kl + 8, SEAL_END, el) == 0;
    for (size_t i = 0; good && i < 8; i++) {
        char c = text[pos + kl + i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) good = 0;
        stored = stored << 4 | (unsigned)(v < 0 ? 0 : v);
    }
    if (!good)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: manifest checksum field damaged (\"manifest_crc32c\" must be the file's "
                              "last field, 8 lowercase hex digits): the file is corrupt; use an earlier "
                              "checkpoint",
                              path);
    unsigned crc = fsdp_crc32c(0, text, pos);
    if (crc != stored)
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: manifest checksum mismatch (CRC32C stored %08x, computed %08x): the file is "
            "corrupt; use an earlier checkpoint",
            path, stored, crc);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- save protocol */

fsdp_status fsdp_ckpt_lock(const char *ckpt_dir, int rank, int *fd_out) {
    *fd_out = -1;
    char *path = fsdp_strdupf("%s/.lock.rank_%05d", ckpt_dir, rank);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
    struct stat st;
    if (fd < 0) {
        s = fsdp_set_error(FSDP_EIO, "cannot open the lock file %s: %s", path, strerror(errno));
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = fsdp_set_error(FSDP_EIO, "lock file %s is not a regular file: remove it", path);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EWOULDBLOCK) {
            char who[256] = "";
            ssize_t n = pread(fd, who, sizeof who - 1, 0);
            who[n > 0 ? n : 0] = '\0';
            for (char *p = who; *p; p++)
                if (*p == '\n') *p = *(p + 1) ? ';' : '\0';
            s = fsdp_set_error(FSDP_EIO,
                               "checkpoint folder %s is in use by another run (%s holds %s): one run per "
                               "--checkpoint-dir; wait for it to end or choose another folder",
                               ckpt_dir, who[0] ? who : "a process that has not yet written its pid", path);
        } else {
            s = fsdp_set_error(FSDP_EIO,
                               "cannot lock %s: %s (the file system must support flock, which keeps two "
                               "runs out of one --checkpoint-dir)",
                               path, strerror(err));
        }
    }
    if (s != FSDP_OK) {
        if (fd >= 0) close(fd);
        free(path);
        return s;
    }
    /* Who holds it, for the message of a run that finds it taken (best effort: the lock is what counts). */
    char host[128] = "?", line[256];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    int n = snprintf(line, sizeof line, "pid %d on host %s (rank %d)\n", (int)getpid(), host, rank);
    if (ftruncate(fd, 0) == 0 && n > 0) (void)!pwrite(fd, line, (size_t)n, 0);
    free(path);
    *fd_out = fd;
    return FSDP_OK;
}

void fsdp_ckpt_unlock(int fd) {
    if (fd < 0) return;
    (void)!ftruncate(fd, 0); /* an unheld lock file names nobody */
    close(fd);               /* releases the flock */
}

/* `fin` (ckpt_dir/name) exists. If `latest` names it, it is a committed checkpoint and is never
 * overwritten. Otherwise it is what a save interrupted between its folder rename and the move of
 * `latest` left behind (never committed: a resume starts from `latest` and recomputes this step
 * bit for bit); it is renamed to .uncommitted_<name> (replacing an older one of that name), so the
 * save can go on and nothing is deleted that was ever committed. */
static fsdp_status set_aside_uncommitted(const char *ckpt_dir, const char *name, const char *fin) {
    char *latest = fsdp_strdupf("%s/latest", ckpt_dir),
         *aside = fsdp_strdupf("%s/.uncommitted_%s", ckpt_dir, name);
    char *text = NULL;
    size_t len = 0;
    fsdp_status s = FSDP_OK;
    if (latest == NULL || aside == NULL) {
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for checkpoint paths");
        goto done;
    }
    int committed = 1; /* when `latest` cannot be read, assume the worst: never touch fin */
    if (access(latest, F_OK) != 0) {
        committed = 0;
    } else if (fsdp_io_read_file(latest, &text, &len) == FSDP_OK) {
        size_t n = strlen(name);
        committed = len >= n && memcmp(text, name, n) == 0 && (len == n || text[n] == '\n');
    }
    if (committed) {
        s = fsdp_set_error(FSDP_EIO,
                           "%s already exists: a checkpoint is never overwritten; use another "
                           "--checkpoint-dir or remove it",
                           fin);
        goto done;
    }
    if (fsdp_ckpt_was_committed(ckpt_dir, name)) { /* `latest` was pointed back past it: still committed */
        s = fsdp_set_error(FSDP_EIO,
                           "%s was committed (%s/.committed lists it) though `latest` names an older step: "
                           "a committed checkpoint is never overwritten or moved; move it out of %s "
                           "yourself, or resume from it",
                           fin, ckpt_dir, ckpt_dir);
        goto done;
    }
    fsdp_rm_tree1(aside);
    if (rename(fin, aside) != 0)
        s = fsdp_set_error(FSDP_EIO,
                           "%s exists but `latest` does not name it (an interrupted save); cannot move it "
                           "to %s: %s",
                           fin, aside, strerror(errno));
done:
    fsdp_mem_free(text);
    free(aside);
    free(latest);
    return s;
}

/* Appends name to ckpt_dir/.committed (fsdp_ckpt_newer_committed), durably: after `latest` names it. */
static fsdp_status append_committed(const char *ckpt_dir, const char *name) {
    char *path = fsdp_strdupf("%s/.committed", ckpt_dir);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    char line[48];
    const int n = snprintf(line, sizeof line, "%s\n", name);
    if (fd < 0 || write(fd, line, (size_t)n) != n || fsync(fd) != 0)
        s = fsdp_set_error(FSDP_EIO, "cannot append to %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    free(path);
    return s;
}

/* Removes every .tmp_step_* folder and latest.tmp.* file of ckpt_dir: what saves killed before their
 * rename left. Only safe under the folder's lock (fsdp_ckpt_lock), which the trainer holds for the
 * whole run. */
static void remove_stale_temps(const char *ckpt_dir) {
    DIR *d = opendir(ckpt_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int folder = strncmp(e->d_name, ".tmp_step_", 10) == 0,
            file = strncmp(e->d_name, "latest.tmp.", 11) == 0;
        if (!folder && !file) continue;
        char *p = fsdp_strdupf("%s/%s", ckpt_dir, e->d_name);
        if (p && folder) fsdp_rm_tree1(p);
        if (p && file) unlink(p);
        free(p);
    }
    closedir(d);
}

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

fsdp_status fsdp_ckpt_prune(const char *ckpt_dir, int keep_last, int keep_every, int *removed, char *names,
                            size_t cap) {
    if (removed) *removed = 0;
    if (names && cap) names[0] = '\0';
    if (ckpt_dir == NULL || keep_last < 1 || keep_every < 0)
        return FSDP_ERR(FSDP_EINVAL, "prune: need a folder, keep_last >= 1 and keep_every >= 0");
    char *latest = fsdp_strdupf("%s/latest", ckpt_dir), *text = NULL;
    size_t len = 0;
    long long newest = -1;
    fsdp_status s =
        latest ? fsdp_io_read_file(latest, &text, &len) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) {
        char nm[64] = "";
        snprintf(nm, sizeof nm, "%.*s", (int)(len < 63 ? len : 63), text);
        nm[strcspn(nm, "\n")] = '\0';
        if (!step_name(nm, &newest))
            s = fsdp_set_error(FSDP_EIO, "%s does not name a step folder: no checkpoint removed", latest);
    }
    fsdp_mem_free(text);
    free(latest);
    if (s != FSDP_OK) return s;
    /* the older real step folders, newest first */
    long long *steps = NULL;
    size_t n = 0, capn = 0;
    DIR *d = opendir(ckpt_dir);
    if (!d) return fsdp_set_error(FSDP_EIO, "cannot list %s: %s", ckpt_dir, strerror(errno));
    struct dirent *e;
    while (s == FSDP_OK && (e = readdir(d)) != NULL) {
        long long st = 0;
        struct stat sb;
        if (!step_name(e->d_name, &st) || st >= newest) continue;
        char *p = fsdp_strdupf("%s/%s", ckpt_dir, e->d_name);
        int dir = p && lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        free(p);
        if (!dir) continue;
        if (n == capn) {
            size_t nc = capn ? 2 * capn : 16;
            long long *ns = realloc(steps, nc * sizeof *ns);
            if (!ns) {
                s = FSDP_ERR(FSDP_ENOMEM, "no memory for the list of checkpoints");
                break;
            }
            steps = ns, capn = nc;
        }
        steps[n++] = st;
    }
    closedir(d);
    if (n) qsort(steps, n, sizeof *steps, cmp_desc);
    int count = 0;
    for (size_t i = (size_t)keep_last - 1; s == FSDP_OK && i < n; i++) {
        if (keep_every > 0 && steps[i] % keep_every == 0) continue;
        char *from = fsdp_strdupf("%s/step_%06lld", ckpt_dir, steps[i]),
             *to = fsdp_strdupf("%s/.tmp_step_%06lld.pruned", ckpt_dir, steps[i]);
        if (!from || !to) {
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        } else {
            fsdp_rm_tree1(to); /* a leftover of an interrupted removal */
            if (rename(from, to) != 0) {
                s = fsdp_set_error(FSDP_EIO, "cannot move %s aside to remove it: %s", from, strerror(errno));
            } else {
                s = fsdp_fsync_dir(ckpt_dir);
                fsdp_rm_tree1(to);
                count++;
                if (names && cap) {
                    size_t l = strlen(names);
                    snprintf(names + l, cap - l, "%sstep_%06lld", l ? " " : "", steps[i]);
                }
            }
        }
        free(to);
        free(from);
    }
    free(steps);
    if (removed) *removed = count;
    return s;
}

fsdp_status fsdp_ckpt_save_parts(fsdp_comm_t *comm, const char *ckpt_dir, const cJSON *config, int n_units,
                                 const fsdp_ckpt_unit *units, const fsdp_ckpt_part *parts,
                                 const fsdp_ckpt_state *st, char **final_dir) {
    int rank = comm ? fsdp_comm_rank(comm) : 0, world = comm ? fsdp_comm_size(comm) : 1;
    if (final_dir) *final_dir = NULL;
    fsdp_status s = FSDP_OK;
    char name[40];
    snprintf(name, sizeof name, "step_%06lld", (long long)st->step);
    char *tmp = fsdp_strdupf("%s/.tmp_%s", ckpt_dir, name), *fin = fsdp_strdupf("%s/%s", ckpt_dir, name);
    char *shard = fsdp_strdupf("%s/.tmp_%s/rank_%05d.bin", ckpt_dir, name, rank);
    char *manifest = fsdp_strdupf("%s/.tmp_%s/manifest.json", ckpt_dir, name);
    char *latest = fsdp_strdupf("%s/latest", ckpt_dir);
    uint32_t *crcs = calloc((size_t)world, 4);
    uint64_t *bytes = calloc((size_t)world, 8);
    int64_t *info = calloc((size_t)world * 2, sizeof(int64_t)); /* (crc, bytes) of every rank */
    int tmp_made = 0;
    if (!tmp || !fin || !shard || !manifest || !latest || !crcs || !bytes || !info)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for checkpoint paths");
    if (s == FSDP_OK && rank == 0) {
        s = fsdp_mkdirs(ckpt_dir);
        struct stat fst; /* lstat: a symlink of the step's name (dangling or not) is set aside itself */
        if (s == FSDP_OK && lstat(fin, &fst) == 0) s = set_aside_uncommitted(ckpt_dir, name, fin);
        if (s == FSDP_OK) {
            remove_stale_temps(ckpt_dir); /* debris of earlier killed saves, of any step */
            if (mkdir(tmp, 0755) != 0)
                s = fsdp_set_error(FSDP_EIO, "cannot create %s: %s", tmp, strerror(errno));
            else
                tmp_made = 1;
        }
    }
    s = fsdp_comm_agree(comm, s, "preparing the checkpoint folder");
    if (s != FSDP_OK) goto done;

    uint32_t crc = 0;
    uint64_t nbytes = 0;
    s = fsdp_ckpt_write_shard(shard, rank, world, n_units, units, parts, st, &crc, &nbytes);
    s = fsdp_comm_agree(comm, s, "writing a shard file");
    if (s != FSDP_OK) goto done;
    /* Every rank's (crc, bytes) to rank 0 for the manifest. */
    int64_t mine[2] = {(int64_t)crc, (int64_t)nbytes};
    if (comm && world > 1) {
        s = fsdp_comm_all_gather(comm, mine, info, 2, FSDP_I64);
        if (s != FSDP_OK) goto done;
    } else {
        memcpy(info, mine, sizeof mine);
    }
    for (int r = 0; r < world; r++) {
        crcs[r] = (uint32_t)info[2 * r];
        bytes[r] = (uint64_t)info[2 * r + 1];
    }
    if (rank == 0) {
        s = fsdp_ckpt_write_manifest(manifest, world, config, n_units, units, st, crcs, bytes);
        if (s == FSDP_OK) s = fsdp_fsync_dir(tmp);
        if (s == FSDP_OK && rename(tmp, fin) != 0)
            s = fsdp_set_error(FSDP_EIO, "cannot rename %s to %s: %s", tmp, fin, strerror(errno));
        if (s == FSDP_OK) {
            tmp_made = 0;
            s = fsdp_fsync_dir(ckpt_dir);
        }
        /* Only now, with every rank's file durable under its final name, does `latest` move. */
        if (s == FSDP_OK) {
            char line[48];
            snprintf(line, sizeof line, "%s\n", name);
            s = fsdp_io_write_file_atomic(latest, line, strlen(line), FSDP_OUT_MAY_REPLACE_INPUT);
        }
        if (s == FSDP_OK) s = append_committed(ckpt_dir, name);
    }
    s = fsdp_comm_agree(comm, s, "committing the checkpoint");
done:
    if (s != FSDP_OK && rank == 0 && tmp_made) fsdp_rm_tree1(tmp);
    if (s == FSDP_OK && final_dir) {
        *final_dir = fin;
        fin = NULL;
    }
    free(info);
    free(bytes);
    free(crcs);
    free(latest);
    free(manifest);
    free(shard);
    free(fin);
    free(tmp);
    return s;
}

/* ckpt_dir/.committed's text (NULL, *len 0 when there is none or it cannot be read). */
static char *read_committed(const char *ckpt_dir, size_t *len) {
    char *path = fsdp_strdupf("%s/.committed", ckpt_dir), *text = NULL;
    *len = 0;
    if (!path || access(path, F_OK) != 0 || fsdp_io_read_file(path, &text, len) != FSDP_OK) {
        fsdp_clear_error();
        text = NULL, *len = 0;
    }
    free(path);
    return text;
}

/* Whether text (len bytes, one name a line) holds name as a whole line. */
static int lists_line(const char *text, size_t len, const char *name) {
    const size_t n = strlen(name);
    for (size_t i = 0; text && i + n <= len; i++)
        if ((i == 0 || text[i - 1] == '\n') && !memcmp(text + i, name, n) &&
            (i + n == len || text[i + n] == '\n'))
            return 1;
    return 0;
}

int fsdp_ckpt_was_committed(const char *ckpt_dir, const char *name) {
    size_t len;
    char *text = read_committed(ckpt_dir, &len);
    const int found = lists_line(text, len, name);
    fsdp_mem_free(text);
    return found;
}

int fsdp_ckpt_newer_committed(const char *ckpt_dir, const char *step_dir, char *names, size_t cap) {
    if (names && cap) names[0] = '\0';
    const char *base = step_dir ? strrchr(step_dir, '/') : NULL;
    base = base ? base + 1 : step_dir;
    long long step;
    if (!base || !step_name(base, &step)) return 0; /* not one of ckpt_dir's step folders */
    DIR *d = ckpt_dir ? opendir(ckpt_dir) : NULL;
    if (!d) return 0;
    size_t len;
    char *text = read_committed(ckpt_dir, &len); /* once for every folder */
    int count = 0;
    size_t used = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long st;
        if (!step_name(e->d_name, &st) || st <= step || !lists_line(text, len, e->d_name)) continue;
        if (names && used + strlen(e->d_name) + 3 < cap)
            used += (size_t)snprintf(names + used, cap - used, "%s%s", count ? ", " : "", e->d_name);
        count++;
    }
    closedir(d);
    fsdp_mem_free(text);
    return count;
}
