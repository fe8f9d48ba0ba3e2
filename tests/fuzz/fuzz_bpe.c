/* fuzz_bpe.c — libFuzzer target for the byte-level BPE (src/data/bpe.h). Byte 0 picks the mode:
 * even: the rest is text, encoded with a fixed tokenizer built here (256 byte tokens, a few merges,
 * <|endoftext|>): every id in the vocabulary, at most one id per byte, and decode(encode(x)) == x exactly;
 * odd: the rest is a tokenizer.json: a loaded one encodes a fixed text and decodes it back exactly, a
 * refused one says why. */
#include "fuzz_common.h"
#include "../test_bytes.h"

#include "fsdp.h"
#include "data/bpe.h"

#include <cjson/cJSON.h>

static fsdp_bpe *fixed_;

static fsdp_bpe *fixed(void) {
    if (fixed_) return fixed_;
    static const char *const merges[] = {"Ġ t",   "h e", "Ġt he", "i n", "a n", "e r",  "Ġ a", "o u", "Ġ Ġ",
                                         "ĠĠ ĠĠ", "Ċ Ċ", "' s",   "Ġ s", "r e", "in g", "Ġ 1", "1 2"};
    cJSON *j = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *m = cJSON_AddArrayToObject(model, "merges");
    int id = 0;
    char c[8];
    for (int b = 0; b < 256; b++) {
        test_gpt2_byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, id++);
    }
    for (size_t k = 0; k < sizeof merges / sizeof merges[0]; k++) {
        char joined[32];
        const char *sp = strchr(merges[k], ' ');
        snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - merges[k]), merges[k], sp + 1);
        cJSON_AddNumberToObject(vocab, joined, id++);
        cJSON_AddItemToArray(m, cJSON_CreateString(merges[k]));
    }
    cJSON *pre = cJSON_AddObjectToObject(j, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON *added = cJSON_AddArrayToObject(j, "added_tokens"), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", "<|endoftext|>");
    cJSON_AddItemToArray(added, a);
    char *text = cJSON_PrintUnformatted(j);
    char path[512];
    fuzz_path(path, sizeof path, "fixed_tokenizer.json");
    fuzz_write(path, text, strlen(text));
    free(text);
    cJSON_Delete(j);
    if (fsdp_bpe_load(&fixed_, path) != FSDP_OK) {
        fprintf(stderr, "fuzz_bpe: the fixed tokenizer does not load: %s\n", fsdp_last_error());
        abort();
    }
    return fixed_;
}

/* Encodes text and checks the ids and the exact round trip (the texts here are their own NFC). */
static void round_trip(fsdp_bpe *b, const char *text, size_t n) {
    int32_t *ids = malloc(sizeof *ids * (fsdp_bpe_max_ids(b, n) + 1));
    char *back = malloc(n + 1);
    FUZZ_REQUIRE(ids && back);
    size_t k = 0, m = 0;
    fsdp_status s = fsdp_bpe_encode(b, text, n, ids, &k);
    if (s == FSDP_EFORMAT && strstr(fsdp_last_error(), "has no token")) { /* a vocabulary without a byte */
        free(ids);
        free(back);
        return;
    }
    FUZZ_REQUIRE(s == FSDP_OK);
    FUZZ_REQUIRE(k <= fsdp_bpe_max_ids(b, n));
    for (size_t t = 0; t < k; t++) {
        size_t len = 0;
        const char *p = fsdp_bpe_token_bytes(b, ids[t], &len);
        FUZZ_REQUIRE(p != NULL && len > 0 && m + len <= n);
        memcpy(back + m, p, len);
        m += len;
    }
    FUZZ_REQUIRE(m == n && memcmp(back, text, n) == 0);
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if ((data[0] & 1) == 0) {
        round_trip(fixed(), (const char *)data + 1, size - 1);
        return 0;
    }
    char path[512];
    fuzz_path(path, sizeof path, "tokenizer.json");
    fuzz_write(path, data + 1, size - 1);
    fsdp_bpe *b = NULL;
    fsdp_status s = fsdp_bpe_load(&b, path);
    if (s != FSDP_OK) {
        FUZZ_REQUIRE(b == NULL && fsdp_last_error()[0] != '\0');
        return 0;
    }
    FUZZ_REQUIRE(fsdp_bpe_vocab_size(b) >= 256 && fsdp_bpe_vocab_size(b) <= 65536);
    static const char text[] = "The cat's 12 \xc3\xa9t\xc3\xa9  \n\n x<|endoftext|>\xff!";
    round_trip(b, text, sizeof text - 1);
    fsdp_bpe_free(b);
    return 0;
}
