/* core.h — internals shared by every layer: error helpers and small utilities.
 * Library code reports failures with FSDP_ERR(status, fmt, ...) which records the message and
 * returns the status; FSDP_TRY propagates a failure unchanged (its message already set); FSDP_WRAP
 * adds context in front of a failure's own message. Below the trainer a message starts with where
 * it arose (the function, or the public entry point a check belongs to); the trainer's messages are
 * for the person at the command line and name flags, files and ranks instead (fsdp_set_error,
 * FSDP_WRAP_USER). */
#ifndef FSDP_CORE_H
#define FSDP_CORE_H

#include "fsdp.h"

#include <stdio.h>

/* Record "where: message" for this thread and evaluate to s. */
#define FSDP_ERR(s, ...) fsdp_set_error_at((s), __func__, __VA_ARGS__)
fsdp_status fsdp_set_error_at(fsdp_status s, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keep the failure's own message and put "where: context: " in front of it (the inner message is
 * copied first, so it may come from fsdp_last_error()). Evaluates to s. */
#define FSDP_WRAP(s, ...) fsdp_wrap_error_at((s), __func__, __VA_ARGS__)
/* The same without the function name: "context: inner message" (the trainer's style). */
#define FSDP_WRAP_USER(s, ...) fsdp_wrap_error_at((s), NULL, __VA_ARGS__)
fsdp_status fsdp_wrap_error_at(fsdp_status s, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FSDP_TRY(expr)                                                                                       \
    do {                                                                                                     \
        fsdp_status fsdp_try_s_ = (expr);                                                                    \
        if (fsdp_try_s_ != FSDP_OK) return fsdp_try_s_;                                                      \
    } while (0)

/* Internal invariant (a bug if it fails): on in release builds too, never for input checks. */
#define FSDP_INVARIANT(cond)                                                                                 \
    do {                                                                                                     \
        if (!(cond)) fsdp_invariant_failed(#cond, __FILE__, __LINE__);                                       \
    } while (0)
void fsdp_invariant_failed(const char *cond, const char *file, int line) __attribute__((noreturn));

/* Function attributes for run-time-dispatched SIMD bodies. GCC takes a vector-width preference inside
 * target(); clang rejects that string (and then drops the whole attribute), so it gets its own
 * spelling.
 * gnu11 lets GCC contract a*b + c into an fma wherever the target has one (-ffp-contract=fast), even
 * across intrinsics; functions whose rounding must match a scalar or PyTorch reference bit for bit
 * carry FSDP_NOCONTRACT inside their __attribute__((...)) list. clang has no optimize(): a file using
 * FSDP_NOCONTRACT also states FSDP_FILE_NOCONTRACT once at file scope, which turns contraction off for
 * the rest of that file under clang (the fuzz build) and is empty under GCC. */
#if defined(__clang__)
#define FSDP_TARGET_AVX512   __attribute__((target("avx512f,fma"), min_vector_width(512)))
#define FSDP_NOCONTRACT      __unused__ /* a no-op attribute: FSDP_FILE_NOCONTRACT does the work */
#define FSDP_FILE_NOCONTRACT _Pragma("clang fp contract(off)")
#else
#define FSDP_TARGET_AVX512 __attribute__((target("avx512f,fma,prefer-vector-width=512")))
#define FSDP_NOCONTRACT    optimize("fp-contract=off")
#define FSDP_FILE_NOCONTRACT
#endif

/* Rank-order fp32 sums for the communicator's reductions (dtype.c; every SIMD path gives the same
 * bits, NaNs by fsdp_bf16_add_f32_n's rule):
 * fsdp_f32_sum_n: dst[i] = ((src[0][i] + src[1][i]) + ...) + src[k-1][i]; dst may be src[0].
 * fsdp_f32_sum_axpy_n: acc[i] += that sum * scale, the product rounded to fp32 before the addition
 * (never an fma): the same bits as summing into a buffer b and then acc[i] += b[i] * scale. */
void fsdp_f32_sum_n(float *dst, const float *const *src, int k, size_t n);
void fsdp_f32_sum_axpy_n(float *acc, const float *const *src, int k, size_t n, float scale);
/* fsdp_bf16_sum_n: the same sum of k bf16 contributions (each widened exactly), rounded once to bf16
 * as fsdp_f32_to_bf16_n does: the bits of fsdp_bf16_to_f32_n, fsdp_bf16_add_f32_n per contribution,
 * fsdp_f32_to_bf16_n. One pass; dst may be any src[s] (element i is read before it is written). */
void fsdp_bf16_sum_n(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int k, size_t n);

/* The index of the first element of x[0, n) that is NaN or +-Inf, or n when all are finite: one pass
 * over the bits (finite.c), how loaded weights are checked (issue 28 item 3a). fsdp_nonfinite_name:
 * "NaN", "+Inf" or "-Inf" for such a value (messages). */
size_t fsdp_first_nonfinite(const float *x, size_t n);
const char *fsdp_nonfinite_name(float v);

/* The host-shared heap (shm_heap.c): one arena per process, an anonymous shared-memory file that the
 * peers on the host map, so collectives read each other's buffers with plain loads.
 * core_heap_open: creates the arena on first use, sized for `sharers` processes on the host mapping
 * each other's (a status with a message if the system refuses), and counts one user; blocks come
 * from it while any user is left. core_heap_close: one user less.
 * core_heap_alloc: a page-aligned block of at least `bytes`, or NULL (no user, or no room: the caller
 * falls back to its ordinary heap). core_heap_free: returns a block (FSDP_EINVAL for a pointer that is
 * not one). core_heap_offset: 1 + the offset of [p, p+bytes) in the arena when it lies inside, else 0.
 * core_heap_live: page-rounded bytes handed out. core_heap_cached: at most how many bytes of freed
 * blocks still hold pages (below the high-water mark), now and at most since the last trim.
 * core_heap_trim: gives the free pages back. */
typedef struct {
    int fd;     /* the memfd: peers open /proc/PID/fd/FD */
    char *base; /* the arena in this process */
    size_t size;
} core_heap_info;
fsdp_status core_heap_open(int sharers, core_heap_info *out);
void core_heap_close(void);
void *core_heap_alloc(size_t bytes);
fsdp_status core_heap_free(void *p, size_t bytes);
uint64_t core_heap_offset(const void *p, size_t bytes);
size_t core_heap_live(void);
void core_heap_cached(size_t *cur, size_t *peak);
void core_heap_trim(void);

/* Device memory in the tracked accounting (alloc.c): a device row (core/device.h) whose pointers cannot
 * carry the allocator's header counts each block here, under the same categories, peaks and timeline.
 * fsdp_mem_track: FSDP_EINVAL for a pointer already counted or a bad category. fsdp_mem_tracked: 1 and
 * its bytes and category when p is counted. fsdp_mem_untrack: 1 (and its bytes) when p was counted,
 * now not; 0 for a pointer never counted. */
fsdp_status fsdp_mem_track(const void *p, size_t bytes, fsdp_mem_cat cat);
int fsdp_mem_tracked(const void *p, size_t *bytes, fsdp_mem_cat *cat);
int fsdp_mem_untrack(const void *p, size_t *bytes);

/* The library's FSDP_* environment knobs (env.c; docs/ENV.md): one table and one parser. A set value
 * that does not parse or lies outside its range is FSDP_EINVAL naming the variable, what it takes and
 * its default; unset or empty is the default (and *out = def). fsdp_env_check validates every set one
 * (what fsdp_comm_init and fsdp-train do first). fsdp_env_value: the set value, or NULL. */
typedef enum { FSDP_ENV_BOOL, FSDP_ENV_INT, FSDP_ENV_CHOICE, FSDP_ENV_TEXT } fsdp_env_type;
typedef struct {
    const char *name;
    fsdp_env_type type;
    long lo, hi;         /* INT: the accepted range */
    const char *choices; /* CHOICE: "a|b|c" */
    const char *def;     /* the default, as text */
    const char *meaning;
} fsdp_env_var;
int fsdp_env_count(void);
const fsdp_env_var *fsdp_env_at(int i);
const char *fsdp_env_value(const char *name);
fsdp_status fsdp_env_bool(const char *name, int def, int *out);
/* Writes n bytes of buf to fd, waiting at most timeout_ms in all for fd to take them (poll); returns the
 * bytes written. For the last words of a process that is about to end: a full pipe (a launcher's daemon
 * that stopped reading) must not keep it alive. */
size_t fsdp_write_bounded(int fd, const void *buf, size_t n, int timeout_ms);
fsdp_status fsdp_env_int(const char *name, long def, long *out);
fsdp_status fsdp_env_choice(const char *name, int def, int *out); /* the index in choices */
fsdp_status fsdp_env_check(void);
/* The FSDP_* variables set in the environment that are neither a knob of the table nor the test
 * harness's (FSDP_FAULT_*, FSDP_TEST_*, ...: docs/ENV.md), their names comma-separated into buf (may be
 * NULL); returns how many. A misspelled knob is ignored by the library: fsdp-train warns of these, and
 * fsdp_env_check refuses them under FSDP_STRICT_ENV=1. */
int fsdp_env_unknown(char *buf, size_t cap);

/* Overflow-checked size_t multiply: returns 0 on overflow, else 1 and *out = a*b. */
static inline int fsdp_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

#endif
