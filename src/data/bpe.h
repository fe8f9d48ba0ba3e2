/* bpe.h — byte-level BPE from a Hugging Face tokenizer.json, as GPT-2, Llama 3, Qwen2 and SmolLM use it:
 * the added tokens (<|endoftext|>, <|eot_id|>, <|im_start|>...) matched in the text first, then the NFC
 * normalizer when the file has one (Qwen2), the pre-tokenizer's splits (GPT-2's pattern, Llama 3's and
 * Qwen2's Split patterns, Digits; over Unicode letters, numbers and white space), the vocabulary and
 * merges (ignore_merges too), as the `tokenizers` library does. Encoding gives the same ids as
 * `tokenizers`' encode(text, add_special_tokens=False); decoding gives the exact bytes back of text the
 * normalizer leaves as it is (invalid UTF-8 included: such bytes are tokens of their own kind for the
 * split). */
#ifndef FSDP_DATA_BPE_H
#define FSDP_DATA_BPE_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fsdp_bpe fsdp_bpe;

/* Loads and checks path: model BPE with vocab + merges (either spelling: "a b" or ["a", "b"]), no
 * dropout, no subword prefix/suffix, no byte fallback, ignore_merges either way; normalizer null or NFC;
 * pre_tokenizer ByteLevel without prefix space, alone or last in a Sequence after Split (Llama 3's or
 * Qwen2's pattern, Isolated) or Digits; post_processor and decoder ignored (they add special tokens
 * around an encoding and join text back); added tokens without single_word/lstrip/rstrip; a token for
 * each byte but C0, C1, F1..FF (StarCoder's vocabulary has none for C0 C1 F1 F5..FF: a text holding such
 * a byte without a token is refused when it is encoded); every
 * merge's parts and result in the vocabulary; ids below 2^24; no repeated JSON key. Any other field or type:
 * FSDP_EFORMAT naming the file and the field; FSDP_EIO if unreadable. */
fsdp_status fsdp_bpe_load(fsdp_bpe **out, const char *path);
void fsdp_bpe_free(fsdp_bpe *b); /* NULL is a no-op */

int fsdp_bpe_vocab_size(const fsdp_bpe *b); /* largest id + 1 */
/* The end-of-document token: the added token "<|endoftext|>" (GPT-2, Qwen2, SmolLM), else
 * "<|end_of_text|>" (Llama 3), else -1. */
int fsdp_bpe_eot(const fsdp_bpe *b);
/* The id of an added token or vocabulary token by its exact bytes ("<|eot_id|>"), or -1. Linear in the
 * vocabulary: look ids up once, not per document. */
int fsdp_bpe_token_id(const fsdp_bpe *b, const char *token);
/* The most ids fsdp_bpe_encode can give for n bytes: n, or 3n with the NFC normalizer (NFC can lengthen
 * UTF-8 text up to 3 times). */
size_t fsdp_bpe_max_ids(const fsdp_bpe *b, size_t n);

/* Token ids of text[0..n) into out (room for fsdp_bpe_max_ids(b, n) ids: never more are written),
 * *n_out = count. Keeps a cache of words seen and scratch space (so b is not const; one thread per
 * fsdp_bpe). */
fsdp_status fsdp_bpe_encode(fsdp_bpe *b, const char *text, size_t n, int32_t *out, size_t *n_out);

/* The bytes of token id (not NUL-terminated), or NULL for an id outside the vocabulary. */
const char *fsdp_bpe_token_bytes(const fsdp_bpe *b, int id, size_t *len);

/* How the pre-tokenizers see one code point (tests/train/unicode_classes.sh compares every one with
 * the `tokenizers` library): 'L' letter (\p{L}), 'N' number (\p{N}), 'S' white space (\s), 'O' other;
 * and whether the Digits pre-tokenizer counts it as a number (Rust's char::is_numeric). */
char fsdp_bpe_char_class(uint32_t cp);
int fsdp_bpe_char_numeric(uint32_t cp);

#endif
