/* test_shards.c — the loader over many shards and its shuffle (data/data.h): the permutation is a
 * bijection of [0, n) for many n (1, 2, powers of two and not), different across epochs and seeds; a
 * shuffled epoch hands out every sequence once, the same global batches at 1, 2 and 3 ranks and 1 or 2
 * micro-batches; a folder of shards (and a glob of them) gives the sequences their concatenation
 * predicts, none across a shard boundary, with a shard's mask file applied to that shard alone; a saved state
 * resumes the same order on another world size; every shard is validated before use (bad header, an id >= the
 * vocabulary in shard 2, also past the size checked when a file is opened, named with the file and the token
 * index; an empty glob). The expectations are derived from the token ids, which encode the shard and the
 * token index. */
#include "test_util.h"

#include "fsdp.h"
#include "data/data.h"
#include "io/io.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];

static char *path_in(const char *name) { return fsdp_strdupf("%s/%s", dir, name); }

/* The permutation: every index once, for sizes around powers of two; the identity is rare; epochs and
 * seeds give other orders. */
static void test_permutation(void) {
    static const uint64_t sizes[] = {1,  2,  3,  4,   5,   7,   8,   9,    15,   16,   17,
                                     31, 33, 64, 100, 255, 256, 257, 1000, 4095, 4097, 65537};
    static uint8_t seen[65537];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const uint64_t n = sizes[k];
        for (uint64_t seed = 0; seed < 3; seed++)
            for (uint64_t epoch = 0; epoch < 3; epoch++) {
                uint64_t key = fsdp_data_shuffle_key(seed, epoch);
                memset(seen, 0, n);
                int ok = 1;
                uint64_t fixed = 0;
                for (uint64_t i = 0; i < n; i++) {
                    uint64_t j = fsdp_data_shuffle_index(i, n, key);
                    if (j >= n || seen[j]) {
                        ok = 0;
                        break;
                    }
                    seen[j] = 1;
                    fixed += j == i;
                }
                CHECKF(ok, "n %llu seed %llu epoch %llu: a bijection of [0, n)", (unsigned long long)n,
                       (unsigned long long)seed, (unsigned long long)epoch);
                if (n >= 64)
                    CHECKF(fixed < n / 4, "n %llu: %llu of the indices stay in place", (unsigned long long)n,
                           (unsigned long long)fixed);
            }
        if (n < 8) continue;
        /* another epoch, another seed: another order */
        uint64_t k00 = fsdp_data_shuffle_key(1337, 0), k01 = fsdp_data_shuffle_key(1337, 1),
                 k10 = fsdp_data_shuffle_key(1338, 0);
        int d_epoch = 0, d_seed = 0;
        for (uint64_t i = 0; i < n; i++) {
            d_epoch += fsdp_data_shuffle_index(i, n, k00) != fsdp_data_shuffle_index(i, n, k01);
            d_seed += fsdp_data_shuffle_index(i, n, k00) != fsdp_data_shuffle_index(i, n, k10);
        }
        CHECKF(d_epoch > 0 && d_seed > 0, "n %llu: epochs and seeds change the order (%d, %d differ)",
               (unsigned long long)n, d_epoch, d_seed);
    }
    /* a size near 2^64 (the 64-bit Feistel halves) still maps into [0, n) */
    uint64_t big = ~0ull - 5, key = fsdp_data_shuffle_key(7, 3);
    for (uint64_t i = big - 20; i < big; i++)
        CHECK(fsdp_data_shuffle_index(i, big, key) < big);
}

/* A 32-bit token file whose token i has id base + i. */
static char *write_ids(const char *name, uint32_t base, size_t n) {
    uint32_t *t = malloc(4 * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        t[i] = base + (uint32_t)i;
    char *p = path_in(name);
    CHECK_OK(fsdp_tokens_write(p, t, n, 4));
    free(t);
    return p;
}

enum { VOCAB = 1 << 20, SHARD_STRIDE = 100000 };

/* Token 20 of shard 1 lacks the loss flag in its mask file (sh_train_001.mask): its target is ignored. */
#define MASKED_ID ((uint64_t)SHARD_STRIDE + 20)

/* Sequence (shard, first token) of the slice's row i, from its ids; checks the row's T inputs and
 * targets follow one another in that shard (the masked token's target: FSDP_IGNORE_INDEX). */
static int row_start(const int32_t *in, const int32_t *tg, int i, int T, uint64_t *id0) {
    *id0 = (uint64_t)in[(size_t)i * T];
    for (int t = 0; t < T; t++) {
        uint64_t want = *id0 + (uint64_t)t + 1;
        if ((uint64_t)in[(size_t)i * T + t] != *id0 + (uint64_t)t ||
            tg[(size_t)i * T + t] != (want == MASKED_ID ? FSDP_IGNORE_INDEX : (int32_t)want))
            return 0;
    }
    return 1;
}

/* Shards sh_train_*.bin of lengths 1000, 37, 10 (no sequence of T + 1 = 17 tokens) and 2500, created out of
 * name order; a val shard; ids SHARD_STRIDE * k + i for shard k in name order. */
static const size_t shard_len[] = {1000, 37, 10, 2500};
static const char *const shard_name[] = {"sh_train_000.bin", "sh_train_001.bin", "sh_train_002.bin",
                                         "sh_train_003.bin"};

static void make_shards(void) {
    for (int k = 3; k >= 0; k--)
        free(write_ids(shard_name[k], (uint32_t)(SHARD_STRIDE * k), shard_len[k]));
    free(write_ids("sh_val_000.bin", 9 * SHARD_STRIDE, 700));
    free(write_ids("unrelated.bin", 0, 50)); /* neither pattern: not a shard */
    uint8_t fl[37];
    for (int i = 0; i < 37; i++)
        fl[i] = FSDP_MASK_LOSS;
    fl[20] = 0;
    char *mp = path_in("sh_train_001.mask");
    CHECK_OK(fsdp_mask_write(mp, fl, 37));
    free(mp);
}

/* The folder and the glob find the shards sorted, the val shards beside them; unshuffled, the loader
 * hands out exactly the sequences of the concatenation (per shard floor((n - 1) / T) of T + 1 tokens at
 * stride T), in order, batch after batch, and then wraps. */
static void test_shards(void) {
    const int T = 16, B = 6;
    fsdp_data_files f, g;
    CHECK_OK(fsdp_data_files_find(dir, &f));
    CHECK(f.n_train == 4 && f.n_val == 1 && strstr(f.val[0], "sh_val_000.bin"));
    for (int k = 0; k < 4 && f.n_train == 4; k++)
        CHECKF(strstr(f.train[k], shard_name[k]) != NULL, "shard %d is %s", k, f.train[k]);
    char *pat = path_in("sh_train_*.bin");
    CHECK_OK(fsdp_data_files_find(pat, &g));
    CHECK(g.n_train == 4 && g.n_val == 1 && strstr(g.val_desc, "sh_val_*.bin"));
    for (int k = 0; k < 4 && g.n_train == 4; k++)
        CHECK(!strcmp(f.train[k], g.train[k]));
    fsdp_data_files h; /* a glob that also matches the mask file: the mask is no shard */
    char *pat2 = path_in("sh_train_*");
    CHECK_OK(fsdp_data_files_find(pat2, &h));
    CHECK(h.n_train == 4 && h.n_val == 1);
    for (int k = 0; k < 4 && h.n_train == 4; k++)
        CHECK(!strcmp(f.train[k], h.train[k]));
    fsdp_data_files_free(&h);
    free(pat2);
    char *ddir = fsdp_data_dir(pat);
    CHECK(ddir && !strcmp(ddir, dir));
    free(ddir);
    free(pat);
    /* the predicted list of sequences: (shard, first token) */
    uint64_t want[400];
    int nw = 0;
    for (int k = 0; k < 4; k++)
        for (uint64_t j = 0; j < (shard_len[k] - 1) / (uint64_t)T; j++)
            want[nw++] = (uint64_t)SHARD_STRIDE * k + j * T;
    fsdp_loader L;
    fsdp_loader_args a = {.paths = (const char *const *)f.train,
                          .n_paths = f.n_train,
                          .vocab = VOCAB,
                          .batch = B,
                          .T = T,
                          .micro = 1,
                          .rank = 0,
                          .world = 1};
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.nseq == (uint64_t)nw && L.n_shards == 4 && fsdp_loader_num_batches(&L) == (uint64_t)nw / B);
    int32_t in[6 * 16], tg[6 * 16];
    int bad = 0, at = 0, masked = 0;
    const int nb = nw / B;
    for (int step = 0; step < nb + 2; step++) {
        CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
        for (int i = 0; i < B; i++) {
            uint64_t id0;
            bad += !row_start(in, tg, i, T, &id0);
            bad += id0 != want[(at % nb) * B + i];
        }
        for (int i = 0; i < B * T; i++)
            masked += tg[i] == FSDP_IGNORE_INDEX;
        at++;
        fsdp_loader_advance(&L);
    }
    CHECKF(!bad, "the shards' sequences in order, never across a shard boundary (%d wrong)", bad);
    /* the one sequence holding the masked target (shard 1's second, in batch 10) came once */
    CHECKF(masked == 1 && L.shards[1].mask.fd >= 0 && L.shards[0].mask.fd < 0,
           "shard 1's mask file applies to shard 1 alone (%d ignored targets)", masked);
    CHECK(L.epoch == 1 && L.pos == (uint64_t)2 * B * T);
    /* locate: the last sequence of shard 0, the first of shards 1 and 3 (shard 2 has none) */
    int sh;
    uint64_t tok;
    fsdp_loader_locate(&L, (1000 - 1) / T - 1, &sh, &tok);
    CHECK(sh == 0 && tok == (uint64_t)((1000 - 1) / T - 1) * T);
    fsdp_loader_locate(&L, (1000 - 1) / T, &sh, &tok);
    CHECK(sh == 1 && tok == 0);
    fsdp_loader_locate(&L, (1000 - 1) / T + (37 - 1) / T, &sh, &tok);
    CHECK(sh == 3 && tok == 0);
    fsdp_loader_free(&L);
    fsdp_loader_free(&L); /* twice: harmless */
    fsdp_data_files_free(&f);
    fsdp_data_files_free(&g);
}

/* Shuffled: each epoch hands out nb*B distinct sequences, never the same order twice; the global batch
 * is the same at 1, 2, 3 ranks and 1 or 2 micro-batches; a state saved at one world size resumes the
 * same order at another. */
static void test_shuffled(void) {
    const int T = 16, B = 6;
    fsdp_data_files f;
    CHECK_OK(fsdp_data_files_find(dir, &f));
    enum { STEPS = 120 }; /* three epochs of 36 batches and then some */
    const int steps = STEPS;
    uint64_t ref[STEPS][6]; /* the 1-rank run's global batches (id of each sequence's first token) */
    int nb = 0, bad = 0;
    for (int world = 1; world <= 3; world++)
        for (int micro = 1; micro <= 2; micro++) {
            if (B % (world * micro)) continue;
            const int b = B / (world * micro);
            fsdp_loader L[3];
            for (int r = 0; r < world; r++) {
                fsdp_loader_args a = {.paths = (const char *const *)f.train,
                                      .n_paths = f.n_train,
                                      .vocab = VOCAB,
                                      .batch = B,
                                      .T = T,
                                      .micro = micro,
                                      .rank = r,
                                      .world = world,
                                      .shuffle = 1,
                                      .seed = 1337};
                CHECK_OK(fsdp_loader_open(&L[r], &a));
            }
            nb = (int)fsdp_loader_num_batches(&L[0]);
            CHECK(nb > 3 && nb * 3 <= steps);
            for (int step = 0; step < steps; step++) {
                uint64_t got[6];
                for (int r = 0; r < world; r++)
                    for (int m = 0; m < micro; m++) {
                        int32_t in[6 * 16], tg[6 * 16];
                        CHECK_OK(fsdp_loader_micro(&L[r], m, in, tg, NULL));
                        for (int i = 0; i < b; i++)
                            bad += !row_start(in, tg, i, T, &got[m * (B / micro) + r * b + i]);
                    }
                for (int s = 0; s < B; s++) {
                    if (world == 1 && micro == 1)
                        ref[step][s] = got[s];
                    else
                        bad += ref[step][s] != got[s];
                }
                for (int r = 0; r < world; r++)
                    fsdp_loader_advance(&L[r]);
            }
            for (int r = 0; r < world; r++)
                fsdp_loader_free(&L[r]);
        }
    CHECKF(!bad, "the same global batches at every world size and micro-batch count (%d differ)", bad);
    /* each epoch: nb*B distinct sequences; epochs differ in order; file order would be ascending */
    int dup = 0, same_order = 1, ascending = 1;
    for (int e = 0; e < 3; e++)
        for (int x = 0; x < nb * B; x++)
            for (int y = x + 1; y < nb * B; y++)
                dup += ref[e * nb + x / B][x % B] == ref[e * nb + y / B][y % B];
    for (int x = 0; x < nb * B; x++) {
        same_order &= ref[x / B][x % B] == ref[nb + x / B][x % B];
        if (x) ascending &= ref[x / B][x % B] > ref[(x - 1) / B][(x - 1) % B];
    }
    CHECKF(dup == 0 && !same_order && !ascending,
           "every sequence at most once per epoch (%d repeats), a new "
           "order each epoch, not file order",
           dup);
    /* resume: 2 ranks, state after 40 steps (in the second epoch); 3 ranks continue from it */
    fsdp_loader_state st = {0, 0};
    for (int r = 0; r < 2; r++) {
        fsdp_loader L;
        fsdp_loader_args a = {.paths = (const char *const *)f.train,
                              .n_paths = f.n_train,
                              .vocab = VOCAB,
                              .batch = B,
                              .T = T,
                              .micro = 1,
                              .rank = r,
                              .world = 2,
                              .shuffle = 1,
                              .seed = 1337};
        CHECK_OK(fsdp_loader_open(&L, &a));
        for (int k = 0; k < 40; k++)
            fsdp_loader_advance(&L);
        st = fsdp_loader_get_state(&L);
        fsdp_loader_free(&L);
    }
    CHECK(st.epoch == (uint64_t)(40 / nb) && st.pos == (uint64_t)(40 % nb) * B * T);
    bad = 0;
    for (int r = 0; r < 3; r++) {
        fsdp_loader L;
        fsdp_loader_args a = {.paths = (const char *const *)f.train,
                              .n_paths = f.n_train,
                              .vocab = VOCAB,
                              .batch = B,
                              .T = T,
                              .micro = 2,
                              .rank = r,
                              .world = 3,
                              .shuffle = 1,
                              .seed = 1337};
        CHECK_OK(fsdp_loader_open(&L, &a));
        CHECK_OK(fsdp_loader_set_state(&L, st));
        for (int step = 40; step < 60; step++) {
            for (int m = 0; m < 2; m++) {
                int32_t in[6 * 16], tg[6 * 16];
                uint64_t id0;
                CHECK_OK(fsdp_loader_micro(&L, m, in, tg, NULL));
                bad += !row_start(in, tg, 0, T, &id0);
                bad += id0 != ref[step][m * 3 + r];
            }
            fsdp_loader_advance(&L);
        }
        fsdp_loader_free(&L);
    }
    CHECKF(!bad, "a 2-rank state resumes the same order on 3 ranks (%d differ)", bad);
    fsdp_data_files_free(&f);
}

/* A token file of n 16-bit zeros with its header (sparse: nothing but the header is written), and id
 * `bad_id` at token index bad_at. */
static char *write_sparse(const char *name, uint64_t n, uint64_t bad_at, uint16_t bad_id) {
    char *p = path_in(name);
    int32_t hdr[256] = {FSDP_TOKENS_MAGIC, FSDP_TOKENS_VERSION, (int32_t)n};
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
    CHECK(pwrite(fd, &bad_id, 2, (off_t)(FSDP_TOKENS_HEADER_BYTES + 2 * bad_at)) == 2);
    CHECK(ftruncate(fd, (off_t)(FSDP_TOKENS_HEADER_BYTES + 2 * n)) == 0);
    close(fd);
    return p;
}

/* Validation before step 1: a bad header or an id >= the vocabulary in shard 2 fails the open, naming
 * the file (and the token index); ids of a file too large to be checked when opened are read through
 * (by the rank that owns the shard); a glob that matches nothing is refused. */
static void test_validation(void) {
    const int T = 16, B = 4;
    char *good = write_ids("v_good.bin", 0, 1000);
    char *badid = write_ids("v_badid.bin", 0, 1000);
    { /* id VOCAB at token 777 of shard 2 */
        uint32_t *t = malloc(4 * 1000);
        for (int i = 0; i < 1000; i++)
            t[i] = (uint32_t)i;
        t[777] = VOCAB;
        CHECK_OK(fsdp_tokens_write(badid, t, 1000, 4));
        free(t);
    }
    char *badhdr = path_in("v_badhdr.bin");
    {
        FILE *fp = fopen(badhdr, "wb");
        int32_t hdr[256] = {1234, 1, 10};
        fwrite(hdr, 4, 256, fp);
        fwrite(hdr, 4, 5, fp);
        fclose(fp);
    }
    const char *p1[] = {good, badid};
    fsdp_loader L;
    fsdp_loader_args a = {
        .paths = p1, .n_paths = 2, .vocab = VOCAB, .batch = B, .T = T, .micro = 1, .world = 1};
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, "v_badid.bin: token 777 has id 1048576");
    const char *p2[] = {good, badhdr};
    a.paths = p2;
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, "v_badhdr.bin: bad magic 1234");
    /* past FSDP_TOKENS_FULL_CHECK_MAX tokens: read through at open by the rank of its shard */
    const uint64_t n = FSDP_TOKENS_FULL_CHECK_MAX + 1000, at = FSDP_TOKENS_FULL_CHECK_MAX + 900;
    char *big = write_sparse("v_big.bin", n, at, 300);
    const char *p3[] = {good, big};
    a.paths = p3;
    a.vocab = 257;
    free(good);
    good = write_ids("v_good257.bin", 0, 200); /* ids < 257 */
    p3[0] = good;
    char wantbuf[128];
    const char *want = wantbuf;
    snprintf(wantbuf, sizeof wantbuf, "v_big.bin: token %llu has id 300", (unsigned long long)at);
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, want);
    a.world = 2;
    a.rank = 1; /* shard 1 is rank 1's to read through */
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, want);
    a.rank = 0; /* rank 0 only opens it; its ids are checked where read */
    CHECK_OK(fsdp_loader_open(&L, &a));
    fsdp_loader_free(&L);
    unlink(big);
    /* an empty glob, and fewer sequences than one batch */
    fsdp_data_files f;
    char *none = path_in("nothing_train_*.bin");
    CHECK_ERR(fsdp_data_files_find(none, &f), FSDP_EINVAL, "matches no file");
    const char *p4[] = {good, good};
    a.paths = p4;
    a.world = 1;
    a.batch = 100;
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, "fewer than one global batch");
    a.allow_short = 1;
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(fsdp_loader_num_batches(&L) == 0);
    fsdp_loader_state zero = {0, 0};
    CHECK_ERR(fsdp_loader_set_state(&L, zero), FSDP_EINVAL, "not a batch start");
    fsdp_loader_free(&L);
    /* a position so large that position / T + batch wraps around 2^64 is no batch start */
    a.batch = 4;
    a.T = 1;
    a.allow_short = 0;
    CHECK_OK(fsdp_loader_open(&L, &a));
    fsdp_loader_state huge = {~0ull - 3, 0};
    CHECK_ERR(fsdp_loader_set_state(&L, huge), FSDP_EINVAL, "not a batch start");
    fsdp_loader_free(&L);
    free(none);
    free(big);
    free(badhdr);
    free(badid);
    free(good);
}

/* A glob whose folder's path holds "train" (issue 39 item 7): the validation pattern comes from the file
 * name alone, so 'train_runs/x_*.bin' has none (it used to rewrite the folder to 'val_runs/x_*.bin' and
 * fail on that folder), and 'train_runs/x_train_*.bin' finds its validation shards beside it. */
static void test_glob_folder_named_train(void) {
    char *sub = path_in("train_runs");
    CHECK(mkdir(sub, 0755) == 0);
    snprintf(dir, sizeof dir, "%s", sub);
    free(write_ids("x_000.bin", 0, 100));
    free(write_ids("x_001.bin", 0, 100));
    free(write_ids("y_train_000.bin", 0, 100));
    free(write_ids("y_val_000.bin", 0, 100));
    fsdp_data_files f;
    char *pat = path_in("x_*.bin");
    CHECK_OK(fsdp_data_files_find(pat, &f));
    CHECK(f.n_train == 2 && f.n_val == 0);
    CHECK(f.val_desc == NULL || strstr(f.val_desc, "val_runs") == NULL);
    fsdp_data_files_free(&f);
    free(pat);
    pat = path_in("y_train_*.bin");
    CHECK_OK(fsdp_data_files_find(pat, &f));
    CHECK(f.n_train == 1 && f.n_val == 1 && strstr(f.val[0], "train_runs/y_val_000.bin"));
    fsdp_data_files_free(&f);
    free(pat);
    *strrchr(dir, '/') = '\0';
    free(sub);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_shards_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    test_permutation();
    char *sd = fsdp_strdupf("%s", dir);
    make_shards();
    test_shards();
    test_shuffled();
    test_glob_folder_named_train();
    snprintf(dir, sizeof dir, "%s/v", sd);
    mkdir(dir, 0755);
    test_validation();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sd);
    free(sd);
    return TEST_MAIN_END();
}
