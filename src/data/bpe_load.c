/* bpe_load.c — tokenizer.json read and checked into the tokenizer's tables (bpe_impl.h): the model's
 * vocabulary, merges and added tokens, the pre-tokenizer and normalizer settings this implementation
 * reproduces (anything else refused by name), the byte-level alphabet, the trie of added tokens and
 * the merge-pair table. Encoding is bpe.c. */
#include "data/bpe_impl.h"

#include "io/io.h"
#include "io/json.h"

#include <cjson/cJSON.h>

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
    /* Files written by older `tokenizers` versions (the Hub's gpt2 tokenizer.json among them) give a BPE
     * model no "type": `tokenizers` takes an untyped model with "vocab" and "merges" as a BPE. */
    if (cJSON_GetObjectItemCaseSensitive(*model, "type") ||
        !cJSON_GetObjectItemCaseSensitive(*model, "merges"))
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
