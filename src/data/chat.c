/* chat.c — JSONL rows of chat or prompt/completion data for `prepare --jsonl` (chat.h): strict row
 * checks with FILE:LINE messages, the ChatML and Llama 3 renderings, and the loss mask of the
 * assistant's tokens. */
#include "data/chat.h"

#include "core/core.h"
#include "io/io.h"
#include "io/json.h"
#include "io/tokens.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const fsdp_chat_format_names[] = {"auto", "chatml", "llama3", NULL};

/* ---------------------------------------------------------------- row checks */

/* Offset of the first byte of s[0..n) that is not part of valid UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF), or n. */
static size_t utf8_bad(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 1, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3, cp = c & 0x07;
        } else {
            return i;
        }
        if (i + k >= n) return i; /* truncated sequence */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += k + 1;
    }
    return n;
}

/* Offset of a \u0000 escape in the JSON text s[0..n), or n: cJSON's strings end at a NUL, so it would
 * silently cut the string there. */
static size_t nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return i;
        i++; /* the escaped character: "\\u0000" is a backslash and text */
    }
    return n;
}

static const char *const role_names[] = {"system", "user", "assistant", NULL};
enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

static const char *json_kind(const cJSON *v) {
    return cJSON_IsString(v)   ? "a string"
           : cJSON_IsNumber(v) ? "a number"
           : cJSON_IsBool(v)   ? "a boolean"
           : cJSON_IsNull(v)   ? "null"
           : cJSON_IsArray(v)  ? "an array"
           : cJSON_IsObject(v) ? "an object"
                               : "something else";
}

/* The row's JSON object (*out, cJSON_Delete it): UTF-8, no NUL escape, valid JSON with nothing after
 * the value, no repeated key, an object. */
static fsdp_status row_parse(const char *line, size_t n, const char *where, cJSON **out) {
    *out = NULL;
    size_t bad = utf8_bad((const unsigned char *)line, n);
    if (bad < n)
        return fsdp_set_error(FSDP_EFORMAT, "%s: invalid UTF-8 at byte %zu of the line (byte 0x%02x)", where,
                              bad + 1, (unsigned char)line[bad]);
    if ((bad = nul_escape(line, n)) < n)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: a NUL character (\\u0000) at byte %zu: not allowed in a row's text", where,
                              bad + 1);
    char *buf = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&buf, n + 1, FSDP_MEM_OTHER));
    memcpy(buf, line, n);
    buf[n] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, n + 1, &end, 1); /* 1: nothing but white space after it */
    fsdp_status s = FSDP_OK;
    if (!j)
        s = fsdp_set_error(FSDP_EFORMAT, "%s: not valid JSON (near byte %ld of the line)", where,
                           end ? (long)(end - buf) + 1 : -1L);
    fsdp_mem_free(buf);
    if (s == FSDP_OK) s = fsdp_json_check_unique(j, where);
    if (s == FSDP_OK && !cJSON_IsObject(j))
        s = fsdp_set_error(FSDP_EFORMAT, "%s: a row must be a JSON object, not %s", where, json_kind(j));
    if (s != FSDP_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return FSDP_OK;
}

/* One turn of a row. */
typedef struct {
    int role;
    const char *content;
} turn;

/* Calls fn for every turn of the object j, in order, after checking all of them: 0 turns were visited
 * when it fails. *text_bytes: the contents' bytes. */
typedef fsdp_status (*turn_fn)(void *ctx, turn t);
static fsdp_status row_turns(const cJSON *j, const char *where, size_t *text_bytes, turn_fn fn, void *ctx) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages"),
                *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt"),
                *completion = cJSON_GetObjectItemCaseSensitive(j, "completion");
    *text_bytes = 0;
    if (msgs && (prompt || completion))
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: a row has \"messages\" or \"prompt\" and \"completion\", not both", where);
    if (!msgs) {
        if (!prompt || !completion)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: missing key \"%s\": a row needs \"messages\" or \"prompt\" and \"completion\"", where,
                !prompt && !completion ? "messages"
                : !prompt              ? "prompt"
                                       : "completion");
        if (!cJSON_IsString(prompt) || !cJSON_IsString(completion))
            return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" must be a string, not %s", where,
                                  cJSON_IsString(prompt) ? "completion" : "prompt",
                                  json_kind(cJSON_IsString(prompt) ? completion : prompt));
        *text_bytes = strlen(prompt->valuestring) + strlen(completion->valuestring);
        if (!fn) return FSDP_OK;
        FSDP_TRY(fn(ctx, (turn){ROLE_USER, prompt->valuestring}));
        return fn(ctx, (turn){ROLE_ASSISTANT, completion->valuestring});
    }
    if (!cJSON_IsArray(msgs))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"messages\" must be an array, not %s", where,
                              json_kind(msgs));
    if (!msgs->child) return fsdp_set_error(FSDP_EFORMAT, "%s: \"messages\" is empty", where);
    int k = 0, assistant = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, k++) {
        if (!cJSON_IsObject(m))
            return fsdp_set_error(FSDP_EFORMAT, "%s: messages[%d] must be an object, not %s", where, k,
                                  json_kind(m));
        for (const cJSON *f = m->child; f; f = f->next)
            if (strcmp(f->string, "role") != 0 && strcmp(f->string, "content") != 0)
                return fsdp_set_error(
                    FSDP_EFORMAT,
                    "%s: messages[%d] has the key \"%.60s\": a message has only \"role\" and "
                    "\"content\" (tool calls, names and the like are not rendered)",
                    where, k, f->string);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!role || !content)
            return fsdp_set_error(FSDP_EFORMAT, "%s: messages[%d] has no \"%s\"", where, k,
                                  role ? "content" : "role");
        if (!cJSON_IsString(role) || !cJSON_IsString(content))
            return fsdp_set_error(FSDP_EFORMAT, "%s: messages[%d]'s \"%s\" must be a string, not %s", where,
                                  k, cJSON_IsString(role) ? "content" : "role",
                                  json_kind(cJSON_IsString(role) ? content : role));
        int r = 0;
        while (role_names[r] && strcmp(role_names[r], role->valuestring) != 0)
            r++;
        if (!role_names[r])
            return fsdp_set_error(
                FSDP_EFORMAT, "%s: messages[%d] has the unknown role \"%.40s\" (system, user or assistant)",
                where, k, role->valuestring);
        assistant |= r == ROLE_ASSISTANT;
        *text_bytes += strlen(content->valuestring);
    }
    if (!assistant)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: no assistant turn: a row needs one to have tokens to train on", where);
    if (!fn) return FSDP_OK;
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        int r = 0;
        while (strcmp(role_names[r], role) != 0)
            r++;
        FSDP_TRY(fn(ctx, (turn){r, cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring}));
    }
    return FSDP_OK;
}

fsdp_status fsdp_chat_check_row(const char *line, size_t n, const char *file, uint64_t lineno,
                                size_t *text_bytes) {
    char where[512];
    snprintf(where, sizeof where, "%s:%llu", file, (unsigned long long)lineno);
    cJSON *j = NULL;
    FSDP_TRY(row_parse(line, n, where, &j));
    fsdp_status s = row_turns(j, where, text_bytes, NULL, NULL);
    cJSON_Delete(j);
    return s;
}

/* ---------------------------------------------------------------- formats */

/* The id of text when the tokenizer encodes it as one token (an added token), else -1. */
static int32_t single_id(fsdp_bpe *b, const char *text) {
    int32_t ids[64];
    size_t n = 0, len = strlen(text);
    if (fsdp_bpe_max_ids(b, len) > 64 || fsdp_bpe_encode(b, text, len, ids, &n) != FSDP_OK || n != 1)
        return -1;
    return ids[0];
}

static const char *const chatml_tokens[] = {"<|im_start|>", "<|im_end|>", NULL};
static const char *const llama3_tokens[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                            "<|eot_id|>", NULL};

/* The first token of the format's list that the tokenizer lacks as one token, or NULL. */
static const char *format_missing(fsdp_bpe *b, fsdp_chat_format f) {
    for (const char *const *t = f == FSDP_CHAT_CHATML ? chatml_tokens : llama3_tokens; *t; t++)
        if (single_id(b, *t) < 0) return *t;
    return NULL;
}

/* The chat_template of the tokenizer_config.json beside tokenizer_path: *fmt CHATML or LLAMA3 by the
 * special tokens it writes, AUTO when there is no such file or template; FSDP_EFORMAT for a template of
 * another format. */
static fsdp_status template_format(const char *tokenizer_path, fsdp_chat_format *fmt) {
    *fmt = FSDP_CHAT_AUTO;
    char dir[4096];
    fsdp_path_dirname(tokenizer_path, dir, sizeof dir);
    char *path = fsdp_strdupf("%s/tokenizer_config.json", dir), *text = NULL;
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    size_t len = 0;
    cJSON *j = NULL;
    if (access(path, F_OK) != 0) goto done;
    s = fsdp_io_read_file(path, &text, &len);
    if (s == FSDP_OK) s = fsdp_json_parse(text, len, path, &j);
    if (s != FSDP_OK) goto done;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsArray(t)) { /* [{"name": "default", "template": ...}, ...]: the default one, else the first */
        const cJSON *pick = NULL;
        for (const cJSON *e = t->child; e; e = e->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (!pick || (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))) pick = e;
        }
        t = pick ? cJSON_GetObjectItemCaseSensitive(pick, "template") : NULL;
    }
    if (!t || cJSON_IsNull(t)) goto done;
    if (!cJSON_IsString(t)) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: \"chat_template\" must be a string or a list of named templates", path);
        goto done;
    }
    if (strstr(t->valuestring, "<|im_start|>"))
        *fmt = FSDP_CHAT_CHATML;
    else if (strstr(t->valuestring, "<|start_header_id|>"))
        *fmt = FSDP_CHAT_LLAMA3;
    else
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: its chat_template is neither ChatML (<|im_start|>) nor Llama 3's "
                           "(<|start_header_id|>), the formats prepare --jsonl renders; pass --chat-format "
                           "chatml or llama3 to choose one",
                           path);
done:
    cJSON_Delete(j);
    fsdp_mem_free(text);
    free(path);
    return s;
}

fsdp_status fsdp_chat_init(fsdp_chat *c, fsdp_bpe *bpe, const char *tokenizer_path, fsdp_chat_format want) {
    memset(c, 0, sizeof *c);
    c->bpe = bpe;
    fsdp_chat_format f = want;
    if (f == FSDP_CHAT_AUTO) FSDP_TRY(template_format(tokenizer_path, &f));
    if (f == FSDP_CHAT_AUTO) {
        const int chatml = !format_missing(bpe, FSDP_CHAT_CHATML),
                  llama3 = !format_missing(bpe, FSDP_CHAT_LLAMA3);
        if (chatml && llama3)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s has the special tokens of ChatML and of Llama 3 and no chat_template "
                                  "beside it: pass --chat-format chatml or llama3",
                                  tokenizer_path);
        if (!chatml && !llama3)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s is not a chat tokenizer prepare --jsonl knows: it has neither ChatML's <|im_start|> and "
                "<|im_end|> (Qwen2, SmolLM2) nor Llama 3's <|start_header_id|>, <|end_header_id|> and "
                "<|eot_id|> as tokens, and no chat_template in a tokenizer_config.json beside it",
                tokenizer_path);
        f = chatml ? FSDP_CHAT_CHATML : FSDP_CHAT_LLAMA3;
    }
    const char *miss = format_missing(bpe, f);
    if (miss)
        return fsdp_set_error(FSDP_EFORMAT,
                              "%s: the %s chat format needs %s as one token (an added token), and this "
                              "tokenizer encodes it otherwise",
                              tokenizer_path, fsdp_chat_format_names[f], miss);
    c->format = f;
    if (f == FSDP_CHAT_CHATML) {
        c->bos = -1;
        c->open = single_id(bpe, "<|im_start|>");
        c->close = c->eot = single_id(bpe, "<|im_end|>");
        c->eot_text = "<|im_end|>";
    } else {
        c->bos = single_id(bpe, "<|begin_of_text|>");
        c->open = single_id(bpe, "<|start_header_id|>");
        c->close = single_id(bpe, "<|end_header_id|>");
        c->eot = single_id(bpe, "<|eot_id|>");
        c->eot_text = "<|eot_id|>";
    }
    return FSDP_OK;
}

void fsdp_chat_free(fsdp_chat *c) {
    fsdp_mem_free(c->ids);
    fsdp_mem_free(c->text);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- rendering */

typedef struct {
    fsdp_chat *c;
    int32_t **ids;
    uint8_t **flags;
    size_t *cap, *len;
    int first; /* the next token is the row's first */
} render_ctx;

/* Room for need tokens in both arrays (*cap: what both hold). */
static fsdp_status grow(render_ctx *r, size_t need) {
    if (need <= *r->cap) return FSDP_OK;
    size_t n = *r->cap ? *r->cap : 4096;
    while (n < need)
        n *= 2;
    int32_t *gi = realloc(*r->ids, n * sizeof(int32_t));
    if (gi) *r->ids = gi;
    uint8_t *gf = gi ? realloc(*r->flags, n) : NULL;
    if (gf) *r->flags = gf;
    if (!gi || !gf) return FSDP_ERR(FSDP_ENOMEM, "no memory for %zu tokens of chat data", n);
    *r->cap = n;
    return FSDP_OK;
}

/* Appends ids[0..n) with flags (loss from index loss_from on); the row's first token gets FSDP_MASK_DOC. */
static fsdp_status put(render_ctx *r, const int32_t *ids, size_t n, size_t loss_from) {
    FSDP_TRY(grow(r, *r->len + n));
    for (size_t i = 0; i < n; i++) {
        (*r->ids)[*r->len] = ids[i];
        (*r->flags)[*r->len] =
            (uint8_t)((i >= loss_from ? FSDP_MASK_LOSS : 0) | (r->first ? FSDP_MASK_DOC : 0));
        r->first = 0;
        (*r->len)++;
    }
    return FSDP_OK;
}

static fsdp_status put_one(render_ctx *r, int32_t id, int loss) { return put(r, &id, 1, loss ? 0 : 1); }

/* Encodes text[0..n) into c->ids; *k its ids. */
static fsdp_status encode(fsdp_chat *c, const char *text, size_t n, size_t *k) {
    size_t need = fsdp_bpe_max_ids(c->bpe, n) + 1;
    if (need > c->ids_cap) {
        fsdp_mem_free(c->ids);
        c->ids = NULL;
        c->ids_cap = 0;
        FSDP_TRY(fsdp_mem_alloc((void **)&c->ids, need * sizeof(int32_t), FSDP_MEM_OTHER));
        c->ids_cap = need;
    }
    return fsdp_bpe_encode(c->bpe, text, n, c->ids, k);
}

/* The piece of text head + content between two special tokens: its ids, with loss on the content's
 * (from the first id where the encoding of head + content leaves that of head alone) when loss. */
static fsdp_status put_segment(render_ctx *r, const char *head, const char *content, size_t cn, int loss) {
    fsdp_chat *c = r->c;
    size_t hn = strlen(head), k = 0;
    int32_t hid[64];
    size_t hk = 0;
    if (fsdp_bpe_max_ids(c->bpe, hn) > 64) return FSDP_ERR(FSDP_EINVAL, "chat header too long");
    FSDP_TRY(fsdp_bpe_encode(c->bpe, head, hn, hid, &hk));
    if (hn + cn + 1 > c->text_cap) {
        fsdp_mem_free(c->text);
        c->text = NULL;
        c->text_cap = 0;
        FSDP_TRY(fsdp_mem_alloc((void **)&c->text, hn + cn + 1, FSDP_MEM_OTHER));
        c->text_cap = hn + cn + 1;
    }
    memcpy(c->text, head, hn);
    memcpy(c->text + hn, content, cn);
    FSDP_TRY(encode(c, c->text, hn + cn, &k));
    size_t from = 0;
    while (from < k && from < hk && c->ids[from] == hid[from])
        from++;
    return put(r, c->ids, k, loss ? from : k);
}

/* Python's str.isspace() for the code point that starts at s (length *len set), as Jinja's trim uses. */
static int space_at(const unsigned char *s, size_t n, size_t *len) {
    *len = 1;
    if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x1F)) return 1;
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return *len = 2, 1;
    if (n >= 3) {
        unsigned cp = ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        if ((s[0] & 0xF0) == 0xE0 && (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                                      cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000))
            return *len = 3, 1;
    }
    return 0;
}

/* content without the white space at its ends: [*b, *b + *n). */
static void trim(const char *content, const char **b, size_t *n) {
    const unsigned char *s = (const unsigned char *)content, *e = s + strlen(content);
    size_t len;
    while (s < e && space_at(s, (size_t)(e - s), &len))
        s += len;
    for (int moved = 1; moved && e > s;) {
        moved = 0;
        for (size_t back = 1; back <= 3 && back <= (size_t)(e - s); back++)
            if (space_at(e - back, back, &len) && len == back) {
                e -= back;
                moved = 1;
                break;
            }
    }
    *b = (const char *)s;
    *n = (size_t)(e - s);
}

static fsdp_status render_turn(void *ctx, turn t) {
    render_ctx *r = ctx;
    fsdp_chat *c = r->c;
    const int loss = t.role == ROLE_ASSISTANT;
    const char *role = role_names[t.role];
    if (c->format == FSDP_CHAT_CHATML) {
        char head[32];
        snprintf(head, sizeof head, "%s\n", role);
        FSDP_TRY(put_one(r, c->open, 0));
        FSDP_TRY(put_segment(r, head, t.content, strlen(t.content), loss));
        FSDP_TRY(put_one(r, c->eot, loss));
        return put_segment(r, "\n", "", 0, 0);
    }
    const char *body;
    size_t bn;
    trim(t.content, &body, &bn);
    FSDP_TRY(put_one(r, c->open, 0));
    FSDP_TRY(put_segment(r, role, "", 0, 0));
    FSDP_TRY(put_one(r, c->close, 0));
    FSDP_TRY(put_segment(r, "\n\n", body, bn, loss));
    return put_one(r, c->eot, loss);
}

fsdp_status fsdp_chat_render_row(fsdp_chat *c, const char *line, size_t n, const char *file, uint64_t lineno,
                                 int32_t **ids, uint8_t **flags, size_t *cap, size_t *len) {
    char where[512];
    snprintf(where, sizeof where, "%s:%llu", file, (unsigned long long)lineno);
    cJSON *j = NULL;
    FSDP_TRY(row_parse(line, n, where, &j));
    render_ctx r = {c, ids, flags, cap, len, 1};
    size_t bytes = 0;
    fsdp_status s = c->bos >= 0 ? put_one(&r, c->bos, 0) : FSDP_OK;
    if (s == FSDP_OK) s = row_turns(j, where, &bytes, render_turn, &r);
    cJSON_Delete(j);
    return s;
}
