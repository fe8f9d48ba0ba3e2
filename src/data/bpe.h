/* bpe.h — GPT-2's byte-level BPE from a Hugging Face tokenizer.json: the ByteLevel pre-tokenizer (GPT-2's
 * split pattern over Unicode letters, numbers and white space), the vocabulary and merges, and the added
 * tokens (<|endoftext|>) matched in the text first, as the `tokenizers` library does. Encoding gives the
 * same ids as `tokenizers`; decoding gives the exact bytes back (invalid UTF-8 included: such bytes are
 * tokens of their own kind for the split, and every byte has a token). */
#ifndef FSDP_DATA_BPE_H
#define FSDP_DATA_BPE_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fsdp_bpe fsdp_bpe;

/* Loads and checks path: model BPE with vocab + merges (either spelling: "a b" or ["a", "b"]), no
 * dropout, no subword prefix/suffix, no byte fallback; pre_tokenizer ByteLevel without prefix space
 * (alone, or the only element of a Sequence); normalizer null; a token for each of the 256 bytes; every
 * merge's parts and result in the vocabulary; ids below 2^24.
 * FSDP_EFORMAT naming the file and the field; FSDP_EIO if unreadable. */
fsdp_status fsdp_bpe_load(fsdp_bpe **out, const char *path);
void fsdp_bpe_free(fsdp_bpe *b); /* NULL is a no-op */

int fsdp_bpe_vocab_size(const fsdp_bpe *b); /* largest id + 1 */
int fsdp_bpe_eot(const fsdp_bpe *b);        /* id of "<|endoftext|>", or -1 */

/* Token ids of text[0..n) into out (room for n ids: never more are written), *n_out = count. Keeps a
 * cache of words seen (so b is not const; one thread per fsdp_bpe). */
fsdp_status fsdp_bpe_encode(fsdp_bpe *b, const char *text, size_t n, int32_t *out, size_t *n_out);

/* The bytes of token id (not NUL-terminated), or NULL for an id outside the vocabulary. */
const char *fsdp_bpe_token_bytes(const fsdp_bpe *b, int id, size_t *len);

#endif
