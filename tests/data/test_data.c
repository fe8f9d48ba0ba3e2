/* test_data.c — token files (round trip, every malformed-file error), `prepare` on a small text, and
 * the loader: disjoint, complete rank/micro-batch slices of each global batch for world sizes 1..4,
 * wrap-around, and save/restore of its position. Expectations are derived from the token index. */
#include "test_util.h"
#include "test_bytes.h"

#include "fsdp.h"
#include "data/data.h"
#include "io/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

static char *path_in(const char *name) { return fsdp_strdupf("%s/%s", dir, name); }

static void write_raw(const char *path, const int32_t *hdr, const uint16_t *tok, size_t n, size_t extra) {
    FILE *f = fopen(path, "wb");
    fwrite(hdr, 4, 256, f);
    if (n) fwrite(tok, 2, n, f);
    for (size_t i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

static void test_round_trip(void) {
    enum { N = 10000 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)((i * 7919) % FSDP_GPT2_VOCAB);
    char *p = path_in("rt.bin");
    CHECK_OK(fsdp_tokens_write(p, tok, N, 2));
    fsdp_token_file tf;
    CHECK_OK(fsdp_tokens_open(&tf, p, FSDP_GPT2_VOCAB));
    CHECK(tf.ntok == N);
    static int32_t out[N];
    CHECK_OK(fsdp_tokens_read(&tf, 0, N, out));
    int same = 1;
    for (int i = 0; i < N; i++)
        same &= out[i] == tok[i];
    CHECK(same);
    CHECK_OK(fsdp_tokens_read(&tf, 9000, 1000, out));
    CHECK(out[0] == tok[9000] && out[999] == tok[9999]);
    CHECK_ERR(fsdp_tokens_read(&tf, 9001, 1000, out), FSDP_EINVAL, "past its end");
    fsdp_tokens_close(&tf);
    fsdp_tokens_close(&tf); /* second close is a no-op */
    /* Same file against a vocabulary too small for its ids: named file and token index. */
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, p);
    CHECK(strstr(fsdp_last_error(), "token 1 has id 7919") != NULL);
    free(p);
}

/* 32-bit files: written by fsdp_tokens_write(width 4) with llm.c's Llama 3 header (magic 20240801,
 * version 7: checked byte by byte here), read back; a file written by hand as llm.c's
 * write_datafile(model_desc="llama-3") does (numpy int32 header, then uint32 tokens) loads as it is. */
static void test_round_trip32(void) {
    enum { N = 10000, V = 151936 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(((uint64_t)i * 104729u) % V);
    tok[17] = V - 1;
    char *p = path_in("rt32.bin");
    CHECK_OK(fsdp_tokens_write(p, tok, N, 4));
    FILE *f = fopen(p, "rb");
    int32_t hdr[256];
    CHECK(fread(hdr, 4, 256, f) == 256);
    fseek(f, 0, SEEK_END);
    CHECK(ftell(f) == 1024 + 4 * N);
    fclose(f);
    CHECK(hdr[0] == 20240801 && hdr[1] == 7 && hdr[2] == N && hdr[3] == 0 && hdr[255] == 0);
    fsdp_token_file tf;
    CHECK_OK(fsdp_tokens_open(&tf, p, V));
    CHECK(tf.ntok == N && tf.width == 4);
    static int32_t out[N];
    CHECK_OK(fsdp_tokens_read(&tf, 0, N, out));
    int same = 1;
    for (int i = 0; i < N; i++)
        same &= out[i] == (int32_t)tok[i];
    CHECK(same);
    CHECK_OK(fsdp_tokens_read(&tf, 9000, 1000, out));
    CHECK(out[0] == (int32_t)tok[9000] && out[999] == (int32_t)tok[9999]);
    CHECK_ERR(fsdp_tokens_read(&tf, 9001, 1000, out), FSDP_EINVAL, "past its end");
    fsdp_tokens_close(&tf);
    /* An id >= the vocabulary: refused at open (small file) with the token's index, and by read. */
    CHECK_ERR(fsdp_tokens_open(&tf, p, V - 1), FSDP_EFORMAT, "token 17 has id 151935");
    CHECK(strstr(fsdp_last_error(), p) != NULL);
    /* A 16-bit file opens for a vocabulary over 65536 too (its ids are below it). */
    static uint16_t t16[100];
    for (int i = 0; i < 100; i++)
        t16[i] = (uint16_t)(65535 - i);
    char *p16 = path_in("rt16.bin");
    CHECK_OK(fsdp_tokens_write(p16, t16, 100, 2));
    CHECK_OK(fsdp_tokens_open(&tf, p16, V));
    CHECK(tf.width == 2 && tf.ntok == 100);
    CHECK_OK(fsdp_tokens_read(&tf, 0, 100, out));
    CHECK(out[0] == 65535 && out[99] == 65436);
    fsdp_tokens_close(&tf);

    /* llm.c-style: header then raw little-endian uint32 ids, with ids above 65535. */
    int32_t lh[256] = {20240801, 7, 5};
    uint32_t ids[5] = {128000, 9906, 1917, 0, 128255};
    char *pl = path_in("llmc_llama3.bin");
    f = fopen(pl, "wb");
    fwrite(lh, 4, 256, f);
    fwrite(ids, 4, 5, f);
    fclose(f);
    CHECK_OK(fsdp_tokens_open(&tf, pl, 128256));
    CHECK_OK(fsdp_tokens_read(&tf, 0, 5, out));
    CHECK(out[0] == 128000 && out[1] == 9906 && out[2] == 1917 && out[3] == 0 && out[4] == 128255);
    fsdp_tokens_close(&tf);
    CHECK_ERR(fsdp_tokens_open(&tf, pl, 128255), FSDP_EFORMAT, "token 4 has id 128255");
    /* Truncated: one byte short of the last token, and a whole token short; one byte too many. */
    f = fopen(pl, "wb");
    fwrite(lh, 4, 256, f);
    fwrite(ids, 1, 19, f);
    fclose(f);
    CHECK_ERR(fsdp_tokens_open(&tf, pl, 128256), FSDP_EFORMAT, "header says 5 tokens (1044 bytes of file)");
    f = fopen(pl, "wb");
    fwrite(lh, 4, 256, f);
    fwrite(ids, 4, 4, f);
    fclose(f);
    CHECK_ERR(fsdp_tokens_open(&tf, pl, 128256), FSDP_EFORMAT, "truncated or corrupt");
    f = fopen(pl, "wb");
    fwrite(lh, 4, 256, f);
    fwrite(ids, 4, 5, f);
    fputc(0, f);
    fclose(f);
    CHECK_ERR(fsdp_tokens_open(&tf, pl, 128256), FSDP_EFORMAT, "header says 5 tokens");
    /* A 16-bit count read as 32-bit: magic 20240801 with version 1, and 20240520 with version 7. */
    lh[1] = 1;
    f = fopen(pl, "wb");
    fwrite(lh, 4, 256, f);
    fwrite(ids, 4, 5, f);
    fclose(f);
    CHECK_ERR(fsdp_tokens_open(&tf, pl, 128256), FSDP_EFORMAT,
              "version 1 is not supported with magic 20240801");
    CHECK_ERR(fsdp_tokens_write(pl, ids, 5, 3), FSDP_EINVAL, "width 3");
    free(pl);
    free(p16);
    free(p);
}

static void test_bad_files(void) {
    uint16_t tok[100];
    for (int i = 0; i < 100; i++)
        tok[i] = (uint16_t)i;
    int32_t hdr[256] = {FSDP_TOKENS_MAGIC, FSDP_TOKENS_VERSION, 100};
    fsdp_token_file tf;
    char *p = path_in("bad.bin");

    char *missing = path_in("nope.bin");
    CHECK_ERR(fsdp_tokens_open(&tf, missing, 257), FSDP_EIO, missing);
    free(missing);

    write_raw(p, hdr, tok, 100, 0);
    CHECK_OK(fsdp_tokens_open(&tf, p, 257));
    fsdp_tokens_close(&tf);

    write_raw(p, hdr, tok, 99, 0); /* one token short */
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "header says 100 tokens");
    CHECK(strstr(fsdp_last_error(), p) != NULL);
    write_raw(p, hdr, tok, 100, 1); /* one byte too many */
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "header says 100 tokens");

    hdr[0] = 12345;
    write_raw(p, hdr, tok, 100, 0);
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "bad magic 12345");
    hdr[0] = FSDP_TOKENS_MAGIC;
    hdr[1] = 7;
    write_raw(p, hdr, tok, 100, 0);
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "version 7");
    hdr[1] = FSDP_TOKENS_VERSION;

    tok[42] = 300;
    write_raw(p, hdr, tok, 100, 0);
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "token 42 has id 300");
    CHECK_OK(fsdp_tokens_open(&tf, p, 301));
    fsdp_tokens_close(&tf);

    FILE *f = fopen(p, "wb"); /* shorter than a header */
    fputs("hello", f);
    fclose(f);
    CHECK_ERR(fsdp_tokens_open(&tf, p, 257), FSDP_EFORMAT, "shorter than");
    free(p);
}

static void test_prepare(void) {
    char *txt = path_in("a.txt"), *txt2 = path_in("b.txt"), *out = path_in("prep");
    FILE *f = fopen(txt, "wb");
    /* 10 documents "doc0\n" .. "doc9\n" separated by "%" lines, one with CRLF, plus an empty doc. */
    for (int i = 0; i < 10; i++)
        fprintf(f, "doc%d\n%s", i, i == 3 ? "%\r\n" : "%\n");
    fputs("%\n", f);
    fclose(f);
    f = fopen(txt2, "wb");
    fputs("tail", f);
    fclose(f);
    const char *texts[] = {txt, txt2};
    fsdp_prepare_args a = {
        .texts = texts, .n_texts = 2, .out_dir = out, .val_fraction = 0.25, .doc_sep = "%"};
    fsdp_prepare_stats st;
    CHECK_OK(fsdp_prepare(&a, &st));
    CHECK(st.n_docs == 11);
    /* floor((i+1)/4) > floor(i/4) -> docs 3 and 7 go to val: 2 docs of 6 tokens (EOT + "docN\n"). */
    CHECK(st.n_val == 12);
    CHECK(st.n_train == 8 * 6 + 5);
    char *vp = fsdp_strdupf("%s/val.bin", out), *tp = fsdp_strdupf("%s/train.bin", out);
    fsdp_token_file tf;
    CHECK_OK(fsdp_tokens_open(&tf, vp, FSDP_BYTE_VOCAB));
    int32_t v[12];
    CHECK_OK(fsdp_tokens_read(&tf, 0, 12, v));
    const char *want = "doc3\ndoc7\n";
    CHECK(v[0] == FSDP_TOKEN_EOT && v[6] == FSDP_TOKEN_EOT);
    int ok = 1;
    for (int i = 0; i < 5; i++)
        ok &= v[1 + i] == want[i] && v[7 + i] == want[5 + i];
    CHECK(ok);
    fsdp_tokens_close(&tf);
    CHECK_OK(fsdp_tokens_open(&tf, tp, FSDP_BYTE_VOCAB));
    int32_t t[53];
    CHECK_OK(fsdp_tokens_read(&tf, 0, 53, t));
    CHECK(t[0] == FSDP_TOKEN_EOT && t[1] == 'd' && t[4] == '0' && t[48] == FSDP_TOKEN_EOT && t[52] == 'l');
    fsdp_tokens_close(&tf);
    int vocab;
    CHECK_OK(fsdp_data_meta_vocab(out, &vocab));
    CHECK(vocab == FSDP_BYTE_VOCAB);
    CHECK_OK(fsdp_data_meta_vocab(dir, &vocab)); /* no meta.json: unknown */
    CHECK(vocab == 0);
    /* A bad "vocab" is the file's fault, named as such: too small, or not a whole number. */
    {
        char *md = path_in("metabad"), *mp = path_in("metabad/meta.json");
        CHECK_OK(fsdp_mkdirs(md));
        const char *bad[] = {"{\"vocab\": 1}", "{\"vocab\": 300.9}", "{\"vocab\": 3000000000}",
                             "{\"vocab\": \"257\"}"};
        for (int i = 0; i < 4; i++) {
            FILE *mf = fopen(mp, "wb");
            fputs(bad[i], mf);
            fclose(mf);
            CHECK_ERR(fsdp_data_meta_vocab(md, &vocab), FSDP_EFORMAT,
                      "meta.json: \"vocab\" must be a whole number from 2 to 2147483647");
            CHECK(vocab == 0);
        }
        FILE *mf = fopen(mp, "wb");
        fputs("{\"vocab\": 300}", mf);
        fclose(mf);
        CHECK_OK(fsdp_data_meta_vocab(md, &vocab));
        CHECK(vocab == 300);
        mf = fopen(mp, "wb");
        fputs("{\"vocab\": 151936}", mf); /* Qwen2's */
        fclose(mf);
        CHECK_OK(fsdp_data_meta_vocab(md, &vocab));
        CHECK(vocab == 151936);
        free(mp);
        free(md);
    }

    /* One document, no separator: the last 25% of tokens go to val. */
    const char *one[] = {txt2};
    a.texts = one;
    a.n_texts = 1;
    a.doc_sep = NULL;
    CHECK_OK(fsdp_prepare(&a, &st));
    CHECK(st.n_docs == 1 && st.n_train == 4 && st.n_val == 1);

    a.val_fraction = 1.5;
    CHECK_ERR(fsdp_prepare(&a, &st), FSDP_EINVAL, "--val-fraction");
    a.val_fraction = 0.1;
    char *missing = path_in("missing.txt");
    const char *bad[] = {missing};
    a.texts = bad;
    CHECK_ERR(fsdp_prepare(&a, &st), FSDP_EIO, missing);
    free(missing);
    free(vp);
    free(tp);
    free(txt);
    free(txt2);
    free(out);
}

/* prepare with a vocabulary over 65536 writes 32-bit files (llm.c's Llama 3 header) and the loader
 * reads them: a byte-level tokenizer whose <|endoftext|> is id 100000, no merges, so the ids of a
 * document are its bytes' tokens (byte b is id b here), known without the tokenizer. */
static void test_prepare32(void) {
    char *tj = path_in("big_tok.json"), *txt = path_in("big.txt"), *out = path_in("prep32");
    FILE *f = fopen(tj, "wb");
    fputs("{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {", f);
    for (int b = 0; b < 256; b++) {
        char c[8];
        test_gpt2_byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    fputs("}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 100000, "
          "\"content\": \"<|endoftext|>\"}]}",
          f);
    fclose(f);
    f = fopen(txt, "wb");
    for (int i = 0; i < 40; i++)
        fprintf(f, "doc %d\n%%\n", i);
    fclose(f);
    const char *texts[] = {txt};
    fsdp_prepare_args a = {
        .texts = texts, .n_texts = 1, .out_dir = out, .val_fraction = 0.25, .doc_sep = "%", .tokenizer = tj};
    fsdp_prepare_stats st;
    CHECK_OK(fsdp_prepare(&a, &st));
    CHECK(st.vocab == 100001 && st.n_docs == 40);
    char *tp = fsdp_strdupf("%s/train.bin", out);
    int32_t hdr[256];
    f = fopen(tp, "rb");
    CHECK(f && fread(hdr, 4, 256, f) == 256);
    if (f) fclose(f);
    CHECK(hdr[0] == FSDP_TOKENS32_MAGIC && hdr[1] == FSDP_TOKENS32_VERSION && (uint64_t)hdr[2] == st.n_train);
    int vocab = 0;
    CHECK_OK(fsdp_data_meta_vocab(out, &vocab));
    CHECK(vocab == 100001);
    /* Expected train tokens: documents not sent to val (floor((i+1)/4) > floor(i/4): i = 3, 7, ...). */
    int32_t want[600], got[600];
    size_t nw = 0;
    for (int i = 0; i < 40; i++) {
        if ((i + 1) / 4 > i / 4) continue;
        char d[16];
        int n = snprintf(d, sizeof d, "doc %d\n", i);
        want[nw++] = 100000;
        for (int k = 0; k < n; k++)
            want[nw++] = (uint8_t)d[k];
    }
    CHECK(nw == st.n_train);
    fsdp_loader L;
    CHECK_OK(fsdp_loader_init(&L, tp, vocab, 1, (int)nw - 1, 1, 0, 1));
    int32_t *in = got, tg[600];
    CHECK_OK(fsdp_loader_micro(&L, 0, in, tg, NULL));
    CHECK(!memcmp(got, want, 4 * (nw - 1)) && tg[nw - 2] == want[nw - 1]);
    fsdp_loader_free(&L);
    free(tp);
    free(out);
    free(txt);
    free(tj);
}

/* Token i of the loader file has id i % 1000, so a token's id tells where it came from. */
static void test_loader(void) {
    enum { N = 5000 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)(i % 1000);
    char *p = path_in("load.bin");
    CHECK_OK(fsdp_tokens_write(p, tok, N, 2));
    const int B = 12, T = 16;
    for (int world = 1; world <= 4; world++) {
        for (int micro = 1; micro <= 3; micro++) {
            if (B % (world * micro)) {
                fsdp_loader L;
                CHECK_ERR(fsdp_loader_init(&L, p, 1000, B, T, micro, 0, world), FSDP_EINVAL,
                          "--micro-batches");
                continue;
            }
            int b = B / (world * micro);
            /* seen[s] counts how often global sequence s of the batch was handed out. */
            for (int step = 0; step < 30; step++) {
                int seen[12] = {0}, bad = 0;
                uint64_t pos0 = 0;
                for (int r = 0; r < world; r++) {
                    fsdp_loader L;
                    CHECK_OK(fsdp_loader_init(&L, p, 1000, B, T, micro, r, world));
                    /* jump to this step by advancing, as training would */
                    for (int k = 0; k < step; k++)
                        fsdp_loader_advance(&L);
                    pos0 = L.pos;
                    int32_t in[12 * 16], tg[12 * 16];
                    for (int m = 0; m < micro; m++) {
                        CHECK_OK(fsdp_loader_micro(&L, m, in, tg, NULL));
                        for (int i = 0; i < b; i++) {
                            uint64_t start = (uint64_t)in[i * T]; /* id of the sequence's first token */
                            /* which global sequence: start - pos0 (mod 1000) / T */
                            int s = (int)(((start + 1000) - pos0 % 1000) % 1000) / T;
                            if (s < 0 || s >= B) {
                                bad++;
                                continue;
                            }
                            seen[s]++;
                            for (int t = 0; t < T; t++) {
                                uint64_t g = pos0 + (uint64_t)s * T + (uint64_t)t;
                                bad += in[i * T + t] != (int32_t)(g % 1000);
                                bad += tg[i * T + t] != (int32_t)((g + 1) % 1000);
                            }
                        }
                    }
                    fsdp_loader_free(&L);
                }
                int once = 1;
                for (int s = 0; s < B; s++)
                    once &= seen[s] == 1;
                CHECKF(once && !bad, "world %d micro %d step %d: every sequence once, right tokens", world,
                       micro, step);
                /* wrap: a batch never runs past the end */
                CHECK(pos0 + (uint64_t)B * T + 1 <= N);
            }
        }
    }
    /* State: save after 7 steps, restore into a fresh loader, same next batch. */
    fsdp_loader L, L2;
    CHECK_OK(fsdp_loader_init(&L, p, 1000, B, T, 1, 0, 1));
    CHECK(fsdp_loader_num_batches(&L) == (uint64_t)((N - 1) / (B * T)));
    for (int k = 0; k < 7; k++)
        fsdp_loader_advance(&L);
    fsdp_loader_state st = fsdp_loader_get_state(&L);
    CHECK(st.epoch == 0 && st.pos == (uint64_t)7 * B * T);
    /* (N - 1) / (B*T) = 26 whole batches: the 26th advance wraps to the start. */
    fsdp_loader Lw;
    CHECK_OK(fsdp_loader_init(&Lw, p, 1000, B, T, 1, 0, 1));
    for (int k = 0; k < 25; k++)
        fsdp_loader_advance(&Lw);
    CHECK(Lw.pos == (uint64_t)25 * B * T && Lw.epoch == 0);
    fsdp_loader_advance(&Lw);
    CHECK(Lw.pos == 0 && Lw.epoch == 1);
    fsdp_loader_free(&Lw);
    CHECK_OK(fsdp_loader_init(&L2, p, 1000, B, T, 1, 0, 1));
    CHECK_OK(fsdp_loader_set_state(&L2, st));
    int32_t a1[12 * 16], a2[12 * 16], t1[12 * 16], t2[12 * 16];
    CHECK_OK(fsdp_loader_micro(&L, 0, a1, t1, NULL));
    CHECK_OK(fsdp_loader_micro(&L2, 0, a2, t2, NULL));
    CHECK(!memcmp(a1, a2, sizeof a1) && !memcmp(t1, t2, sizeof t1));
    st.pos += 1;
    CHECK_ERR(fsdp_loader_set_state(&L2, st), FSDP_EINVAL, "not a batch start");
    fsdp_loader_free(&L);
    fsdp_loader_free(&L2);
    /* A file smaller than one batch. */
    CHECK_ERR(fsdp_loader_init(&L, p, 1000, 400, 16, 1, 0, 1), FSDP_EFORMAT, "fewer than one global batch");
    free(p);
}

/* The regular-file rules of io.c: a FIFO or folder is refused as an input without blocking, an output
 * is never written over a FIFO or over one of the command's inputs, and a refused or aborted output
 * leaves no temporary behind. */
static void test_io_rules(void) {
    char *fifo = path_in("io_fifo"), *sub = path_in("io_dir"), *in = path_in("io_in.bin"),
         *out = path_in("io_out.bin");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_OK(fsdp_mkdirs(sub));
    int fd = -1;
    CHECK_ERR(fsdp_io_open_input(fifo, &fd), FSDP_EIO, "is a FIFO (named pipe), not a regular file");
    CHECK(fd == -1);
    CHECK_ERR(fsdp_io_open_input(sub, &fd), FSDP_EIO, "is a folder, not a regular file");
    char *text = NULL;
    size_t len = 0;
    CHECK_ERR(fsdp_io_read_file(fifo, &text, &len), FSDP_EIO, "FIFO");
    CHECK_ERR(fsdp_io_write_file_atomic(fifo, "x", 1, 0), FSDP_EIO,
              "is a FIFO (named pipe), not a regular file: refusing");
    struct stat st;
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    /* An input of this command is never an output (unless the caller says so), until the set is reset. */
    fsdp_io_inputs_reset();
    CHECK_OK(fsdp_io_write_file_atomic(in, "abc", 3, 0));
    CHECK_OK(fsdp_io_read_file(in, &text, &len));
    CHECK(len == 3 && !memcmp(text, "abc", 3));
    fsdp_mem_free(text);
    CHECK(fsdp_io_is_input(in) == 1 && fsdp_io_is_input(out) == 0);
    CHECK_ERR(fsdp_io_write_file_atomic(in, "def", 3, 0), FSDP_EIO, "is a file this command reads");
    CHECK_ERR(fsdp_out_check(in, "--x"), FSDP_EIO, "--x");
    CHECK_OK(fsdp_io_write_file_atomic(in, "def", 3, FSDP_OUT_MAY_REPLACE_INPUT));
    fsdp_io_inputs_reset();
    CHECK_OK(fsdp_io_write_file_atomic(in, "ghi", 3, 0));
    /* An aborted output leaves the destination as it was and no temporary. */
    fsdp_out o;
    CHECK_OK(fsdp_out_begin(&o, out, "--out", 0));
    CHECK(o.fd >= 0 && o.tmp != NULL && access(o.tmp, F_OK) == 0);
    char *tmp = fsdp_strdupf("%s", o.tmp);
    CHECK_OK(fsdp_io_write_all(o.fd, "partial", 7, o.tmp));
    fsdp_out_abort(&o);
    CHECK(access(tmp, F_OK) != 0 && access(out, F_OK) != 0);
    free(tmp);
    CHECK_ERR(fsdp_out_check("/nonexistent-fsdp-dir/x", NULL), FSDP_EIO,
              "folder /nonexistent-fsdp-dir does not exist");
    /* The folder holds only what the test made: no temporaries. */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep '\\.tmp\\.')\"", dir);
    CHECK(system(cmd) == 0);
    fsdp_io_inputs_reset();
    free(out);
    free(in);
    free(sub);
    free(fifo);
}

/* A mask file written by hand: header (magic, version, count 3), then n flag bytes. */
static void write_mask_raw(const char *path, int32_t magic, int32_t version, const uint8_t *fl, size_t n) {
    int32_t h[256] = {magic, version, 3};
    FILE *f = fopen(path, "wb");
    fwrite(h, 4, 256, f);
    fwrite(fl, 1, n, f);
    fclose(f);
}

/* Mask files: written flags read back byte for byte (header checked field by field), every malformed
 * file refused with its reason: magic, version, a count that is not its token file's, a size that does
 * not match, an unknown bit (with the token's index), reads past the end. */
static void test_mask_files(void) {
    enum { N = 5000 };
    static uint8_t fl[N], back[N];
    for (int i = 0; i < N; i++)
        fl[i] = (uint8_t)((i % 7 == 0 ? FSDP_MASK_DOC : 0) | (i % 3 != 0 ? FSDP_MASK_LOSS : 0));
    char *p = path_in("m.mask");
    CHECK_OK(fsdp_mask_write(p, fl, N));
    FILE *f = fopen(p, "rb");
    int32_t hdr[256];
    CHECK(fread(hdr, 4, 256, f) == 256);
    fseek(f, 0, SEEK_END);
    CHECK(ftell(f) == 1024 + N);
    fclose(f);
    CHECK(hdr[0] == 20241203 && hdr[1] == 1 && hdr[2] == N && hdr[3] == 0 && hdr[255] == 0);
    fsdp_mask_file mf;
    CHECK_ERR(fsdp_mask_open(&mf, p, N + 1), FSDP_EFORMAT,
              "header says 5000 tokens but its token file has 5001");
    CHECK_OK(fsdp_mask_open(&mf, p, N));
    CHECK_OK(fsdp_mask_read(&mf, 0, N, back));
    CHECK(memcmp(back, fl, N) == 0);
    CHECK_OK(fsdp_mask_read(&mf, 4990, 10, back));
    CHECK(memcmp(back, fl + 4990, 10) == 0);
    CHECK_ERR(fsdp_mask_read(&mf, 4991, 10, back), FSDP_EINVAL, "past its end");
    fsdp_mask_close(&mf);
    fsdp_mask_close(&mf);
    uint8_t bad[3] = {1, 4, 0};
    CHECK_ERR(fsdp_mask_write(p, bad, 3), FSDP_EINVAL, "flag 1 is 0x04");
    /* Hand-made files: an unknown bit, wrong magic, wrong version, one byte short. */
    write_mask_raw(p, 20241203, 1, bad, 3);
    CHECK_ERR(fsdp_mask_open(&mf, p, 3), FSDP_EFORMAT, "token 1 has mask flags 0x04");
    write_mask_raw(p, 20240520, 1, fl, 3);
    CHECK_ERR(fsdp_mask_open(&mf, p, 3), FSDP_EFORMAT, "not a mask file");
    write_mask_raw(p, 20241203, 2, fl, 3);
    CHECK_ERR(fsdp_mask_open(&mf, p, 3), FSDP_EFORMAT, "version 2");
    write_mask_raw(p, 20241203, 1, fl, 2);
    CHECK_ERR(fsdp_mask_open(&mf, p, 3), FSDP_EFORMAT, "truncated");
    free(p);
}

/* Loader with a mask file: every target of every rank/micro-batch slice, for world sizes 1..3 and
 * 1 or 2 micro-batches over two steps, is its token where the flag has FSDP_MASK_LOSS and
 * FSDP_IGNORE_INDEX (-100) elsewhere; the index of each target is recomputed from the documented
 * layout. A mask whose count is not the token file's fails fsdp_loader_init; the file name is X.mask
 * beside X.bin. */
static void test_loader_mask(void) {
    enum { N = 3001, B = 12, T = 8 };
    static uint16_t tok[N];
    static uint8_t fl[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (uint16_t)(i % 1000);
        fl[i] = (uint8_t)(((i * 7) % 5 < 3 ? FSDP_MASK_LOSS : 0) | (i % 11 == 0 ? FSDP_MASK_DOC : 0));
    }
    char *p = path_in("lm.bin"), *pm = path_in("lm.mask");
    CHECK_OK(fsdp_tokens_write(p, tok, N, 2));
    CHECK_OK(fsdp_mask_write(pm, fl, N));
    int32_t in[B * T], tg[B * T];
    long n_ignored = 0;
    for (int world = 1; world <= 3; world++)
        for (int micro = 1; micro <= 2; micro++) {
            if (B % (micro * world)) continue;
            int b = B / (micro * world);
            for (int r = 0; r < world; r++) {
                fsdp_loader L;
                CHECK_OK(fsdp_loader_init(&L, p, 1000, B, T, micro, r, world));
                for (int step = 0; step < 2; step++) {
                    for (int m = 0; m < micro; m++) {
                        CHECK_OK(fsdp_loader_micro(&L, m, in, tg, NULL));
                        for (int i = 0; i < b; i++)
                            for (int t = 0; t < T; t++) {
                                long idx =
                                    (long)L.pos + ((long)m * (B / micro) + (long)r * b + i) * T + t + 1;
                                int want = (fl[idx] & FSDP_MASK_LOSS) ? (int)(idx % 1000) : -100;
                                CHECK(in[i * T + t] == (int)((idx - 1) % 1000));
                                CHECK(tg[i * T + t] == want);
                                n_ignored += want == -100;
                            }
                    }
                    fsdp_loader_advance(&L);
                }
                fsdp_loader_free(&L);
            }
        }
    CHECK(n_ignored > 0);
    char *p2 = path_in("lm2.bin"), *pm2 = path_in("lm2.mask");
    CHECK_OK(fsdp_tokens_write(p2, tok, N, 2));
    CHECK_OK(fsdp_mask_write(pm2, fl, N - 1));
    fsdp_loader L;
    CHECK_ERR(fsdp_loader_init(&L, p2, 1000, B, T, 1, 0, 1), FSDP_EFORMAT, "3000 tokens");
    fsdp_loader_free(&L);
    free(p);
    free(pm);
    free(p2);
    free(pm2);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_data_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    test_round_trip();
    test_round_trip32();
    test_mask_files();
    test_bad_files();
    test_prepare();
    test_loader();
    test_loader_mask();
    test_prepare32();
    test_io_rules();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_MAIN_END();
}
