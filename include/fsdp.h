/* fsdp.h — fully sharded data-parallel (ZeRO-3) training in C: the one public header.
 *
 * Tutorial (the whole life of one training step; error checks left out for brevity):
 *
 *   fsdp_comm_t *comm;                    // world 1 without a launcher, MPI under mpirun
 *   fsdp_comm_config cc = fsdp_comm_config_default();
 *   fsdp_comm_init(&comm, &cc, &argc, &argv);
 *
 *   fsdp_engine_t *eng;                   // holds the units, the policies and the communicator
 *   fsdp_engine_config ec = fsdp_engine_config_default();
 *   fsdp_engine_init(&eng, comm, &ec);
 *
 *   fsdp_tensor_spec specs[] = {          // one unit = one layer's parameters, flattened
 *       {.name = "w", .ndim = 2, .shape = {out, in}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
 *       {.name = "b", .ndim = 1, .shape = {out}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
 *   };
 *   fsdp_unit_t *u;
 *   fsdp_engine_add_unit(eng, "layer0", specs, 2, NULL, &u);
 *   fsdp_engine_init_params(eng);         // same values on any world size for one seed
 *
 *   fsdp_engine_begin_step(eng, n_micro); // zero the sharded gradients
 *   for (int m = 0; m < n_micro; m++) {
 *       fsdp_engine_begin_micro(eng, m);
 *       fsdp_unit_pre_forward(u);         // all-gather: params now readable in compute dtype
 *       void *w; fsdp_unit_param(u, 0, &w);
 *       ... forward ...
 *       fsdp_unit_post_forward(u);        // reshard (FULL_SHARD)
 *       fsdp_unit_pre_backward(u);        // all-gather again; main_grad allocated, uninitialised
 *       float *dw; int acc;
 *       fsdp_unit_main_grad(u, 0, &dw, &acc);   // acc == 0: overwrite (GEMM beta 0), else beta 1
 *       ... dW = dY^T X written into dw ...
 *       fsdp_unit_post_backward(u);       // zero-fill untouched slices, reduce-scatter, free
 *   }
 *   float norm;
 *   fsdp_engine_clip_grad_norm(eng, 1.0f, &norm);
 *   fsdp_adamw_config oc = fsdp_adamw_config_default();
 *   fsdp_engine_adamw_step(eng, &oc);
 *
 * Conventions: every library call returns an fsdp_status; on failure fsdp_last_error() holds a
 * message (per thread) that says what failed, where and what to do. Counts are element counts with a
 * dtype; `*_bytes` names hold bytes. Objects come in init/free pairs and free(NULL) is a no-op.
 */
#ifndef FSDP_H
#define FSDP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSDP_VERSION_MAJOR 0
#define FSDP_VERSION_MINOR 1

/* A target equal to this is not counted in the loss (PyTorch's ignore_index): the models
 * (fsdp_model.h) skip it, the data loader (src/data) writes it for masked tokens. */
#define FSDP_IGNORE_INDEX (-100)

/* ---------------------------------------------------------------- core: status */

typedef enum {
    FSDP_OK = 0,
    FSDP_EINVAL,       /* bad argument or input value */
    FSDP_ENOMEM,       /* allocation failed */
    FSDP_ESTATE,       /* call not allowed in the object's current state (hook order, view window) */
    FSDP_ECOMM,        /* communication failed (carries the backend's message) */
    FSDP_ETIMEOUT,     /* a collective did not complete within the configured timeout */
    FSDP_EIO,          /* file system error */
    FSDP_EFORMAT,      /* a file or message is malformed (magic, version, size, checksum) */
    FSDP_EUNSUPPORTED, /* valid request this build or machine cannot do */
    FSDP_EINTERNAL,    /* broken invariant: a bug in fsdp.c */
    FSDP_EPEER         /* this rank was fine but another rank failed (fsdp_comm_agree) */
} fsdp_status;

const char *fsdp_strerror(fsdp_status s);
/* Message of the last failure on this thread ("" if none). Valid until the next failing call. */
const char *fsdp_last_error(void);
/* Sets the calling thread's last-error message (printf format) and returns s. For code that
 * embeds the library and wants one error path; the library itself uses it internally. */
fsdp_status fsdp_set_error(fsdp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fsdp_clear_error(void);

/* ---------------------------------------------------------------- core: dtypes */

/* F32 and BF16 are the numeric types of tensors. I32, I64 (signed, two's complement) and U8 (raw
 * bytes) exist for the communicator: sizes, ids, lengths and texts travel as what they are. The shard
 * engine and the kernels accept F32/BF16 only. */
typedef enum { FSDP_F32 = 0, FSDP_BF16 = 1, FSDP_I32 = 2, FSDP_I64 = 3, FSDP_U8 = 4 } fsdp_dtype;
typedef uint16_t fsdp_bf16; /* raw bfloat16 bits */

size_t fsdp_dtype_size(fsdp_dtype t);      /* bytes per element; 0 for a value that is no dtype */
const char *fsdp_dtype_name(fsdp_dtype t); /* "f32", "bf16", "i32", "i64", "u8" */

/* f32 -> bf16 rounds to nearest, ties to even; NaN stays a quiet NaN with its sign; infinities,
 * signed zeros and subnormals are kept (subnormals rounded like any other value). */
fsdp_bf16 fsdp_f32_to_bf16(float x);
float fsdp_bf16_to_f32(fsdp_bf16 x);

/* Bulk forms; SIMD (AVX-512, AVX2) picked at run time, bit-identical to the scalar form.
 * dst and src must not overlap. n may be 0. */
void fsdp_f32_to_bf16_n(fsdp_bf16 *dst, const float *src, size_t n);
void fsdp_bf16_to_f32_n(float *dst, const fsdp_bf16 *src, size_t n);
/* One pass: dst[i] += (float)src[i] (fp32 add). */
void fsdp_bf16_add_f32_n(float *dst, const fsdp_bf16 *src, size_t n);

typedef enum { FSDP_SIMD_AUTO = 0, FSDP_SIMD_SCALAR, FSDP_SIMD_AVX2, FSDP_SIMD_AVX512 } fsdp_simd;
/* Forces a code path (tests, benchmarks). FSDP_EUNSUPPORTED if the CPU lacks it. Process-wide. */
fsdp_status fsdp_simd_force(fsdp_simd path);
fsdp_simd fsdp_simd_active(void);
const char *fsdp_simd_name(fsdp_simd path);

/* ---------------------------------------------------------------- core: tracked allocator */

typedef enum {
    FSDP_MEM_MASTER = 0, /* fp32 master weight shards */
    FSDP_MEM_OPTIM,      /* AdamW moments */
    FSDP_MEM_GRAD_SHARD, /* fp32 sharded gradients */
    FSDP_MEM_PARAM_FULL, /* unsharded parameters in compute dtype */
    FSDP_MEM_MAIN_GRAD,  /* unsharded fp32 main_grad buffers */
    FSDP_MEM_ACTIVATION,
    FSDP_MEM_COMM, /* communication staging */
    FSDP_MEM_OTHER,
    FSDP_MEM_NCAT
} fsdp_mem_cat;

const char *fsdp_mem_cat_name(fsdp_mem_cat c); /* "master", "optim", ... */
/* Parses a name back ("main_grad" -> FSDP_MEM_MAIN_GRAD); FSDP_EINVAL if unknown. */
fsdp_status fsdp_mem_cat_parse(const char *name, fsdp_mem_cat *out);

/* 64-byte aligned, uninitialised. bytes == 0 gives *out = NULL and FSDP_OK. Thread-safe.
 * On failure: FSDP_ENOMEM with the size and category in the message, *out = NULL. */
fsdp_status fsdp_mem_alloc(void **out, size_t bytes, fsdp_mem_cat cat);
/* Same, zero-filled. */
fsdp_status fsdp_mem_calloc(void **out, size_t bytes, fsdp_mem_cat cat);
void fsdp_mem_free(void *p); /* NULL is a no-op */
/* Same as fsdp_mem_alloc, but from the host-shared heap while a communicator with the shared-memory
 * transport is open in this process: an arena every rank on the host maps, so the communicator's
 * collectives read such a buffer from the peers with plain loads rather than a kernel copy (the
 * send buffer of a reduce-scatter or all-gather, in place or not). Falls back to fsdp_mem_alloc's heap
 * when no such communicator is open or the arena is full; the accounting is the same either way.
 * fsdp_mem_free frees both kinds. fsdp_mem_is_shared: 1 if p (from these allocators) lies in the
 * arena. The arena is reserved, not committed (FSDP_SHM_HEAP_MIB sizes it; default: the machine's
 * memory over the ranks on the host); its freed pages stay with the process until fsdp_mem_trim.
 * docs/DESIGN.md section 6. */
fsdp_status fsdp_mem_alloc_shared(void **out, size_t bytes, fsdp_mem_cat cat);
int fsdp_mem_is_shared(const void *p);

/* Accounting, in bytes requested (not counting the allocator's own header). */
size_t fsdp_mem_current(fsdp_mem_cat c);
size_t fsdp_mem_peak(fsdp_mem_cat c);
size_t fsdp_mem_total_current(void);
size_t fsdp_mem_total_peak(void); /* peak of the sum, not the sum of peaks */
void fsdp_mem_reset_peaks(void);  /* peaks := current values */

/* Freed blocks of >= 1 MiB are kept (at most 32 blocks, 512 MiB) and handed to the next allocation of
 * the same size, so a training step does not fault in fresh pages for every unit's full parameters and
 * main_grad. Kept bytes are freed bytes for the categories above: the process holds up to
 * fsdp_mem_cached() more than fsdp_mem_total_current(). Off in FSDP_DEBUG_CHECKS/sanitizer builds.
 * The shared heap's freed pages below its high-water mark count as kept too (an upper bound), in every
 * build. fsdp_mem_trim() returns every kept block to the C library and the shared heap's free pages
 * to the system. */
size_t fsdp_mem_cached(void);
size_t fsdp_mem_cached_peak(void); /* most bytes kept at once since start or the last trim */
void fsdp_mem_trim(void);

/* Optional timeline of allocation events for traces. */
typedef struct {
    double t_s; /* seconds since the timeline was enabled (monotonic clock) */
    fsdp_mem_cat cat;
    int64_t delta; /* +bytes on alloc, -bytes on free */
} fsdp_mem_event;
void fsdp_mem_timeline_enable(int on); /* on: clears and starts recording */
/* Copies out up to cap events (oldest first); returns the number recorded so far. */
size_t fsdp_mem_timeline(fsdp_mem_event *out, size_t cap);

/* Monotonic seconds. */
double fsdp_time_s(void);

/* ---------------------------------------------------------------- comm: communicator */

typedef struct fsdp_comm fsdp_comm_t;
typedef struct fsdp_comm_req fsdp_comm_req_t;

typedef enum {
    FSDP_COMM_AUTO = 0, /* MPI when started by a launcher (mpirun), else self */
    FSDP_COMM_SELF,     /* world size 1, no MPI calls at all */
    FSDP_COMM_MPI
} fsdp_comm_backend;

typedef enum { FSDP_SUM = 0, FSDP_AVG, FSDP_MAX } fsdp_reduce_op;

typedef struct {
    int version; /* = 1 */
    fsdp_comm_backend backend;
    double timeout_s; /* a collective not done after this long fails with FSDP_ETIMEOUT; <= 0: wait forever */
    int shm; /* 1 (default): when every rank is on one host, all-gather, reduce-scatter and all-reduce go
              * through a shared-memory segment (two 4 MiB slots per rank; FSDP_COMM_SHM_SLOT_KIB sets the
              * slot size); 0, or FSDP_COMM_SHM=0 in the environment: Open MPI's collectives */
    int stuck_exit; /* 1..255, with timeout_s > 0: a thread that has been inside one call into MPI for longer
                     * than timeout_s (MPI itself not returning, e.g. waiting on a lost launcher daemon, so
                     * the caller's wait never gets to report its timeout) prints which collective and
                     * ends the process with this status (_exit); 0 (default): no such watchdog */
} fsdp_comm_config;

fsdp_comm_config fsdp_comm_config_default(void);
/* argc/argv may be NULL. MPI is initialised here if the backend needs it and it is not yet. */
fsdp_status fsdp_comm_init(fsdp_comm_t **out, const fsdp_comm_config *cfg, int *argc, char ***argv);
void fsdp_comm_free(fsdp_comm_t *c); /* finalises MPI if fsdp_comm_init initialised it */
/* A communicator over the ranks of c that pass the same color (>= 0), ranked by key: MPI_Comm_split.
 * Collective over c. It has c's timeout and shared-memory setting (used where its ranks share a host);
 * free it with fsdp_comm_free before c. The self backend gives a world-1 communicator. */
fsdp_status fsdp_comm_split(fsdp_comm_t *c, int color, int key, fsdp_comm_t **out);
int fsdp_comm_rank(const fsdp_comm_t *c);
int fsdp_comm_size(const fsdp_comm_t *c);
int fsdp_comm_local_size(const fsdp_comm_t *c); /* ranks on this node */
const char *fsdp_comm_backend_name(const fsdp_comm_t *c);
int fsdp_comm_shm_active(const fsdp_comm_t *c); /* 1 if the shared-memory transport is in use */
/* 1 if a thread moves MPI requests in the background (ranks on several hosts; see comm_mpi.c) */
int fsdp_comm_progress_thread(const fsdp_comm_t *c);
/* A label ("unit block3 / reduce-scatter") that timeout and error messages include. Copied. */
void fsdp_comm_set_label(fsdp_comm_t *c, const char *label);
/* Ends every rank of the job (MPI_Abort), or exits the process for self. Programs only. Whatever blocks
 * on the way (a launcher that cannot reach a lost host, an output pipe nobody reads), the process ends
 * with code within FSDP_ABORT_GRACE_S of the call (or of fsdp_comm_abort_arm). */
void fsdp_comm_abort(fsdp_comm_t *c, int code);
/* Arms that deadline now, for a program that prints its last words before fsdp_comm_abort: a write
 * to a full pipe then cannot keep the process alive. Idempotent (the first arming counts). */
void fsdp_comm_abort_arm(fsdp_comm_t *c, int code);
#define FSDP_ABORT_GRACE_S 3

/* Agreement on a step that can fail on some ranks only (a file one rank cannot read, rank 0's output):
 * without it the ranks that were fine would wait in their next collective. Collective: every rank
 * passes its own outcome s of the step `what`. Returns
 * - FSDP_OK when no rank failed;
 * - s itself on a rank that failed (its message kept);
 * - FSDP_EPEER on a rank that was fine while some rank failed, with the message "<what> failed on rank
 *   r (its message says why)" naming the lowest failing rank r;
 * - the agreement's own communication failure (FSDP_ECOMM, FSDP_ETIMEOUT, FSDP_ESTATE): nothing was
 *   agreed, the job must end with fsdp_comm_abort.
 * c NULL or world size 1: s unchanged. One all-reduce (MAX) of one int64. */
fsdp_status fsdp_comm_agree(fsdp_comm_t *c, fsdp_status s, const char *what);
/* After the last fsdp_comm_agree on c: the lowest failing rank and (status != NULL) its status, so
 * every rank can end an agreed failure the same way; -1 (*status FSDP_OK) when that agreement found
 * no failure, none was made, or it failed itself. */
int fsdp_comm_agreed_failure(const fsdp_comm_t *c, fsdp_status *status);

/* Rules for every collective, on every backend:
 * - count 0 is a no-op returning FSDP_OK (buffers may then be NULL).
 * - FSDP_EINVAL, before anything is communicated: a NULL buffer with count > 0, world*count*size
 *   overflowing, a dtype that is not an fsdp_dtype, an op other than SUM/AVG/MAX, a reduction the
 *   dtype does not have (below), a root outside [0, size), or buffers that overlap other than in the
 *   documented in-place position.
 * - Dtypes: all-gather and broadcast move any dtype (bits untouched). Reductions: F32 and BF16 with
 *   SUM/AVG/MAX; I32 and I64 with SUM/MAX (exact, so independent of order; a sum must fit the type);
 *   U8 is bytes, not numbers: no reduction. Integer types travel as MPI's own integer types; the
 *   shared-memory transport carries F32/BF16 only, the others take Open MPI's collectives.
 * - Every rank must pass the same count, dtype, op and root, in the same collective order. This is not
 *   checked (it would cost a collective): a mismatch gives a wrong result, an MPI error or a timeout.
 * - AVG = SUM, then one division by the world size. MAX is supported by both reductions.
 * - Counts above INT_MAX work (derived datatypes / chunking), up to memory.
 * - With timeout_s > 0, a collective not complete in time returns FSDP_ETIMEOUT naming the rank, the
 *   label, the collective and the elapsed time. The communicator then refuses collectives
 *   (FSDP_ESTATE); the buffers of the timed-out call must stay valid; end the job with
 *   fsdp_comm_abort. fsdp_comm_test checks the deadline too, and on any failure consumes the request
 *   (sets *done = 1). */

/* Every rank sends `count` elements; recv gets size*count, rank r's at recv + r*count.
 * In place: send == recv + rank*count (elements) is allowed. */
fsdp_status fsdp_comm_all_gather(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t);
/* Every rank sends size*count elements; recv gets the reduction of block `rank` (count elements).
 * In place: recv == send (result in the first count elements) or recv == send + rank*count (result in
 * this rank's own block, where nothing has to move: the cheaper form) are allowed. BF16 is summed in
 * fp32 per element over all ranks in rank order and rounded once. */
fsdp_status fsdp_comm_reduce_scatter(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                     fsdp_reduce_op op);
/* In place: send == recv allowed. */
fsdp_status fsdp_comm_all_reduce(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                 fsdp_reduce_op op);
fsdp_status fsdp_comm_broadcast(fsdp_comm_t *c, void *buf, size_t count, fsdp_dtype t, int root);
fsdp_status fsdp_comm_barrier(fsdp_comm_t *c);

/* Non-blocking forms; buffers must stay untouched until the request completes.
 * fsdp_comm_wait frees the request (also on failure); fsdp_comm_test frees it once *done is 1. */
fsdp_status fsdp_comm_iall_gather(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                  fsdp_comm_req_t **req);
fsdp_status fsdp_comm_ireduce_scatter(fsdp_comm_t *c, const void *send, void *recv, size_t count,
                                      fsdp_dtype t, fsdp_reduce_op op, fsdp_comm_req_t **req);
fsdp_status fsdp_comm_iall_reduce(fsdp_comm_t *c, const void *send, void *recv, size_t count, fsdp_dtype t,
                                  fsdp_reduce_op op, fsdp_comm_req_t **req);
/* Reduce-scatter that accumulates (F32 SUM): acc[i] += scale * sum over ranks of block `rank` of
 * send, where the sum is the same rank-order fp32 sum fsdp_comm_ireduce_scatter computes and the
 * product is rounded before the addition (never an fma): bit for bit a reduce-scatter into a buffer b
 * followed by acc[i] += b[i] * scale, without writing b. acc (count elements) must not overlap send
 * (world*count); both stay untouched by the caller until the request completes. After a timeout the
 * call writes acc no more. */
fsdp_status fsdp_comm_ireduce_scatter_acc(fsdp_comm_t *c, const float *send, float *acc, size_t count,
                                          float scale, fsdp_comm_req_t **req);
fsdp_status fsdp_comm_test(fsdp_comm_req_t *req, int *done);
fsdp_status fsdp_comm_wait(fsdp_comm_req_t *req);
/* Advances every started request as far as it can without waiting (Open MPI and the shared-memory
 * transport move data only inside library calls): call it between kernels to overlap communication
 * with compute. A failure is reported by that request's own test/wait. */
void fsdp_comm_progress(fsdp_comm_t *c);
/* After a collective returned FSDP_ETIMEOUT: buf (from fsdp_mem_alloc) may still be written by that
 * call, so it must be neither freed nor reused; the communicator takes it and frees it once the call
 * completes (in fsdp_comm_free's grace period), or never. NULL is a no-op; with no timed-out call,
 * buf is freed at once. */
void fsdp_comm_adopt_buffer(fsdp_comm_t *c, void *buf);

/* ---------------------------------------------------------------- shard: flat parameters, units */

/* The one place shard arithmetic lives: a flat buffer of padded_numel elements (a multiple of world)
 * is split into world equal contiguous shards; rank r owns [*offset, *offset + *len). */
void fsdp_shard_range(size_t padded_numel, int rank, int world, size_t *offset, size_t *len);

/* FSDP_INIT_UNIFORM: uniform on [-std, std) (LoRA's A, Kaiming-uniform as PEFT: std = 1/sqrt(fan_in)). */
typedef enum { FSDP_INIT_ZEROS = 0, FSDP_INIT_ONES, FSDP_INIT_NORMAL, FSDP_INIT_UNIFORM } fsdp_init_kind;

#define FSDP_MAX_DIMS 4
typedef struct {
    const char *name; /* unique within the unit; copied */
    int ndim;         /* 1..FSDP_MAX_DIMS */
    int64_t shape[FSDP_MAX_DIMS];
    fsdp_init_kind init;
    float std; /* FSDP_INIT_NORMAL: mean 0, this standard deviation; FSDP_INIT_UNIFORM: the bound */
    /* Tied tensor: name of an earlier tensor in the same unit ("wte"), or "unit.tensor" naming one in
     * another unit (refused: FSDP_EINVAL naming both units). NULL: an ordinary tensor. An alias takes
     * no space: it shares its target's view, main_grad slice and shard. */
    const char *alias_of;
    int no_decay; /* AdamW skips weight decay for this tensor (biases, norm weights) */
    /* 1: frozen. The tensor takes part in forward and backward (input gradients flow through it) but
     * has no gradient, no fp32 master and no AdamW moments: it is kept as one shard in the compute dtype
     * (category master), gathered with the unit, never reduced, never updated. A unit lays out its
     * trainable tensors first (the trainable region: master, gradient, moments, main_grad, the
     * reduce-scatter) and its frozen ones after them (the frozen region), each padded to a multiple of
     * the world and sharded; a unit with nothing trainable allocates no main_grad and reduces nothing.
     * fsdp_unit_main_grad gives a frozen tensor a NULL view (the kernel skips its weight gradient). An
     * alias follows its target (its own flag is ignored). */
    int frozen;
} fsdp_tensor_spec;

typedef struct fsdp_device fsdp_device_t; /* the device seam (src/core/device.h) */

/* HYBRID_SHARD (HSDP): FULL_SHARD within groups of shard_group ranks, replicated across the groups;
 * gradients reduce-scattered within the group, then all-reduced across groups on the shard only. */
typedef enum { FSDP_FULL_SHARD = 0, FSDP_SHARD_GRAD_OP, FSDP_NO_SHARD, FSDP_HYBRID_SHARD } fsdp_strategy;
typedef enum { FSDP_MAIN_GRAD_LAZY = 0, FSDP_MAIN_GRAD_EAGER } fsdp_main_grad_policy;
typedef enum { FSDP_ACCUM_SHARDED = 0, FSDP_ACCUM_NO_SYNC } fsdp_accum_mode;

typedef struct {
    int version;                     /* = 1 */
    fsdp_strategy strategy;          /* FULL_SHARD */
    fsdp_dtype compute_dtype;        /* dtype of unsharded params: F32 or BF16 (default BF16) */
    fsdp_dtype reduce_dtype;         /* dtype on the wire for gradient reduction (default F32) */
    fsdp_main_grad_policy main_grad; /* LAZY */
    fsdp_accum_mode accum;           /* ACCUM_SHARDED */
    uint64_t seed;                   /* parameter initialisation */
    size_t align;                    /* tensor alignment in the flat buffer, elements (default 16) */
    int shard_group;  /* HYBRID_SHARD: ranks per shard group, a divisor of the world size; 0 (default):
                         the ranks of one host (each host one group) */
    int max_inflight; /* overlap (default 2): from the second step on, up to this many units' all-gathers
                         run ahead of their hooks (prefetch in the recorded forward and backward order;
                         the first this many units backward gathers stay gathered from forward instead)
                         and each reduction runs during the previous unit's backward; 0: every
                         collective completes inside its hook (no overlap, least memory) */
    /* Where the shards, gathered parameters and main_grad live and where the engine's element work
     * runs: NULL (default) the CPU. Library-internal devices so far: the CPU and the simulated device
     * of the tests (src/core/device.h, docs/DESIGN.md "Devices"). */
    fsdp_device_t *device;
    /* 1 (default): the caller's kernels run on the host at the call (fsdp.c's models): on an asynchronous
     * device the engine then lets the compute stream catch up before it hands out parameter and
     * main_grad views and after a grad_from_* copy. 0: the caller queues its kernels on the engine's
     * compute stream itself (a device backend's models; the simulated device's tests). */
    int host_kernels;
    /* Tensors to freeze by name, as if their fsdp_tensor_spec.frozen were 1: comma-separated shell
     * globs (fnmatch) over "unit.tensor" ("h*.qkv_w,root.*"); NULL or "" (default): none. Copied by
     * fsdp_engine_init; the memory plan applies its engine config's the same way. */
    const char *freeze;
} fsdp_engine_config;

typedef struct {
    int version;               /* = 1 */
    int reshard_after_forward; /* -1: the strategy's default (FULL_SHARD yes, others no); 0; 1 */
} fsdp_unit_config;

typedef struct fsdp_engine fsdp_engine_t;
typedef struct fsdp_unit fsdp_unit_t;

fsdp_engine_config fsdp_engine_config_default(void);
fsdp_unit_config fsdp_unit_config_default(void);

fsdp_status fsdp_engine_init(fsdp_engine_t **out, fsdp_comm_t *comm, const fsdp_engine_config *cfg);
void fsdp_engine_free(fsdp_engine_t *e); /* frees its units; not the communicator */
/* Adds a unit (registration order = unit index). cfg NULL: defaults. The flat layout is computed
 * here; master/grad shards and AdamW moments are allocated here (master uninitialised until
 * fsdp_engine_init_params or a load). */
fsdp_status fsdp_engine_add_unit(fsdp_engine_t *e, const char *name, const fsdp_tensor_spec *specs, int n,
                                 const fsdp_unit_config *cfg, fsdp_unit_t **out);
int fsdp_engine_num_units(const fsdp_engine_t *e);
fsdp_unit_t *fsdp_engine_unit(fsdp_engine_t *e, int i);
const fsdp_engine_config *fsdp_engine_get_config(const fsdp_engine_t *e);
fsdp_comm_t *fsdp_engine_comm(fsdp_engine_t *e);
/* The communicator parameters are gathered and gradients reduce-scattered on (the engine's own under
 * FULL_SHARD / SHARD_GRAD_OP / NO_SHARD; the shard group's under HYBRID_SHARD), and the one that
 * all-reduces gradient shards across groups (NULL unless HYBRID_SHARD with more than one group). */
fsdp_comm_t *fsdp_engine_shard_comm(fsdp_engine_t *e);
fsdp_comm_t *fsdp_engine_replica_comm(fsdp_engine_t *e);

/* Initialises every unit's master shard from cfg.seed, value by global element index: the same
 * weights on any world size. */
fsdp_status fsdp_engine_init_params(fsdp_engine_t *e);
/* The initial values of tensor t of unit u alone (this rank's part of them, trainable or frozen), as
 * fsdp_engine_init_params gives them: what a load that does not name the tensor (a LoRA adapter under
 * --init-from) leaves it at. Not collective. */
fsdp_status fsdp_unit_init_tensor(fsdp_unit_t *u, int t);

/* Unit introspection. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[FSDP_MAX_DIMS];
    size_t numel;
    size_t offset; /* element offset in the unit's flat buffer (an alias: its target's) */
    int alias_of;  /* index of the target tensor, or -1 */
    int no_decay;
    int frozen; /* 1: in the frozen region (offset >= fsdp_unit_padded_numel); an alias: its target's */
} fsdp_tensor_info;

const char *fsdp_unit_name(const fsdp_unit_t *u);
int fsdp_unit_index(const fsdp_unit_t *u);
int fsdp_unit_num_tensors(const fsdp_unit_t *u);
int fsdp_unit_find(const fsdp_unit_t *u, const char *name); /* -1 if absent */
fsdp_status fsdp_unit_tensor_info(const fsdp_unit_t *u, int t, fsdp_tensor_info *out);
/* The trainable region (the whole flat buffer when nothing is frozen): its unpadded length (non-alias
 * trainable tensors incl. alignment gaps), and its length padded to a multiple of world, which the
 * master, gradient and moment shards, main_grad and the reduce-scatter cover. */
size_t fsdp_unit_numel(const fsdp_unit_t *u);
size_t fsdp_unit_padded_numel(const fsdp_unit_t *u);
/* The frozen region's padded length (a multiple of world; 0 when nothing is frozen). It follows the
 * trainable region in the unsharded buffer: flat elements [padded_numel, padded_numel + this). */
size_t fsdp_unit_frozen_padded_numel(const fsdp_unit_t *u);

/* This rank's shard: fp32 master weights, fp32 sharded gradient, AdamW moments, all with the same
 * offsets; [offset, offset+numel) of the flat buffer. Under NO_SHARD the "shard" is everything.
 * replicas ranks hold this same shard (NO_SHARD: world; HYBRID_SHARD: the groups; else 1); this rank
 * is replica number `replica` of them (a checkpoint saves slice `replica` of `replicas` of it). */
typedef struct {
    float *master, *grad, *adam_m, *adam_v;
    size_t offset, numel;
    int replica, replicas;
    /* The frozen region's shard: flat elements [frozen_offset, frozen_offset + frozen_numel) (absolute,
     * so frozen_offset >= the trainable region's padded length), held in the compute dtype at frozen
     * (NULL where the host may not address it, or frozen_numel == 0). */
    void *frozen;
    size_t frozen_offset, frozen_numel;
} fsdp_shard_view;
fsdp_status fsdp_unit_shard(fsdp_unit_t *u, fsdp_shard_view *out);
/* The same view where the host may address the engine's device memory (the CPU: the same as
 * fsdp_unit_shard); elsewhere offset, numel, replica and replicas only, with every pointer NULL: then
 * the bytes move through fsdp_unit_shard_read / _write (checkpoints and Hugging Face folders do). */
fsdp_status fsdp_unit_shard_info(fsdp_unit_t *u, fsdp_shard_view *out);
/* Which of the shard's fp32 arrays a copy moves. */
typedef enum {
    FSDP_SHARD_MASTER = 0,
    FSDP_SHARD_ADAM_M,
    FSDP_SHARD_ADAM_V,
    FSDP_SHARD_GRAD,
    FSDP_SHARD_FROZEN /* the frozen region's shard (frozen_offset..): converted from and to fp32 (a
                         bf16 region rounds a write to nearest even, and reads back exactly) */
} fsdp_shard_array;
/* Copies flat elements [offset, offset + count) of this rank's shard of one array (inside the view's
 * [offset, offset + numel)) to host memory dst, or from host memory src into it, through the engine's
 * device; returns when the copy is done (src may be reused). A write changes the master: prefetched
 * parameters are dropped, as for a load. */
fsdp_status fsdp_unit_shard_read(fsdp_unit_t *u, fsdp_shard_array which, size_t offset, size_t count,
                                 float *dst);
fsdp_status fsdp_unit_shard_write(fsdp_unit_t *u, fsdp_shard_array which, size_t offset, size_t count,
                                  const float *src);

/* Lifecycle hooks. Out-of-order calls return FSDP_ESTATE naming the unit, its state and the call.
 * A forward inside backward (activation recompute: pre_forward/post_forward between pre_backward and
 * post_backward) is allowed and keeps the parameters. A new pre_forward after post_forward without
 * a backward (evaluation) is allowed and abandons that forward. */
fsdp_status fsdp_unit_pre_forward(fsdp_unit_t *u);
fsdp_status fsdp_unit_post_forward(fsdp_unit_t *u);
fsdp_status fsdp_unit_pre_backward(fsdp_unit_t *u);
fsdp_status fsdp_unit_post_backward(fsdp_unit_t *u);
/* Frees every unit's full parameters (after evaluation-only forwards). */
fsdp_status fsdp_engine_reshard_all(fsdp_engine_t *e);
/* on 1: the forwards that follow have no backward (evaluation, sampling, logits): post_forward
 * reshards as in a forward of a unit backward will not need (no unit is kept gathered for backward)
 * and EAGER main_grad is not allocated, so they stay inside the memory plan; pre_backward is
 * FSDP_ESTATE until it is set back to 0 (call fsdp_engine_reshard_all first). */
fsdp_status fsdp_engine_set_no_backward(fsdp_engine_t *e, int on);
int fsdp_engine_no_backward(const fsdp_engine_t *e); /* the setting (0 for NULL) */
/* Completes every collective the overlap left running (the pending reduction, prefetched gathers) and
 * drops prefetched parameters no hook has used. Clip, AdamW, begin_step, zero_grad, gather/load
 * tensor, fsdp_unit_shard, reshard_all and engine_free call it themselves; call it before reading
 * gradient shards any other way. Collective (every rank). */
fsdp_status fsdp_engine_drain(fsdp_engine_t *e);
/* Gives started collectives a turn of progress without waiting; a model calls it between kernels so
 * that prefetches and reductions move while it computes (see fsdp_comm_progress). */
void fsdp_engine_progress(fsdp_engine_t *e);
/* Hook calls that did not follow the order recorded in the first step (prefetch then pauses until
 * the next pass starts again at its first unit). */
long fsdp_engine_order_mismatches(const fsdp_engine_t *e);

/* View of tensor t of the unsharded parameters, in the compute dtype (float* or fsdp_bf16*).
 * FSDP_ESTATE when the unit is not unsharded. */
fsdp_status fsdp_unit_param(fsdp_unit_t *u, int t, void **view);

/* ---------------------------------------------------------------- shard: main_grad */

/* The first-touch protocol. Returns tensor t's fp32 main_grad view and whether to accumulate:
 * *accumulate == 0: first touch since allocation — the caller MUST overwrite every element
 *                   (GEMM beta = 0); the contents are uninitialised.
 * *accumulate == 1: add into it (GEMM beta = 1).
 * Marks the tensor written. An alias resolves to its target (so a tied weight's second use
 * accumulates). Allowed between pre_backward and post_backward (and, under EAGER, from pre_forward);
 * elsewhere FSDP_ESTATE, never a stale pointer. A frozen tensor (fsdp_tensor_spec.frozen): *view NULL
 * and *accumulate 0, FSDP_OK (in the same window): the caller skips that weight gradient; the
 * grad_from_* calls below do nothing for it. */
fsdp_status fsdp_unit_main_grad(fsdp_unit_t *u, int t, float **view, int *accumulate);
/* A low-precision gradient from a non-fused op, whole tensor: upcast-copy on first touch, else
 * upcast-add; one pass, no temporary. */
fsdp_status fsdp_unit_grad_from_bf16(fsdp_unit_t *u, int t, const fsdp_bf16 *g);
/* Same for an fp32 gradient: copy on first touch, else add. Both are queued on the engine's compute
 * stream (the CPU runs them at once): on an asynchronous device without host_kernels g is read when
 * the stream gets there, so it must stay unchanged until the engine next synchronises (clip_grad_norm);
 * with host_kernels the call returns once it was read. */
fsdp_status fsdp_unit_grad_from_f32(fsdp_unit_t *u, int t, const float *g);
/* Whether tensor t was written since main_grad was allocated (tests, diagnostics). */
int fsdp_unit_grad_touched(const fsdp_unit_t *u, int t);

/* Step structure. begin_step zeroes the sharded gradients and fixes the number of micro-batches;
 * begin_micro(m) announces micro-batch m (0-based). post_backward of micro-batch m reduces:
 *   ACCUM_SHARDED: every micro-batch, adding into the sharded gradient;
 *   ACCUM_NO_SYNC: only after the last; main_grad is kept (and accumulates) until then.
 * Averaging over ranks and micro-batches happens once, when the reduced gradient is added into the
 * sharded gradient (scale 1 / (world * n_micro)); the model's loss is a mean over its own micro-batch. */
fsdp_status fsdp_engine_begin_step(fsdp_engine_t *e, int n_micro);
fsdp_status fsdp_engine_begin_micro(fsdp_engine_t *e, int m);
/* Zeroes every sharded gradient (begin_step does it too). */
fsdp_status fsdp_engine_zero_grad(fsdp_engine_t *e);

/* ---------------------------------------------------------------- shard: optimizer */

/* Global gradient norm over the whole model's fp32 sharded gradients (padding excluded, each element
 * counted once, aliases once): sqrt of one all-reduce of local squared sums. If max_norm > 0 and the
 * norm exceeds it, scales the gradients by max_norm / (norm + 1e-6). *norm: the pre-clip norm. */
fsdp_status fsdp_engine_clip_grad_norm(fsdp_engine_t *e, float max_norm, float *norm);

typedef struct {
    int version;                               /* = 1 */
    float lr, beta1, beta2, eps, weight_decay; /* 3e-4, 0.9, 0.95, 1e-8, 0.1 */
} fsdp_adamw_config;
fsdp_adamw_config fsdp_adamw_config_default(void);
/* One AdamW step (decoupled weight decay, bias correction) on every master shard; tensors with
 * no_decay get none. Increments the engine's step count (bias correction uses it). */
fsdp_status fsdp_engine_adamw_step(fsdp_engine_t *e, const fsdp_adamw_config *cfg);
int64_t fsdp_engine_step_count(const fsdp_engine_t *e);
void fsdp_engine_set_step_count(fsdp_engine_t *e, int64_t step); /* checkpoint restore */

/* ---------------------------------------------------------------- shard: full tensors */

/* Gathers tensor t's full fp32 values (numel elements) from the master shards into out on `root`,
 * or on every rank if root < 0 (out may be NULL on non-root ranks). Collective. */
fsdp_status fsdp_unit_gather_tensor(fsdp_unit_t *u, int t, float *out, int root);
/* Sets tensor t's master values from full fp32 data. root >= 0: only root's `full` is read (it is
 * broadcast); root < 0: every rank passes the same data. Collective. */
fsdp_status fsdp_unit_load_tensor(fsdp_unit_t *u, int t, const float *full, int root);

/* ---------------------------------------------------------------- plan: predicted memory */

/* Predicts every allocator category's per-rank peak for a set of units, a world size and the engine's
 * policies WITHOUT allocating anything: the layout is the engine's arithmetic (alignment, padding to a
 * multiple of world, fsdp_shard_range), and the allocation sequence of one training step is replayed
 * exactly as unit.c / main_grad.c / the comm backend perform it. For master, optim, grad_shard,
 * param_full, main_grad and comm the prediction equals fsdp_mem_peak after a step to the byte;
 * activation and other are the caller's estimates, passed through.
 *
 * Use (errors left out):
 *   fsdp_plan_unit pu[] = {{.name = "root", .specs = root_specs, .n_specs = 5, .cfg = &root_cfg},
 *                          {.name = "h0", .specs = block_specs, .n_specs = 12}, ...};
 *   fsdp_plan_config pc = fsdp_plan_config_default();
 *   pc.world = 4; pc.engine = engine_cfg; pc.activation_bytes = gpt_activation_bytes(&gc, B, T);
 *   fsdp_plan plan; fsdp_plan_compute(pu, n, &pc, &plan);
 *   fsdp_plan_print(stdout, &plan, NULL);                 // before the run
 *   ... run ...
 *   fsdp_mem_peaks m; fsdp_mem_peaks_local(&m); fsdp_mem_peaks_max(comm, &m);   // collective
 *   if (rank == 0) { fsdp_plan_print(stdout, &plan, &m); fsdp_plan_write_json("r.json", &plan, &m); }
 */

/* One unit to plan: the same specs and unit config fsdp_engine_add_unit would get. */
typedef struct {
    const char *name;              /* for messages (may be NULL) */
    const fsdp_tensor_spec *specs; /* (n_specs) */
    int n_specs;
    const fsdp_unit_config *cfg; /* NULL: fsdp_unit_config_default() */
    size_t param_full_bytes;     /* 0: the engine's unsharded buffer (padded x compute dtype); else the
                                    bytes this unit's full parameters take (a caller-managed unit) */
} fsdp_plan_unit;

/* The hook order of one forward + backward (the order the model calls the unit hooks in). */
typedef enum {
    FSDP_PLAN_ROOT_WRAPS = 0, /* unit 0 is the root: its pre/post_forward and pre/post_backward enclose
                                 every other unit's (gpt, PyTorch FSDP); others in order / reverse */
    FSDP_PLAN_SEQUENTIAL      /* forward units 0..n-1, backward n-1..0, each hook pair back to back */
} fsdp_plan_schedule;

typedef struct {
    int version;                 /* = 1 */
    int world;                   /* ranks, >= 1 (default 1) */
    fsdp_engine_config engine;   /* strategy, compute/reduce dtype, main_grad policy, accum, align */
    fsdp_comm_backend backend;   /* staging of the reduction; AUTO: MPI if world > 1, else SELF */
    int shm;                     /* MPI backend: 1 (default) if the gathers' and reduce-scatters'
                                    communicator (HYBRID: the shard group's) runs on shared memory (no
                                    staging); 0: Open MPI's paths */
    int shard_group;             /* HYBRID_SHARD: ranks per group (0: world) */
    int replica_shm;             /* HYBRID_SHARD: 1 (default) if the across-group all-reduce runs on
                                    shared memory (the groups share a host), 0: MPI's all-to-all */
    int n_micro;                 /* micro-batches per step, >= 1 (default 1) */
    int steps;                   /* steps replayed: 2 (default) for any run of 2+ steps, 1 for a one-step
                                    run (the first step records the hook order; prefetch starts after) */
    fsdp_plan_schedule schedule; /* default ROOT_WRAPS */
    size_t activation_bytes;     /* the model's activation estimate (e.g. gpt_activation_bytes), bytes */
    size_t other_bytes;          /* anything else the program holds in category other, bytes */
} fsdp_plan_config;

/* Peak bytes per category and the peak of their sum (not the sum of the peaks). */
typedef struct {
    size_t peak[FSDP_MEM_NCAT];
    size_t total;
} fsdp_mem_peaks;

typedef struct {
    fsdp_plan_config cfg;     /* as given, backend resolved */
    fsdp_mem_peaks predicted; /* per rank; every rank gets the same (shards are equal) */
    fsdp_mem_peaks no_shard;  /* the same run as plain data parallel (strategy NO_SHARD) */
    size_t n_params;          /* psi: parameter elements (aliases once; no alignment gaps or padding) */
    size_t n_frozen;          /* of them frozen (fsdp_tensor_spec.frozen) */
    size_t padded_params;     /* sum of the flat buffers' lengths, elements */
    size_t zero_ref_bytes;    /* ZeRO-3 model states per rank, ((2 + 2 + 12) * psi_trainable + 2 *
                                 psi_frozen) / world, rounded up */
    int n_units;
} fsdp_plan;

fsdp_plan_config fsdp_plan_config_default(void);
/* FSDP_EINVAL (naming the unit and tensor) for specs fsdp_engine_add_unit would refuse. */
fsdp_status fsdp_plan_compute(const fsdp_plan_unit *units, int n_units, const fsdp_plan_config *cfg,
                              fsdp_plan *out);
/* The flat layout of one unit as the engine computes it: *numel as fsdp_unit_numel, *padded as
 * fsdp_unit_padded_numel (either may be NULL). */
fsdp_status fsdp_plan_unit_layout(const fsdp_plan_unit *u, size_t align, int world, size_t *numel,
                                  size_t *padded);
/* This process's measured peaks (fsdp_mem_peak per category, fsdp_mem_total_peak). */
void fsdp_mem_peaks_local(fsdp_mem_peaks *out);
/* Collective: *inout := the element-wise maximum over ranks (exact: sizes travel as I64). */
fsdp_status fsdp_mem_peaks_max(fsdp_comm_t *c, fsdp_mem_peaks *inout);
/* Table: category, predicted bytes and MiB, plain-data-parallel MiB and, if measured != NULL, measured
 * bytes and MiB with the difference; then the ZeRO reference. f: an open stream (stdout). */
fsdp_status fsdp_plan_print(FILE *f, const fsdp_plan *p, const fsdp_mem_peaks *measured);
/* {"predicted": {"master": bytes, ..., "total": bytes}, "measured": {...} (only if measured != NULL),
 *  "no_shard": {...}, "zero_ref_bytes": n, "n_params": psi, "world": N, ...} written to path (replaced). */
fsdp_status fsdp_plan_write_json(const char *path, const fsdp_plan *p, const fsdp_mem_peaks *measured);

/* ---------------------------------------------------------------- trace: Chrome-trace JSON */

/* Records duration events and the allocator's per-category memory over time, and writes them as
 * Chrome-trace JSON (open in Perfetto or chrome://tracing): pid = rank, one counter track "memory"
 * with one series per category. Disabled, every call is one atomic load. Thread-safe (each thread
 * gets its own tid); call fsdp_trace_enable after a barrier so the ranks' time origins roughly agree.
 * The shard engine emits "<phase> <unit>" spans (all-gather, forward, backward, reduce-scatter or
 * all-reduce, optimizer) through fsdp_trace_unit_begin/end. */

/* Starts recording (clears earlier events; turns on fsdp_mem_timeline). rank labels the process. */
fsdp_status fsdp_trace_enable(int rank);
/* Stops recording; recorded events are kept until the next enable or fsdp_trace_free. */
void fsdp_trace_disable(void);
int fsdp_trace_enabled(void);
/* A duration event on this thread, begin/end nested like a call stack (Chrome "B"/"E"). name and cat
 * are copied (truncated to 63 and 31 characters). */
void fsdp_trace_begin(const char *name, const char *cat);
void fsdp_trace_end(const char *name, const char *cat);
/* Shard-engine form: name "<phase> <unit>", category = phase ("all-gather", "forward", "backward",
 * "reduce-scatter", "optimizer"). */
void fsdp_trace_unit_begin(const char *unit, const char *phase);
void fsdp_trace_unit_end(const char *unit, const char *phase);
/* Number of duration events recorded so far. */
size_t fsdp_trace_num_events(void);
/* Writes the trace to path. comm != NULL: collective; every rank's events are gathered to rank 0,
 * which alone writes the file (one file, pid = rank). comm NULL: this process's events only. */
fsdp_status fsdp_trace_write(const char *path, fsdp_comm_t *comm);
/* Frees the recorded events (and disables recording). */
void fsdp_trace_free(void);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_H */
