/* data.c — the data set's files (a folder, shards, globs), the shuffled order, and the loader that hands
 * each rank its disjoint part of every global batch. Token files are read with pread per micro-batch:
 * nothing is mapped or loaded whole. `prepare` (text or JSONL to token files) is prepare.c. */
#include "data/data.h"

#include "core/core.h"
#include "data/bpe.h"
#include "data/chat.h"
#include "io/io.h"
#include "io/json.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token and checkpoint files are little-endian; this build assumes a little-endian host"
#endif

/* ---------------------------------------------------------------- data set files */

int fsdp_data_is_glob(const char *data) { return strpbrk(data, "*?[") != NULL; }

char *fsdp_data_dir(const char *data) {
    if (!fsdp_data_is_glob(data)) return strdup(data);
    size_t n = strlen(data) + 2;
    char *d = malloc(n);
    if (d) fsdp_path_dirname(data, d, n);
    return d;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends a malloc'd copy of path to (*list, *n). */
static fsdp_status list_add(char ***list, int *n, const char *path) {
    char **l = realloc(*list, sizeof *l * (size_t)(*n + 1));
    if (!l) return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of data files");
    *list = l;
    if (!(l[*n] = strdup(path))) return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of data files");
    (*n)++;
    return FSDP_OK;
}

/* The paths pattern expands to with glob(3), sorted by byte order (no match: an empty list), less the
 * mask files (X.mask: a token file's companion, never a shard of its own). strict: a folder of the
 * pattern that cannot be read is an error (the training shards); else it only matches nothing. */
static fsdp_status glob_list(const char *pattern, int strict, char ***list, int *n) {
    glob_t g;
    int rc = glob(pattern, strict ? GLOB_ERR : 0, NULL, &g);
    fsdp_status s = FSDP_OK;
    if (rc == GLOB_NOSPACE)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory to expand --data %s", pattern);
    else if (rc == GLOB_ABORTED)
        s = fsdp_set_error(FSDP_EIO, "--data %s: cannot read a folder of the pattern: %s", pattern,
                           strerror(errno));
    for (size_t i = 0; s == FSDP_OK && rc == 0 && i < g.gl_pathc; i++) {
        size_t len = strlen(g.gl_pathv[i]);
        if (len >= 5 && strcmp(g.gl_pathv[i] + len - 5, ".mask") == 0) continue;
        s = list_add(list, n, g.gl_pathv[i]);
    }
    if (rc == 0 || rc == GLOB_NOMATCH) globfree(&g);
    if (s == FSDP_OK && *n > 1) qsort(*list, (size_t)*n, sizeof **list, cmp_str);
    return s;
}

/* dir's entries whose name matches the fnmatch(3) pattern, as dir/name, sorted by name. */
static fsdp_status dir_list(const char *dir, const char *pattern, char ***list, int *n) {
    DIR *d = opendir(dir);
    if (!d) return fsdp_set_error(FSDP_EIO, "cannot read the data folder %s: %s", dir, strerror(errno));
    fsdp_status s = FSDP_OK;
    struct dirent *e;
    while (s == FSDP_OK && (e = readdir(d)) != NULL) {
        if (fnmatch(pattern, e->d_name, 0) != 0) continue;
        char *p = fsdp_strdupf("%s/%s", dir, e->d_name);
        s = p ? list_add(list, n, p) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        free(p);
    }
    closedir(d);
    if (s == FSDP_OK && *n > 1) qsort(*list, (size_t)*n, sizeof **list, cmp_str);
    return s;
}

fsdp_status fsdp_data_files_find(const char *data, fsdp_data_files *f) {
    memset(f, 0, sizeof *f);
    fsdp_status s = FSDP_OK;
    struct stat st;
    if (fsdp_data_is_glob(data)) {
        s = glob_list(data, 1, &f->train, &f->n_train);
        if (s == FSDP_OK && f->n_train == 0)
            s = fsdp_set_error(FSDP_EINVAL, "--data %s matches no file: name a folder or a pattern of shards",
                               data);
        /* the validation shards: the pattern with the last "train" of its file name as "val" (never one
         * of its folders'); a file name without "train" has none. Optional: a folder that cannot be
         * read only means no validation (a run without evaluation never needs them). */
        const char *base = strrchr(data, '/'), *t = NULL;
        base = base ? base + 1 : data;
        for (const char *q = strstr(base, "train"); q; q = strstr(q + 1, "train"))
            t = q;
        if (s == FSDP_OK && t) {
            f->val_desc = fsdp_strdupf("%.*sval%s", (int)(t - data), data, t + 5);
            s = f->val_desc ? glob_list(f->val_desc, 0, &f->val, &f->n_val)
                            : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        } else if (s == FSDP_OK) {
            f->val_desc = fsdp_strdupf("validation shards (the file name of %s has no \"train\" to stand for "
                                       "\"val\")",
                                       data);
            if (!f->val_desc) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        }
    } else {
        char *tp = fsdp_strdupf("%s/train.bin", data);
        if (!tp) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        if (access(tp, F_OK) != 0 && stat(data, &st) == 0 && S_ISDIR(st.st_mode)) {
            s = dir_list(data, "*_train_*.bin", &f->train, &f->n_train);
            if (s == FSDP_OK && f->n_train > 0) {
                f->val_desc = fsdp_strdupf("%s/*_val_*.bin", data);
                s = f->val_desc ? dir_list(data, "*_val_*.bin", &f->val, &f->n_val)
                                : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
            }
        }
        if (s == FSDP_OK && f->n_train == 0 && access(tp, F_OK) != 0 && stat(data, &st) == 0 &&
            S_ISDIR(st.st_mode))
            s = fsdp_set_error(FSDP_EINVAL,
                               "--data %s: the folder holds neither train.bin nor shards named *_train_*.bin "
                               "(make one with `fsdp-train prepare --out %s ...`)",
                               data, data);
        if (s == FSDP_OK && f->n_train == 0) {
            /* DIR/train.bin and DIR/val.bin, also when missing: opening train.bin says so */
            s = list_add(&f->train, &f->n_train, tp);
            f->val_desc = fsdp_strdupf("%s/val.bin", data);
            if (s == FSDP_OK && !f->val_desc) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
            if (s == FSDP_OK && access(f->val_desc, F_OK) == 0) s = list_add(&f->val, &f->n_val, f->val_desc);
        }
        free(tp);
    }
    if (s != FSDP_OK) fsdp_data_files_free(f);
    return s;
}

void fsdp_data_files_free(fsdp_data_files *f) {
    for (int i = 0; f->train && i < f->n_train; i++)
        free(f->train[i]);
    for (int i = 0; f->val && i < f->n_val; i++)
        free(f->val[i]);
    free(f->train);
    free(f->val);
    free(f->val_desc);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------- shuffle */

/* splitmix64's finaliser: a bijection of 64-bit words that mixes every bit into every other. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t fsdp_data_shuffle_key(uint64_t seed, uint64_t epoch) {
    return mix64(mix64(seed ^ 0x5851f42d4c957f2dull) + epoch);
}

uint64_t fsdp_data_shuffle_index(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return i;
    /* a balanced Feistel network on the smallest even number of bits (>= 2) whose range holds n; a
     * value at or past n walks the cycle on to the next one below n (fewer than 4 steps on average) */
    int bits = 64 - __builtin_clzll(n - 1);
    bits += bits & 1;
    if (bits < 2) bits = 2;
    const int half = bits / 2;
    const uint64_t mask = (half == 64 ? ~0ull : (1ull << half) - 1);
    uint64_t x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = mix64(r ^ mix64(key + round)) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

/* ---------------------------------------------------------------- loader */

/* Ids of a token file too large to be checked when opened (io/tokens.h), and the flags of its mask
 * file, read through once in chunks: each fsdp_tokens_read / fsdp_mask_read checks what it reads and
 * names the file and the token index at fault. The chunk is transient staging outside the memory plan
 * (freed before the model exists). */
static fsdp_status check_all(const fsdp_loader_shard *sh) {
    const size_t chunk = (size_t)1 << 18;
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!buf) return FSDP_ERR(FSDP_ENOMEM, "no memory to check %s", sh->file.path);
    fsdp_status s = FSDP_OK;
    for (uint64_t at = 0; s == FSDP_OK && sh->file.ntok > FSDP_TOKENS_FULL_CHECK_MAX && at < sh->file.ntok;
         at += chunk) {
        size_t n = sh->file.ntok - at < chunk ? (size_t)(sh->file.ntok - at) : chunk;
        s = fsdp_tokens_read(&sh->file, at, n, buf);
    }
    for (uint64_t at = 0;
         s == FSDP_OK && sh->mask.fd >= 0 && sh->mask.ntok > FSDP_TOKENS_FULL_CHECK_MAX && at < sh->mask.ntok;
         at += chunk) {
        size_t n = sh->mask.ntok - at < chunk ? (size_t)(sh->mask.ntok - at) : chunk;
        s = fsdp_mask_read(&sh->mask, at, n, (uint8_t *)buf);
    }
    free(buf);
    return s;
}

/* Opens shard sh of path: its token file, and X.mask beside X.bin (a path not ending in .bin: PATH.mask)
 * when that exists. */
static fsdp_status shard_open(fsdp_loader_shard *sh, const char *path, int vocab, int *has_mask) {
    sh->file.fd = -1;
    sh->mask.fd = -1;
    FSDP_TRY(fsdp_tokens_open(&sh->file, path, vocab));
    size_t n = strlen(path);
    size_t stem = (n >= 4 && strcmp(path + n - 4, ".bin") == 0) ? n - 4 : n;
    char *mp = fsdp_strdupf("%.*s.mask", (int)stem, path);
    if (!mp) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    if (access(mp, F_OK) == 0) {
        s = fsdp_mask_open(&sh->mask, mp, sh->file.ntok);
        if (s == FSDP_OK) *has_mask = 1;
    }
    free(mp);
    return s;
}

/* The --pack pad table: every shard scanned once for its document starts (its mask's flags when they
 * mark documents, else its tokens), in blocks; the block is transient staging outside the memory plan. */
static fsdp_status build_pad_table(fsdp_loader *L) {
    const size_t chunk = (size_t)1 << 18;
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!buf) return FSDP_ERR(FSDP_ENOMEM, "no memory to scan the documents (--pack pad)");
    fsdp_pack_table_init(&L->table, L->T);
    fsdp_status s = FSDP_OK;
    for (int i = 0; s == FSDP_OK && i < L->n_shards; i++) {
        const fsdp_loader_shard *sh = &L->shards[i];
        fsdp_pack_scan_begin(&L->table, i);
        for (uint64_t at = 0; s == FSDP_OK && at < sh->file.ntok; at += chunk) {
            size_t n = sh->file.ntok - at < chunk ? (size_t)(sh->file.ntok - at) : chunk;
            if (sh->doc_flags) {
                s = fsdp_mask_read(&sh->mask, at, n, (uint8_t *)buf);
                if (s == FSDP_OK) s = fsdp_pack_scan(&L->table, NULL, (const uint8_t *)buf, n, L->eot);
            } else {
                s = fsdp_tokens_read(&sh->file, at, n, buf);
                if (s == FSDP_OK) s = fsdp_pack_scan(&L->table, buf, NULL, n, L->eot);
            }
        }
        if (s == FSDP_OK) s = fsdp_pack_scan_end(&L->table);
    }
    free(buf);
    if (s == FSDP_OK) L->nseq = L->table.n;
    return s;
}

/* --pack: auto becomes doc when a shard's mask file marks documents, else concat; doc and pad need the
 * document starts of every shard: its mask's flags, or the end-of-text token. pad builds its table. */
static fsdp_status resolve_pack(fsdp_loader *L, const fsdp_loader_args *a) {
    int any_flags = 0;
    for (int i = 0; i < L->n_shards; i++)
        any_flags |= L->shards[i].doc_flags;
    L->eot = a->eot;
    L->pack = a->pack == FSDP_PACK_AUTO ? (any_flags ? FSDP_PACK_DOC : FSDP_PACK_CONCAT) : a->pack;
    if (L->pack == FSDP_PACK_CONCAT) return FSDP_OK;
    for (int i = 0; i < L->n_shards; i++)
        if (!L->shards[i].doc_flags && L->eot < 0)
            return fsdp_set_error(
                FSDP_EINVAL,
                "--pack %s: %s has no mask file marking documents and the data's meta.json "
                "names no end-of-text token (\"eot\"), so its documents are unknown: add "
                "\"eot\": ID to meta.json (fsdp-train prepare writes it; GPT-2's is 50256), "
                "or train with --pack concat",
                fsdp_pack_names[L->pack], L->shards[i].file.path);
    return L->pack == FSDP_PACK_PAD ? build_pad_table(L) : FSDP_OK;
}

fsdp_status fsdp_loader_open(fsdp_loader *L, const fsdp_loader_args *a) {
    memset(L, 0, sizeof *L);
    const int batch = a->batch, T = a->T, micro = a->micro, rank = a->rank, world = a->world;
    if (batch <= 0 || T <= 0 || micro <= 0 || world <= 0 || rank < 0 || rank >= world || a->n_paths <= 0)
        return FSDP_ERR(FSDP_EINVAL,
                        "bad loader shape: --batch %d, --seq-len %d, --micro-batches %d, rank %d of %d, %d "
                        "files",
                        batch, T, micro, rank, world, a->n_paths);
    if (batch % (micro * world) != 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "--batch %d is not divisible by --micro-batches %d x world size %d = %d: every "
                              "rank needs the same whole number of sequences per micro-batch",
                              batch, micro, world, micro * world);
    L->batch = batch;
    L->T = T;
    L->micro = micro;
    L->rank = rank;
    L->world = world;
    L->b = batch / (micro * world);
    L->shuffle = a->shuffle;
    L->seed = a->seed;
    L->key = fsdp_data_shuffle_key(a->seed, 0);
    L->shards = calloc((size_t)a->n_paths, sizeof *L->shards);
    if (!L->shards) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d shards", a->n_paths);
    fsdp_status s = FSDP_OK;
    int has_mask = 0;
    for (int i = 0; i < a->n_paths; i++) {
        L->shards[i].file.fd = L->shards[i].mask.fd = -1;
        L->n_shards = i + 1;
        fsdp_loader_shard *sh = &L->shards[i];
        s = shard_open(sh, a->paths[i], a->vocab, &has_mask);
        if (s == FSDP_OK && sh->mask.fd >= 0 && sh->mask.ntok > 0) {
            uint8_t f0;
            s = fsdp_mask_read(&sh->mask, 0, 1, &f0);
            sh->doc_flags = s == FSDP_OK && (f0 & FSDP_MASK_DOC);
        }
        /* the large files' ids: each shard checked by one rank (the caller agrees on the outcome) */
        if (s == FSDP_OK && i % world == rank) s = check_all(sh);
        if (s != FSDP_OK) goto fail;
        sh->first = L->nseq;
        sh->nseq = sh->file.ntok ? (sh->file.ntok - 1) / (uint64_t)T : 0;
        L->nseq += sh->nseq;
        L->ntok += sh->file.ntok;
    }
    s = resolve_pack(L, a);
    if (s != FSDP_OK) goto fail;
    if (L->pack == FSDP_PACK_PAD && L->nseq < (uint64_t)batch && !a->allow_short) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "--pack pad: %s%s hold%s %llu documents' sequences (a document, or a chunk of "
                           "--seq-len %d of a longer one, a sequence), fewer than one global batch (--batch "
                           "%d): use more data, a smaller batch or --pack doc",
                           a->paths[0], L->n_shards > 1 ? " and the shards after it" : "",
                           L->n_shards > 1 ? "" : "s", (unsigned long long)L->nseq, T, batch);
        goto fail;
    }
    if (L->nseq < (uint64_t)batch && !a->allow_short) {
        uint64_t need = (uint64_t)batch * (uint64_t)T + 1;
        if (L->n_shards == 1)
            s = fsdp_set_error(
                FSDP_EFORMAT,
                "%s holds %llu tokens, fewer than one global batch needs (--batch %d x --seq-len "
                "%d + 1 = %llu): use more data or a smaller batch",
                a->paths[0], (unsigned long long)L->ntok, batch, T, (unsigned long long)need);
        else
            s = fsdp_set_error(FSDP_EFORMAT,
                               "the %d shards %s ... %s hold %llu sequences of --seq-len %d + 1 tokens (a "
                               "sequence never spans two shards), fewer than one global batch (--batch %d): "
                               "use more data or a smaller batch",
                               L->n_shards, a->paths[0], a->paths[L->n_shards - 1],
                               (unsigned long long)L->nseq, T, batch);
        goto fail;
    }
    s = fsdp_mem_alloc((void **)&L->buf, sizeof(int32_t) * ((size_t)L->b * (size_t)T + 1), FSDP_MEM_OTHER);
    if (s == FSDP_OK && has_mask)
        s = fsdp_mem_alloc((void **)&L->mbuf, (size_t)L->b * (size_t)T + 1, FSDP_MEM_OTHER);
    if (s != FSDP_OK) goto fail;
    return FSDP_OK;
fail:
    fsdp_loader_free(L);
    return s;
}

fsdp_status fsdp_loader_init(fsdp_loader *L, const char *path, int vocab, int batch, int T, int micro,
                             int rank, int world) {
    fsdp_loader_args a = {.paths = &path,
                          .n_paths = 1,
                          .vocab = vocab,
                          .batch = batch,
                          .T = T,
                          .micro = micro,
                          .rank = rank,
                          .world = world,
                          .pack = FSDP_PACK_CONCAT,
                          .eot = -1};
    return fsdp_loader_open(L, &a);
}

void fsdp_loader_free(fsdp_loader *L) {
    fsdp_mem_free(L->buf);
    L->buf = NULL;
    fsdp_mem_free(L->mbuf);
    L->mbuf = NULL;
    for (int i = 0; L->shards && i < L->n_shards; i++) {
        fsdp_mask_close(&L->shards[i].mask);
        fsdp_tokens_close(&L->shards[i].file);
    }
    free(L->shards);
    L->shards = NULL;
    fsdp_pack_table_free(&L->table);
    L->n_shards = 0;
}

void fsdp_loader_locate(const fsdp_loader *L, uint64_t seq, int *shard, uint64_t *tok) {
    if (L->pack == FSDP_PACK_PAD) {
        *shard = L->table.seq[seq].shard;
        *tok = L->table.seq[seq].tok;
        return;
    }
    /* the last shard whose first sequence is <= seq: a shard of no sequence shares its first index with
     * the next one, which wins */
    int lo = 0, hi = L->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (L->shards[mid].first <= seq)
            lo = mid;
        else
            hi = mid - 1;
    }
    *shard = lo;
    *tok = (seq - L->shards[lo].first) * (uint64_t)L->T;
}

uint64_t fsdp_loader_sequence(const fsdp_loader *L, uint64_t k) {
    return L->shuffle ? fsdp_data_shuffle_index(k, L->nseq, L->key) : k;
}

/* --pack pad: sequence i of the slice is table entry seq, padded to T. */
static fsdp_status pad_sequence(fsdp_loader *L, uint64_t seq, size_t i, int32_t *inputs, int32_t *targets) {
    const size_t T = (size_t)L->T;
    const fsdp_pack_seq *e = &L->table.seq[seq];
    const fsdp_loader_shard *S = &L->shards[e->shard];
    FSDP_TRY(fsdp_tokens_read(&S->file, e->tok, e->len, L->buf));
    if (S->mask.fd >= 0) FSDP_TRY(fsdp_mask_read(&S->mask, e->tok, e->len, L->mbuf));
    fsdp_pack_pad_row(L->buf, S->mask.fd >= 0 ? L->mbuf : NULL, e->len, L->T, L->eot >= 0 ? L->eot : 0,
                      inputs + i * T, targets + i * T);
    return FSDP_OK;
}

fsdp_status fsdp_loader_micro(fsdp_loader *L, int m, int32_t *inputs, int32_t *targets, int32_t *doc) {
    if (m < 0 || m >= L->micro)
        return FSDP_ERR(FSDP_EINVAL, "micro-batch %d is outside 0..%d", m, L->micro - 1);
    const size_t T = (size_t)L->T, b = (size_t)L->b;
    /* this slice's first place in the epoch's order of sequences */
    const uint64_t k0 = L->pos / T + (uint64_t)m * (uint64_t)(L->batch / L->micro) + (uint64_t)L->rank * b;
    if (doc) memset(doc, 0, sizeof *doc * b * T); /* concat, pad: one attention span a sequence */
    for (size_t i = 0; i < b;) {
        if (L->pack == FSDP_PACK_PAD) {
            FSDP_TRY(pad_sequence(L, fsdp_loader_sequence(L, k0 + i), i, inputs, targets));
            i++;
            continue;
        }
        /* a run of sequences that follow each other in one shard: one read of n*T + 1 tokens */
        int sh;
        uint64_t tok;
        fsdp_loader_locate(L, fsdp_loader_sequence(L, k0 + i), &sh, &tok);
        const fsdp_loader_shard *S = &L->shards[sh];
        size_t n = 1;
        while (i + n < b && fsdp_loader_sequence(L, k0 + i + n) == fsdp_loader_sequence(L, k0 + i) + n &&
               (tok / T) + n < S->nseq)
            n++;
        FSDP_TRY(fsdp_tokens_read(&S->file, tok, n * T + 1, L->buf));
        for (size_t j = 0; j < n; j++)
            for (size_t t = 0; t < T; t++) {
                inputs[(i + j) * T + t] = L->buf[j * T + t];
                targets[(i + j) * T + t] = L->buf[j * T + t + 1];
            }
        if (S->mask.fd >= 0) {
            FSDP_TRY(fsdp_mask_read(&S->mask, tok, n * T + 1, L->mbuf));
            for (size_t j = 0; j < n; j++)
                for (size_t t = 0; t < T; t++)
                    if (!(L->mbuf[j * T + t + 1] & FSDP_MASK_LOSS))
                        targets[(i + j) * T + t] = FSDP_IGNORE_INDEX;
        }
        for (size_t j = 0; doc && L->pack == FSDP_PACK_DOC && j < n; j++)
            fsdp_pack_doc_ids(L->buf + j * T, S->doc_flags ? L->mbuf + j * T : NULL, T, L->eot,
                              doc + (i + j) * T);
        i += n;
    }
    return FSDP_OK;
}

void fsdp_loader_advance(fsdp_loader *L) {
    uint64_t step = (uint64_t)L->batch * (uint64_t)L->T;
    L->pos += step;
    if (L->pos / L->T + (uint64_t)L->batch > L->nseq) {
        L->pos = 0;
        L->epoch++;
        L->key = fsdp_data_shuffle_key(L->seed, L->epoch);
    }
}

fsdp_loader_state fsdp_loader_get_state(const fsdp_loader *L) {
    fsdp_loader_state s = {L->pos, L->epoch};
    return s;
}

fsdp_status fsdp_loader_set_state(fsdp_loader *L, fsdp_loader_state st) {
    uint64_t step = (uint64_t)L->batch * (uint64_t)L->T;
    if (st.pos % step != 0 || L->nseq < (uint64_t)L->batch || st.pos / L->T > L->nseq - (uint64_t)L->batch)
        return fsdp_set_error(FSDP_EINVAL,
                              "data position %llu is not a batch start in %s%s (%llu sequences of %d + 1 "
                              "tokens, %llu tokens per batch): the checkpoint was made with other data, "
                              "--batch or --seq-len",
                              (unsigned long long)st.pos, L->shards[0].file.path,
                              L->n_shards > 1 ? " and the shards after it" : "", (unsigned long long)L->nseq,
                              L->T, (unsigned long long)step);
    L->pos = st.pos;
    L->epoch = st.epoch;
    L->key = fsdp_data_shuffle_key(L->seed, L->epoch);
    return FSDP_OK;
}

uint64_t fsdp_loader_num_batches(const fsdp_loader *L) { return L->nseq / (uint64_t)L->batch; }
