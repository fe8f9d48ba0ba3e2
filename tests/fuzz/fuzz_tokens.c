/* fuzz_tokens.c — libFuzzer target for token files (src/data/data.h): the header check of
 * fsdp_tokens_open, the id check of fsdp_tokens_read, and the loader on top (init, every micro-batch,
 * advance, set_state with an untrusted position), and --pack doc and pad over the same file.
 * Input: byte 0 picks the vocabulary and the loader's shape, bytes 1.. are the file. */
#include "fuzz_common.h"

#include "fsdp.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    static const int vocabs[4] = {FSDP_BYTE_VOCAB, FSDP_GPT2_VOCAB, 151936, 2};
    const int vocab = vocabs[mode & 3];
    char path[512];
    fuzz_path(path, sizeof path, "train.bin");
    fuzz_write(path, data + 1, size - 1);

    fsdp_token_file tf;
    fsdp_status s = fsdp_tokens_open(&tf, path, vocab);
    if (s == FSDP_OK) {
        /* A file that opened must hold exactly the tokens its header says, each readable. */
        FUZZ_REQUIRE(tf.width == 2 || tf.width == 4);
        FUZZ_REQUIRE(tf.ntok * (uint64_t)tf.width == size - 1 - FSDP_TOKENS_HEADER_BYTES);
        int32_t buf[64];
        size_t n = tf.ntok < 64 ? (size_t)tf.ntok : 64;
        FUZZ_REQUIRE(fsdp_tokens_read(&tf, 0, n, buf) == FSDP_OK);
        for (size_t i = 0; i < n; i++)
            FUZZ_REQUIRE(buf[i] >= 0 && buf[i] < vocab);
        FUZZ_REQUIRE(fsdp_tokens_read(&tf, tf.ntok, 1, buf) == FSDP_EINVAL); /* past the end */
        fsdp_tokens_close(&tf);
    } else {
        FUZZ_REQUIRE(fsdp_last_error()[0] != '\0'); /* every failure says why */
    }
    fsdp_tokens_close(&tf); /* twice: must be harmless */

    /* The loader: batch 1..4, T 1..8, micro 1..2 over world 1..2, from the mode byte. */
    int micro = 1 + ((mode >> 2) & 1), world = 1 + ((mode >> 3) & 1);
    int batch = micro * world * (1 + ((mode >> 4) & 1)), T = 1 + ((mode >> 5) & 7);
    fsdp_loader L;
    s = fsdp_loader_init(&L, path, vocab, batch, T, micro, world - 1, world);
    if (s == FSDP_OK) {
        int32_t in[64], tg[64];
        for (int step = 0; step < 3; step++) {
            for (int m = 0; m < micro; m++)
                if (fsdp_loader_micro(&L, m, in, tg, NULL) == FSDP_OK)
                    for (int i = 0; i < L.b * T; i++)
                        FUZZ_REQUIRE(in[i] >= 0 && in[i] < vocab && tg[i] >= 0 && tg[i] < vocab);
            fsdp_loader_advance(&L);
        }
        /* An untrusted position (as a checkpoint would give it): header int 3 and 4 of the file. */
        uint32_t raw[2] = {0, 0};
        if (size >= 1 + 20) memcpy(raw, data + 1 + 12, 8);
        fsdp_loader_state st = {((uint64_t)raw[1] << 32) | raw[0], raw[1]};
        if (fsdp_loader_set_state(&L, st) == FSDP_OK) fsdp_loader_micro(&L, 0, in, tg, NULL);
        (void)fsdp_loader_num_batches(&L);
        fsdp_loader_free(&L);
    }
    fsdp_loader_free(&L); /* twice: must be harmless */

    /* Packing (data/pack.h) over the same file, id 0 as the end-of-text token: pad's table entries lie
     * inside the file with 2..T+1 tokens, its padding is ignored; doc's ids start at 0 in every sequence
     * and step by at most 1. */
    const char *paths[1] = {path};
    fsdp_loader_args a = {.paths = paths,
                          .n_paths = 1,
                          .vocab = vocab,
                          .batch = batch,
                          .T = T,
                          .micro = micro,
                          .rank = world - 1,
                          .world = world,
                          .eot = 0};
    for (int pack = FSDP_PACK_DOC; pack <= FSDP_PACK_PAD; pack += FSDP_PACK_PAD - FSDP_PACK_DOC) {
        a.pack = pack;
        if (fsdp_loader_open(&L, &a) != FSDP_OK) {
            FUZZ_REQUIRE(fsdp_last_error()[0] != '\0');
            continue;
        }
        FUZZ_REQUIRE(L.pack == pack);
        for (uint64_t e = 0; pack == FSDP_PACK_PAD && e < L.table.n; e++)
            FUZZ_REQUIRE(L.table.seq[e].len >= 2 && L.table.seq[e].len <= (uint32_t)T + 1 &&
                         L.table.seq[e].tok + L.table.seq[e].len <= L.shards[0].file.ntok);
        int32_t in[64], tg[64], doc[64];
        for (int step = 0; step < 3; step++) {
            for (int m = 0; m < micro; m++)
                if (fsdp_loader_micro(&L, m, in, tg, doc) == FSDP_OK)
                    for (int i = 0; i < L.b * T; i++) {
                        FUZZ_REQUIRE(in[i] >= 0 && in[i] < vocab);
                        FUZZ_REQUIRE(tg[i] == FSDP_IGNORE_INDEX || (tg[i] >= 0 && tg[i] < vocab));
                        FUZZ_REQUIRE(i % T == 0 ? doc[i] == 0
                                                : doc[i] - doc[i - 1] == 0 || doc[i] - doc[i - 1] == 1);
                        FUZZ_REQUIRE(pack == FSDP_PACK_DOC ? tg[i] != FSDP_IGNORE_INDEX : doc[i] == 0);
                    }
            fsdp_loader_advance(&L);
        }
        fsdp_loader_free(&L);
    }
    return 0;
}
