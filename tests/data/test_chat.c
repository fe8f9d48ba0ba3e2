/* test_chat.c — prepare --jsonl's rows (src/data/chat.c) with a byte-level tokenizer without merges, whose
 * ids are known by hand (byte b is id b; the chat special tokens are added tokens 257..262): the ChatML
 * and Llama 3 renderings and their flags written out token by token, each malformed-row class with its
 * FILE:LINE message, and --chat-format auto's refusals. A unit test: it runs in the ASan+UBSan build too
 * (tests/train/chat_jsonl.sh compares real tokenizers with transformers). */
#include "test_util.h"
#include "test_bytes.h"

#include "data/chat.h"
#include "data/data.h"
#include "io/io.h"
#include "io/tokens.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[512];
static char *path_in(const char *name) { return fsdp_strdupf("%s/%s", dir, name); }

enum { EOT = 256, IM_START, IM_END, BOT, SH, EH, EOT_ID };

static void write_tokenizer(const char *path, int chatml, int llama3) {
    FILE *f = fopen(path, "wb");
    fputs("{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {", f);
    for (int b = 0; b < 256; b++) {
        char c[8];
        test_gpt2_byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    fputs("}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 256, \"content\": "
          "\"<|endoftext|>\"}",
          f);
    if (chatml)
        fputs(", {\"id\": 257, \"content\": \"<|im_start|>\"}, {\"id\": 258, \"content\": \"<|im_end|>\"}",
              f);
    if (llama3)
        fputs(", {\"id\": 259, \"content\": \"<|begin_of_text|>\"}, {\"id\": 260, \"content\": "
              "\"<|start_header_id|>\"}, {\"id\": 261, \"content\": \"<|end_header_id|>\"}, {\"id\": 262, "
              "\"content\": \"<|eot_id|>\"}",
              f);
    fputs("]}", f);
    fclose(f);
}

/* The expected tokens of a row, built piece by piece. */
typedef struct {
    int32_t ids[512];
    uint8_t fl[512];
    size_t n;
} want_t;
static void w_id(want_t *w, int32_t id, int loss) {
    w->fl[w->n] = (uint8_t)((loss ? FSDP_MASK_LOSS : 0) | (w->n == 0 ? FSDP_MASK_DOC : 0));
    w->ids[w->n++] = id;
}
static void w_text(want_t *w, const char *s, int loss) {
    for (; *s; s++)
        w_id(w, (uint8_t)*s, loss);
}

static int same(const int32_t *ids, const uint8_t *fl, size_t n, const want_t *w) {
    if (n != w->n) {
        fprintf(stderr, "  %zu tokens, want %zu\n", n, w->n);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] != w->ids[i] || fl[i] != w->fl[i]) {
            fprintf(stderr, "  token %zu: id %d flags %u, want %d %u\n", i, ids[i], fl[i], w->ids[i],
                    w->fl[i]);
            return 0;
        }
    return 1;
}

static const char *const row1 = "{\"prompt\": \"Hi\", \"completion\": \" ok \"}";
static const char *const row2 = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": "
                                "\"user\", \"content\": \"\\tq\\n\"}, "
                                "{\"role\": \"assistant\", \"content\": \"a\\u3000\"}, {\"role\": \"user\", "
                                "\"content\": \"u\"}], \"id\": 3}";

static void test_render(const char *tok) {
    fsdp_bpe *b = NULL;
    CHECK_OK(fsdp_bpe_load(&b, tok));
    fsdp_chat c;
    int32_t *ids = NULL;
    uint8_t *fl = NULL;
    size_t cap = 0, len = 0;

    CHECK_OK(fsdp_chat_init(&c, b, tok, FSDP_CHAT_CHATML));
    want_t w = {0};
    w_id(&w, IM_START, 0), w_text(&w, "user\nHi", 0), w_id(&w, IM_END, 0), w_text(&w, "\n", 0);
    w_id(&w, IM_START, 0), w_text(&w, "assistant\n", 0), w_text(&w, " ok ", 1), w_id(&w, IM_END, 1);
    w_text(&w, "\n", 0);
    CHECK_OK(fsdp_chat_render_row(&c, row1, strlen(row1), "r.jsonl", 1, &ids, &fl, &cap, &len));
    CHECK(same(ids, fl, len, &w));
    len = 0;
    memset(&w, 0, sizeof w);
    w_id(&w, IM_START, 0), w_text(&w, "system\nS", 0), w_id(&w, IM_END, 0), w_text(&w, "\n", 0);
    w_id(&w, IM_START, 0), w_text(&w, "user\n\tq\n", 0), w_id(&w, IM_END, 0), w_text(&w, "\n", 0);
    w_id(&w, IM_START, 0), w_text(&w, "assistant\n", 0), w_text(&w, "a\xe3\x80\x80", 1), w_id(&w, IM_END, 1);
    w_text(&w, "\n", 0);
    w_id(&w, IM_START, 0), w_text(&w, "user\nu", 0), w_id(&w, IM_END, 0), w_text(&w, "\n", 0);
    CHECK_OK(fsdp_chat_render_row(&c, row2, strlen(row2), "r.jsonl", 2, &ids, &fl, &cap, &len));
    CHECK(same(ids, fl, len, &w));
    fsdp_chat_free(&c);

    /* Llama 3: contents trimmed of ASCII and Unicode white space (U+3000), as Jinja's trim does */
    CHECK_OK(fsdp_chat_init(&c, b, tok, FSDP_CHAT_LLAMA3));
    len = 0;
    memset(&w, 0, sizeof w);
    w_id(&w, BOT, 0);
    w_id(&w, SH, 0), w_text(&w, "user", 0), w_id(&w, EH, 0), w_text(&w, "\n\nHi", 0), w_id(&w, EOT_ID, 0);
    w_id(&w, SH, 0), w_text(&w, "assistant", 0), w_id(&w, EH, 0), w_text(&w, "\n\n", 0), w_text(&w, "ok", 1);
    w_id(&w, EOT_ID, 1);
    CHECK_OK(fsdp_chat_render_row(&c, row1, strlen(row1), "r.jsonl", 1, &ids, &fl, &cap, &len));
    CHECK(same(ids, fl, len, &w));
    len = 0;
    memset(&w, 0, sizeof w);
    w_id(&w, BOT, 0);
    w_id(&w, SH, 0), w_text(&w, "system", 0), w_id(&w, EH, 0), w_text(&w, "\n\nS", 0), w_id(&w, EOT_ID, 0);
    w_id(&w, SH, 0), w_text(&w, "user", 0), w_id(&w, EH, 0), w_text(&w, "\n\nq", 0), w_id(&w, EOT_ID, 0);
    w_id(&w, SH, 0), w_text(&w, "assistant", 0), w_id(&w, EH, 0), w_text(&w, "\n\n", 0), w_text(&w, "a", 1);
    w_id(&w, EOT_ID, 1);
    w_id(&w, SH, 0), w_text(&w, "user", 0), w_id(&w, EH, 0), w_text(&w, "\n\nu", 0), w_id(&w, EOT_ID, 0);
    CHECK_OK(fsdp_chat_render_row(&c, row2, strlen(row2), "r.jsonl", 2, &ids, &fl, &cap, &len));
    CHECK(same(ids, fl, len, &w));
    fsdp_chat_free(&c);

    /* auto: both formats' tokens and no template is ambiguous; neither is not a chat tokenizer */
    CHECK_ERR(fsdp_chat_init(&c, b, tok, FSDP_CHAT_AUTO), FSDP_EFORMAT, "ChatML and of Llama 3");
    fsdp_chat_free(&c);
    free(ids);
    free(fl);
    fsdp_bpe_free(b);
}

static void test_rows(void) {
    static const struct {
        const char *row, *msg;
    } bad[] = {
        {"[1]", "f.jsonl:7: a row must be a JSON object, not an array"},
        {"{\"prompt\": \"a\"", "f.jsonl:7: not valid JSON"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"} {}", "f.jsonl:7: not valid JSON"},
        {"{\"prompt\": \"a\", \"completion\": \"b\", \"completion\": \"c\"}",
         "the key \"completion\" appears twice"},
        {"{\"prompt\": \"a\"}", "f.jsonl:7: missing key \"completion\""},
        {"{}", "f.jsonl:7: missing key \"messages\""},
        {"{\"prompt\": \"a\", \"completion\": false}", "\"completion\" must be a string, not a boolean"},
        {"{\"messages\": \"x\"}", "\"messages\" must be an array, not a string"},
        {"{\"messages\": []}", "f.jsonl:7: \"messages\" is empty"},
        {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", "unknown role \"bot\""},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "f.jsonl:7: no assistant turn"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", \"weight\": 1}]}",
         "messages[0] has the key \"weight\""},
        {"{\"prompt\": \"\xc3\", \"completion\": \"b\"}", "f.jsonl:7: invalid UTF-8 at byte 13"},
        {"{\"prompt\": \"\xf4\x90\x80\x80\", \"completion\": \"b\"}", "invalid UTF-8 at byte 13"},
        {"{\"prompt\": \"x\\u0000\", \"completion\": \"b\"}", "f.jsonl:7: a NUL character"},
    };
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_ERR(fsdp_chat_check_row(bad[i].row, strlen(bad[i].row), "f.jsonl", 7, &bytes), FSDP_EFORMAT,
                  bad[i].msg);
    const char *okr =
        "{\"prompt\": \"x\\\\u0000\", \"completion\": \"b\"}"; /* an escaped backslash, then text */
    CHECK_OK(fsdp_chat_check_row(okr, strlen(okr), "f.jsonl", 1, &bytes));
    CHECK(bytes == 8);
    CHECK_OK(fsdp_chat_check_row(row2, strlen(row2), "f.jsonl", 1, &bytes));
    CHECK(bytes == 1 + 3 + 4 + 1);
}

/* fsdp_prepare --jsonl: the mask files beside the token files, the rows split by --val-fraction. */
static void test_prepare_jsonl(const char *tok) {
    char *jl = path_in("rows.jsonl"), *out = path_in("prep_chat");
    FILE *f = fopen(jl, "wb");
    for (int i = 0; i < 8; i++)
        fprintf(f, "{\"prompt\": \"q%d\", \"completion\": \"a%d\"}\n", i, i);
    fclose(f);
    fsdp_prepare_args a = {
        .jsonl = jl, .out_dir = out, .val_fraction = 0.25, .tokenizer = tok, .chat_format = FSDP_CHAT_CHATML};
    fsdp_prepare_stats st;
    CHECK_OK(fsdp_prepare(&a, &st));
    /* a row: <|im_start|> user\nqI <|im_end|> \n <|im_start|> assistant\naI <|im_end|> \n = 25 tokens,
     * 3 of them loss targets ('a', 'I', <|im_end|>); rows 3 and 7 go to val */
    CHECK(st.n_docs == 8 && st.n_train == 6 * 25 && st.n_val == 2 * 25 && st.n_loss == 8 * 3);
    char *tp = fsdp_strdupf("%s/train.bin", out), *mp = fsdp_strdupf("%s/train.mask", out);
    fsdp_token_file tf;
    fsdp_mask_file mf;
    CHECK_OK(fsdp_tokens_open(&tf, tp, 263));
    CHECK_OK(fsdp_mask_open(&mf, mp, tf.ntok));
    int32_t ids[6 * 25];
    uint8_t fl[6 * 25];
    CHECK_OK(fsdp_tokens_read(&tf, 0, 6 * 25, ids));
    CHECK_OK(fsdp_mask_read(&mf, 0, 6 * 25, fl));
    int ok = 1;
    for (int r = 0; r < 6; r++) {
        const int32_t *t = ids + 25 * r;
        const uint8_t *g = fl + 25 * r;
        int row = r < 3 ? r : r + 1; /* row 3 went to val */
        ok &= t[0] == IM_START && g[0] == FSDP_MASK_DOC && t[7] == '0' + row && t[22] == '0' + row;
        ok &=
            t[23] == IM_END && g[23] == FSDP_MASK_LOSS && g[21] == FSDP_MASK_LOSS && g[20] == 0 && g[24] == 0;
        for (int k = 1; k < 25; k++)
            ok &= !(g[k] & FSDP_MASK_DOC);
    }
    CHECK(ok);
    fsdp_mask_close(&mf);
    fsdp_tokens_close(&tf);
    /* a bad row leaves the folder as it was: the same train.bin */
    f = fopen(jl, "ab");
    fputs("{\"prompt\": \"q\", \"completion\": 3}\n", f);
    fclose(f);
    CHECK_ERR(fsdp_prepare(&a, &st), FSDP_EFORMAT,
              "rows.jsonl:9: \"completion\" must be a string, not a number");
    CHECK_OK(fsdp_tokens_open(&tf, tp, 263));
    CHECK(tf.ntok == 6 * 25);
    fsdp_tokens_close(&tf);
    a.chat_format = FSDP_CHAT_AUTO; /* the tokenizer has both formats' tokens */
    CHECK_ERR(fsdp_prepare(&a, &st), FSDP_EFORMAT, "pass --chat-format chatml or llama3");
    free(mp);
    free(tp);
    free(out);
    free(jl);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_chat_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    char *tok = path_in("tok.json"), *gpt = path_in("gpt.json");
    write_tokenizer(tok, 1, 1);
    write_tokenizer(gpt, 0, 0);
    test_render(tok);
    test_rows();
    test_prepare_jsonl(tok);
    {
        fsdp_bpe *b = NULL;
        fsdp_chat c;
        CHECK_OK(fsdp_bpe_load(&b, gpt));
        CHECK_ERR(fsdp_chat_init(&c, b, gpt, FSDP_CHAT_AUTO), FSDP_EFORMAT, "is not a chat tokenizer");
        CHECK_ERR(fsdp_chat_init(&c, b, gpt, FSDP_CHAT_LLAMA3), FSDP_EFORMAT,
                  "the llama3 chat format needs <|begin_of_text|> as one token");
        fsdp_chat_free(&c);
        fsdp_bpe_free(b);
    }
    free(gpt);
    free(tok);
    return TEST_MAIN_END();
}
