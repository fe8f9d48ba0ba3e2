/* data.h — token files (docs/DESIGN.md section 8, llm.c's layout), the byte-level tokenizer behind
 * `fsdp-train prepare`, and the sharded data loader that gives every rank its own disjoint part of
 * each global batch at a position that checkpoints save and restore. */
#ifndef FSDP_DATA_DATA_H
#define FSDP_DATA_DATA_H

#include "fsdp.h"

#include <stdint.h>
#include <stdio.h>

#include "io/tokens.h"

/* ---- prepare: text files -> DIR/train.bin, DIR/val.bin, DIR/meta.json */
typedef struct {
    const char *const *texts; /* input text files */
    int n_texts;
    const char *out_dir;   /* created if missing */
    double val_fraction;   /* share of documents (or of tokens, with one document) for val.bin */
    const char *doc_sep;   /* a line equal to this separates documents ("%" for fortune files);
                              NULL: every file is one document */
    const char *tokenizer; /* NULL: bytes (vocabulary 257); else a byte-level BPE tokenizer.json (data/bpe.h):
                              documents start with its <|endoftext|>, and the file is copied into
                              out_dir/tokenizer.json for sample and export */
    int quiet;
} fsdp_prepare_args;
typedef struct {
    uint64_t n_docs, n_train, n_val; /* documents, tokens written */
    int vocab;                       /* of the tokens written */
    uint64_t text_bytes;             /* BPE: bytes of document text it encoded */
    double encode_s;                 /* BPE: seconds fsdp_bpe_encode took over them */
} fsdp_prepare_stats;
fsdp_status fsdp_prepare(const fsdp_prepare_args *a, fsdp_prepare_stats *stats);

/* Copies the tokenizer src (a tokenizer.json) into the folder dst_dir as dst_dir/tokenizer.json, and
 * when src is named tokenizer.json, the Hugging Face files beside it that belong to it
 * (tokenizer_config.json, special_tokens_map.json: the tokenizer class, special tokens, chat template),
 * so that AutoTokenizer loads dst_dir as it loaded src's folder. *n_copied (may be NULL): files copied.
 * Nothing to do for a file that already is its destination. */
fsdp_status fsdp_data_copy_tokenizer(const char *src, const char *dst_dir, int *n_copied);

/* Reads DIR/meta.json's "vocab" if the file exists: *vocab = value, else *vocab = 0 (unknown). */
fsdp_status fsdp_data_meta_vocab(const char *dir, int *vocab);

/* ---- loader
 * A step consumes one global batch: `batch` sequences, sequence s covering tokens
 * [pos + s*T, pos + s*T + T] (T+1 tokens: inputs are the first T, targets the last T).
 * Micro-batch m on rank r of `world` gets sequences m*(batch/micro) + r*b + [0, b) with
 * b = batch / (micro * world): disjoint across ranks and micro-batches, and the same global batch
 * for every world size. After a step pos advances by batch*T; a batch that would run past the end
 * of the file wraps to 0 (epoch + 1).
 * A mask file beside the token file (X.mask beside X.bin, io/tokens.h), when it exists, is opened and
 * validated with it: a target whose token lacks FSDP_MASK_LOSS becomes FSDP_IGNORE_INDEX. */
typedef struct {
    fsdp_token_file file;
    fsdp_mask_file mask; /* fd -1: no mask file, every target counts */
    uint8_t *mbuf;       /* (b*T + 1) flags staging, with a mask file */
    int batch, T, micro, rank, world;
    int b;          /* sequences per rank per micro-batch */
    uint64_t pos;   /* token index of the current global batch */
    uint64_t epoch; /* number of wraps */
    int32_t *buf;   /* (b*T + 1) int32 staging */
} fsdp_loader;

typedef struct {
    uint64_t pos, epoch;
} fsdp_loader_state;

/* Errors: batch not divisible by micro*world (FSDP_EINVAL naming --batch, --micro-batches and the
 * world size), file smaller than one global batch (FSDP_EFORMAT naming the file and sizes), a mask file
 * that does not match the token file or is unreadable (fsdp_mask_open's errors). */
fsdp_status fsdp_loader_init(fsdp_loader *L, const char *path, int vocab, int batch, int T, int micro,
                             int rank, int world);
void fsdp_loader_free(fsdp_loader *L);
/* inputs, targets: (b, T) int32 each, micro-batch m of the current global batch for this rank; targets
 * are FSDP_IGNORE_INDEX where the mask file says the token is not a loss target. */
fsdp_status fsdp_loader_micro(fsdp_loader *L, int m, int32_t *inputs, int32_t *targets);
/* Moves to the next global batch. */
void fsdp_loader_advance(fsdp_loader *L);
fsdp_loader_state fsdp_loader_get_state(const fsdp_loader *L);
/* FSDP_EINVAL if pos is not a valid batch start for this file (e.g. a checkpoint of other data). */
fsdp_status fsdp_loader_set_state(fsdp_loader *L, fsdp_loader_state s);
/* Number of whole global batches in the file. */
uint64_t fsdp_loader_num_batches(const fsdp_loader *L);

#endif
