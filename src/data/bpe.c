/* bpe.c — GPT-2 byte-level BPE (bpe.h): tokenizer.json parsed and checked, the split pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched by hand over UTF-8 code points (unicode_tables.h), merges applied lowest rank first (leftmost
 * among equals, as `tokenizers` does), and a direct-mapped cache of recent words. */
#include "data/bpe.h"

#include "core/core.h"
#include "io/io.h"
#include "io/json.h"
#include "data/unicode_tables.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ID     (1 << 24) /* ids beyond any real vocabulary (Qwen2: 151936) are a damaged file */
#define CACHE_SIZE 16384     /* direct-mapped word cache slots */
#define CACHE_WORD 48        /* words up to this many bytes are cached */

typedef struct {
    uint64_t key; /* (left id << 32) | right id, + 1 so 0 marks an empty slot */
    int32_t rank, id;
} pair_slot;

typedef struct {
    int32_t rank, pos;   /* merge rank; index of the left symbol */
    int32_t left, right; /* the pair's ids when it was queued: a stale entry no longer matches */
} merge_cand;

typedef struct {
    uint32_t key; /* node * 256 + byte, + 1 so 0 marks an empty slot */
    int32_t child;
} edge_slot;

typedef struct {
    uint64_t hash;
    uint8_t len, n; /* word bytes, ids */
    char word[CACHE_WORD];
    int32_t ids[CACHE_WORD];
} cache_slot;

typedef struct {
    const char *s;
    size_t len;
    int32_t id;
} str_slot;
typedef struct {
    str_slot *slots;
    size_t mask;
} str_map;

enum { STAGE_GPT2, STAGE_LLAMA3, STAGE_QWEN2, STAGE_DIGIT, STAGE_DIGITS };
#define MAX_STAGES 4

struct fsdp_bpe {
    int vocab_size, eot;
    int nfc;               /* the NFC normalizer, applied to the text between added tokens */
    int ignore_merges;     /* a pre-token that is a vocabulary token is that token (Llama 3) */
    int byte_level;        /* the pre-tokenizer ended in ByteLevel */
    int stage[MAX_STAGES]; /* the splits before the BPE, in order (STAGE_*) */
    int n_stage;
    str_map bytes_id; /* (ignore_merges) a vocabulary token's bytes -> its id */
    char **tok;       /* (vocab_size) each token's bytes, or NULL for an unused id */
    size_t *tlen;     /* (vocab_size) */
    int32_t byte_id[256];
    pair_slot *pairs;
    size_t pair_mask;
    int n_added;
    char **added; /* (n_added) contents, matched in the text before the split */
    size_t *added_len;
    int32_t *added_id;
    /* The added tokens as a trie: node 0 is the root; an edge (node, byte) -> child in an open-addressing
     * table; term[node] the index of the added token ending there, or -1. */
    edge_slot *edges; /* (edge_mask + 1) */
    size_t edge_mask;
    int32_t *term; /* (n_nodes) */
    int32_t n_nodes;
    uint8_t first[256]; /* first[c]: some added token starts with byte c */
    cache_slot *cache;  /* (CACHE_SIZE) */
    /* scratch for one word: symbols as a doubly linked list (cap_sym), candidate merges as a min-heap
     * by (rank, position) (cap_heap) */
    int32_t *sym, *prev, *next;
    size_t cap_sym;
    merge_cand *heap;
    size_t cap_heap;
    uint32_t *norm_cp; /* NFC scratch: code points (cap_norm), then the UTF-8 (norm, cap_norm bytes) */
    unsigned char *norm;
    size_t cap_norm;
};

/* ---------------------------------------------------------------- byte-level alphabet */

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 for U+0100.. in order. */
static void byte_map(uint32_t cp_of[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp_of[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* One UTF-8 code point at s[0..n): its value and length; -1 for an invalid sequence (length 1). */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    int need;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, cp = c & 0x07, min = 0x10000;
    else
        return -1;
    if ((size_t)need >= n) return -1;
    for (int k = 1; k <= need; k++) {
        if ((s[k] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = (size_t)need + 1;
    return (int32_t)cp;
}

/* ---------------------------------------------------------------- string -> id map (loading only) */

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
static int32_t str_get(const str_map *m, const char *s, size_t len) {
    for (size_t i = fnv(s, len) & m->mask;; i = (i + 1) & m->mask) {
        const str_slot *e = &m->slots[i];
        if (!e->s) return -1;
        if (e->len == len && !memcmp(e->s, s, len)) return e->id;
    }
}
static int str_put(str_map *m, const char *s, size_t len, int32_t id) { /* 0: duplicate key */
    for (size_t i = fnv(s, len) & m->mask;; i = (i + 1) & m->mask) {
        str_slot *e = &m->slots[i];
        if (!e->s) {
            *e = (str_slot){s, len, id};
            return 1;
        }
        if (e->len == len && !memcmp(e->s, s, len)) return 0;
    }
}

static size_t pow2_above(size_t n) {
    size_t c = 16;
    while (c < 2 * n)
        c <<= 1;
    return c;
}

/* ---------------------------------------------------------------- loading */

void fsdp_bpe_free(fsdp_bpe *b) {
    if (!b) return;
    if (b->tok)
        for (int i = 0; i < b->vocab_size; i++)
            free(b->tok[i]);
    free(b->tok);
    free(b->tlen);
    free(b->pairs);
    if (b->added)
        for (int i = 0; i < b->n_added; i++)
            free(b->added[i]);
    free(b->added);
    free(b->added_len);
    free(b->added_id);
    free(b->edges);
    free(b->term);
    free(b->cache);
    free(b->sym);
    free(b->prev);
    free(b->next);
    free(b->heap);
    free(b->norm_cp);
    free(b->norm);
    free(b->bytes_id.slots);
    free(b);
}

int fsdp_bpe_vocab_size(const fsdp_bpe *b) { return b ? b->vocab_size : 0; }
int fsdp_bpe_eot(const fsdp_bpe *b) { return b ? b->eot : -1; }

size_t fsdp_bpe_max_ids(const fsdp_bpe *b, size_t n) { return b && b->nfc ? 3 * n : n; }

int fsdp_bpe_token_id(const fsdp_bpe *b, const char *token) {
    if (!b || !token) return -1;
    size_t n = strlen(token);
    for (int a = 0; a < b->n_added; a++)
        if (b->added_len[a] == n && !memcmp(b->added[a], token, n)) return b->added_id[a];
    for (int id = 0; id < b->vocab_size; id++)
        if (b->tok[id] && b->tlen[id] == n && !memcmp(b->tok[id], token, n)) return id;
    return -1;
}

const char *fsdp_bpe_token_bytes(const fsdp_bpe *b, int id, size_t *len) {
    if (!b || id < 0 || id >= b->vocab_size || !b->tok[id]) return NULL;
    *len = b->tlen[id];
    return b->tok[id];
}

/* A byte-level token string (UTF-8 of the alphabet's characters) -> its bytes; 0 if not byte-level. */
static int byte_level_decode(const char *s, const uint8_t byte_of[324], const uint8_t valid[324], char *out,
                             size_t *n_out) {
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = utf8_next((const unsigned char *)s + i, n - i, &l);
        if (cp < 0 || cp >= 324 || !valid[cp]) return 0;
        out[k++] = (char)byte_of[cp];
        i += l;
    }
    *n_out = k;
    return 1;
}

static fsdp_status need_type(const cJSON *obj, const char *field, const char *type, const char *path) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, type) != 0)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\".\"type\" is not \"%s\" (a byte-level BPE)", path,
                              field, type);
    return FSDP_OK;
}

/* A setting that must be null/absent or equal a value this encoder implements. */
static int is_off(const cJSON *v) {
    return !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsString(v) && !v->valuestring[0]);
}

/* A copy of n bytes into *dst (malloc'd: tokens are freed by fsdp_bpe_free). */
static fsdp_status dup_bytes(char **dst, const char *src, size_t n) {
    *dst = malloc(n ? n : 1);
    if (!*dst) return FSDP_ERR(FSDP_ENOMEM, "no memory for a token");
    memcpy(*dst, src, n);
    return FSDP_OK;
}

/* The two Split patterns implemented (by hand, in split_llama3): Llama 3's (numbers in groups of up to
 * three) and Qwen2's (single numbers), exactly as their tokenizer.json files spell them. */
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Every key of obj must be one of the NULL-terminated list keys (a field this encoder does not know
 * could change the ids). */
static fsdp_status known_keys(const cJSON *obj, const char *const *keys, const char *field,
                              const char *path) {
    for (const cJSON *e = obj->child; e; e = e->next) {
        int k = 0;
        while (keys[k] && strcmp(keys[k], e->string))
            k++;
        if (!keys[k])
            return fsdp_set_error(FSDP_EFORMAT, "%s: %s\"%.60s\" is not implemented by fsdp.c's tokenizer",
                                  path, field, e->string);
    }
    return FSDP_OK;
}

static const char *type_of(const cJSON *obj) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* One element of the pre-tokenizer (a Sequence's k-th, or the whole when k < 0) into b->stage. */
static fsdp_status pre_stage(fsdp_bpe *b, const cJSON *p, int k, const char *path) {
    char field[64];
    if (k >= 0)
        snprintf(field, sizeof field, "\"pre_tokenizer\".\"pretokenizers\"[%d]", k);
    else
        snprintf(field, sizeof field, "\"pre_tokenizer\"");
    const char *t = cJSON_IsObject(p) ? type_of(p) : NULL;
    if (!t) return fsdp_set_error(FSDP_EFORMAT, "%s: %s has no \"type\"", path, field);
    if (b->n_stage == MAX_STAGES || b->byte_level)
        return fsdp_set_error(FSDP_EFORMAT, "%s: %s (\"%s\") after ByteLevel is not implemented", path, field,
                              t);
    int st;
    if (!strcmp(t, "ByteLevel")) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        FSDP_TRY(known_keys(p, keys, field[0] == '"' ? "" : "", path));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space")))
            return fsdp_set_error(FSDP_EFORMAT, "%s: %s.\"add_prefix_space\" is true: not implemented", path,
                                  field);
        b->byte_level = 1;
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(p, "use_regex"))) return FSDP_OK;
        st = STAGE_GPT2;
    } else if (!strcmp(t, "Split")) {
        static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
        FSDP_TRY(known_keys(p, keys, "", path));
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (!cJSON_IsString(re) ||
            (strcmp(re->valuestring, LLAMA3_PATTERN) && strcmp(re->valuestring, QWEN2_PATTERN)))
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: %s.\"pattern\" is not implemented: only Llama 3's and Qwen2's Split "
                                  "regex are",
                                  path, field);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
            return fsdp_set_error(FSDP_EFORMAT, "%s: %s.\"behavior\" is not \"Isolated\": not implemented",
                                  path, field);
        if (!is_off(cJSON_GetObjectItemCaseSensitive(p, "invert")))
            return fsdp_set_error(FSDP_EFORMAT, "%s: %s.\"invert\" is set: not implemented", path, field);
        st = strcmp(re->valuestring, LLAMA3_PATTERN) ? STAGE_QWEN2 : STAGE_LLAMA3;
    } else if (!strcmp(t, "Digits")) {
        static const char *const keys[] = {"type", "individual_digits", NULL};
        FSDP_TRY(known_keys(p, keys, "", path));
        st = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "individual_digits")) ? STAGE_DIGIT
                                                                                    : STAGE_DIGITS;
    } else {
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: %s type \"%.40s\" is not implemented (ByteLevel, Split with Llama 3's or "
                              "Qwen2's pattern, Digits)",
                              path, field, t);
    }
    b->stage[b->n_stage++] = st;
    return FSDP_OK;
}

/* The settings outside the vocabulary: a byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) with only what is
 * implemented switched on; each other field or type is refused by name. *model: the "model" object. */
static fsdp_status check_settings(fsdp_bpe *b, const cJSON *j, const char *path, const cJSON **model) {
    if (!cJSON_IsObject(j))
        return fsdp_set_error(FSDP_EFORMAT, "%s is not a JSON object (a tokenizer.json)", path);
    /* post_processor and decoder only add special tokens around an encoding / join the text back: the
     * ids here are those of encode(text, add_special_tokens=False). */
    static const char *const top[] = {
        "version",       "truncation",     "padding", "added_tokens", "normalizer",
        "pre_tokenizer", "post_processor", "decoder", "model",        NULL};
    FSDP_TRY(known_keys(j, top, "", path));
    static const char *const cut[] = {"truncation", "padding"};
    for (size_t k = 0; k < 2; k++)
        if (!is_off(cJSON_GetObjectItemCaseSensitive(j, cut[k])))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is set: not implemented", path, cut[k]);
    *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsObject(*model)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\" is missing", path);
    FSDP_TRY(need_type(*model, "model", "BPE", path));
    static const char *const mkeys[] = {"type",
                                        "dropout",
                                        "unk_token",
                                        "continuing_subword_prefix",
                                        "end_of_word_suffix",
                                        "fuse_unk",
                                        "byte_fallback",
                                        "ignore_merges",
                                        "vocab",
                                        "merges",
                                        NULL};
    FSDP_TRY(known_keys(*model, mkeys, "\"model\".", path));
    static const char *const off_keys[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix",
                                           "byte_fallback", "unk_token"};
    for (size_t k = 0; k < sizeof off_keys / sizeof off_keys[0]; k++)
        if (!is_off(cJSON_GetObjectItemCaseSensitive(*model, off_keys[k])))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"%s\" is set: not implemented", path,
                                  off_keys[k]);
    b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*model, "ignore_merges"));
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const char *t = type_of(norm);
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (t && !strcmp(t, "Sequence") && cJSON_GetArraySize(seq) == 1) norm = seq->child, t = type_of(norm);
        if (!t || strcmp(t, "NFC") || cJSON_GetArraySize(norm) != 1)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: \"normalizer\" \"%.40s\" is not implemented (null or NFC)", path,
                                  t ? t : "?");
        b->nfc = 1;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    if (!cJSON_IsObject(pre))
        return fsdp_set_error(
            FSDP_EFORMAT, "%s: \"pre_tokenizer\" is missing (a byte-level BPE's ends in ByteLevel)", path);
    const char *pt = type_of(pre);
    if (pt && !strcmp(pt, "Sequence")) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
        if (!cJSON_IsArray(seq))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"pre_tokenizer\".\"pretokenizers\" is not an array",
                                  path);
        int k = 0;
        for (const cJSON *e = seq->child; e; e = e->next, k++)
            FSDP_TRY(pre_stage(b, e, k, path));
    } else {
        FSDP_TRY(pre_stage(b, pre, -1, path));
    }
    if (!b->byte_level)
        return fsdp_set_error(
            FSDP_EFORMAT, "%s: \"pre_tokenizer\" has no ByteLevel: fsdp.c's tokenizer is a byte-level BPE",
            path);
    return FSDP_OK;
}

/* Every id of the vocabulary and of the added tokens checked; *maxid the largest, *n_added counted. */
static fsdp_status check_ids(const cJSON *vocab, const cJSON *added, const char *path, int nfc, int *n_added,
                             int *maxid) {
    *maxid = -1;
    *n_added = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_ID ||
            e->valuedouble != (int)e->valuedouble)
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"vocab\".\"%.40s\" is not an id in 0..%d",
                                  path, e->string, MAX_ID - 1);
        if (e->valueint > *maxid) *maxid = e->valueint;
    }
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_ID ||
            id->valuedouble != (int)id->valuedouble || !cJSON_IsString(c) || !c->valuestring[0])
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: an \"added_tokens\" entry lacks a valid \"id\" (0..%d) or a non-empty \"content\"", path,
                MAX_ID - 1);
        /* "normalized" (matched in the normalized text) only matters with a normalizer */
        static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (size_t k = 0; k < sizeof flags / sizeof flags[0] - !nfc; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, flags[k])))
                return fsdp_set_error(FSDP_EFORMAT,
                                      "%s: \"added_tokens\" \"%.40s\": \"%s\" is true: not supported", path,
                                      c->valuestring, flags[k]);
        if (id->valueint > *maxid) *maxid = id->valueint;
        ++*n_added;
    }
    return FSDP_OK;
}

/* The vocabulary's tokens as bytes (b->tok, b->tlen), their strings in vm; then each byte's token. */
static fsdp_status load_vocab(fsdp_bpe *b, str_map *vm, const cJSON *vocab, const char *path) {
    uint32_t cp_of[256];
    uint8_t byte_of[324] = {0}, valid[324] = {0};
    byte_map(cp_of);
    for (int i = 0; i < 256; i++) {
        byte_of[cp_of[i]] = (uint8_t)i;
        valid[cp_of[i]] = 1;
    }
    char buf[4096];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        size_t n = 0, sl = strlen(e->string);
        if (sl >= sizeof buf || !byte_level_decode(e->string, byte_of, valid, buf, &n) || n == 0)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: \"model\".\"vocab\" token \"%.40s\" is not a byte-level token", path,
                                  e->string);
        int id = e->valueint;
        if (b->tok[id])
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"vocab\": id %d is given twice", path, id);
        if (!str_put(vm, e->string, sl, id))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"vocab\" token \"%.40s\" twice", path,
                                  e->string);
        FSDP_TRY(dup_bytes(&b->tok[id], buf, n));
        b->tlen[id] = n;
    }
    for (int i = 0; i < 256; i++) {
        char u[4];
        size_t ul = 0;
        uint32_t cp = cp_of[i];
        if (cp < 0x80)
            u[ul++] = (char)cp;
        else
            u[ul++] = (char)(0xC0 | (cp >> 6)), u[ul++] = (char)(0x80 | (cp & 0x3F));
        b->byte_id[i] = str_get(vm, u, ul);
        /* StarCoder's and SmolLM's vocabularies lack a few bytes that UTF-8 never uses (C0, C1, F5..FF) or
         * only for unassigned planes (F1..F3): a text holding one is refused when it is encoded */
        if (b->byte_id[i] < 0 && !(i == 0xC0 || i == 0xC1 || i >= 0xF1))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"vocab\" lacks the token of byte 0x%02X",
                                  path, i);
    }
    return FSDP_OK;
}

/* The added tokens (matched before the BPE); an id the vocabulary has must be the same token. */
static fsdp_status load_added(fsdp_bpe *b, const cJSON *added, const char *path) {
    int k = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, k++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        int id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        size_t n = strlen(c->valuestring);
        FSDP_TRY(dup_bytes(&b->added[k], c->valuestring, n));
        b->added_len[k] = n;
        b->added_id[k] = id;
        if (b->tok[id] && (b->tlen[id] != n || memcmp(b->tok[id], c->valuestring, n) != 0))
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: \"added_tokens\" id %d (\"%.40s\") is another token in \"model\".\"vocab\"", path, id,
                c->valuestring);
        if (!b->tok[id]) {
            FSDP_TRY(dup_bytes(&b->tok[id], c->valuestring, n));
            b->tlen[id] = n;
        }
        /* the end-of-document token: GPT-2's, Qwen2's and SmolLM's name first, then Llama 3's */
        if (!strcmp(c->valuestring, "<|endoftext|>")) b->eot = id;
        if (!strcmp(c->valuestring, "<|end_of_text|>") && b->eot < 0) b->eot = id;
    }
    return FSDP_OK;
}

static uint32_t edge_hash(uint32_t key) { return key * 2654435761u; }

static int32_t trie_child(const fsdp_bpe *b, int32_t node, unsigned char c) {
    uint32_t key = (uint32_t)node * 256u + c + 1u;
    for (size_t i = edge_hash(key) & b->edge_mask;; i = (i + 1) & b->edge_mask) {
        if (b->edges[i].key == key) return b->edges[i].child;
        if (b->edges[i].key == 0) return -1;
    }
}

/* The trie of the added tokens' contents (a content given twice keeps its first entry). */
static fsdp_status build_trie(fsdp_bpe *b) {
    size_t total = 1;
    for (int a = 0; a < b->n_added; a++)
        total += b->added_len[a];
    if (total > INT32_MAX / 256) return FSDP_ERR(FSDP_EFORMAT, "added tokens too long (%zu bytes)", total);
    b->edge_mask = pow2_above(total) - 1;
    b->edges = calloc(b->edge_mask + 1, sizeof *b->edges);
    b->term = malloc(total * sizeof *b->term);
    if (!b->edges || !b->term) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d added tokens", b->n_added);
    b->n_nodes = 1;
    b->term[0] = -1;
    for (int a = 0; a < b->n_added; a++) {
        int32_t node = 0;
        const unsigned char *t = (const unsigned char *)b->added[a];
        b->first[t[0]] = 1;
        for (size_t k = 0; k < b->added_len[a]; k++) {
            int32_t c = trie_child(b, node, t[k]);
            if (c < 0) {
                uint32_t key = (uint32_t)node * 256u + t[k] + 1u;
                size_t i = edge_hash(key) & b->edge_mask;
                while (b->edges[i].key)
                    i = (i + 1) & b->edge_mask;
                c = b->n_nodes++;
                b->edges[i] = (edge_slot){key, c};
                b->term[c] = -1;
            }
            node = c;
        }
        if (b->term[node] < 0) b->term[node] = a;
    }
    return FSDP_OK;
}

/* The merges, as (left id, right id) -> (rank, merged id) in an open-addressing table. */
static fsdp_status load_merges(fsdp_bpe *b, const str_map *vm, const cJSON *merges, const char *path) {
    int nm = cJSON_GetArraySize(merges);
    b->pair_mask = pow2_above((size_t)nm) - 1;
    b->pairs = calloc(b->pair_mask + 1, sizeof *b->pairs);
    if (!b->pairs) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d merges", nm);
    char buf[4096];
    int rank = 0;
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        const char *a = NULL, *c = NULL;
        size_t al = 0, cl = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (sp) a = e->valuestring, al = (size_t)(sp - a), c = sp + 1, cl = strlen(c);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, al = strlen(a), c = e->child->next->valuestring, cl = strlen(c);
        }
        if (!a || al + cl >= sizeof buf)
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"merges\"[%d] is not a pair of tokens", path,
                                  rank);
        memcpy(buf, a, al);
        memcpy(buf + al, c, cl);
        int32_t ia = str_get(vm, a, al), ic = str_get(vm, c, cl), ir = str_get(vm, buf, al + cl);
        if (ia < 0 || ic < 0 || ir < 0)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: \"model\".\"merges\"[%d] (\"%.*s\" + \"%.*s\"): %s is not in the vocabulary", path, rank,
                (int)(al > 40 ? 40 : al), a, (int)(cl > 40 ? 40 : cl), c,
                ir < 0 && ia >= 0 && ic >= 0 ? "the merged token" : "a part");
        uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ic) + 1;
        for (size_t i = fnv(&key, 8) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
            if (b->pairs[i].key == key) break; /* a repeated merge: the first (lowest) rank stays */
            if (b->pairs[i].key == 0) {
                b->pairs[i] = (pair_slot){key, rank, ir};
                break;
            }
        }
    }
    return FSDP_OK;
}

/* (ignore_merges) the vocabulary's tokens by their bytes. */
static fsdp_status bytes_map(fsdp_bpe *b) {
    b->bytes_id.mask = pow2_above((size_t)b->vocab_size) - 1;
    b->bytes_id.slots = calloc(b->bytes_id.mask + 1, sizeof *b->bytes_id.slots);
    if (!b->bytes_id.slots) return FSDP_ERR(FSDP_ENOMEM, "no memory for a vocabulary of %d", b->vocab_size);
    for (int id = 0; id < b->vocab_size; id++)
        if (b->tok[id]) str_put(&b->bytes_id, b->tok[id], b->tlen[id], id); /* a repeat keeps the first */
    return FSDP_OK;
}

/* The tokenizer's parts once its ids are known: the tables, the vocabulary, the added tokens, the
 * merges. */
static fsdp_status build(fsdp_bpe *b, const cJSON *vocab, const cJSON *merges, const cJSON *added,
                         const char *path) {
    int maxid, n_added;
    FSDP_TRY(check_ids(vocab, added, path, b->nfc, &n_added, &maxid));
    b->vocab_size = maxid + 1;
    b->eot = -1;
    b->tok = calloc((size_t)b->vocab_size, sizeof *b->tok);
    b->tlen = calloc((size_t)b->vocab_size, sizeof *b->tlen);
    b->added = calloc((size_t)n_added + 1, sizeof *b->added);
    b->added_len = calloc((size_t)n_added + 1, sizeof *b->added_len);
    b->added_id = calloc((size_t)n_added + 1, sizeof *b->added_id);
    /* n_added counts the entries of b->added only once it exists (fsdp_bpe_free walks it). */
    if (b->added) b->n_added = n_added;
    b->cache = calloc(CACHE_SIZE, sizeof *b->cache);
    str_map vm = {0};
    vm.mask = pow2_above((size_t)cJSON_GetArraySize(vocab)) - 1;
    vm.slots = calloc(vm.mask + 1, sizeof *vm.slots);
    fsdp_status s = FSDP_OK;
    if (!b->tok || !b->tlen || !vm.slots || !b->added || !b->added_len || !b->added_id || !b->cache)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a vocabulary of %d", b->vocab_size);
    if (s == FSDP_OK) s = load_vocab(b, &vm, vocab, path);
    if (s == FSDP_OK && b->ignore_merges) s = bytes_map(b);
    if (s == FSDP_OK) s = load_added(b, added, path);
    if (s == FSDP_OK) s = build_trie(b);
    if (s == FSDP_OK) s = load_merges(b, &vm, merges, path);
    free(vm.slots);
    return s;
}

fsdp_status fsdp_bpe_load(fsdp_bpe **out, const char *path) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    FSDP_TRY(fsdp_io_read_file(path, &text, &len));
    cJSON *j = NULL;
    fsdp_status ps = fsdp_json_parse(text, len, path, &j);
    fsdp_mem_free(text);
    FSDP_TRY(ps);
    fsdp_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        cJSON_Delete(j);
        return FSDP_ERR(FSDP_ENOMEM, "no memory for a tokenizer");
    }
    const cJSON *model = NULL;
    fsdp_status s = check_settings(b, j, path, &model);
    if (s == FSDP_OK) {
        const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
        const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
        const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
        if (!cJSON_IsObject(vocab) || !vocab->child)
            s = fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"vocab\" is missing or empty", path);
        else if (!cJSON_IsArray(merges))
            s = fsdp_set_error(FSDP_EFORMAT, "%s: \"model\".\"merges\" is missing", path);
        else if (added && !cJSON_IsArray(added))
            s = fsdp_set_error(FSDP_EFORMAT, "%s: \"added_tokens\" is not an array", path);
        else
            s = build(b, vocab, merges, added, path);
    }
    cJSON_Delete(j);
    if (s != FSDP_OK) {
        fsdp_bpe_free(b);
        return s;
    }
    *out = b;
    return FSDP_OK;
}

/* ---------------------------------------------------------------- encoding */

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

enum { CL_OTHER = 0, CL_LETTER, CL_NUMBER, CL_SPACE, CL_END };

/* Unicode White_Space (what \s matches in the `tokenizers` regex). */
static int is_space(int32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static int cp_class(int32_t cp) {
    if (cp < 0) return CL_OTHER; /* an invalid byte */
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return CL_LETTER;
        if (cp >= '0' && cp <= '9') return CL_NUMBER;
        return is_space(cp) ? CL_SPACE : CL_OTHER;
    }
    if (is_space(cp)) return CL_SPACE;
    if (in_ranges(fsdp_uni_letter, sizeof fsdp_uni_letter / sizeof fsdp_uni_letter[0], (uint32_t)cp))
        return CL_LETTER;
    if (in_ranges(fsdp_uni_number, sizeof fsdp_uni_number / sizeof fsdp_uni_number[0], (uint32_t)cp))
        return CL_NUMBER;
    return CL_OTHER;
}

/* Class and length of the code point at s[i] (CL_END at the end). */
static int class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    if (i >= n) {
        *len = 0;
        return CL_END;
    }
    if (s[i] < 0x80) {
        *len = 1;
        return cp_class(s[i]);
    }
    return cp_class(utf8_next(s + i, n - i, len));
}

/* Length in bytes of the pre-token starting at s[i]. */
static size_t pretoken(const unsigned char *s, size_t n, size_t i) {
    size_t l0, l1;
    int c0 = class_at(s, n, i, &l0);
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 'm 'd 're 've 'll */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    size_t j = i;
    int run = c0;
    if (s[i] == ' ') {
        int c1 = class_at(s, n, i + 1, &l1);
        if (c1 != CL_SPACE && c1 != CL_END) { /* " ?X+" with the space */
            run = c1;
            j = i + 1;
        }
    }
    if (run != CL_SPACE) {
        size_t l;
        while (j < n && class_at(s, n, j, &l) == run)
            j += l;
        return j - i;
    }
    /* \s+(?!\S) then \s+: a run of white space, less its last character when a non-space follows. */
    size_t last = i, l;
    while (j < n && class_at(s, n, j, &l) == CL_SPACE) {
        last = j;
        j += l;
    }
    if (j < n && last > i) return last - i;
    return j - i;
}

static int is_crlf(unsigned char c) { return c == '\r' || c == '\n'; }

/* Length of the pre-token at s[i] under Llama 3's Split pattern (LLAMA3_PATTERN; maxdig 3) or Qwen2's
 * (maxdig 1), its alternatives tried in order as the regex does:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,maxdig} | ' '?[^\s\p{L}\p{N}]+[\r\n]*
 *   | \s*[\r\n]+ | \s+(?!\S) | \s+                                                                   */
static size_t split_llama3(const unsigned char *s, size_t n, size_t i, int maxdig) {
    size_t l0, l1, l, j;
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1] | 0x20, c = i + 2 < n ? s[i + 2] | 0x20 : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l')) return 3;
    }
    int c0 = class_at(s, n, i, &l0);
    if (c0 == CL_LETTER || (c0 != CL_NUMBER && !is_crlf(s[i]) && class_at(s, n, i + l0, &l1) == CL_LETTER)) {
        j = c0 == CL_LETTER ? i : i + l0;
        while (j < n && class_at(s, n, j, &l) == CL_LETTER)
            j += l;
        return j - i;
    }
    if (c0 == CL_NUMBER) {
        j = i;
        for (int d = 0; d < maxdig && j < n && class_at(s, n, j, &l) == CL_NUMBER; d++)
            j += l;
        return j - i;
    }
    j = s[i] == ' ' && class_at(s, n, i + 1, &l1) == CL_OTHER ? i + 1 : i;
    if (class_at(s, n, j, &l) == CL_OTHER) {
        while (j < n && class_at(s, n, j, &l) == CL_OTHER)
            j += l;
        while (j < n && is_crlf(s[j]))
            j++;
        return j - i;
    }
    /* white space: the run [i, j); through its last CR/LF if it has one; else less its last character
     * when a non-space follows (and the run is longer than that character) */
    size_t last_nl = 0, last = i;
    int nl = 0;
    for (j = i; j < n && class_at(s, n, j, &l) == CL_SPACE; j += l) {
        if (is_crlf(s[j])) last_nl = j, nl = 1;
        last = j;
    }
    if (nl) return last_nl + 1 - i;
    if (j < n && last > i) return last - i;
    return j - i;
}

static int is_numeric_rust(const unsigned char *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return s[i] >= '0' && s[i] <= '9';
    }
    int32_t cp = utf8_next(s + i, n - i, len);
    return cp >= 0 && in_ranges(fsdp_uni_number_rust,
                                sizeof fsdp_uni_number_rust / sizeof fsdp_uni_number_rust[0], (uint32_t)cp);
}

/* The Digits pre-tokenizer (Rust's char::is_numeric): each number alone (individual) or runs of numbers,
 * and the runs of other characters between them. */
static size_t split_digits(const unsigned char *s, size_t n, size_t i, int individual) {
    size_t l, j = i;
    int num = is_numeric_rust(s, n, i, &l);
    if (num && individual) return l;
    while (j < n && is_numeric_rust(s, n, j, &l) == num)
        j += l;
    return j - i;
}

/* ---------------------------------------------------------------- NFC */

static int ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    const uint32_t(*r)[3] = fsdp_uni_ccc;
    size_t lo = 0, hi = sizeof fsdp_uni_ccc / sizeof fsdp_uni_ccc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return (int)r[mid][2];
    }
    return 0;
}

enum {
    H_SBASE = 0xAC00,
    H_LBASE = 0x1100,
    H_VBASE = 0x1161,
    H_TBASE = 0x11A7,
    H_LCOUNT = 19,
    H_VCOUNT = 21,
    H_TCOUNT = 28,
    H_NCOUNT = 588,
    H_SCOUNT = 11172
};
#define NFC_RAW                                                                                              \
    0x110000u /* + byte: an invalid UTF-8 byte kept as it is (a starter that composes with nothing) */

/* The full canonical decomposition of cp appended at d[*k] (room for 4). */
static void decompose(uint32_t cp, uint32_t *d, size_t *k) {
    if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) {
        uint32_t si = cp - H_SBASE;
        d[(*k)++] = H_LBASE + si / H_NCOUNT;
        d[(*k)++] = H_VBASE + (si % H_NCOUNT) / H_TCOUNT;
        if (si % H_TCOUNT) d[(*k)++] = H_TBASE + si % H_TCOUNT;
        return;
    }
    if (cp >= 0xC0 && cp < NFC_RAW) {
        size_t lo = 0, hi = sizeof fsdp_uni_decomp / sizeof fsdp_uni_decomp[0];
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (fsdp_uni_decomp[mid][0] < cp)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < sizeof fsdp_uni_decomp / sizeof fsdp_uni_decomp[0] && fsdp_uni_decomp[lo][0] == cp) {
            for (uint32_t t = 0; t < fsdp_uni_decomp[lo][2]; t++)
                d[(*k)++] = fsdp_uni_decomp_pool[fsdp_uni_decomp[lo][1] + t];
            return;
        }
    }
    d[(*k)++] = cp;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
        return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
    if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
        b < H_TBASE + H_TCOUNT)
        return a + (b - H_TBASE);
    size_t lo = 0, hi = sizeof fsdp_uni_compose / sizeof fsdp_uni_compose[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = fsdp_uni_compose[mid];
        if (e[0] < a || (e[0] == a && e[1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < sizeof fsdp_uni_compose / sizeof fsdp_uni_compose[0] && fsdp_uni_compose[lo][0] == a &&
        fsdp_uni_compose[lo][1] == b)
        return fsdp_uni_compose[lo][2];
    return 0;
}

/* NFC of s[0..n) into b->norm (*out, *n_out bytes; at most 3n: Unicode's bound for NFC in UTF-8).
 * Decompose, order the marks canonically, recompose (UAX #15's algorithm); invalid bytes pass through. */
static fsdp_status nfc(fsdp_bpe *b, const unsigned char *s, size_t n, const unsigned char **out,
                       size_t *n_out) {
    size_t need = 4 * n + 4;
    if (need > b->cap_norm) {
        uint32_t *cp = realloc(b->norm_cp, need * sizeof *cp);
        if (cp) b->norm_cp = cp;
        unsigned char *t = realloc(b->norm, need);
        if (t) b->norm = t;
        if (!cp || !t) return FSDP_ERR(FSDP_ENOMEM, "no memory to normalize %zu bytes", n);
        b->cap_norm = need;
    }
    uint32_t *d = b->norm_cp;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = utf8_next(s + i, n - i, &l);
        size_t at = k;
        decompose(cp < 0 ? NFC_RAW + s[i] : (uint32_t)cp, d, &k);
        /* canonical order: insert each new mark behind the marks of a higher class before it */
        for (size_t q = at; q < k; q++) {
            int c = ccc_of(d[q]);
            if (!c) continue;
            for (size_t r = q; r > 0 && ccc_of(d[r - 1]) > c; r--) {
                uint32_t t = d[r];
                d[r] = d[r - 1], d[r - 1] = t;
            }
        }
        i += l;
    }
    if (k) {
        size_t starter = 0, w = 1;
        int last = ccc_of(d[0]) ? 256 : 0;
        for (size_t r = 1; r < k; r++) {
            uint32_t ch = d[r], comp;
            int c = ccc_of(ch);
            if (d[starter] < NFC_RAW && ch < NFC_RAW && (last < c || last == 0) &&
                (comp = compose(d[starter], ch))) {
                d[starter] = comp;
                continue;
            }
            if (c == 0) starter = w;
            last = c;
            d[w++] = ch;
        }
        k = w;
    }
    unsigned char *t = b->norm;
    size_t m = 0;
    for (size_t q = 0; q < k; q++) {
        uint32_t c = d[q];
        if (c >= NFC_RAW)
            t[m++] = (unsigned char)(c - NFC_RAW);
        else if (c < 0x80)
            t[m++] = (unsigned char)c;
        else if (c < 0x800)
            t[m++] = (unsigned char)(0xC0 | c >> 6), t[m++] = (unsigned char)(0x80 | (c & 0x3F));
        else if (c < 0x10000)
            t[m++] = (unsigned char)(0xE0 | c >> 12), t[m++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)),
            t[m++] = (unsigned char)(0x80 | (c & 0x3F));
        else
            t[m++] = (unsigned char)(0xF0 | c >> 18), t[m++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F)),
            t[m++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)), t[m++] = (unsigned char)(0x80 | (c & 0x3F));
    }
    *out = t;
    *n_out = m;
    return FSDP_OK;
}

static fsdp_status grow_scratch(fsdp_bpe *b, size_t n) {
    if (n > b->cap_sym) {
        size_t cap = n < 256 ? 256 : n * 2;
        int32_t *sy = realloc(b->sym, cap * sizeof *sy);
        if (sy) b->sym = sy;
        int32_t *pv = realloc(b->prev, cap * sizeof *pv);
        if (pv) b->prev = pv;
        int32_t *nx = realloc(b->next, cap * sizeof *nx);
        if (nx) b->next = nx;
        if (!sy || !pv || !nx) return FSDP_ERR(FSDP_ENOMEM, "no memory for a word of %zu bytes", n);
        b->cap_sym = cap;
    }
    return FSDP_OK;
}

/* (rank, pos) order of the merge queue: lowest rank first, leftmost among equal ranks (`tokenizers`). */
static int cand_less(const merge_cand *x, const merge_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static fsdp_status heap_push(fsdp_bpe *b, size_t *n, merge_cand c) {
    if (*n == b->cap_heap) {
        size_t cap = b->cap_heap ? 2 * b->cap_heap : 256;
        merge_cand *h = realloc(b->heap, cap * sizeof *h);
        if (!h) return FSDP_ERR(FSDP_ENOMEM, "no memory for %zu merge candidates", cap);
        b->heap = h, b->cap_heap = cap;
    }
    merge_cand *h = b->heap;
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
    return FSDP_OK;
}

static merge_cand heap_pop(merge_cand *h, size_t *n) {
    merge_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= *n) break;
        if (l + 1 < *n && cand_less(&h[l + 1], &h[l])) m = l + 1;
        if (!cand_less(&h[m], &last)) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static int32_t pair_rank(const fsdp_bpe *b, int32_t x, int32_t y, int32_t *id) {
    uint64_t key = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
    for (size_t i = fnv(&key, 8) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        const pair_slot *p = &b->pairs[i];
        if (p->key == key) {
            *id = p->id;
            return p->rank;
        }
        if (p->key == 0) return INT32_MAX;
    }
}

/* BPE of one pre-token's bytes; appends the ids to out, returns their number. */
static fsdp_status bpe_word(fsdp_bpe *b, const unsigned char *w, size_t n, int32_t *out, size_t *n_out) {
    uint64_t h = fnv(w, n);
    cache_slot *cs = n <= CACHE_WORD ? &b->cache[h & (CACHE_SIZE - 1)] : NULL;
    if (cs && cs->n && cs->hash == h && cs->len == n && !memcmp(cs->word, w, n)) {
        memcpy(out, cs->ids, cs->n * sizeof *out);
        *n_out = cs->n;
        return FSDP_OK;
    }
    *n_out = 0;
    if (n == 0) return FSDP_OK;
    if (b->ignore_merges) {
        int32_t whole = str_get(&b->bytes_id, (const char *)w, n);
        if (whole >= 0) {
            out[0] = whole;
            *n_out = 1;
            return FSDP_OK;
        }
    }
    FSDP_TRY(grow_scratch(b, n));
    /* Symbols i = 0..n-1 start as the bytes; a merge of i with next[i] keeps i and unlinks the right one.
     * Each merge pushes at most two candidates, so the work is O(n log n) in the word's length. */
    int32_t *sym = b->sym, *prev = b->prev, *next = b->next, id;
    size_t nh = 0, m = n;
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[w[i]];
        if (sym[i] < 0)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "the text holds the byte 0x%02X, which is not UTF-8 and has no token in this "
                "vocabulary",
                w[i]);
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = pair_rank(b, sym[i], sym[i + 1], &id);
        if (r != INT32_MAX) FSDP_TRY(heap_push(b, &nh, (merge_cand){r, (int32_t)i, sym[i], sym[i + 1]}));
    }
    while (nh) {
        merge_cand c = heap_pop(b->heap, &nh);
        int32_t p = c.pos, q = next[p];
        if (sym[p] != c.left || q < 0 || sym[q] != c.right) continue; /* stale: p or its neighbour merged */
        pair_rank(b, sym[p], sym[q], &id);
        sym[p] = id;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        m--;
        int32_t l = prev[p], r = next[p], rr;
        if (l >= 0 && (rr = pair_rank(b, sym[l], sym[p], &id)) != INT32_MAX)
            FSDP_TRY(heap_push(b, &nh, (merge_cand){rr, l, sym[l], sym[p]}));
        if (r >= 0 && (rr = pair_rank(b, sym[p], sym[r], &id)) != INT32_MAX)
            FSDP_TRY(heap_push(b, &nh, (merge_cand){rr, p, sym[p], sym[r]}));
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        out[k++] = sym[i];
    *n_out = m;
    if (cs) {
        cs->hash = h;
        cs->len = (uint8_t)n;
        cs->n = (uint8_t)m;
        memcpy(cs->word, w, n);
        memcpy(cs->ids, out, m * sizeof *out);
    }
    return FSDP_OK;
}

/* Pre-token split k (b->stage[k]) over s[0..n), each piece on to the next split, the last ones to BPE. */
static fsdp_status encode_stage(fsdp_bpe *b, int k, const unsigned char *s, size_t n, int32_t *out,
                                size_t *kk) {
    if (k == b->n_stage) {
        size_t got;
        FSDP_TRY(bpe_word(b, s, n, out + *kk, &got));
        *kk += got;
        return FSDP_OK;
    }
    for (size_t i = 0; i < n;) {
        size_t l;
        switch (b->stage[k]) {
        case STAGE_GPT2: l = pretoken(s, n, i); break;
        case STAGE_LLAMA3: l = split_llama3(s, n, i, 3); break;
        case STAGE_QWEN2: l = split_llama3(s, n, i, 1); break;
        case STAGE_DIGIT: l = split_digits(s, n, i, 1); break;
        default: l = split_digits(s, n, i, 0); break;
        }
        FSDP_TRY(encode_stage(b, k + 1, s + i, l, out, kk));
        i += l;
    }
    return FSDP_OK;
}

/* Text between added tokens: normalized (NFC, when the tokenizer has it), split, BPE. */
static fsdp_status encode_plain(fsdp_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *k) {
    if (b->nfc) {
        size_t i = 0;
        while (i < n && s[i] < 0x80)
            i++;
        if (i < n) FSDP_TRY(nfc(b, s, n, &s, &n)); /* ASCII is its own NFC */
    }
    return encode_stage(b, 0, s, n, out, k);
}

fsdp_status fsdp_bpe_encode(fsdp_bpe *b, const char *text, size_t n, int32_t *out, size_t *n_out) {
    if (!b || (!text && n) || !out || !n_out) return FSDP_ERR(FSDP_EINVAL, "fsdp_bpe_encode: NULL argument");
    const unsigned char *s = (const unsigned char *)text;
    size_t k = 0, pos = 0;
    while (pos < n) {
        /* The next added token: the earliest start, the longest among those starting there (`tokenizers`'
         * leftmost-longest), found by walking the trie from each position whose byte can start one. */
        size_t start = pos, len = 0;
        int bi = -1;
        for (; start < n; start++) {
            if (!b->first[s[start]]) continue;
            int32_t node = 0;
            for (size_t e = start; e < n && (node = trie_child(b, node, s[e])) >= 0; e++)
                if (b->term[node] >= 0) bi = b->term[node], len = e + 1 - start;
            if (bi >= 0) break;
        }
        size_t end = bi >= 0 ? start : n;
        FSDP_TRY(encode_plain(b, s + pos, end - pos, out, &k));
        if (bi < 0) break;
        out[k++] = b->added_id[bi];
        pos = end + len;
    }
    *n_out = k;
    return FSDP_OK;
}
