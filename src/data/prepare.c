/* prepare.c — `fsdp-train prepare`: text files (byte-level or a tokenizer.json's BPE) or JSONL chat rows
 * into token files in llm.c's layout with their loss masks, meta.json and the tokenizer's files, written
 * as one folder. */
#include "data/data.h"

#include "core/core.h"
#include "data/bpe.h"
#include "data/chat.h"
#include "io/io.h"
#include "io/json.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- prepare */

/* Calls fn for every document of text[0..n): with sep, documents are the runs of lines between
 * lines equal to sep (a trailing '\r' ignored); empty documents are skipped. */
typedef void (*doc_fn)(void *ctx, const char *p, size_t n);
static void for_each_doc(const char *text, size_t n, const char *sep, doc_fn fn, void *ctx) {
    if (!sep) {
        if (n) fn(ctx, text, n);
        return;
    }
    size_t seplen = strlen(sep), doc = 0, i = 0;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n; /* line is [i, end) */
        size_t len = end - i;
        if (len > 0 && text[end - 1] == '\r') len--;
        if (len == seplen && memcmp(text + i, sep, seplen) == 0) {
            if (i > doc) fn(ctx, text + doc, i - doc);
            doc = nl ? end + 1 : n;
        }
        i = nl ? end + 1 : n;
    }
    if (n > doc) fn(ctx, text + doc, n - doc);
}

typedef struct {
    /* pass 1 */
    uint64_t n_docs, n_tokens;
    size_t max_doc; /* bytes of the longest document */
    /* lower bounds of the tokens of train.bin, val.bin and both (prep_limit) */
    uint64_t lb_train, lb_val, lb_all;
    uint64_t bytes_per_token; /* the most bytes of input one token can stand for */
    /* the BPE (NULL: bytes), its end-of-text id, one document's ids, the first error */
    fsdp_bpe *bpe;
    int eot;
    int32_t *doc;
    fsdp_status err;
    double encode_s;
    uint64_t encoded; /* bytes of text the BPE encoded */
    /* pass 2 */
    double f;
    uint64_t doc_i, total_docs, single_split; /* single_split: token split index for one document */
    void *train, *val;                        /* width bytes per token: uint16 or uint32 (io/tokens.h) */
    int width;
    uint64_t nt, nv;
    /* jsonl: the rows' tokens and flags (realloc'd; narrowed to width in place before writing) */
    const char *jsonl; /* the file, named in row messages */
    fsdp_chat chat;
    int32_t *jt, *jv;
    uint8_t *ft, *fv;
    size_t jt_cap, jv_cap;
    uint64_t n_loss;
} prep_ctx;

static void put_tok(const prep_ctx *x, void *dst, uint64_t i, int32_t id) {
    if (x->width == 2)
        ((uint16_t *)dst)[i] = (uint16_t)id;
    else
        ((uint32_t *)dst)[i] = (uint32_t)id;
}

/* Document i goes to val when floor((i+1) f) > floor(i f): an exact share f, spread evenly. */
static int doc_to_val(double f, uint64_t i) { return floor((double)(i + 1) * f) > floor((double)i * f); }

/* Document i of n bytes in the lower bounds: its end-of-text token (or a row's first token) and at
 * least one token per bytes_per_token bytes. */
static void limit_add(prep_ctx *x, uint64_t i, uint64_t n) {
    uint64_t lb = 1 + (n + x->bytes_per_token - 1) / x->bytes_per_token;
    x->lb_all += lb;
    if (doc_to_val(x->f, i))
        x->lb_val += lb;
    else
        x->lb_train += lb;
}

/* A token file holds at most INT32_MAX tokens (its header counts them in an int32): refused before
 * tokenizing when the lower bounds already exceed it. n_docs: documents counted (one: split by tokens). */
static fsdp_status prep_limit(const prep_ctx *x, uint64_t n_docs, const char *what) {
    uint64_t t = x->lb_train, v = x->lb_val;
    if (n_docs == 1) {
        v = (uint64_t)llround((double)x->lb_all * x->f);
        t = x->lb_all - v;
    }
    if (t <= INT32_MAX && v <= INT32_MAX) return FSDP_OK;
    return fsdp_set_error(FSDP_EINVAL,
                          "prepare: %s give%s at least %llu tokens for %s, more than a token file holds "
                          "(%d: llm.c's header counts them in an int32); found before tokenizing: prepare "
                          "the input in parts, each into its own folder",
                          what, strchr(what, ' ') ? "" : "s", (unsigned long long)(t > INT32_MAX ? t : v),
                          t > INT32_MAX ? "train.bin" : "val.bin", INT32_MAX);
}

static void count_doc(void *c, const char *p, size_t n) {
    prep_ctx *x = c;
    (void)p;
    limit_add(x, x->n_docs, n);
    x->n_docs++;
    /* an upper bound with a BPE: every token covers at least one byte of the normalized text */
    x->n_tokens += 1 + (x->bpe ? fsdp_bpe_max_ids(x->bpe, n) : n);
    if (n > x->max_doc) x->max_doc = n;
}

static void emit_doc(void *c, const char *p, size_t n) {
    prep_ctx *x = c;
    uint64_t i = x->doc_i++;
    size_t nd = n;
    if (x->bpe) {
        if (x->err != FSDP_OK) return;
        double t0 = fsdp_time_s();
        x->err = fsdp_bpe_encode(x->bpe, p, n, x->doc, &nd);
        x->encode_s += fsdp_time_s() - t0;
        x->encoded += n;
        if (x->err != FSDP_OK) return;
    }
    /* token k of the document: end-of-text, then its bytes or BPE ids */
#define TOK(k) ((int32_t)((k) == 0 ? x->eot : x->bpe ? x->doc[(k)-1] : (uint8_t)p[(k)-1]))
    if (x->total_docs == 1) {
        uint64_t split = x->bpe ? (nd + 1) - (uint64_t)llround((double)(nd + 1) * x->f) : x->single_split;
        for (size_t k = 0; k <= nd; k++) {
            if (k < split)
                put_tok(x, x->train, x->nt++, TOK(k));
            else
                put_tok(x, x->val, x->nv++, TOK(k));
        }
        return;
    }
    int to_val = doc_to_val(x->f, i);
    void *dst = to_val ? x->val : x->train;
    uint64_t at = to_val ? x->nv : x->nt;
    for (size_t k = 0; k <= nd; k++)
        put_tok(x, dst, at + k, TOK(k));
#undef TOK
    if (to_val)
        x->nv += 1 + nd;
    else
        x->nt += 1 + nd;
}

/* The tokenizer of a prepare run: --tokenizer's BPE with its end-of-text id, or bytes (x->bpe NULL);
 * x->bytes_per_token for the limits. */
static fsdp_status prep_tokenizer(const fsdp_prepare_args *a, prep_ctx *x, int *vocab) {
    x->eot = FSDP_TOKEN_EOT;
    x->bytes_per_token = 1;
    *vocab = FSDP_BYTE_VOCAB;
    if (!a->tokenizer) return FSDP_OK;
    FSDP_TRY(fsdp_bpe_load(&x->bpe, a->tokenizer));
    x->eot = fsdp_bpe_eot(x->bpe);
    *vocab = fsdp_bpe_vocab_size(x->bpe);
    size_t longest = 1, len;
    for (int id = 0; id < *vocab; id++)
        if (fsdp_bpe_token_bytes(x->bpe, id, &len) && len > longest) longest = len;
    /* NFC can shorten text to a third (three Hangul jamo compose into one syllable) */
    x->bytes_per_token = longest * (fsdp_bpe_max_ids(x->bpe, 1) > 1 ? 3 : 1);
    if (x->eot < 0 && !a->jsonl)
        return fsdp_set_error(
            FSDP_EFORMAT, "%s: no \"<|endoftext|>\" token (\"added_tokens\"): documents need it as separator",
            a->tokenizer);
    return FSDP_OK;
}

/* Without --doc-sep every file is one document of its size: the limits are checked from the sizes
 * before a file is read. */
static fsdp_status prep_limit_sizes(const fsdp_prepare_args *a, prep_ctx *x) {
    if (a->doc_sep) return FSDP_OK;
    uint64_t docs = 0;
    for (int i = 0; i < a->n_texts; i++) {
        struct stat st;
        if (stat(a->texts[i], &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) continue;
        limit_add(x, docs++, (uint64_t)st.st_size);
    }
    fsdp_status s = prep_limit(x, docs, a->n_texts == 1 ? "--text" : "the --text files");
    x->lb_train = x->lb_val = x->lb_all = 0;
    return s;
}

/* Reads every input (texts[i], lens[i]), counts its documents (pass 1), then tokenizes them into
 * x->train / x->val (pass 2). */
static fsdp_status prep_tokenize(const fsdp_prepare_args *a, prep_ctx *x, char **texts, size_t *lens) {
    x->f = a->val_fraction;
    FSDP_TRY(prep_limit_sizes(a, x));
    for (int i = 0; i < a->n_texts; i++) {
        FSDP_TRY(fsdp_io_read_file(a->texts[i], &texts[i], &lens[i]));
        for_each_doc(texts[i], lens[i], a->doc_sep, count_doc, x);
    }
    if (x->n_tokens == 0) return fsdp_set_error(FSDP_EINVAL, "prepare: the input files hold no text");
    FSDP_TRY(prep_limit(x, x->n_docs, a->n_texts == 1 ? "--text" : "the --text files"));
    x->total_docs = x->n_docs;
    if (x->n_docs == 1) x->single_split = x->n_tokens - (uint64_t)llround((double)x->n_tokens * x->f);
    FSDP_TRY(fsdp_mem_alloc(&x->train, (size_t)x->width * x->n_tokens, FSDP_MEM_OTHER));
    FSDP_TRY(fsdp_mem_alloc(&x->val, (size_t)x->width * x->n_tokens, FSDP_MEM_OTHER));
    if (x->bpe)
        FSDP_TRY(
            fsdp_mem_alloc((void **)&x->doc, 4 * (fsdp_bpe_max_ids(x->bpe, x->max_doc) + 1), FSDP_MEM_OTHER));
    for (int i = 0; i < a->n_texts; i++)
        for_each_doc(texts[i], lens[i], a->doc_sep, emit_doc, x);
    if (x->err != FSDP_OK) return x->err;
    if (x->nt == 0)
        return fsdp_set_error(FSDP_EINVAL, "prepare: --val-fraction %g leaves no training tokens", x->f);
    return FSDP_OK;
}

/* Calls fn for every line of text[0..n) that holds more than white space (its 1-based number, without
 * the '\n' and a '\r' before it), until fn fails. */
typedef fsdp_status (*line_fn)(prep_ctx *x, const char *p, size_t n, uint64_t lineno, uint64_t row);
static fsdp_status for_each_row(prep_ctx *x, const char *text, size_t n, line_fn fn) {
    uint64_t lineno = 0, row = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n, len = end - i;
        lineno++;
        if (len > 0 && text[i + len - 1] == '\r') len--;
        size_t k = 0;
        while (k < len && (text[i + k] == ' ' || text[i + k] == '\t'))
            k++;
        if (k < len) FSDP_TRY(fn(x, text + i, len, lineno, row++));
        i = end + 1;
    }
    return FSDP_OK;
}

static fsdp_status check_row(prep_ctx *x, const char *p, size_t n, uint64_t lineno, uint64_t row) {
    size_t bytes = 0;
    FSDP_TRY(fsdp_chat_check_row(p, n, x->jsonl, lineno, &bytes));
    limit_add(x, row, bytes);
    x->n_docs++;
    return FSDP_OK;
}

static fsdp_status emit_row(prep_ctx *x, const char *p, size_t n, uint64_t lineno, uint64_t row) {
    int to_val = doc_to_val(x->f, row);
    size_t len = to_val ? x->nv : x->nt;
    double t0 = fsdp_time_s();
    fsdp_status s = fsdp_chat_render_row(&x->chat, p, n, x->jsonl, lineno, to_val ? &x->jv : &x->jt,
                                         to_val ? &x->fv : &x->ft, to_val ? &x->jv_cap : &x->jt_cap, &len);
    x->encode_s += fsdp_time_s() - t0;
    x->encoded += n;
    if (s != FSDP_OK) return s;
    uint8_t *fl = to_val ? x->fv : x->ft;
    for (size_t k = to_val ? x->nv : x->nt; k < len; k++)
        x->n_loss += fl[k] & FSDP_MASK_LOSS;
    *(to_val ? &x->nv : &x->nt) = len;
    return FSDP_OK;
}

/* --jsonl: every row checked (pass 1: nothing is tokenized before all are valid and the limits hold),
 * then rendered into x->jt / x->jv with their flags, narrowed to x->width as x->train / x->val. */
static fsdp_status prep_jsonl(const fsdp_prepare_args *a, prep_ctx *x, char **text, size_t *len) {
    x->f = a->val_fraction;
    x->jsonl = a->jsonl;
    FSDP_TRY(fsdp_chat_init(&x->chat, x->bpe, a->tokenizer, (fsdp_chat_format)a->chat_format));
    FSDP_TRY(fsdp_io_read_file(a->jsonl, text, len));
    FSDP_TRY(for_each_row(x, *text, *len, check_row));
    if (x->n_docs == 0) return fsdp_set_error(FSDP_EINVAL, "prepare: %s holds no rows", a->jsonl);
    x->lb_all = 0; /* rows are never split: lb_train and lb_val are the bounds */
    FSDP_TRY(prep_limit(x, 2, "--jsonl"));
    FSDP_TRY(for_each_row(x, *text, *len, emit_row));
    if (x->nt == 0)
        return fsdp_set_error(FSDP_EINVAL, "prepare: --val-fraction %g leaves no training rows", x->f);
    for (size_t i = 0; i < x->nt; i++) /* in place: element i of the narrow array lies at or before i */
        put_tok(x, x->jt, i, x->jt[i]);
    for (size_t i = 0; i < x->nv; i++)
        put_tok(x, x->jv, i, x->jv[i]);
    return FSDP_OK;
}

static const char *const tokenizer_companions[] = {"tokenizer_config.json", "special_tokens_map.json", NULL};

fsdp_status fsdp_data_copy_tokenizer(const char *src, const char *dst_dir, int *n_copied) {
    if (n_copied) *n_copied = 0;
    char *dst = fsdp_strdupf("%s/tokenizer.json", dst_dir);
    fsdp_status s = dst ? fsdp_io_copy_file(src, dst) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    free(dst);
    if (s != FSDP_OK) return s;
    if (n_copied) *n_copied = 1;
    const char *base = strrchr(src, '/');
    if (strcmp(base ? base + 1 : src, "tokenizer.json") != 0) return FSDP_OK; /* no folder of its own */
    char sdir[4096];
    fsdp_path_dirname(src, sdir, sizeof sdir);
    for (int i = 0; tokenizer_companions[i] && s == FSDP_OK; i++) {
        char *from = fsdp_strdupf("%s/%s", sdir, tokenizer_companions[i]);
        char *to = fsdp_strdupf("%s/%s", dst_dir, tokenizer_companions[i]);
        if (!from || !to)
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        else if (access(from, F_OK) == 0 && (s = fsdp_io_copy_file(from, to)) == FSDP_OK && n_copied)
            (*n_copied)++;
        free(from);
        free(to);
    }
    return s;
}

/* meta.json of the prepared folder, as text (caller frees), or NULL when out of memory. */
static char *prep_meta(const fsdp_prepare_args *a, const prep_ctx *x, int vocab) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "tokenizer", x->bpe ? "tokenizer.json" : "bytes");
    cJSON_AddNumberToObject(j, "vocab", vocab);
    if (x->eot >= 0) cJSON_AddNumberToObject(j, "eot", x->eot); /* a chat tokenizer may lack one */
    cJSON_AddNumberToObject(j, "documents", (double)x->n_docs);
    cJSON_AddNumberToObject(j, "train_tokens", (double)x->nt);
    cJSON_AddNumberToObject(j, "val_tokens", (double)x->nv);
    cJSON_AddNumberToObject(j, "val_fraction", x->f);
    if (a->jsonl) {
        const fsdp_chat *c = &x->chat;
        cJSON_AddStringToObject(j, "chat_format", fsdp_chat_format_names[c->format]);
        cJSON_AddNumberToObject(j, "end_of_turn", c->eot);
        cJSON_AddStringToObject(j, "end_of_turn_token", c->eot_text);
        cJSON_AddNumberToObject(j, "loss_tokens", (double)x->n_loss);
        cJSON_AddStringToObject(j, "mask", "train.mask, val.mask: bit 0 loss target, bit 1 document start");
        cJSON_AddStringToObject(j, "documents_are",
                                c->format == FSDP_CHAT_LLAMA3
                                    ? "JSONL rows, each beginning with <|begin_of_text|> (bit 1 set there)"
                                    : "JSONL rows, each beginning with <|im_start|> (bit 1 set there)");
        cJSON_AddStringToObject(j, "loss_on",
                                "the assistant turns' content and the end-of-turn token closing each");
    }
    cJSON *src = cJSON_AddArrayToObject(j, "sources");
    if (a->jsonl && src) cJSON_AddItemToArray(src, cJSON_CreateString(a->jsonl));
    for (int i = 0; src && !a->jsonl && i < a->n_texts; i++)
        cJSON_AddItemToArray(src, cJSON_CreateString(a->texts[i]));
    char *meta = cJSON_Print(j);
    cJSON_Delete(j);
    return meta;
}

/* The files prepare writes in its folder: an existing --out may hold these and nothing else (and the
 * temporaries its writers leave when killed: ".NAME.XXXXXX"), as its replacement removes them all. */
static const char *const prep_outputs[] = {"train.bin",
                                           "val.bin",
                                           "train.mask",
                                           "val.mask",
                                           "meta.json",
                                           "tokenizer.json",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json",
                                           NULL};

static int prep_output_name(const char *name, int *tokenizer) {
    const char *n = name[0] == '.' ? name + 1 : name;
    for (int i = 0; prep_outputs[i]; i++) {
        size_t k = strlen(prep_outputs[i]);
        if (strncmp(n, prep_outputs[i], k) == 0 && (n == name ? n[k] == '\0' : n[k] == '.')) {
            *tokenizer = i >= 5 && n == name;
            return 1;
        }
    }
    return 0;
}

/* An old folder's entry prepare replaces (fsdp_io_dir_stage): its files, and the tokenizer may be one
 * of the command's inputs (it is copied before the swap). */
static unsigned prep_own(const char *name, void *arg) {
    (void)arg;
    int tok = 0;
    if (!prep_output_name(name, &tok)) return 0;
    return FSDP_STAGE_OWN | (tok ? FSDP_STAGE_MAY_BE_INPUT : 0u);
}

/* The files of the folder, written into dir (the new folder). */
static fsdp_status prep_write_files(const fsdp_prepare_args *a, const prep_ctx *x, int vocab,
                                    const char *dir) {
    char *train_path = fsdp_strdupf("%s/train.bin", dir), *val_path = fsdp_strdupf("%s/val.bin", dir),
         *tm_path = fsdp_strdupf("%s/train.mask", dir), *vm_path = fsdp_strdupf("%s/val.mask", dir),
         *meta_path = fsdp_strdupf("%s/meta.json", dir), *meta = NULL;
    fsdp_status s = train_path && val_path && tm_path && vm_path && meta_path
                        ? FSDP_OK
                        : FSDP_ERR(FSDP_ENOMEM, "no memory for paths");
    const void *train = a->jsonl ? (const void *)x->jt : x->train,
               *val = a->jsonl ? (const void *)x->jv : x->val;
    if (s == FSDP_OK) s = fsdp_tokens_write(train_path, train, x->nt, x->width);
    if (s == FSDP_OK) s = fsdp_tokens_write(val_path, val, x->nv, x->width);
    if (s == FSDP_OK && a->jsonl) s = fsdp_mask_write(tm_path, x->ft, x->nt);
    if (s == FSDP_OK && a->jsonl) s = fsdp_mask_write(vm_path, x->fv, x->nv);
    if (s == FSDP_OK && x->bpe) s = fsdp_data_copy_tokenizer(a->tokenizer, dir, NULL);
    if (s == FSDP_OK && (meta = prep_meta(a, x, vocab)) == NULL)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for meta.json");
    if (s == FSDP_OK) s = fsdp_io_write_file_atomic(meta_path, meta, strlen(meta), 0);
    free(meta);
    free(meta_path);
    free(vm_path);
    free(tm_path);
    free(val_path);
    free(train_path);
    return s;
}

/* OUT as one unit: the files go into a new folder beside it, which then takes its place (data.h). */
static fsdp_status prep_write(const fsdp_prepare_args *a, const prep_ctx *x, int vocab) {
    fsdp_dir_stage st;
    fsdp_status s = fsdp_io_dir_stage(&st, a->out_dir, "prepare", "--out", "prepare", prep_own, NULL);
    if (s != FSDP_OK) return s;
    s = prep_write_files(a, x, vocab, st.tmp);
    if (s == FSDP_OK) return fsdp_io_dir_commit(&st);
    fsdp_io_dir_abort(&st);
    return s;
}

fsdp_status fsdp_prepare(const fsdp_prepare_args *a, fsdp_prepare_stats *stats) {
    if (a->jsonl && a->n_texts > 0)
        return fsdp_set_error(FSDP_EINVAL, "prepare: pass --text or --jsonl, not both");
    if (a->n_texts <= 0 && !a->jsonl)
        return fsdp_set_error(FSDP_EINVAL, "prepare: no input given: pass --text FILE... or --jsonl FILE");
    if (a->jsonl && !a->tokenizer)
        return fsdp_set_error(FSDP_EINVAL,
                              "prepare --jsonl needs --tokenizer tokenizer.json: the chat model's tokenizer, "
                              "whose special tokens render the turns");
    if (a->jsonl && a->doc_sep)
        return fsdp_set_error(FSDP_EINVAL,
                              "prepare: --doc-sep is for --text; every --jsonl row is a document");
    if (a->chat_format < 0 || a->chat_format >= FSDP_CHAT_NFORMATS)
        return FSDP_ERR(FSDP_EINVAL, "prepare: unknown chat format %d", a->chat_format);
    if (!(a->val_fraction >= 0.0 && a->val_fraction < 1.0))
        return fsdp_set_error(FSDP_EINVAL, "prepare: --val-fraction %g is outside [0, 1)", a->val_fraction);
    if (!a->out_dir) return fsdp_set_error(FSDP_EINVAL, "prepare: no output folder: pass --out DIR");
    fsdp_io_inputs_reset();
    int nt = a->n_texts > 0 ? a->n_texts : 1;
    char **texts = calloc((size_t)nt, sizeof *texts);
    size_t *lens = calloc((size_t)nt, sizeof *lens);
    prep_ctx x = {0};
    int vocab = 0;
    fsdp_status s = prep_tokenizer(a, &x, &vocab);
    x.width = fsdp_tokens_width(vocab); /* 16-bit ids when the vocabulary fits, else 32-bit */
    if (s == FSDP_OK && (!texts || !lens)) s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d file entries", nt);
    if (s == FSDP_OK)
        s = a->jsonl ? prep_jsonl(a, &x, &texts[0], &lens[0]) : prep_tokenize(a, &x, texts, lens);
    if (s == FSDP_OK) s = prep_write(a, &x, vocab);
    if (s == FSDP_OK && stats) {
        stats->n_docs = x.n_docs;
        stats->n_train = x.nt;
        stats->n_val = x.nv;
        stats->n_loss = x.n_loss;
        stats->chat_format = a->jsonl ? (int)x.chat.format : 0;
        stats->vocab = vocab;
        stats->encode_s = x.encode_s;
        stats->text_bytes = x.encoded;
    }
    fsdp_mem_free(x.val);
    fsdp_mem_free(x.train);
    fsdp_mem_free(x.doc);
    free(x.jt);
    free(x.jv);
    free(x.ft);
    free(x.fv);
    fsdp_chat_free(&x.chat);
    fsdp_bpe_free(x.bpe);
    for (int i = 0; texts && i < nt; i++)
        fsdp_mem_free(texts[i]);
    free(lens);
    free(texts);
    return s;
}

fsdp_status fsdp_data_meta_vocab(const char *data, int *vocab) {
    *vocab = 0;
    char *dir = fsdp_data_dir(data);
    char *path = dir ? fsdp_strdupf("%s/meta.json", dir) : NULL;
    free(dir);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    cJSON *j = NULL;
    long v = 0;
    fsdp_status s = fsdp_json_read_file(path, 1, &j); /* not JSON, or a repeated key: named there */
    if (s == FSDP_OK && j)
        s = fsdp_json_get_whole(j, path, "vocab", 2, FSDP_TOKENS_MAX_VOCAB,
                                "a model needs at least 2 tokens; token ids are int32", &v, NULL);
    if (s == FSDP_OK && j) *vocab = (int)v;
    cJSON_Delete(j);
    free(path);
    return s;
}
