/* data.h — token files (docs/DESIGN.md section 8, llm.c's layout), the byte-level tokenizer behind
 * `fsdp-train prepare`, and the sharded data loader that gives every rank its own disjoint part of
 * each global batch at a position that checkpoints save and restore. */
#ifndef FSDP_TRAIN_DATA_H
#define FSDP_TRAIN_DATA_H

#include "fsdp.h"

#include <stdint.h>
#include <stdio.h>

/* Token file: 256 x int32 header, then uint16 tokens (little-endian), exactly llm.c's format:
 *   header[0] = FSDP_TOKENS_MAGIC, header[1] = FSDP_TOKENS_VERSION, header[2] = token count;
 *   the other 253 ints are reserved (written as 0, ignored on read). */
#define FSDP_TOKENS_MAGIC        20240520
#define FSDP_TOKENS_VERSION      1
#define FSDP_TOKENS_HEADER_INTS  256
#define FSDP_TOKENS_HEADER_BYTES (FSDP_TOKENS_HEADER_INTS * 4)

/* Byte-level vocabulary: ids 0..255 are the bytes, FSDP_TOKEN_EOT (256) starts every document
 * (as GPT-2's <|endoftext|> does in llm.c's files). Vocabulary size 257. */
#define FSDP_TOKEN_EOT  256
#define FSDP_BYTE_VOCAB 257
/* GPT-2's BPE vocabulary (llm.c's prepared data sets). */
#define FSDP_GPT2_VOCAB 50257

/* Files whose token count is at most this are checked id by id when opened; larger ones are
 * checked as they are read (every batch), so opening a multi-GB file stays fast. */
#define FSDP_TOKENS_FULL_CHECK_MAX ((uint64_t)64 << 20)

typedef struct {
    char *path;    /* copied; named in every error */
    int fd;        /* -1 when closed */
    uint64_t ntok; /* tokens after the header */
    int vocab;     /* every id must be < vocab */
} fsdp_token_file;

/* Opens and validates: magic, version, count vs file size (exact), and (up to
 * FSDP_TOKENS_FULL_CHECK_MAX tokens) every id < vocab. Errors name the file and what is wrong:
 * FSDP_EIO (missing/unreadable), FSDP_EFORMAT (magic, version, size, id). */
fsdp_status fsdp_tokens_open(fsdp_token_file *tf, const char *path, int vocab);
/* Reads n tokens starting at token index pos as int32; FSDP_EINVAL past the end, FSDP_EFORMAT
 * for an id >= vocab (with its index). */
fsdp_status fsdp_tokens_read(const fsdp_token_file *tf, uint64_t pos, size_t n, int32_t *out);
void fsdp_tokens_close(fsdp_token_file *tf); /* safe on a zeroed or closed struct */

/* Writes n tokens (each < 65536) as a token file, atomically: a temporary name in the same
 * folder, fsync, rename. */
fsdp_status fsdp_tokens_write(const char *path, const uint16_t *tokens, size_t n);

/* ---- prepare: text files -> DIR/train.bin, DIR/val.bin, DIR/meta.json */
typedef struct {
    const char *const *texts; /* input text files */
    int n_texts;
    const char *out_dir;   /* created if missing */
    double val_fraction;   /* share of documents (or of tokens, with one document) for val.bin */
    const char *doc_sep;   /* a line equal to this separates documents ("%" for fortune files);
                              NULL: every file is one document */
    const char *tokenizer; /* NULL: bytes (vocabulary 257); else a GPT-2 style tokenizer.json (train/bpe.h):
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

/* Reads DIR/meta.json's "vocab" if the file exists: *vocab = value, else *vocab = 0 (unknown). */
fsdp_status fsdp_data_meta_vocab(const char *dir, int *vocab);

/* ---- loader
 * A step consumes one global batch: `batch` sequences, sequence s covering tokens
 * [pos + s*T, pos + s*T + T] (T+1 tokens: inputs are the first T, targets the last T).
 * Micro-batch m on rank r of `world` gets sequences m*(batch/micro) + r*b + [0, b) with
 * b = batch / (micro * world): disjoint across ranks and micro-batches, and the same global batch
 * for every world size. After a step pos advances by batch*T; a batch that would run past the end
 * of the file wraps to 0 (epoch + 1). */
typedef struct {
    fsdp_token_file file;
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
 * world size), file smaller than one global batch (FSDP_EFORMAT naming the file and sizes). */
fsdp_status fsdp_loader_init(fsdp_loader *L, const char *path, int vocab, int batch, int T, int micro,
                             int rank, int world);
void fsdp_loader_free(fsdp_loader *L);
/* inputs, targets: (b, T) int32 each, micro-batch m of the current global batch for this rank. */
fsdp_status fsdp_loader_micro(fsdp_loader *L, int m, int32_t *inputs, int32_t *targets);
/* Moves to the next global batch. */
void fsdp_loader_advance(fsdp_loader *L);
fsdp_loader_state fsdp_loader_get_state(const fsdp_loader *L);
/* FSDP_EINVAL if pos is not a valid batch start for this file (e.g. a checkpoint of other data). */
fsdp_status fsdp_loader_set_state(fsdp_loader *L, fsdp_loader_state s);
/* Number of whole global batches in the file. */
uint64_t fsdp_loader_num_batches(const fsdp_loader *L);

#endif
