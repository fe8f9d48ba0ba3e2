/* bpe_impl.h — the tokenizer's state and the small helpers both halves use: loading and checking
 * tokenizer.json (bpe_load.c) and encoding (bpe.c). Internal to src/data. */
#ifndef FSDP_DATA_BPE_IMPL_H
#define FSDP_DATA_BPE_IMPL_H

#include "data/bpe.h"

#include "core/core.h"

#include <stdint.h>
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
static inline void byte_map(uint32_t cp_of[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp_of[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* One UTF-8 code point at s[0..n): its value and length; -1 for an invalid sequence (length 1). */
static inline int32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
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

static inline uint64_t fnv(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
static inline int32_t str_get(const str_map *m, const char *s, size_t len) {
    for (size_t i = fnv(s, len) & m->mask;; i = (i + 1) & m->mask) {
        const str_slot *e = &m->slots[i];
        if (!e->s) return -1;
        if (e->len == len && !memcmp(e->s, s, len)) return e->id;
    }
}
static inline int str_put(str_map *m, const char *s, size_t len, int32_t id) { /* 0: duplicate key */
    for (size_t i = fnv(s, len) & m->mask;; i = (i + 1) & m->mask) {
        str_slot *e = &m->slots[i];
        if (!e->s) {
            *e = (str_slot){s, len, id};
            return 1;
        }
        if (e->len == len && !memcmp(e->s, s, len)) return 0;
    }
}

static inline size_t pow2_above(size_t n) {
    size_t c = 16;
    while (c < 2 * n)
        c <<= 1;
    return c;
}

/* The added tokens' trie: the child of node for byte c, or -1 (an open-addressed edge table). */
static inline uint32_t edge_hash(uint32_t key) { return key * 2654435761u; }

static inline int32_t trie_child(const fsdp_bpe *b, int32_t node, unsigned char c) {
    uint32_t key = (uint32_t)node * 256u + c + 1u;
    for (size_t i = edge_hash(key) & b->edge_mask;; i = (i + 1) & b->edge_mask) {
        if (b->edges[i].key == key) return b->edges[i].child;
        if (b->edges[i].key == 0) return -1;
    }
}

#endif
