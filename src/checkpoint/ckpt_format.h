/* ckpt_format.h — the shard file's binary layout (header fields, table entries, the training state) and
 * the manifest check, shared by the writer (checkpoint.c) and the reader (ckpt_read.c). Internal to
 * src/checkpoint; docs/DESIGN.md section 8 describes the format. */
#ifndef FSDP_CHECKPOINT_FORMAT_H
#define FSDP_CHECKPOINT_FORMAT_H

#include "checkpoint/checkpoint.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- shard file layout */

#define STATE_BYTES 40 /* i64 step, u64 pos, u64 epoch, u64 rng[2] */
#define TABLE_ENTRY 24 /* u64 offset, numel, padded */

/* Header field offsets (bytes). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HBYTES = 12,
    H_RANK = 16,
    H_WORLD = 20,
    H_NUNITS = 24,
    H_PCRC = 28,
    H_PBYTES = 32,
    H_STEP = 40,
    H_HCRC = 124
};

static inline void put32(unsigned char *b, int off, uint32_t v) { memcpy(b + off, &v, 4); }
static inline void put64(unsigned char *b, int off, uint64_t v) { memcpy(b + off, &v, 8); }
static inline uint32_t get32(const unsigned char *b, int off) {
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}
static inline uint64_t get64(const unsigned char *b, int off) {
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

static inline void state_pack(unsigned char *b, const fsdp_ckpt_state *st) {
    put64(b, 0, (uint64_t)st->step);
    put64(b, 8, st->data_pos);
    put64(b, 16, st->data_epoch);
    put64(b, 24, st->rng[0]);
    put64(b, 32, st->rng[1]);
}
static inline void state_unpack(const unsigned char *b, fsdp_ckpt_state *st) {
    st->step = (int64_t)get64(b, 0);
    st->data_pos = get64(b, 8);
    st->data_epoch = get64(b, 16);
    st->rng[0] = get64(b, 24);
    st->rng[1] = get64(b, 32);
}

/* A step folder's name: "step_" and at least six digits; its step into *step. */
static inline int step_name(const char *name, long long *step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *d = name + 5;
    size_t n = strspn(d, "0123456789");
    if (n < 6 || d[n] != '\0' || n > 18) return 0;
    *step = strtoll(d, NULL, 10);
    return 1;
}

/* 1 if ckpt_dir/.committed lists step folder `name` (ckpt_read.c). */
int fsdp_ckpt_was_committed(const char *ckpt_dir, const char *name);

/* The manifest text (len bytes, read from path) is sealed and its seal matches: a torn or edited
 * manifest is refused naming path. */
fsdp_status fsdp_ckpt_manifest_verify(const char *text, size_t len, const char *path);

#endif
