/* pack.c — document ids of packed sequences and the one-document sequence table of --pack pad
 * (data/pack.h). Nothing here reads a file but meta.json: the loader hands in the tokens and flags. */
#include "data/pack.h"

#include "core/core.h"
#include "io/io.h"
#include "io/json.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

const char *const fsdp_pack_names[] = {"auto", "doc", "concat", "pad", NULL};

void fsdp_pack_doc_ids(const int32_t *tokens, const uint8_t *flags, size_t n, int32_t eot, int32_t *doc) {
    int32_t id = 0;
    for (size_t t = 0; t < n; t++) {
        if (t > 0 && fsdp_pack_is_start(tokens, flags, t, eot)) id++;
        doc[t] = id;
    }
}

void fsdp_pack_table_init(fsdp_pack_table *tb, int T) {
    memset(tb, 0, sizeof *tb);
    tb->T = T;
}

void fsdp_pack_table_free(fsdp_pack_table *tb) {
    free(tb->seq);
    tb->seq = NULL;
    tb->n = tb->cap = 0;
}

fsdp_status fsdp_pack_table_add_span(fsdp_pack_table *tb, int32_t shard, uint64_t start, uint64_t span) {
    const uint64_t T = (uint64_t)tb->T;
    const uint64_t k = span > 0 ? span - 1 : 0; /* targets */
    for (uint64_t j = 0; j * T < k; j++) {
        if (tb->n == tb->cap) {
            uint64_t cap = tb->cap ? 2 * tb->cap : 1024;
            fsdp_pack_seq *p = realloc(tb->seq, (size_t)cap * sizeof *p);
            if (!p)
                return FSDP_ERR(FSDP_ENOMEM,
                                "no memory for a table of %llu sequences (--pack pad, 16 bytes each)",
                                (unsigned long long)cap);
            tb->seq = p;
            tb->cap = cap;
        }
        const uint64_t left = k - j * T;
        fsdp_pack_seq e = {
            .tok = start + j * T, .len = (uint32_t)((left < T ? left : T) + 1), .shard = shard};
        tb->seq[tb->n++] = e;
    }
    return FSDP_OK;
}

void fsdp_pack_scan_begin(fsdp_pack_table *tb, int32_t shard) {
    tb->shard = shard;
    tb->at = 0;
    tb->doc = 0;
}

fsdp_status fsdp_pack_scan(fsdp_pack_table *tb, const int32_t *tokens, const uint8_t *flags, size_t n,
                           int32_t eot) {
    for (size_t i = 0; i < n; i++) {
        const uint64_t g = tb->at + i;
        if (g > tb->doc && fsdp_pack_is_start(tokens, flags, i, eot)) {
            /* the document [doc, g) ends: its span takes token g too */
            FSDP_TRY(fsdp_pack_table_add_span(tb, tb->shard, tb->doc, g - tb->doc + 1));
            tb->doc = g;
        }
    }
    tb->at += n;
    return FSDP_OK;
}

fsdp_status fsdp_pack_scan_end(fsdp_pack_table *tb) {
    return fsdp_pack_table_add_span(tb, tb->shard, tb->doc, tb->at - tb->doc);
}

void fsdp_pack_pad_row(const int32_t *tok, const uint8_t *flags, size_t len, int T, int32_t pad,
                       int32_t *inputs, int32_t *targets) {
    for (size_t t = 0; t < (size_t)T; t++) {
        if (t + 1 < len) {
            inputs[t] = tok[t];
            targets[t] = flags && !(flags[t + 1] & FSDP_MASK_LOSS) ? FSDP_IGNORE_INDEX : tok[t + 1];
        } else {
            inputs[t] = pad;
            targets[t] = FSDP_IGNORE_INDEX;
        }
    }
}

fsdp_status fsdp_pack_meta_eot(const char *dir, int vocab, int32_t *eot) {
    *eot = -1;
    char *path = fsdp_strdupf("%s/meta.json", dir);
    if (!path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    cJSON *j = NULL;
    long v = -1;
    int found = 0;
    fsdp_status s = fsdp_json_read_file(path, 1, &j);
    if (s == FSDP_OK && j)
        s = fsdp_json_get_whole(j, path, "eot", 0, vocab - 1L, "a token id of the vocabulary", &v, &found);
    if (s == FSDP_OK && found) *eot = (int32_t)v;
    cJSON_Delete(j);
    free(path);
    return s;
}
