/* prof.h — per-kernel-class time accounting, always on: each instrumented entry point (GEMM, attention,
 * LayerNorm, ..., AdamW, casts, communication waits) opens a scope whose EXCLUSIVE time (its own time
 * minus the scopes nested in it on the same thread) is added to its class. On one thread the classes
 * therefore never sum to more than the wall time they cover; the rest of a step is "other". Cost: two
 * monotonic clock reads and two atomic adds per scope (kernels run for microseconds and more).
 * Scopes opened on OpenMP worker threads inside a parallel region each count their own time (their sum
 * can then exceed wall time); the library opens scopes only on the calling thread. */
#ifndef FSDP_PROF_H
#define FSDP_PROF_H

#include <stdint.h>

typedef enum {
    FSDP_PROF_GEMM_F32 = 0, /* fsdp_matmul_forward / _backward with f32 parameters (oneDNN; bias grad) */
    FSDP_PROF_GEMM_BF16,    /* the same with bf16 parameters (native bf16, or the bf16-via-f32 path) */
    FSDP_PROF_ATTENTION,    /* causal attention forward / backward */
    FSDP_PROF_LAYERNORM,    /* LayerNorm forward / backward */
    FSDP_PROF_GELU,         /* GELU forward / backward */
    FSDP_PROF_RESIDUAL,     /* residual add forward / backward */
    FSDP_PROF_SOFTMAX_CE,   /* softmax + cross-entropy (and sampling's softmax) */
    FSDP_PROF_ENCODER,      /* token + position embedding forward / backward */
    FSDP_PROF_ADAMW,        /* gradient-norm clipping and AdamW on the shards */
    FSDP_PROF_CAST,         /* bf16 <-> f32 conversions: GEMM operands, gathers, gradient reductions */
    FSDP_PROF_COMM,         /* waiting for collectives (blocking ones and waits on non-blocking ones) */
    FSDP_PROF_NCLASS
} fsdp_prof_class;

/* One open scope; lives on the caller's stack (FSDP_PROF_SCOPE). */
typedef struct fsdp_prof_scope {
    struct fsdp_prof_scope *parent;
    double t0, child_s; /* start; wall time of the scopes nested in this one */
    int cls;
} fsdp_prof_scope;

void fsdp_prof_enter(fsdp_prof_scope *s, fsdp_prof_class cls);
void fsdp_prof_leave(fsdp_prof_scope *s);

/* Times the rest of the enclosing block as class cls (closed on every return path by the cleanup
 * attribute). Scopes nest: a block inside a scoped block may open its own. */
#define FSDP_PROF_SCOPE(cls) FSDP_PROF_SCOPE_AT_(FSDP_PROF_CAT_(fsdp_prof_scope_, __LINE__), cls)
#define FSDP_PROF_SCOPE_AT_(v, cls)                                                                          \
    fsdp_prof_scope v __attribute__((cleanup(fsdp_prof_leave)));                                             \
    fsdp_prof_enter(&v, (cls))
#define FSDP_PROF_CAT_(a, b)  FSDP_PROF_CAT2_(a, b)
#define FSDP_PROF_CAT2_(a, b) a##b

typedef struct {
    double seconds[FSDP_PROF_NCLASS]; /* exclusive time per class since the last reset */
    uint64_t calls[FSDP_PROF_NCLASS];
} fsdp_prof_counts;

/* Process-wide totals (every thread's scopes). */
void fsdp_prof_get(fsdp_prof_counts *out);
void fsdp_prof_reset(void);
/* "gemm_f32", "gemm_bf16", "attention", "layernorm", "gelu", "residual", "softmax_ce", "encoder", "adamw",
 * "cast", "comm"; "?" out of range. */
const char *fsdp_prof_class_name(fsdp_prof_class c);

#endif
