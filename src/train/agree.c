/* agree.c — agreement between ranks before a run: every setting and the data's files and shards the same
 * on every rank (hashes, the differing ones named), and a checkpoint folder the ranks share. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A file's fingerprint: its size and its first `head` bytes (the whole file with head 0); 1 when the
 * file is absent, its type when it is not a regular file (opened without blocking and not read: a
 * FIFO is refused, naming it, when the data is opened). */
static uint64_t file_fingerprint(const char *path, size_t head) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 1;
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ((uint64_t)st.st_mode << 8) | 3;
    }
    uint64_t h = 0xcbf29ce484222325ull, size = (uint64_t)st.st_size;
    unsigned char buf[4096];
    size_t total = 0;
    ssize_t got;
    while ((head == 0 || total < head) && (got = read(fd, buf, sizeof buf)) > 0) {
        size_t n = (size_t)got;
        if (head && total + n > head) n = head - total;
        h = fnv1a(h, buf, n);
        total += n;
    }
    close(fd);
    return fnv1a(h, &size, sizeof size) | 2; /* never 1 */
}

/* The shards --data names (data/data.h) when they are not a folder's train.bin and val.bin (those have
 * entries of their own): each one's name without its folder and file_fingerprint(head); 0 for a folder's
 * train.bin, 1 when they cannot be listed (opening the data says why). */
static uint64_t shards_fingerprint(const char *data, size_t head) {
    fsdp_data_files f;
    if (fsdp_data_files_find(data, &f) != FSDP_OK) return 1;
    const char *b0 = strrchr(f.train[0], '/');
    uint64_t h = 0;
    if (fsdp_data_is_glob(data) || f.n_train > 1 || strcmp(b0 ? b0 + 1 : f.train[0], "train.bin") != 0) {
        h = 0xcbf29ce484222325ull;
        for (int list = 0; list < 2; list++) {
            char **p = list ? f.val : f.train;
            int n = list ? f.n_val : f.n_train;
            h = fnv1a(h, &n, sizeof n);
            for (int i = 0; i < n; i++) {
                const char *b = strrchr(p[i], '/');
                b = b ? b + 1 : p[i];
                uint64_t fp = file_fingerprint(p[i], head);
                h = fnv1a(fnv1a(h, b, strlen(b) + 1), &fp, sizeof fp);
            }
        }
        h |= 2;
    }
    fsdp_data_files_free(&f);
    return h;
}

/* Settings a rank may legitimately hold its own value of: its host's cores, memory and GEMM peak, and
 * the paths of the data and checkpoint folders (a host may mount them elsewhere: the data's content is
 * compared instead, and fsdp_train_check_shared_folder finds a checkpoint folder the ranks do not share). */
static int per_rank_setting(const char *name) {
    return !strcmp(name, "threads") || !strcmp(name, "mem-limit") || !strcmp(name, "peak-gflops") ||
           !strcmp(name, "data") || !strcmp(name, "checkpoint-dir");
}

/* The entries fsdp_train_agree_settings compares after the settings: the data folder's files, then its shards
 * ("*": shards_fingerprint); heads: the bytes of a file's head hashed beside its size (0: all of it). */
static const char *const agree_files[] = {"train.bin", "val.bin", "meta.json", "tokenizer.json", "*"};

static const size_t agree_heads[] = {1024, 1024, 0, 0, 1024};

enum { AGREE_NFILES = sizeof agree_files / sizeof agree_files[0] };

/* mine[k]: the hash of settings entry k of j (0 for a per-rank one), then of each agree_files entry. */
static fsdp_status settings_hashes(const train_run *r, const cJSON *j, int n, int64_t *mine) {
    int k = 0;
    for (const cJSON *it = j->child; it; it = it->next, k++) {
        if (per_rank_setting(it->string)) continue;
        char *v = cJSON_PrintUnformatted(it);
        if (!v) return FSDP_ERR(FSDP_ENOMEM, "no memory for the settings record");
        mine[k] = (int64_t)fnv1a(fnv1a(0xcbf29ce484222325ull, it->string, strlen(it->string)), v, strlen(v));
        free(v);
    }
    for (int f = 0; f < AGREE_NFILES; f++) {
        if (f == AGREE_NFILES - 1) {
            mine[n + f] = (int64_t)shards_fingerprint(r->cfg.data, agree_heads[f]);
            continue;
        }
        char *dir = fsdp_data_dir(r->cfg.data);
        char *p = dir ? fsdp_strdupf("%s/%s", dir, agree_files[f]) : NULL;
        free(dir);
        if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        mine[n + f] = (int64_t)file_fingerprint(p, agree_heads[f]);
        free(p);
    }
    return FSDP_OK;
}

/* all: every rank's total entries (rank q's at q*total). Writes into msg each entry some rank holds
 * another value of than rank 0, with those ranks; returns how many entries differ. */
static int settings_differences(const train_run *r, const cJSON *j, int n, int total, const int64_t *all,
                                char *msg, size_t cap) {
    size_t len = 0;
    int differ = 0;
    msg[0] = '\0';
    for (int e = 0; e < total; e++) {
        int first = 1;
        for (int q = 1; q < r->world; q++) {
            if (all[(size_t)q * (size_t)total + (size_t)e] == all[e]) continue;
            if (first && len < cap) {
                const char *name = e < n ? NULL : agree_files[e - n];
                if (e < n) {
                    const cJSON *it = j->child;
                    for (int i = 0; i < e; i++)
                        it = it->next;
                    name = it->string;
                }
                if (e == total - 1)
                    len += (size_t)snprintf(msg + len, cap - len,
                                            "%sthe shards of --data %s (names, sizes, first KiB) (ranks",
                                            differ ? "; " : "", r->cfg.data);
                else
                    len += (size_t)snprintf(msg + len, cap - len, "%s%s%s%s (ranks", differ ? "; " : "",
                                            e < n ? "--" : r->cfg.data, e < n ? "" : "/", name);
                differ++;
            }
            if (len < cap) len += (size_t)snprintf(msg + len, cap - len, " %d", q);
            first = 0;
        }
        if (!first && len < cap) len += (size_t)snprintf(msg + len, cap - len, " differ from rank 0)");
    }
    return differ;
}

/* Before anything is built: every rank's resolved settings (the config record, less the per-rank ones)
 * and the data folder's fingerprint (train.bin's and val.bin's size and header, meta.json and
 * tokenizer.json whole, the shards' names, sizes and headers) against rank 0's, one hash per entry and one
 * all-gather. A difference is an error naming each differing entry and the ranks that hold another value than
 * rank 0's. */
fsdp_status fsdp_train_agree_settings(train_run *r) {
    if (r->world == 1) return FSDP_OK;
    cJSON *j = fsdp_train_config_to_json(&r->cfg);
    fsdp_status s = j ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for the settings record");
    int n = 0;
    for (cJSON *it = j ? j->child : NULL; it; it = it->next)
        n++;
    const int total = n + AGREE_NFILES;
    /* The entry count is the code's, the same on every rank; checked all the same (a MAX and a MIN). */
    int64_t *mine = j ? calloc((size_t)total, sizeof *mine) : NULL;
    int64_t *all = j ? calloc((size_t)total * (size_t)r->world, sizeof *all) : NULL;
    if (s == FSDP_OK && (!mine || !all))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d ranks' settings", r->world);
    if (s == FSDP_OK) s = settings_hashes(r, j, n, mine);
    s = fsdp_comm_agree(r->comm, s, "recording the settings");
    if (s == FSDP_OK) {
        int64_t cnt[2] = {total, -total}, red[2];
        fsdp_comm_set_label(r->comm, "train / agreeing on the settings");
        s = fsdp_comm_all_reduce(r->comm, cnt, red, 2, FSDP_I64, FSDP_MAX);
        if (s == FSDP_OK && (red[0] != total || -red[1] != total)) {
            s = fsdp_set_error(FSDP_EINVAL,
                               "the ranks record different numbers of settings (%d here, %lld to %lld): "
                               "they run different builds of fsdp-train",
                               total, (long long)-red[1], (long long)red[0]);
            s = fsdp_comm_agree(r->comm, s, "counting the settings");
        } else if (s == FSDP_OK) {
            s = fsdp_comm_all_gather(r->comm, mine, all, (size_t)total, FSDP_I64);
        }
    }
    char msg[1536];
    const int differ = s == FSDP_OK ? settings_differences(r, j, n, total, all, msg, sizeof msg) : 0;
    if (differ)
        s = fsdp_set_error(
            FSDP_EINVAL,
            "the ranks disagree on %d setting%s or data file%s: %s. Every rank must be given the "
            "same settings and the same data folder; nothing was built or trained",
            differ, differ == 1 ? "" : "s", differ == 1 ? "" : "s", msg);
    /* Every rank found the same differences: agreed, so the job ends without an abort. */
    if (differ) s = fsdp_comm_agree(r->comm, s, "comparing the settings");
    free(mine);
    free(all);
    cJSON_Delete(j);
    return s;
}

/* Every rank sees the checkpoint folder rank 0 sees (multi-host: a folder on each host's own disk
 * would hold each host's shards apart): rank 0 writes a fresh nonce into a file there, every rank
 * reads it back. Found at start, not when a resume cannot find its shards. */
fsdp_status fsdp_train_check_shared_folder(train_run *r) {
    if (r->world == 1) return FSDP_OK;
    const char *dir = r->cfg.checkpoint_dir;
    char *p = fsdp_strdupf("%s/.shared-test", dir);
    fsdp_status s = p ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    int64_t nonce = (int64_t)(fsdp_time_s() * 1e9) ^ ((int64_t)getpid() << 20);
    if (s == FSDP_OK && r->rank == 0) {
        FILE *f = fopen(p, "wb");
        if (!f || fprintf(f, "%lld\n", (long long)nonce) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
            s = FSDP_ERR(FSDP_EIO, "--checkpoint-dir %s: cannot write %s: %s", dir, p, strerror(errno));
        if (f) fclose(f);
    }
    s = fsdp_comm_agree(r->comm, s, "writing the checkpoint folder's shared-test file");
    if (s == FSDP_OK) {
        fsdp_comm_set_label(r->comm, "train / checking that the ranks share the checkpoint folder");
        s = fsdp_comm_broadcast(r->comm, &nonce, 1, FSDP_I64, 0);
        if (s != FSDP_OK) {
            free(p);
            return s;
        }
        long long got = 0;
        FILE *f = fopen(p, "rb");
        int ok = f && fscanf(f, "%lld", &got) == 1 && got == (long long)nonce;
        if (f) fclose(f);
        if (!ok)
            s = fsdp_set_error(
                FSDP_EINVAL,
                "--checkpoint-dir %s is not the folder rank 0 sees: rank %d %s rank 0's %s (each "
                "host its own disk?); the ranks must share one checkpoint folder. Nothing was "
                "trained or saved",
                dir, r->rank, f ? "reads another file than" : "cannot find", p);
        s = fsdp_comm_agree(r->comm, s, "checking that the ranks share the checkpoint folder");
    }
    if (r->rank == 0 && p) unlink(p);
    free(p);
    return s;
}
