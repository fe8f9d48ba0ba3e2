/* data.h — token files (docs/DESIGN.md section 8, llm.c's layout), the byte-level tokenizer behind
 * `fsdp-train prepare`, and the sharded data loader that gives every rank its own disjoint part of
 * each global batch at a position that checkpoints save and restore. */
#ifndef FSDP_DATA_DATA_H
#define FSDP_DATA_DATA_H

#include "fsdp.h"

#include <stdint.h>
#include <stdio.h>

#include "data/pack.h"
#include "io/tokens.h"

/* ---- prepare: text files (or JSONL chat rows) -> DIR/train.bin, DIR/val.bin, DIR/meta.json (and
 * DIR/train.mask, DIR/val.mask for rows) */
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
    const char *jsonl;     /* instead of texts: chat or prompt/completion rows (data/chat.h), one
                              document each, with train.mask and val.mask; needs tokenizer */
    int chat_format;       /* with jsonl: fsdp_chat_format (data/chat.h), FSDP_CHAT_AUTO by default */
    int quiet;
} fsdp_prepare_args;
typedef struct {
    uint64_t n_docs, n_train, n_val; /* documents (rows), tokens written */
    uint64_t n_loss;                 /* jsonl: tokens with FSDP_MASK_LOSS, both files */
    int chat_format;                 /* jsonl: the fsdp_chat_format rendered */
    int vocab;                       /* of the tokens written */
    uint64_t text_bytes;             /* BPE: bytes of document text it encoded */
    double encode_s;                 /* BPE: seconds fsdp_bpe_encode took over them */
} fsdp_prepare_stats;
/* Writes out_dir as one unit: everything goes into a new folder beside it (.NAME.prepare.XXXXXX, same
 * parent), fsync'd, then swapped into place (renameat2 RENAME_EXCHANGE with an existing folder, whose
 * old contents are then removed; rename when there is none), so a kill at any point leaves the old
 * folder or the new one, never a mix (a killed run may leave its .NAME.prepare.* folder behind, which the
 * next prepare of the same out_dir removes: fsdp_io_dir_stage). An
 * existing out_dir must be a real folder (not a symbolic link) holding only files prepare writes and
 * none of this command's inputs but the tokenizer; a failure leaves it untouched and removes the new
 * folder. Limits are checked before any tokenizing: each token file holds at most INT32_MAX tokens
 * (llm.c's header), against a lower bound of the tokens the input gives (its bytes, or with a BPE its
 * bytes over the longest token's, times 3 with NFC). */
fsdp_status fsdp_prepare(const fsdp_prepare_args *a, fsdp_prepare_stats *stats);

/* Copies the tokenizer src (a tokenizer.json) into the folder dst_dir as dst_dir/tokenizer.json, and
 * when src is named tokenizer.json, the Hugging Face files beside it that belong to it
 * (tokenizer_config.json, special_tokens_map.json: the tokenizer class, special tokens, chat template),
 * so that AutoTokenizer loads dst_dir as it loaded src's folder. *n_copied (may be NULL): files copied.
 * Nothing to do for a file that already is its destination. */
fsdp_status fsdp_data_copy_tokenizer(const char *src, const char *dst_dir, int *n_copied);

/* Reads DIR/meta.json's "vocab" if the file exists: *vocab = value, else *vocab = 0 (unknown). data is
 * --data: a folder DIR, or a glob whose folder is DIR (fsdp_data_dir). */
fsdp_status fsdp_data_meta_vocab(const char *data, int *vocab);

/* ---- the data set's files
 * --data names
 *   a folder holding train.bin (and val.bin, for validation): those two files, as `prepare` writes them;
 *   a folder without train.bin holding llm.c-style shards: its *_train_*.bin files (and *_val_*.bin for
 *     validation), each sorted by name (byte order);
 *   a glob(3) pattern (it holds *, ? or [): the files it matches but mask files (*.mask, the companions
 *     of token files), sorted by name; the validation shards
 *     are those of the same pattern with the last "train" of its file name (never of a folder) replaced
 *     by "val" (none when the file name has no "train"; a folder that cannot be read: none either).
 * A folder without train.bin or shards still lists DIR/train.bin, so that opening it names the file
 * that is missing. */
typedef struct {
    char **train; /* n_train >= 1 paths */
    int n_train;
    char **val; /* n_val >= 0 paths */
    int n_val;
    char *val_desc; /* what the validation files are or would be (for a note when there are none) */
} fsdp_data_files;
/* FSDP_EINVAL naming the pattern when a glob matches no file; FSDP_EIO when a folder is unreadable. */
fsdp_status fsdp_data_files_find(const char *data, fsdp_data_files *f);
void fsdp_data_files_free(fsdp_data_files *f); /* safe on a zeroed struct */
/* 1 if --data is a glob pattern (holds *, ? or [). */
int fsdp_data_is_glob(const char *data);
/* The data set's folder (meta.json, tokenizer.json): data itself, or a pattern's folder. malloc'd; NULL
 * when out of memory. */
char *fsdp_data_dir(const char *data);

/* ---- shuffling
 * A bijection of [0, n) keyed by fsdp_data_shuffle_key(seed, epoch): a 4-round balanced Feistel
 * network (splitmix64 round function) on the smallest even number of bits that holds n, walking the
 * cycle past values >= n. It depends on (i, n, key) only: the same at every world size. i < n. */
uint64_t fsdp_data_shuffle_key(uint64_t seed, uint64_t epoch);
uint64_t fsdp_data_shuffle_index(uint64_t i, uint64_t n, uint64_t key);

/* ---- loader
 * The shards (token files) are read as one list of sequences: shard i holds floor((n_i - 1) / T)
 * sequences of T+1 tokens (inputs are the first T, targets the last T), sequence j of the shard covering
 * its tokens [j*T, j*T + T] (consecutive sequences share one token; none spans two shards), numbered
 * globally in shard order (fsdp_loader_locate). An epoch is floor(nseq / batch) global batches; global
 * batch k of epoch e is the sequences perm_e(k*batch + s), s in [0, batch), with perm_e the identity
 * without shuffling and fsdp_data_shuffle_index keyed by (seed, e) with it (the sequences the last
 * partial batch would take are left out of that epoch). For one file unshuffled, sequence s of the batch
 * at token position pos covers [pos + s*T, pos + s*T + T].
 * Micro-batch m on rank r of `world` gets the batch's sequences m*(batch/micro) + r*b + [0, b) with
 * b = batch / (micro * world): disjoint across ranks and micro-batches, and the same global batch for
 * every world size. After the last whole batch of an epoch the next epoch starts (epoch + 1).
 * A mask file beside a token file (X.mask beside X.bin, io/tokens.h), when it exists, is opened and
 * validated with it: a target whose token lacks FSDP_MASK_LOSS becomes FSDP_IGNORE_INDEX.
 * Packing (data/pack.h): with doc and concat the sequences are those above; doc also gives every
 * sequence its document ids (fsdp_loader_micro's doc), from the mask file's FSDP_MASK_DOC flags when it
 * marks its token 0 as a document start (prepare --jsonl's files do), else from the end-of-text token.
 * With pad the sequences are the entries of a table built when opened (fsdp_pack_table: one scan of
 * every shard, 16 bytes a sequence), one document (or a chunk of one) each, in shard order; shuffling
 * permutes them as it does packed sequences. */
typedef struct {
    fsdp_token_file file;
    fsdp_mask_file mask; /* fd -1: no mask file, every target counts */
    uint64_t first;      /* global index of its first sequence (doc, concat) */
    uint64_t nseq;       /* floor((ntok - 1) / T) (doc, concat) */
    int doc_flags;       /* 1: its mask file marks documents (token 0 has FSDP_MASK_DOC) */
} fsdp_loader_shard;

typedef struct {
    fsdp_loader_shard *shards;
    int n_shards;
    uint64_t nseq, ntok; /* sequences and tokens of all shards */
    uint8_t *mbuf;       /* (b*T + 1) flags staging, when a shard has a mask file */
    int batch, T, micro, rank, world;
    int b;                 /* sequences per rank per micro-batch */
    int shuffle;           /* 0: file order */
    uint64_t seed;         /* of the shuffle */
    uint64_t key;          /* fsdp_data_shuffle_key(seed, epoch) */
    uint64_t pos;          /* T x the sequences of this epoch already consumed (k*batch*T before batch k); for
                              one file unshuffled, the token index of the current global batch */
    uint64_t epoch;        /* number of wraps */
    int32_t *buf;          /* (b*T + 1) int32 staging */
    int pack;              /* fsdp_pack_mode: doc, concat or pad (auto resolved when opened) */
    int32_t eot;           /* the end-of-text id, -1: unknown */
    fsdp_pack_table table; /* pad: the sequences (nseq = table.n) */
} fsdp_loader;

typedef struct {
    uint64_t pos, epoch;
} fsdp_loader_state;

typedef struct {
    const char *const *paths; /* the shards, in order */
    int n_paths;
    int vocab, batch, T, micro, rank, world;
    int shuffle;     /* 1: a permutation of the sequences per epoch */
    uint64_t seed;   /* its seed */
    int allow_short; /* 1: fewer sequences than one batch is no error (fsdp_loader_num_batches 0) */
    int pack;        /* fsdp_pack_mode; auto: doc when a shard's mask file marks documents, else concat */
    int32_t eot;     /* the end-of-text id (meta.json's "eot", fsdp_pack_meta_eot); -1: unknown */
} fsdp_loader_args;

/* Opens and validates every shard: header, size, mask file (io/tokens.h), and every id below vocab
 * (files small enough are checked when opened, on every rank; larger ones read through by rank
 * i % world for shard i, so the caller must agree on the outcome across ranks). Errors name the file
 * and, for a bad id or flag, its token index. Also: batch not divisible by micro*world (FSDP_EINVAL
 * naming --batch, --micro-batches and the world size), fewer sequences than one global batch
 * (FSDP_EFORMAT naming the file(s) and sizes) unless allow_short; --pack doc or pad on a shard without
 * a mask file marking documents while eot is -1 (FSDP_EINVAL naming the shard, meta.json's "eot" and
 * --pack concat). */
fsdp_status fsdp_loader_open(fsdp_loader *L, const fsdp_loader_args *a);
/* One file, file order, concat: fsdp_loader_open of {path}, shuffle 0. */
fsdp_status fsdp_loader_init(fsdp_loader *L, const char *path, int vocab, int batch, int T, int micro,
                             int rank, int world);
void fsdp_loader_free(fsdp_loader *L); /* safe on a zeroed or freed loader */
/* Global sequence seq (< L->nseq) -> its shard and the token index of its first token there (pad: the
 * table's entry). The one place that maps sequences to files. */
void fsdp_loader_locate(const fsdp_loader *L, uint64_t seq, int *shard, uint64_t *tok);
/* The sequence at place k (< L->nseq) of the current epoch's order. */
uint64_t fsdp_loader_sequence(const fsdp_loader *L, uint64_t k);
/* inputs, targets: (b, T) int32 each, micro-batch m of the current global batch for this rank; targets
 * are FSDP_IGNORE_INDEX where the mask file says the token is not a loss target, and (pad) at the
 * padding, whose inputs are eot (0 when unknown). doc: NULL, or (b, T) int32 document ids
 * (fsdp_pack_doc_ids of each sequence's inputs with doc; all 0 with concat and pad: one attention span a
 * sequence). */
fsdp_status fsdp_loader_micro(fsdp_loader *L, int m, int32_t *inputs, int32_t *targets, int32_t *doc);
/* Moves to the next global batch. */
void fsdp_loader_advance(fsdp_loader *L);
fsdp_loader_state fsdp_loader_get_state(const fsdp_loader *L);
/* FSDP_EINVAL if pos is not a valid batch start for these shards (e.g. a checkpoint of other data). */
fsdp_status fsdp_loader_set_state(fsdp_loader *L, fsdp_loader_state s);
/* Number of whole global batches in an epoch. */
uint64_t fsdp_loader_num_batches(const fsdp_loader *L);

#endif
