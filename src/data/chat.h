/* chat.h — supervised fine-tuning rows for `fsdp-train prepare --jsonl`: one JSON object per line,
 * {"prompt": ..., "completion": ...} or {"messages": [{"role": ..., "content": ...}, ...]}, checked and
 * rendered with a chat model's format (ChatML: Qwen2, SmolLM2; Llama 3's headers) into token ids and
 * per-token mask flags (io/tokens.h: FSDP_MASK_LOSS on the assistant's tokens, FSDP_MASK_DOC on a
 * row's first token). */
#ifndef FSDP_DATA_CHAT_H
#define FSDP_DATA_CHAT_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"

typedef enum { FSDP_CHAT_AUTO, FSDP_CHAT_CHATML, FSDP_CHAT_LLAMA3, FSDP_CHAT_NFORMATS } fsdp_chat_format;
/* "auto", "chatml", "llama3", NULL: the --chat-format choices, indexed by fsdp_chat_format. */
extern const char *const fsdp_chat_format_names[];

/* A format resolved against a tokenizer: its special tokens' ids, and scratch space for rows. */
typedef struct {
    fsdp_chat_format format; /* CHATML or LLAMA3 */
    fsdp_bpe *bpe;           /* not owned */
    int32_t bos;             /* llama3: <|begin_of_text|>, first token of a row; chatml: -1 (none) */
    int32_t open,
        close;   /* chatml: <|im_start|>, <|im_end|>; llama3: <|start_header_id|>, <|end_header_id|> */
    int32_t eot; /* the end-of-turn token: chatml <|im_end|>, llama3 <|eot_id|> */
    const char *eot_text;
    int32_t *ids; /* scratch: one segment's ids */
    size_t ids_cap;
    char *text; /* scratch: one segment's text */
    size_t text_cap;
} fsdp_chat;

/* Resolves want against bpe (loaded from tokenizer_path). AUTO: the chat_template of the
 * tokenizer_config.json beside tokenizer_path when it has one (ChatML's <|im_start|> or Llama 3's
 * <|start_header_id|> in it), else the special tokens the tokenizer has (ChatML's or Llama 3's, not
 * both). Every special token the format uses must be one token of bpe when encoded (an added token), so
 * it is never split into text. FSDP_EFORMAT naming the tokenizer and what it lacks. */
fsdp_status fsdp_chat_init(fsdp_chat *c, fsdp_bpe *bpe, const char *tokenizer_path, fsdp_chat_format want);
void fsdp_chat_free(fsdp_chat *c); /* safe on a zeroed struct */

/* Checks one row, line[0..n) of file:lineno (a line without its '\n'): valid UTF-8, no NUL character,
 * one JSON object without a repeated key, with "messages" (a non-empty array of {"role": "system" |
 * "user" | "assistant", "content": string} objects, no other keys, at least one assistant turn) or
 * "prompt" and "completion" (strings); other keys of the row are ignored. *text_bytes: the bytes of its
 * contents. FSDP_EFORMAT "FILE:LINE: what is wrong". */
fsdp_status fsdp_chat_check_row(const char *line, size_t n, const char *file, uint64_t lineno,
                                size_t *text_bytes);

/* Renders a checked row: its tokens appended at ids[*len..] with their flags at flags[*len..], both
 * grown as needed (*cap elements, realloc'd; start with NULL, 0), *len advanced. A row is the format's
 * rendering of its turns, without a default system prompt (prompt/completion: one user turn, one
 * assistant turn):
 *   chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n per turn;
 *   llama3: <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> per
 *           turn, CONTENT with the white space of its ends removed (the official template's `trim`).
 * Text between special tokens is encoded as one piece, as encoding the rendered string gives.
 * FSDP_MASK_LOSS: the assistant contents' tokens (a token that spans the header's end and the content's
 * start counts as content) and the end-of-turn token that closes each assistant turn; FSDP_MASK_DOC: the
 * row's first token. */
fsdp_status fsdp_chat_render_row(fsdp_chat *c, const char *line, size_t n, const char *file, uint64_t lineno,
                                 int32_t **ids, uint8_t **flags, size_t *cap, size_t *len);

#endif
