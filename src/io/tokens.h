/* tokens.h — token files: llm.c's 256-int header, then the token ids. */
#ifndef FSDP_IO_TOKENS_H
#define FSDP_IO_TOKENS_H

#include "fsdp.h"

#include <stdint.h>

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

#endif
