/* tokens.h — token files: llm.c's 256-int header, then the token ids, 16- or 32-bit. */
#ifndef FSDP_IO_TOKENS_H
#define FSDP_IO_TOKENS_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

/* Token file: 256 x int32 header, then the tokens (little-endian), exactly llm.c's two formats:
 *   header[0] = magic, header[1] = version, header[2] = token count; the other 253 ints are reserved
 *   (written as 0, ignored on read).
 *   magic 20240520, version 1: uint16 tokens (llm.c's GPT-2 files; vocabularies up to 65536);
 *   magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 files; larger vocabularies). */
#define FSDP_TOKENS_MAGIC        20240520
#define FSDP_TOKENS_VERSION      1
#define FSDP_TOKENS32_MAGIC      20240801
#define FSDP_TOKENS32_VERSION    7
#define FSDP_TOKENS_HEADER_INTS  256
#define FSDP_TOKENS_HEADER_BYTES (FSDP_TOKENS_HEADER_INTS * 4)
#define FSDP_TOKENS16_MAX_VOCAB  65536
#define FSDP_TOKENS_MAX_VOCAB    INT32_MAX /* ids are int32 in memory */

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
    int width;     /* bytes per token: 2 (version 1) or 4 (version 7) */
} fsdp_token_file;

/* Bytes per token that a file for this vocabulary gets: 2 up to 65536 ids, else 4. */
static inline int fsdp_tokens_width(int vocab) { return vocab <= FSDP_TOKENS16_MAX_VOCAB ? 2 : 4; }

/* Opens and validates either format: magic with its version, count vs file size (exact), and (up to
 * FSDP_TOKENS_FULL_CHECK_MAX tokens) every id < vocab. Errors name the file and what is wrong:
 * FSDP_EIO (missing/unreadable), FSDP_EFORMAT (magic, version, size, id). */
fsdp_status fsdp_tokens_open(fsdp_token_file *tf, const char *path, int vocab);
/* Reads n tokens starting at token index pos as int32; FSDP_EINVAL past the end, FSDP_EFORMAT
 * for an id >= vocab (with its index). */
fsdp_status fsdp_tokens_read(const fsdp_token_file *tf, uint64_t pos, size_t n, int32_t *out);
void fsdp_tokens_close(fsdp_token_file *tf); /* safe on a zeroed or closed struct */

/* Writes n tokens as a token file, atomically (a temporary name in the same folder, fsync, rename):
 * width 2: tokens is uint16_t[n], version 1; width 4: tokens is uint32_t[n], version 7. */
fsdp_status fsdp_tokens_write(const char *path, const void *tokens, size_t n, int width);

/* ---- mask files: per-token flags beside a token file (X.mask beside X.bin), written by `prepare
 * --jsonl` for fine-tuning data. Layout: the same 256 x int32 header (header[0] = FSDP_MASK_MAGIC,
 * header[1] = FSDP_MASK_VERSION, header[2] = token count, equal to its token file's), then one uint8 of
 * flags per token:
 *   FSDP_MASK_LOSS (bit 0): token i counts in the loss as a target (the prediction of token i from the
 *                           tokens before it is trained); 0: its target is FSDP_IGNORE_INDEX (a prompt,
 *                           a user turn, the chat template's headers);
 *   FSDP_MASK_DOC  (bit 1): a document (one JSONL row) begins at token i: attention and positions
 *                           restart there when documents are packed.
 * The other bits must be 0. */
#define FSDP_MASK_MAGIC   20241203
#define FSDP_MASK_VERSION 1
#define FSDP_MASK_LOSS    1u
#define FSDP_MASK_DOC     2u
#define FSDP_MASK_BITS    (FSDP_MASK_LOSS | FSDP_MASK_DOC)

typedef struct {
    char *path;    /* copied; named in every error */
    int fd;        /* -1 when closed */
    uint64_t ntok; /* flags after the header */
} fsdp_mask_file;

/* Opens and validates a mask file: magic, version, count == ntok (its token file's; FSDP_EFORMAT naming
 * both counts otherwise), size, and (up to FSDP_TOKENS_FULL_CHECK_MAX) that no unknown bit is set.
 * FSDP_EIO when missing or unreadable. */
fsdp_status fsdp_mask_open(fsdp_mask_file *mf, const char *path, uint64_t ntok);
/* Reads flags [pos, pos + n); FSDP_EINVAL past the end, FSDP_EFORMAT for an unknown bit (with its index). */
fsdp_status fsdp_mask_read(const fsdp_mask_file *mf, uint64_t pos, size_t n, uint8_t *out);
void fsdp_mask_close(fsdp_mask_file *mf); /* safe on a zeroed or closed struct */
/* Writes n flags as a mask file, atomically (as fsdp_tokens_write); FSDP_EINVAL for an unknown bit. */
fsdp_status fsdp_mask_write(const char *path, const uint8_t *flags, size_t n);

#endif
