/* test_pack.c — the pure functions of packing (data/pack.h): document ids from mask flags and from the
 * end-of-text token, across sequence boundaries; the --pack pad sequence table (spans, chunks, the same
 * table whatever the scan's block sizes); padded rows; meta.json's "eot". Expectations written by hand. */
#include "test_util.h"

#include "fsdp.h"
#include "data/data.h"
#include "data/pack.h"
#include "io/io.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

static int same_ids(const int32_t *a, const int32_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void test_doc_ids(void) {
    enum { EOT = 256 };
    int32_t doc[8];
    /* DOC flags at 3 and 6; the eot tokens are ignored when flags are given */
    const int32_t tok[8] = {EOT, 5, EOT, 7, 8, 9, 10, 11};
    const uint8_t fl[8] = {FSDP_MASK_DOC | FSDP_MASK_LOSS, 1, 0, FSDP_MASK_DOC, 1, 1, FSDP_MASK_DOC, 1};
    fsdp_pack_doc_ids(tok, fl, 8, EOT, doc);
    const int32_t want_fl[8] = {0, 0, 0, 1, 1, 1, 2, 2};
    CHECK(same_ids(doc, want_fl, 8));
    /* eot: a document starts AT the token (GPT-2 style); a start at position 0 is id 0 */
    fsdp_pack_doc_ids(tok, NULL, 8, EOT, doc);
    const int32_t want_eot[8] = {0, 0, 1, 1, 1, 1, 1, 1};
    CHECK(same_ids(doc, want_eot, 8));
    /* a stream of documents at 0, 5 and 13 cut into sequences of T = 4: every sequence restarts at id 0;
     * one that begins inside a document continues it as id 0, and one with no start is all id 0 */
    int32_t stream[17];
    for (int i = 0; i < 17; i++)
        stream[i] = (i == 0 || i == 5 || i == 13) ? EOT : i;
    const int32_t want[4][4] = {{0, 0, 0, 0}, {0, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 1, 1}};
    for (int s = 0; s < 4; s++) {
        fsdp_pack_doc_ids(stream + 4 * s, NULL, 4, EOT, doc);
        CHECKF(same_ids(doc, want[s], 4), "sequence %d: %d %d %d %d", s, doc[0], doc[1], doc[2], doc[3]);
    }
    /* the same documents as mask flags over tokens without eot */
    uint8_t sfl[17] = {0};
    sfl[0] = sfl[5] = sfl[13] = FSDP_MASK_DOC;
    int32_t plain[17];
    for (int i = 0; i < 17; i++)
        plain[i] = i + 1;
    for (int s = 0; s < 4; s++) {
        fsdp_pack_doc_ids(plain + 4 * s, sfl + 4 * s, 4, EOT, doc);
        CHECK(same_ids(doc, want[s], 4));
    }
    /* consecutive starts: one-token documents get ids of their own */
    const int32_t all_eot[4] = {EOT, EOT, EOT, EOT};
    fsdp_pack_doc_ids(all_eot, NULL, 4, EOT, doc);
    const int32_t want_all[4] = {0, 1, 2, 3};
    CHECK(same_ids(doc, want_all, 4));
}

static int table_is(const fsdp_pack_table *tb, const uint64_t (*want)[3], uint64_t n) {
    if (tb->n != n) {
        fprintf(stderr, "table of %llu sequences, want %llu\n", (unsigned long long)tb->n,
                (unsigned long long)n);
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (tb->seq[i].tok != want[i][0] || tb->seq[i].len != want[i][1] ||
            tb->seq[i].shard != (int32_t)want[i][2]) {
            fprintf(stderr, "sequence %llu: tok %llu len %u shard %d, want %llu %llu %llu\n",
                    (unsigned long long)i, (unsigned long long)tb->seq[i].tok, tb->seq[i].len,
                    tb->seq[i].shard, (unsigned long long)want[i][0], (unsigned long long)want[i][1],
                    (unsigned long long)want[i][2]);
            return 0;
        }
    return 1;
}

static void test_pad_table(void) {
    CHECK(sizeof(fsdp_pack_seq) == 16);
    enum { EOT = 99, N = 20, T = 4 };
    /* shard 0: documents at 0, 5, 6, 16 (ntok 20); shard 1: a prefix before its first start at 2, and a
     * one-token document at its last token */
    int32_t a[N], b[9];
    for (int i = 0; i < N; i++)
        a[i] = (i == 0 || i == 5 || i == 6 || i == 16) ? EOT : i;
    for (int i = 0; i < 9; i++)
        b[i] = (i == 2 || i == 8) ? EOT : 50 + i;
    /* {first token, tokens, shard}: a span is the document and the next one's first token */
    static const uint64_t want[][3] = {
        {0, 5, 0},  {4, 2, 0},              /* [0,5) + token 5: 5 targets -> 4 + 1 */
        {5, 2, 0},                          /* [5,6) + token 6: 1 target */
        {6, 5, 0},  {10, 5, 0}, {14, 3, 0}, /* [6,16) + token 16: 10 targets -> 4 + 4 + 2 */
        {16, 4, 0},                         /* [16,20), the shard's end: 3 targets */
        {0, 3, 1},                          /* [0,2) + token 2 */
        {2, 5, 1},  {6, 3, 1},              /* [2,8) + token 8: 6 targets */
    };                                      /* [8,9): one token, no target, no sequence */
    const size_t blocks[][3] = {{N, 9, 0}, {1, 1, 1}, {3, 2, 5}, {7, 4, 2}};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        fsdp_pack_table tb;
        fsdp_pack_table_init(&tb, T);
        const int32_t *src[2] = {a, b};
        const size_t len[2] = {N, 9};
        for (int s = 0; s < 2; s++) {
            fsdp_pack_scan_begin(&tb, s);
            size_t step = blocks[k][s] ? blocks[k][s] : 1;
            for (size_t at = 0; at < len[s]; at += step) {
                size_t n = len[s] - at < step ? len[s] - at : step;
                CHECK_OK(fsdp_pack_scan(&tb, src[s] + at, NULL, n, EOT));
            }
            CHECK_OK(fsdp_pack_scan_end(&tb));
        }
        CHECKF(table_is(&tb, want, sizeof want / sizeof want[0]), "blocks of %zu and %zu", blocks[k][0],
               blocks[k][1]);
        fsdp_pack_table_free(&tb);
        fsdp_pack_table_free(&tb); /* a no-op */
    }
    /* the same documents as DOC flags (tokens without eot), and more sequences than one allocation */
    uint8_t fl[N] = {0};
    fl[0] = fl[5] = fl[6] = fl[16] = FSDP_MASK_DOC;
    fsdp_pack_table tb;
    fsdp_pack_table_init(&tb, T);
    fsdp_pack_scan_begin(&tb, 0);
    CHECK_OK(fsdp_pack_scan(&tb, a, fl, N, -1));
    CHECK_OK(fsdp_pack_scan_end(&tb));
    CHECK(table_is(&tb, want, 7));
    fsdp_pack_table_free(&tb);
    fsdp_pack_table_init(&tb, 1);
    CHECK_OK(fsdp_pack_table_add_span(&tb, 3, 10, 5001)); /* 5000 targets, one a sequence */
    CHECK(tb.n == 5000 && tb.seq[0].tok == 10 && tb.seq[4999].tok == 5009 && tb.seq[4999].len == 2 &&
          tb.seq[4999].shard == 3);
    fsdp_pack_table_free(&tb);
}

static void test_pad_row(void) {
    enum { T = 5, PAD = 7 };
    int32_t in[T], tg[T];
    const int32_t tok[3] = {10, 11, 12};
    fsdp_pack_pad_row(tok, NULL, 3, T, PAD, in, tg);
    const int32_t want_in[T] = {10, 11, PAD, PAD, PAD};
    const int32_t want_tg[T] = {11, 12, FSDP_IGNORE_INDEX, FSDP_IGNORE_INDEX, FSDP_IGNORE_INDEX};
    CHECK(same_ids(in, want_in, T) && same_ids(tg, want_tg, T));
    /* the loss flag of the target token decides */
    const uint8_t fl[3] = {1, 0, 1};
    fsdp_pack_pad_row(tok, fl, 3, T, PAD, in, tg);
    const int32_t want_tg2[T] = {FSDP_IGNORE_INDEX, 12, FSDP_IGNORE_INDEX, FSDP_IGNORE_INDEX,
                                 FSDP_IGNORE_INDEX};
    CHECK(same_ids(in, want_in, T) && same_ids(tg, want_tg2, T));
    /* a full row: T+1 tokens, no padding */
    const int32_t full[T + 1] = {1, 2, 3, 4, 5, 6};
    fsdp_pack_pad_row(full, NULL, T + 1, T, PAD, in, tg);
    CHECK(same_ids(in, full, T) && same_ids(tg, full + 1, T));
}

static void write_text(const char *name, const char *text) {
    char *p = fsdp_strdupf("%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(p);
}

static void test_meta_eot(void) {
    int32_t eot = 0;
    CHECK_OK(fsdp_pack_meta_eot(dir, 257, &eot)); /* no meta.json */
    CHECK(eot == -1);
    write_text("meta.json", "{\"vocab\": 257, \"eot\": 256}");
    CHECK_OK(fsdp_pack_meta_eot(dir, 257, &eot));
    CHECK(eot == 256);
    write_text("meta.json", "{\"vocab\": 257}");
    eot = 0;
    CHECK_OK(fsdp_pack_meta_eot(dir, 257, &eot));
    CHECK(eot == -1);
    write_text("meta.json", "{\"vocab\": 257, \"eot\": 257}");
    CHECK_ERR(fsdp_pack_meta_eot(dir, 257, &eot), FSDP_EFORMAT,
              "\"eot\" must be a whole number from 0 to 256");
    write_text("meta.json", "{\"vocab\": 257, \"eot\": 1.5}");
    CHECK_ERR(fsdp_pack_meta_eot(dir, 257, &eot), FSDP_EFORMAT, "meta.json");
    write_text("meta.json", "{\"vocab\": 257, \"eot\": \"256\"}");
    CHECK_ERR(fsdp_pack_meta_eot(dir, 257, &eot), FSDP_EFORMAT, "\"eot\"");
}

/* The loader with each --pack: tokens i (vocab 100), end-of-text 99 at 0, 6, 7 and 20, T 4, batch 2. */
static void test_loader_pack(void) {
    enum { N = 41, T = 4, B = 2, EOT = 99, IGN = FSDP_IGNORE_INDEX };
    uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)((i == 0 || i == 6 || i == 7 || i == 20) ? EOT : i);
    char *p = fsdp_strdupf("%s/lp.bin", dir), *pm = fsdp_strdupf("%s/lm.bin", dir),
         *mm = fsdp_strdupf("%s/lm.mask", dir);
    CHECK_OK(fsdp_tokens_write(p, tok, N, 2));
    const char *paths[1] = {p};
    fsdp_loader_args a = {.paths = paths,
                          .n_paths = 1,
                          .vocab = 100,
                          .batch = B,
                          .T = T,
                          .micro = 1,
                          .rank = 0,
                          .world = 1,
                          .pack = FSDP_PACK_DOC,
                          .eot = EOT};
    fsdp_loader L;
    int32_t in[B * T], tg[B * T], doc[B * T];
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.pack == FSDP_PACK_DOC && L.nseq == 10);
    fsdp_loader_advance(&L); /* batch 1: sequences 2 and 3, tokens [8, 16] */
    CHECK_OK(fsdp_loader_set_state(&L, (fsdp_loader_state){0, 0}));
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, doc));
    const int32_t want_doc[B * T] = {0, 0, 0, 0, 0, 0, 1, 2}; /* tokens 0..3 | 4, 5, eot, eot */
    CHECK(same_ids(doc, want_doc, B * T) && in[6] == EOT && tg[5] == EOT && tg[7] == 8);
    fsdp_loader_free(&L);
    /* concat: no ids (all 0 when asked for) and the same tokens */
    a.pack = FSDP_PACK_CONCAT;
    CHECK_OK(fsdp_loader_open(&L, &a));
    int32_t in2[B * T], tg2[B * T];
    CHECK_OK(fsdp_loader_micro(&L, 0, in2, tg2, doc));
    const int32_t zeros[B * T] = {0};
    CHECK(same_ids(doc, zeros, B * T) && same_ids(in, in2, B * T) && same_ids(tg, tg2, B * T));
    fsdp_loader_free(&L);
    /* pad: 12 sequences (spans [0,6], [6,7], [7,20], [20,40]); batch 0 is (0, 5 tokens) and (4, 3) */
    a.pack = FSDP_PACK_PAD;
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.pack == FSDP_PACK_PAD && L.nseq == 12 && fsdp_loader_num_batches(&L) == 6);
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, doc));
    const int32_t want_in[B * T] = {EOT, 1, 2, 3, 4, 5, EOT, EOT};
    const int32_t want_tg[B * T] = {1, 2, 3, 4, 5, EOT, IGN, IGN};
    CHECK(same_ids(in, want_in, B * T) && same_ids(tg, want_tg, B * T) && same_ids(doc, zeros, B * T));
    fsdp_loader_advance(&L); /* (6, 2): one target; (7, 5) */
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
    const int32_t want_in1[B * T] = {EOT, EOT, EOT, EOT, EOT, 8, 9, 10};
    const int32_t want_tg1[B * T] = {EOT, IGN, IGN, IGN, 8, 9, 10, 11};
    CHECK(same_ids(in, want_in1, B * T) && same_ids(tg, want_tg1, B * T));
    int sh;
    uint64_t at;
    fsdp_loader_locate(&L, 11, &sh, &at);
    CHECK(sh == 0 && at == 36);
    fsdp_loader_free(&L);
    /* pad shuffled: every table entry once an epoch (its first token and target count name it) */
    a.shuffle = 1;
    a.seed = 3;
    CHECK_OK(fsdp_loader_open(&L, &a));
    int seen[12] = {0}, moved = 0;
    for (uint64_t k = 0; k < 6; k++) {
        CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
        for (int r = 0; r < B; r++) {
            int n = 0; /* real targets: the entry's len - 1 */
            for (int t = 0; t < T; t++)
                n += tg[r * T + t] != IGN;
            for (uint64_t e = 0; e < L.table.n; e++) {
                const fsdp_pack_seq *q = &L.table.seq[e];
                seen[e] += (int)q->len == n + 1 && tok[q->tok] == in[r * T] && tok[q->tok + 1] == tg[r * T];
            }
            moved |= k * B + (uint64_t)r != fsdp_loader_sequence(&L, k * B + (uint64_t)r);
        }
        fsdp_loader_advance(&L);
    }
    int once = 1;
    for (int e = 0; e < 12; e++)
        once &= seen[e] == 1;
    CHECK(once && moved && L.epoch == 1);
    fsdp_loader_free(&L);
    a.shuffle = 0;
    /* doc and pad need the document starts: no eot and no mask file marking documents */
    a.eot = -1;
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EINVAL, "--pack pad: ");
    CHECK(strstr(fsdp_last_error(), "add \"eot\": ID to meta.json") != NULL);
    a.pack = FSDP_PACK_DOC;
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EINVAL, "lp.bin has no mask file marking documents");
    a.pack = FSDP_PACK_AUTO; /* no mask: concat, no eot needed */
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.pack == FSDP_PACK_CONCAT);
    fsdp_loader_free(&L);
    /* pad with fewer sequences than a batch */
    a.pack = FSDP_PACK_PAD;
    a.eot = EOT;
    a.batch = 16;
    CHECK_ERR(fsdp_loader_open(&L, &a), FSDP_EFORMAT, "12 documents' sequences");
    a.batch = B;
    /* a mask file whose flags mark documents at 0 and 10 (the eot tokens no longer count): auto is doc */
    uint8_t fl[N];
    for (int i = 0; i < N; i++)
        fl[i] = (uint8_t)((i == 2 ? 0 : FSDP_MASK_LOSS) | (i == 0 || i == 10 ? FSDP_MASK_DOC : 0));
    CHECK_OK(fsdp_tokens_write(pm, tok, N, 2));
    CHECK_OK(fsdp_mask_write(mm, fl, N));
    paths[0] = pm;
    a.pack = FSDP_PACK_AUTO;
    a.eot = -1;
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.pack == FSDP_PACK_DOC);
    fsdp_loader_advance(&L); /* sequences [8, 12] and [12, 16]: a start at 10 */
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, doc));
    const int32_t want_fl[B * T] = {0, 0, 1, 1, 0, 0, 0, 0}; /* 8, 9 | 10, 11 | 12..15 continue */
    CHECK(same_ids(doc, want_fl, B * T));
    CHECK_OK(fsdp_loader_set_state(&L, (fsdp_loader_state){0, 0}));
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, doc));
    CHECK(tg[1] == IGN && tg[0] == 1 && same_ids(doc, zeros, B * T)); /* token 2 is no target */
    fsdp_loader_free(&L);
    /* pad from the flags: documents [0, 10] and [10, 40] */
    a.pack = FSDP_PACK_PAD;
    CHECK_OK(fsdp_loader_open(&L, &a));
    CHECK(L.nseq == 3 + 8);
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
    CHECK(in[0] == EOT && tg[1] == IGN && tg[0] == 1 && in[4] == 4); /* pads are 0 with eot unknown */
    fsdp_loader_advance(&L);
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
    const int32_t want_p[B * T] = {8, 9, 0, 0, 10, 11, 12, 13};
    CHECK(same_ids(in, want_p, B * T) && tg[1] == 10 && tg[2] == IGN);
    fsdp_loader_free(&L);
    free(p);
    free(pm);
    free(mm);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_pack_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    test_doc_ids();
    test_pad_table();
    test_pad_row();
    test_meta_eot();
    test_loader_pack();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_MAIN_END();
}
