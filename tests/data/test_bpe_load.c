/* test_bpe_load.c — tokenizer.json files as they come (issue 38 item 3): a BPE "model" without "type"
 * (older `tokenizers` versions wrote none: the Hub's gpt2 tokenizer.json) loads and encodes as the typed
 * one does, added tokens marked "normalized": true load (it only matters under a normalizer), and a model
 * of another type, or an untyped one without merges, is still refused by name. */
#include "test_util.h"

#include "fsdp.h"
#include "core/core.h"
#include "data/bpe.h"
#include "io/io.h"
#include "test_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

/* A byte-level BPE over the 256 byte characters plus the merge "a b" -> 256 and <|endoftext|> 257;
 * model_type: the "type" member of "model" (NULL: none); merges 0: no "merges" member. */
static char *write_tok(const char *name, const char *model_type, int merges, int normalized) {
    char *path = fsdp_strdupf("%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fputs("{\"model\": {", f);
    if (model_type) fprintf(f, "\"type\": \"%s\", ", model_type);
    if (merges) fputs("\"merges\": [\"a b\"], ", f);
    fputs("\"vocab\": {", f);
    for (int b = 0; b < 256; b++) {
        char c[8];
        test_gpt2_byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    fprintf(f,
            ", \"ab\": 256}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 257, "
            "\"content\": \"<|endoftext|>\", \"normalized\": %s, \"special\": true}]}",
            normalized ? "true" : "false");
    fclose(f);
    return path;
}

static void encode(fsdp_bpe *b, const char *text, int32_t *ids, size_t *n) {
    CHECK_OK(fsdp_bpe_encode(b, text, strlen(text), ids, n));
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tmp_test_bpe_load_XXXXXX", FSDP_BINARY_DIR);
    if (!mkdtemp(dir)) return 1;
    char *typed = write_tok("typed.json", "BPE", 1, 0), *untyped = write_tok("untyped.json", NULL, 1, 1);
    fsdp_bpe *a = NULL, *b = NULL;
    CHECK_OK(fsdp_bpe_load(&a, typed));
    CHECK_OK(fsdp_bpe_load(&b, untyped)); /* refused before: "model"."type" is not "BPE" */
    if (a && b) {
        int32_t x[64], y[64];
        size_t nx = 0, ny = 0;
        const char *text = "ab cab<|endoftext|>b a";
        encode(a, text, x, &nx);
        encode(b, text, y, &ny);
        CHECK(nx == ny && nx > 0 && !memcmp(x, y, nx * sizeof x[0]));
        CHECK(nx >= 2 && x[0] == 256); /* the merge applied */
        CHECK(fsdp_bpe_vocab_size(b) == 258 && fsdp_bpe_token_id(b, "<|endoftext|>") == 257);
    }
    fsdp_bpe_free(a);
    fsdp_bpe_free(b);
    char *wp = write_tok("wordpiece.json", "WordPiece", 1, 0), *bare = write_tok("bare.json", NULL, 0, 0);
    fsdp_bpe *c = NULL;
    CHECK_ERR(fsdp_bpe_load(&c, wp), FSDP_EFORMAT, "\"model\".\"type\" is not \"BPE\"");
    CHECK_ERR(fsdp_bpe_load(&c, bare), FSDP_EFORMAT, "\"model\".\"type\" is not \"BPE\"");
    const char *all[] = {typed, untyped, wp, bare};
    for (int i = 0; i < 4; i++) {
        unlink(all[i]);
        free((char *)all[i]);
    }
    rmdir(dir);
    return TEST_MAIN_END();
}
