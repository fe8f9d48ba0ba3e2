/* pack.h — documents in fixed-length sequences (docs/TRAINER.md "Packing"): the document ids that confine
 * attention to one document of a packed sequence (--pack doc), and the table of one-document sequences
 * that --pack pad trains on. Pure functions: the loader (data/data.h) reads the tokens and calls them. */
#ifndef FSDP_DATA_PACK_H
#define FSDP_DATA_PACK_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

#include "io/tokens.h"

/* --pack: auto (doc for data whose mask file marks documents, else concat), doc (packed, attention and
 * positions confined to each document), concat (packed, attention across documents: the stream as it
 * is), pad (one document per sequence, padded). fsdp_pack_mode order = the flag's names. */
typedef enum { FSDP_PACK_AUTO, FSDP_PACK_DOC, FSDP_PACK_CONCAT, FSDP_PACK_PAD } fsdp_pack_mode;
extern const char *const fsdp_pack_names[]; /* "auto", "doc", "concat", "pad", NULL */

/* Whether token i of a stream starts a document: flags (a mask file's, io/tokens.h) non-NULL: flag i has
 * FSDP_MASK_DOC; else token i is the end-of-text token eot (GPT-2-style data begin every document with
 * it, as `prepare` writes). */
static inline int fsdp_pack_is_start(const int32_t *tokens, const uint8_t *flags, size_t i, int32_t eot) {
    return flags ? (flags[i] & FSDP_MASK_DOC) != 0 : tokens[i] == eot;
}

/* Document ids of the n input positions of one sequence (tokens[0..n), flags[0..n) or NULL): doc[0] = 0
 * and doc[t] = doc[t-1] + 1 where a document starts at t (fsdp_pack_is_start), so ids restart at 0 in
 * every sequence: the positions before the sequence's first document start continue the document of the
 * previous sequence (id 0), and a start at position 0 begins id 0 as well. doc: int32 [n]. */
void fsdp_pack_doc_ids(const int32_t *tokens, const uint8_t *flags, size_t n, int32_t eot, int32_t *doc);

/* ---- --pack pad: the sequence table
 * A document is the tokens from one start to the next (the tokens before a shard's first start are one
 * as well). Its span is the document and the token after it (the next document's first token: its target
 * is the end-of-document prediction, as in the packed stream), the document alone at the end of a shard.
 * A span of K+1 tokens holds K targets and becomes ceil(K / T) sequences of at most T+1 tokens, chunk j
 * covering span tokens [j*T, j*T + T] (consecutive chunks share one token, as packed sequences do), each
 * trained alone from position 0. A one-token document (no target) gives none. 16 bytes a sequence. */
typedef struct {
    uint64_t tok;  /* the sequence's first token in its shard */
    uint32_t len;  /* tokens, 2..T+1: len - 1 real input positions with their targets */
    int32_t shard; /* index in the loader's shards */
} fsdp_pack_seq;

typedef struct {
    fsdp_pack_seq *seq; /* n entries (capacity cap) */
    uint64_t n, cap;
    int T;
    /* the scan in progress: shard, its tokens seen so far, the current document's first token */
    int32_t shard;
    uint64_t at, doc;
} fsdp_pack_table;

/* An empty table for sequences of T inputs. */
void fsdp_pack_table_init(fsdp_pack_table *tb, int T);
void fsdp_pack_table_free(fsdp_pack_table *tb); /* safe on a zeroed or freed table */
/* Appends the sequences of the span [start, start + span) (span tokens) of shard. FSDP_ENOMEM. */
fsdp_status fsdp_pack_table_add_span(fsdp_pack_table *tb, int32_t shard, uint64_t start, uint64_t span);
/* The scan of one shard, in order: begin, then its tokens in consecutive blocks (n tokens, flags or
 * NULL, as fsdp_pack_is_start), then end (ntok: the shard's token count), which adds its last document. */
void fsdp_pack_scan_begin(fsdp_pack_table *tb, int32_t shard);
fsdp_status fsdp_pack_scan(fsdp_pack_table *tb, const int32_t *tokens, const uint8_t *flags, size_t n,
                           int32_t eot);
fsdp_status fsdp_pack_scan_end(fsdp_pack_table *tb);

/* One padded sequence: tok/flags (flags NULL: every target counts) are the entry's len tokens (2..T+1);
 * inputs[t] = tok[t] and targets[t] = tok[t+1] for t < len - 1 (FSDP_IGNORE_INDEX where flag t+1 lacks
 * FSDP_MASK_LOSS); the positions after are padding: input pad, target FSDP_IGNORE_INDEX. int32 [T] each. */
void fsdp_pack_pad_row(const int32_t *tok, const uint8_t *flags, size_t len, int T, int32_t pad,
                       int32_t *inputs, int32_t *targets);

/* DIR/meta.json's "eot" (the end-of-text id `prepare` writes): *eot = value, or -1 when there is no
 * meta.json or no "eot" in it. FSDP_EFORMAT for an "eot" that is not a whole number below vocab. */
fsdp_status fsdp_pack_meta_eot(const char *dir, int vocab, int32_t *eot);

#endif
