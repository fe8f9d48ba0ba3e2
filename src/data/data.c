/* data.c — token files in llm.c's layout (read, validate, write), the byte-level tokenizer behind
 * `fsdp-train prepare`, and the loader that hands each rank its disjoint part of every global batch.
 * Token files are read with pread per micro-batch: nothing is mapped or loaded whole. */
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token and checkpoint files are little-endian; this build assumes a little-endian host"
#endif

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

/* ---------------------------------------------------------------- data set files */

int fsdp_data_is_glob(const char *data) { return strpbrk(data, "*?[") != NULL; }

char *fsdp_data_dir(const char *data) {
    if (!fsdp_data_is_glob(data)) return strdup(data);
    size_t n = strlen(data) + 2;
    char *d = malloc(n);
    if (d) fsdp_path_dirname(data, d, n);
    return d;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends a malloc'd copy of path to (*list, *n). */
static fsdp_status list_add(char ***list, int *n, const char *path) {
    char **l = realloc(*list, sizeof *l * (size_t)(*n + 1));
    if (!l) return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of data files");
    *list = l;
    if (!(l[*n] = strdup(path))) return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of data files");
    (*n)++;
    return FSDP_OK;
}

/* The paths pattern expands to with glob(3), sorted by byte order (no match: an empty list), less the
 * mask files (X.mask: a token file's companion, never a shard of its own). */
static fsdp_status glob_list(const char *pattern, char ***list, int *n) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    fsdp_status s = FSDP_OK;
    if (rc == GLOB_NOSPACE)
        s = FSDP_ERR(FSDP_ENOMEM, "no memory to expand --data %s", pattern);
    else if (rc == GLOB_ABORTED)
        s = fsdp_set_error(FSDP_EIO, "--data %s: cannot read a folder of the pattern: %s", pattern,
                           strerror(errno));
    for (size_t i = 0; s == FSDP_OK && rc == 0 && i < g.gl_pathc; i++) {
        size_t len = strlen(g.gl_pathv[i]);
        if (len >= 5 && strcmp(g.gl_pathv[i] + len - 5, ".mask") == 0) continue;
        s = list_add(list, n, g.gl_pathv[i]);
    }
    if (rc == 0 || rc == GLOB_NOMATCH) globfree(&g);
    if (s == FSDP_OK && *n > 1) qsort(*list, (size_t)*n, sizeof **list, cmp_str);
    return s;
}

/* dir's entries whose name matches the fnmatch(3) pattern, as dir/name, sorted by name. */
static fsdp_status dir_list(const char *dir, const char *pattern, char ***list, int *n) {
    DIR *d = opendir(dir);
    if (!d) return fsdp_set_error(FSDP_EIO, "cannot read the data folder %s: %s", dir, strerror(errno));
    fsdp_status s = FSDP_OK;
    struct dirent *e;
    while (s == FSDP_OK && (e = readdir(d)) != NULL) {
        if (fnmatch(pattern, e->d_name, 0) != 0) continue;
        char *p = fsdp_strdupf("%s/%s", dir, e->d_name);
        s = p ? list_add(list, n, p) : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        free(p);
    }
    closedir(d);
    if (s == FSDP_OK && *n > 1) qsort(*list, (size_t)*n, sizeof **list, cmp_str);
    return s;
}

fsdp_status fsdp_data_files_find(const char *data, fsdp_data_files *f) {
    memset(f, 0, sizeof *f);
    fsdp_status s = FSDP_OK;
    struct stat st;
    if (fsdp_data_is_glob(data)) {
        s = glob_list(data, &f->train, &f->n_train);
        if (s == FSDP_OK && f->n_train == 0)
            s = fsdp_set_error(FSDP_EINVAL, "--data %s matches no file: name a folder or a pattern of shards",
                               data);
        /* the validation shards: the pattern with its last "train" as "val" */
        const char *t = NULL;
        for (const char *q = strstr(data, "train"); q; q = strstr(q + 1, "train"))
            t = q;
        if (s == FSDP_OK && t) {
            f->val_desc = fsdp_strdupf("%.*sval%s", (int)(t - data), data, t + 5);
            s = f->val_desc ? glob_list(f->val_desc, &f->val, &f->n_val)
                            : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        }
    } else {
        char *tp = fsdp_strdupf("%s/train.bin", data);
        if (!tp) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        if (access(tp, F_OK) != 0 && stat(data, &st) == 0 && S_ISDIR(st.st_mode)) {
            s = dir_list(data, "*_train_*.bin", &f->train, &f->n_train);
            if (s == FSDP_OK && f->n_train > 0) {
                f->val_desc = fsdp_strdupf("%s/*_val_*.bin", data);
                s = f->val_desc ? dir_list(data, "*_val_*.bin", &f->val, &f->n_val)
                                : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
            }
        }
        if (s == FSDP_OK && f->n_train == 0 && access(tp, F_OK) != 0 && stat(data, &st) == 0 &&
            S_ISDIR(st.st_mode))
            s = fsdp_set_error(FSDP_EINVAL,
                               "--data %s: the folder holds neither train.bin nor shards named *_train_*.bin "
                               "(make one with `fsdp-train prepare --out %s ...`)",
                               data, data);
        if (s == FSDP_OK && f->n_train == 0) {
            /* DIR/train.bin and DIR/val.bin, also when missing: opening train.bin says so */
            s = list_add(&f->train, &f->n_train, tp);
            f->val_desc = fsdp_strdupf("%s/val.bin", data);
            if (s == FSDP_OK && !f->val_desc) s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
            if (s == FSDP_OK && access(f->val_desc, F_OK) == 0) s = list_add(&f->val, &f->n_val, f->val_desc);
        }
        free(tp);
    }
    if (s != FSDP_OK) fsdp_data_files_free(f);
    return s;
}

void fsdp_data_files_free(fsdp_data_files *f) {
    for (int i = 0; f->train && i < f->n_train; i++)
        free(f->train[i]);
    for (int i = 0; f->val && i < f->n_val; i++)
        free(f->val[i]);
    free(f->train);
    free(f->val);
    free(f->val_desc);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------- shuffle */

/* splitmix64's finaliser: a bijection of 64-bit words that mixes every bit into every other. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t fsdp_data_shuffle_key(uint64_t seed, uint64_t epoch) {
    return mix64(mix64(seed ^ 0x5851f42d4c957f2dull) + epoch);
}

uint64_t fsdp_data_shuffle_index(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return i;
    /* a balanced Feistel network on the smallest even number of bits (>= 2) whose range holds n; a
     * value at or past n walks the cycle on to the next one below n (fewer than 4 steps on average) */
    int bits = 64 - __builtin_clzll(n - 1);
    bits += bits & 1;
    if (bits < 2) bits = 2;
    const int half = bits / 2;
    const uint64_t mask = (half == 64 ? ~0ull : (1ull << half) - 1);
    uint64_t x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = mix64(r ^ mix64(key + round)) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

/* ---------------------------------------------------------------- loader */

/* Ids of a token file too large to be checked when opened (io/tokens.h), and the flags of its mask
 * file, read through once in chunks: each fsdp_tokens_read / fsdp_mask_read checks what it reads and
 * names the file and the token index at fault. The chunk is transient staging outside the memory plan
 * (freed before the model exists). */
static fsdp_status check_all(const fsdp_loader_shard *sh) {
    const size_t chunk = (size_t)1 << 18;
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!buf) return FSDP_ERR(FSDP_ENOMEM, "no memory to check %s", sh->file.path);
    fsdp_status s = FSDP_OK;
    for (uint64_t at = 0; s == FSDP_OK && sh->file.ntok > FSDP_TOKENS_FULL_CHECK_MAX && at < sh->file.ntok;
         at += chunk) {
        size_t n = sh->file.ntok - at < chunk ? (size_t)(sh->file.ntok - at) : chunk;
        s = fsdp_tokens_read(&sh->file, at, n, buf);
    }
    for (uint64_t at = 0;
         s == FSDP_OK && sh->mask.fd >= 0 && sh->mask.ntok > FSDP_TOKENS_FULL_CHECK_MAX && at < sh->mask.ntok;
         at += chunk) {
        size_t n = sh->mask.ntok - at < chunk ? (size_t)(sh->mask.ntok - at) : chunk;
        s = fsdp_mask_read(&sh->mask, at, n, (uint8_t *)buf);
    }
    free(buf);
    return s;
}

/* Opens shard sh of path: its token file, and X.mask beside X.bin (a path not ending in .bin: PATH.mask)
 * when that exists. */
static fsdp_status shard_open(fsdp_loader_shard *sh, const char *path, int vocab, int *has_mask) {
    sh->file.fd = -1;
    sh->mask.fd = -1;
    FSDP_TRY(fsdp_tokens_open(&sh->file, path, vocab));
    size_t n = strlen(path);
    size_t stem = (n >= 4 && strcmp(path + n - 4, ".bin") == 0) ? n - 4 : n;
    char *mp = fsdp_strdupf("%.*s.mask", (int)stem, path);
    if (!mp) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    if (access(mp, F_OK) == 0) {
        s = fsdp_mask_open(&sh->mask, mp, sh->file.ntok);
        if (s == FSDP_OK) *has_mask = 1;
    }
    free(mp);
    return s;
}

/* The --pack pad table: every shard scanned once for its document starts (its mask's flags when they
 * mark documents, else its tokens), in blocks; the block is transient staging outside the memory plan. */
static fsdp_status build_pad_table(fsdp_loader *L) {
    const size_t chunk = (size_t)1 << 18;
    int32_t *buf = malloc(chunk * sizeof *buf);
    if (!buf) return FSDP_ERR(FSDP_ENOMEM, "no memory to scan the documents (--pack pad)");
    fsdp_pack_table_init(&L->table, L->T);
    fsdp_status s = FSDP_OK;
    for (int i = 0; s == FSDP_OK && i < L->n_shards; i++) {
        const fsdp_loader_shard *sh = &L->shards[i];
        fsdp_pack_scan_begin(&L->table, i);
        for (uint64_t at = 0; s == FSDP_OK && at < sh->file.ntok; at += chunk) {
            size_t n = sh->file.ntok - at < chunk ? (size_t)(sh->file.ntok - at) : chunk;
            if (sh->doc_flags) {
                s = fsdp_mask_read(&sh->mask, at, n, (uint8_t *)buf);
                if (s == FSDP_OK) s = fsdp_pack_scan(&L->table, NULL, (const uint8_t *)buf, n, L->eot);
            } else {
                s = fsdp_tokens_read(&sh->file, at, n, buf);
                if (s == FSDP_OK) s = fsdp_pack_scan(&L->table, buf, NULL, n, L->eot);
            }
        }
        if (s == FSDP_OK) s = fsdp_pack_scan_end(&L->table);
    }
    free(buf);
    if (s == FSDP_OK) L->nseq = L->table.n;
    return s;
}

/* --pack: auto becomes doc when a shard's mask file marks documents, else concat; doc and pad need the
 * document starts of every shard: its mask's flags, or the end-of-text token. pad builds its table. */
static fsdp_status resolve_pack(fsdp_loader *L, const fsdp_loader_args *a) {
    int any_flags = 0;
    for (int i = 0; i < L->n_shards; i++)
        any_flags |= L->shards[i].doc_flags;
    L->eot = a->eot;
    L->pack = a->pack == FSDP_PACK_AUTO ? (any_flags ? FSDP_PACK_DOC : FSDP_PACK_CONCAT) : a->pack;
    if (L->pack == FSDP_PACK_CONCAT) return FSDP_OK;
    for (int i = 0; i < L->n_shards; i++)
        if (!L->shards[i].doc_flags && L->eot < 0)
            return fsdp_set_error(
                FSDP_EINVAL,
                "--pack %s: %s has no mask file marking documents and the data's meta.json "
                "names no end-of-text token (\"eot\"), so its documents are unknown: add "
                "\"eot\": ID to meta.json (fsdp-train prepare writes it; GPT-2's is 50256), "
                "or train with --pack concat",
                fsdp_pack_names[L->pack], L->shards[i].file.path);
    return L->pack == FSDP_PACK_PAD ? build_pad_table(L) : FSDP_OK;
}

fsdp_status fsdp_loader_open(fsdp_loader *L, const fsdp_loader_args *a) {
    memset(L, 0, sizeof *L);
    const int batch = a->batch, T = a->T, micro = a->micro, rank = a->rank, world = a->world;
    if (batch <= 0 || T <= 0 || micro <= 0 || world <= 0 || rank < 0 || rank >= world || a->n_paths <= 0)
        return FSDP_ERR(FSDP_EINVAL,
                        "bad loader shape: --batch %d, --seq-len %d, --micro-batches %d, rank %d of %d, %d "
                        "files",
                        batch, T, micro, rank, world, a->n_paths);
    if (batch % (micro * world) != 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "--batch %d is not divisible by --micro-batches %d x world size %d = %d: every "
                              "rank needs the same whole number of sequences per micro-batch",
                              batch, micro, world, micro * world);
    L->batch = batch;
    L->T = T;
    L->micro = micro;
    L->rank = rank;
    L->world = world;
    L->b = batch / (micro * world);
    L->shuffle = a->shuffle;
    L->seed = a->seed;
    L->key = fsdp_data_shuffle_key(a->seed, 0);
    L->shards = calloc((size_t)a->n_paths, sizeof *L->shards);
    if (!L->shards) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d shards", a->n_paths);
    fsdp_status s = FSDP_OK;
    int has_mask = 0;
    for (int i = 0; i < a->n_paths; i++) {
        L->shards[i].file.fd = L->shards[i].mask.fd = -1;
        L->n_shards = i + 1;
        fsdp_loader_shard *sh = &L->shards[i];
        s = shard_open(sh, a->paths[i], a->vocab, &has_mask);
        if (s == FSDP_OK && sh->mask.fd >= 0 && sh->mask.ntok > 0) {
            uint8_t f0;
            s = fsdp_mask_read(&sh->mask, 0, 1, &f0);
            sh->doc_flags = s == FSDP_OK && (f0 & FSDP_MASK_DOC);
        }
        /* the large files' ids: each shard checked by one rank (the caller agrees on the outcome) */
        if (s == FSDP_OK && i % world == rank) s = check_all(sh);
        if (s != FSDP_OK) goto fail;
        sh->first = L->nseq;
        sh->nseq = sh->file.ntok ? (sh->file.ntok - 1) / (uint64_t)T : 0;
        L->nseq += sh->nseq;
        L->ntok += sh->file.ntok;
    }
    s = resolve_pack(L, a);
    if (s != FSDP_OK) goto fail;
    if (L->pack == FSDP_PACK_PAD && L->nseq < (uint64_t)batch && !a->allow_short) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "--pack pad: %s%s hold%s %llu documents' sequences (a document, or a chunk of "
                           "--seq-len %d of a longer one, a sequence), fewer than one global batch (--batch "
                           "%d): use more data, a smaller batch or --pack doc",
                           a->paths[0], L->n_shards > 1 ? " and the shards after it" : "",
                           L->n_shards > 1 ? "" : "s", (unsigned long long)L->nseq, T, batch);
        goto fail;
    }
    if (L->nseq < (uint64_t)batch && !a->allow_short) {
        uint64_t need = (uint64_t)batch * (uint64_t)T + 1;
        if (L->n_shards == 1)
            s = fsdp_set_error(
                FSDP_EFORMAT,
                "%s holds %llu tokens, fewer than one global batch needs (--batch %d x --seq-len "
                "%d + 1 = %llu): use more data or a smaller batch",
                a->paths[0], (unsigned long long)L->ntok, batch, T, (unsigned long long)need);
        else
            s = fsdp_set_error(FSDP_EFORMAT,
                               "the %d shards %s ... %s hold %llu sequences of --seq-len %d + 1 tokens (a "
                               "sequence never spans two shards), fewer than one global batch (--batch %d): "
                               "use more data or a smaller batch",
                               L->n_shards, a->paths[0], a->paths[L->n_shards - 1],
                               (unsigned long long)L->nseq, T, batch);
        goto fail;
    }
    s = fsdp_mem_alloc((void **)&L->buf, sizeof(int32_t) * ((size_t)L->b * (size_t)T + 1), FSDP_MEM_OTHER);
    if (s == FSDP_OK && has_mask)
        s = fsdp_mem_alloc((void **)&L->mbuf, (size_t)L->b * (size_t)T + 1, FSDP_MEM_OTHER);
    if (s != FSDP_OK) goto fail;
    return FSDP_OK;
fail:
    fsdp_loader_free(L);
    return s;
}

fsdp_status fsdp_loader_init(fsdp_loader *L, const char *path, int vocab, int batch, int T, int micro,
                             int rank, int world) {
    fsdp_loader_args a = {.paths = &path,
                          .n_paths = 1,
                          .vocab = vocab,
                          .batch = batch,
                          .T = T,
                          .micro = micro,
                          .rank = rank,
                          .world = world,
                          .pack = FSDP_PACK_CONCAT,
                          .eot = -1};
    return fsdp_loader_open(L, &a);
}

void fsdp_loader_free(fsdp_loader *L) {
    fsdp_mem_free(L->buf);
    L->buf = NULL;
    fsdp_mem_free(L->mbuf);
    L->mbuf = NULL;
    for (int i = 0; L->shards && i < L->n_shards; i++) {
        fsdp_mask_close(&L->shards[i].mask);
        fsdp_tokens_close(&L->shards[i].file);
    }
    free(L->shards);
    L->shards = NULL;
    fsdp_pack_table_free(&L->table);
    L->n_shards = 0;
}

void fsdp_loader_locate(const fsdp_loader *L, uint64_t seq, int *shard, uint64_t *tok) {
    if (L->pack == FSDP_PACK_PAD) {
        *shard = L->table.seq[seq].shard;
        *tok = L->table.seq[seq].tok;
        return;
    }
    /* the last shard whose first sequence is <= seq: a shard of no sequence shares its first index with
     * the next one, which wins */
    int lo = 0, hi = L->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (L->shards[mid].first <= seq)
            lo = mid;
        else
            hi = mid - 1;
    }
    *shard = lo;
    *tok = (seq - L->shards[lo].first) * (uint64_t)L->T;
}

uint64_t fsdp_loader_sequence(const fsdp_loader *L, uint64_t k) {
    return L->shuffle ? fsdp_data_shuffle_index(k, L->nseq, L->key) : k;
}

/* --pack pad: sequence i of the slice is table entry seq, padded to T. */
static fsdp_status pad_sequence(fsdp_loader *L, uint64_t seq, size_t i, int32_t *inputs, int32_t *targets) {
    const size_t T = (size_t)L->T;
    const fsdp_pack_seq *e = &L->table.seq[seq];
    const fsdp_loader_shard *S = &L->shards[e->shard];
    FSDP_TRY(fsdp_tokens_read(&S->file, e->tok, e->len, L->buf));
    if (S->mask.fd >= 0) FSDP_TRY(fsdp_mask_read(&S->mask, e->tok, e->len, L->mbuf));
    fsdp_pack_pad_row(L->buf, S->mask.fd >= 0 ? L->mbuf : NULL, e->len, L->T, L->eot >= 0 ? L->eot : 0,
                      inputs + i * T, targets + i * T);
    return FSDP_OK;
}

fsdp_status fsdp_loader_micro(fsdp_loader *L, int m, int32_t *inputs, int32_t *targets, int32_t *doc) {
    if (m < 0 || m >= L->micro)
        return FSDP_ERR(FSDP_EINVAL, "micro-batch %d is outside 0..%d", m, L->micro - 1);
    const size_t T = (size_t)L->T, b = (size_t)L->b;
    /* this slice's first place in the epoch's order of sequences */
    const uint64_t k0 = L->pos / T + (uint64_t)m * (uint64_t)(L->batch / L->micro) + (uint64_t)L->rank * b;
    if (doc) memset(doc, 0, sizeof *doc * b * T); /* concat, pad: one attention span a sequence */
    for (size_t i = 0; i < b;) {
        if (L->pack == FSDP_PACK_PAD) {
            FSDP_TRY(pad_sequence(L, fsdp_loader_sequence(L, k0 + i), i, inputs, targets));
            i++;
            continue;
        }
        /* a run of sequences that follow each other in one shard: one read of n*T + 1 tokens */
        int sh;
        uint64_t tok;
        fsdp_loader_locate(L, fsdp_loader_sequence(L, k0 + i), &sh, &tok);
        const fsdp_loader_shard *S = &L->shards[sh];
        size_t n = 1;
        while (i + n < b && fsdp_loader_sequence(L, k0 + i + n) == fsdp_loader_sequence(L, k0 + i) + n &&
               (tok / T) + n < S->nseq)
            n++;
        FSDP_TRY(fsdp_tokens_read(&S->file, tok, n * T + 1, L->buf));
        for (size_t j = 0; j < n; j++)
            for (size_t t = 0; t < T; t++) {
                inputs[(i + j) * T + t] = L->buf[j * T + t];
                targets[(i + j) * T + t] = L->buf[j * T + t + 1];
            }
        if (S->mask.fd >= 0) {
            FSDP_TRY(fsdp_mask_read(&S->mask, tok, n * T + 1, L->mbuf));
            for (size_t j = 0; j < n; j++)
                for (size_t t = 0; t < T; t++)
                    if (!(L->mbuf[j * T + t + 1] & FSDP_MASK_LOSS))
                        targets[(i + j) * T + t] = FSDP_IGNORE_INDEX;
        }
        for (size_t j = 0; doc && L->pack == FSDP_PACK_DOC && j < n; j++)
            fsdp_pack_doc_ids(L->buf + j * T, S->doc_flags ? L->mbuf + j * T : NULL, T, L->eot,
                              doc + (i + j) * T);
        i += n;
    }
    return FSDP_OK;
}

void fsdp_loader_advance(fsdp_loader *L) {
    uint64_t step = (uint64_t)L->batch * (uint64_t)L->T;
    L->pos += step;
    if (L->pos / L->T + (uint64_t)L->batch > L->nseq) {
        L->pos = 0;
        L->epoch++;
        L->key = fsdp_data_shuffle_key(L->seed, L->epoch);
    }
}

fsdp_loader_state fsdp_loader_get_state(const fsdp_loader *L) {
    fsdp_loader_state s = {L->pos, L->epoch};
    return s;
}

fsdp_status fsdp_loader_set_state(fsdp_loader *L, fsdp_loader_state st) {
    uint64_t step = (uint64_t)L->batch * (uint64_t)L->T;
    if (st.pos % step != 0 || L->nseq < (uint64_t)L->batch || st.pos / L->T > L->nseq - (uint64_t)L->batch)
        return fsdp_set_error(FSDP_EINVAL,
                              "data position %llu is not a batch start in %s%s (%llu sequences of %d + 1 "
                              "tokens, %llu tokens per batch): the checkpoint was made with other data, "
                              "--batch or --seq-len",
                              (unsigned long long)st.pos, L->shards[0].file.path,
                              L->n_shards > 1 ? " and the shards after it" : "", (unsigned long long)L->nseq,
                              L->T, (unsigned long long)step);
    L->pos = st.pos;
    L->epoch = st.epoch;
    L->key = fsdp_data_shuffle_key(L->seed, L->epoch);
    return FSDP_OK;
}

uint64_t fsdp_loader_num_batches(const fsdp_loader *L) { return L->nseq / (uint64_t)L->batch; }
