/* kernels.h — CPU compute kernels for a GPT-2 model: oneDNN GEMMs (forward, input gradient, and a
 * weight gradient written straight into an fp32 main_grad with beta 0 or 1) and plain C + OpenMP
 * element-wise kernels (encoder, LayerNorm, GELU, residual, causal attention, softmax cross-entropy;
 * for the Llama family RMSNorm, RoPE and SwiGLU).
 *
 * Conventions shared by every kernel here:
 * - Row-major, contiguous tensors. Shapes are written as [rows, cols]; "N" in element-wise kernels is
 *   the number of rows (B*T).
 * - Activations and activation gradients are float (fp32) in both precision modes.
 * - Parameter INPUTS arrive as (const void *, fsdp_dtype pdt): FSDP_F32 (fp32 mode) or FSDP_BF16
 *   (mixed mode: the unsharded parameters). All parameter pointers of one call share pdt.
 * - Parameter GRADIENTS are fp32 main_grad slices with an `accumulate` flag (the first-touch protocol
 *   of fsdp_unit_main_grad): 0 = overwrite every element (the buffer may hold garbage or NaN),
 *   1 = add into the existing values exactly once.
 * - GEMMs in mixed mode (pdt == FSDP_BF16) take one of two maths, chosen per process
 *   (fsdp_mixed_compute below): bf16 GEMMs round their fp32 activation operands to bf16 (RNE, in a
 *   scratch buffer) and multiply bf16 x bf16 with fp32 accumulation and fp32 output; the f32-compute
 *   path widens the bf16 weight to f32 (exact) and multiplies the fp32 activations as they are. The
 *   weight-gradient GEMM of the f32-compute path is entirely fp32. In fp32 mode everything is fp32.
 * - Non-positive dims, NULL required pointers, out-of-range token ids -> FSDP_EINVAL with a message;
 *   nothing is written on a validation failure. Scratch goes through fsdp_mem_alloc.
 * - Memory: the GEMMs keep a grow-only workspace (category FSDP_MEM_OTHER) until
 *   fsdp_kernels_shutdown: on the bf16 paths bf16 copies of the activation operands (largest M*K + M*N
 *   elements of 2 bytes; the LM head's dlogits copy dominates: B*T*Vp*2 bytes; f32 copies of both
 *   operands too on the bf16-via-f32 path); on the f32-compute path the widened weight (rows =
 * fsdp_gemm_widen_rows(K, N): rows * K floats, at most 32 MiB), when the weight is widened in several blocks
 * (rows < N) a dense [M, rows] float buffer for one block's output or dout columns, and the widened bias (N
 * floats); oneDNN's scratchpad on every path. Element-wise kernels and attention allocate only per-call
 * buffers (C, T, (hs+1)*T or 64*T floats per thread) and free them before returning.
 * - Linear-layer GEMM calls are serialised by a mutex (one engine, stream, cache and workspace per
 *   process); attention's sgemm calls keep no state and run on the calling OpenMP thread;
 *   the element-wise kernels keep no shared state. Parallelism is inside each kernel (OpenMP, and
 *   oneDNN's own OpenMP threads).
 * - Results are deterministic for a fixed thread count (no atomics; fixed summation orders).
 */
#ifndef FSDP_KERNELS_H
#define FSDP_KERNELS_H

#include "core/device.h"
#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- runtime: oneDNN engine, paths */

/* Creates the process-wide oneDNN CPU engine and stream. Idempotent; every GEMM calls it lazily, so
 * calling it is optional (useful to fail early with a clear message). */
fsdp_status fsdp_kernels_init(void);
/* Frees the primitive cache, scratch buffers, stream and engine. Safe to call when not initialised;
 * a later kernel call initialises again. */
void fsdp_kernels_shutdown(void);

/* How a GEMM with parameter dtype pdt runs. */
typedef enum {
    FSDP_GEMM_F32 = 0,      /* fp32 parameters: oneDNN f32 x f32 -> f32 */
    FSDP_GEMM_BF16,         /* oneDNN bf16 x bf16 -> f32 (native or oneDNN-emulated on this ISA); the fp32
                               activation operands are rounded to bf16 */
    FSDP_GEMM_BF16_VIA_F32, /* the same bf16 math where oneDNN has no bf16 matmul: both bf16 operands
                               widened to f32 (exact), f32 GEMM */
    FSDP_GEMM_F32_COMPUTE   /* bf16 parameters widened to f32 (exact), fp32 activations unrounded, f32
                               GEMM: bf16 storage and wire, fp32 math */
} fsdp_gemm_path;

/* How mixed precision (bf16 parameters) computes its GEMMs, set for the process:
 *   BF16  bf16 GEMMs (FSDP_GEMM_BF16, or FSDP_GEMM_BF16_VIA_F32 where oneDNN has no bf16 matmul);
 *   F32   FSDP_GEMM_F32_COMPUTE;
 *   AUTO  (default) the environment variable FSDP_MIXED_COMPUTE=auto|bf16|f32 if set, else: F32 where
 *         oneDNN has no bf16 matmul (AVX2 CPUs), else a probe at the first bf16 GEMM times one
 *         representative GEMM forward on both paths (conversions included) and picks BF16 only when it
 *         takes at most 0.9x the f32-compute time.
 * The probe's answer may differ between machines or runs; ranks of one job must agree on it (the
 * trainer sets rank 0's choice on every rank). Setting resets the resolved choice. */
typedef enum {
    FSDP_MIXED_COMPUTE_AUTO = 0,
    FSDP_MIXED_COMPUTE_BF16,
    FSDP_MIXED_COMPUTE_F32
} fsdp_mixed_compute;

typedef struct {
    fsdp_gemm_path path;        /* FSDP_GEMM_BF16, FSDP_GEMM_BF16_VIA_F32 or FSDP_GEMM_F32_COMPUTE */
    fsdp_mixed_compute setting; /* BF16 or F32 once resolved; AUTO when the probe or the ISA decided */
    const char *source;         /* "set", "FSDP_MIXED_COMPUTE", "auto: probe", "auto: no bf16 matmul ..." */
    double probe_bf16_ms, probe_f32_ms; /* the probe's best times; 0 when no probe ran */
} fsdp_gemm_mixed_choice;

fsdp_status fsdp_gemm_set_mixed_compute(fsdp_mixed_compute m);
/* Resolves the choice (probing once if it must) and returns it. FSDP_EINVAL for a bad
 * FSDP_MIXED_COMPUTE value (every bf16 GEMM then fails with the same message). */
fsdp_status fsdp_gemm_mixed_choice_get(fsdp_gemm_mixed_choice *out);
const char *fsdp_mixed_compute_name(fsdp_mixed_compute m); /* "auto", "bf16", "f32" */

/* The path GEMMs with parameter dtype pdt take on this machine (resolves the mixed choice; may
 * initialise and probe). */
fsdp_gemm_path fsdp_gemm_path_for(fsdp_dtype pdt);
const char *fsdp_gemm_path_name(fsdp_gemm_path p); /* "f32", "bf16", "bf16-via-f32", "f32-compute" */
/* oneDNN's effective CPU ISA ("avx512_core_bf16", "avx2", ...). */
const char *fsdp_kernels_isa_name(void);
/* oneDNN implementation chosen for a representative GEMM of dtype pdt (e.g. "brg:avx512_core_bf16"),
 * or "unavailable". Static string valid until fsdp_kernels_shutdown. */
const char *fsdp_gemm_impl_name(fsdp_dtype pdt);
/* Tests/benchmarks: force the bf16-via-f32 fallback for the BF16 setting (on = 1) or return to auto
 * (on = 0). Clears the primitive cache and the resolved mixed choice. */
fsdp_status fsdp_gemm_force_bf16_fallback(int on);
/* f32-compute path: rows of a weight [N,K] widened per block: N when the whole weight fits in 32 MiB
 * as f32, else equal blocks of a multiple of 16 rows within that bound (at least 16 rows). 0 for bad
 * dims. */
int fsdp_gemm_widen_rows(int K, int N);
/* The f32-compute workspace an [M,K] x [N,K]^T GEMM (or its dinp) needs: *w32_bytes the widened rows,
 * *c32_bytes the dense block buffer (0 unless the weight is widened in blocks and this ISA's f32
 * kernel needs dense operands). May initialise oneDNN. */
void fsdp_gemm_widen_workspace(int M, int K, int N, size_t *w32_bytes, size_t *c32_bytes);
/* The best of a few square S x S x S GEMMs (S 512 or 1024) (fsdp_matmul_forward with parameters in pdt, the
 * path this process's GEMMs take) on the calling process's OpenMP threads, bounded by budget_s seconds in all
 * (warm-ups included): 2 S^3 / best seconds. Releases the GEMM workspace afterwards
 * (fsdp_kernels_shutdown), so that the memory figures after it are the run's alone. */
typedef struct {
    double gflops;  /* the measured peak, GFLOP/s of this process */
    double best_s;  /* the best repetition */
    double total_s; /* the whole measurement, warm-up included */
    int size;       /* S */
    int reps;       /* timed repetitions */
} fsdp_gemm_peak_result;

fsdp_status fsdp_gemm_peak(fsdp_dtype pdt, double budget_s, fsdp_gemm_peak_result *out);
/* Tests/benchmarks: the block bound of fsdp_gemm_widen_rows in bytes (0: the default, 32 MiB). */
void fsdp_gemm_set_widen_bytes(size_t bytes);
/* One weight a model multiplies by: out[rows, n] = in[rows, k] W[n, k]^T (+ bias[n] when bias);
 * frozen: its backward computes no weight gradient; dinp_acc: its input gradient accumulates (a LoRA
 * adapter's A adds to the frozen projection's). */
typedef struct {
    int k, n, bias, frozen, dinp_acc;
} fsdp_gemm_shape;
/* The bytes the GEMMs keep in category other (their grow-only workspace: operand copies, widened
 * weights and bias, dense block buffers, oneDNN's scratchpad) at its peak when a model multiplies
 * `rows` activation rows by each of the weights in shapes, forward and backward (dinp, and dW both
 * overwriting and accumulating), with parameter dtype `compute` (FSDP_F32 or FSDP_BF16, the path
 * fsdp_gemm_path_for takes). Exact: each GEMM runs dry on this machine's path and ISA (the same code and
 * oneDNN primitives as the real call, which it creates and caches, touching no data) and the slots'
 * largest requests are added up. May initialise oneDNN and resolve the mixed-precision path; allocates
 * nothing tracked. 0 on an error or for no shapes. */
size_t fsdp_gemm_workspace_bytes(size_t rows, const fsdp_gemm_shape *shapes, int n_shapes,
                                 fsdp_dtype compute);

/* Primitive cache counters since init (tests: a repeated shape must hit). */
typedef struct {
    size_t entries; /* primitives currently cached */
    size_t hits, misses;
} fsdp_gemm_cache_stats;
void fsdp_gemm_get_cache_stats(fsdp_gemm_cache_stats *out);

/* ---------------------------------------------------------------- GEMMs (linear layers) */

/* out[M,N] = inp[M,K] · weight[N,K]^T (+ bias[N]).  out: float [M,N], overwritten.
 * inp: float [M,K]; weight: pdt [N,K]; bias: pdt [N] or NULL. out must not overlap inp. */
fsdp_status fsdp_matmul_forward(float *out, const float *inp, const void *weight, const void *bias,
                                fsdp_dtype pdt, int M, int K, int N);

/* Backward of fsdp_matmul_forward. Each output may be NULL (not computed) and has its own flag:
 *   dinp[M,K]    (+)= dout[M,N] · weight[N,K]         float activation grad; dinp_acc 1 lets a
 *                                                     residual branch add into an existing gradient
 *   dweight[N,K] (+)= dout[M,N]^T · inp[M,K]          fp32 main_grad slice, dweight_acc = beta
 *   dbias[N]     (+)= sum over rows of dout[M,N]      fp32 main_grad slice, dbias_acc
 * dout: float [M,N]; inp: float [M,K] (needed when dweight != NULL); weight: pdt [N,K] (needed when
 * dinp != NULL). In mixed mode dout is rounded to bf16 once and used by both GEMMs; dbias is summed
 * from the fp32 dout in a fixed order (deterministic). */
fsdp_status fsdp_matmul_backward(float *dinp, int dinp_acc, float *dweight, int dweight_acc, float *dbias,
                                 int dbias_acc, const float *dout, const float *inp, const void *weight,
                                 fsdp_dtype pdt, int M, int K, int N);

/* ---------------------------------------------------------------- encoder (token + position embedding) */

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe NULL: wte's row alone, for models without position
 * embeddings).
 * out: float [B,T,C]; tokens: int32 [B,T], each in [0, Vrows); wte: pdt [Vrows,C] (Vrows may be the
 * padded vocab); wpe: pdt [maxT,C] with T <= maxT. */
fsdp_status fsdp_encoder_forward(float *out, const int *tokens, const void *wte, const void *wpe,
                                 fsdp_dtype pdt, int B, int T, int C, int Vrows, int maxT);
/* dwte[Vrows,C] (+)= scatter-add of dout rows by token; dwpe[maxT,C] (+)= sum over b of dout[b,t,:].
 * With *_acc == 0 every element is written: rows never hit (tokens not present, t >= T) are zeroed.
 * Either gradient may be NULL. Deterministic (parallel over channels, fixed order over tokens). */
fsdp_status fsdp_encoder_backward(float *dwte, int dwte_acc, float *dwpe, int dwpe_acc, const float *dout,
                                  const int *tokens, int B, int T, int C, int Vrows, int maxT);

/* The same with explicit positions pos int32 [B,T] (NULL: the two functions above): row (b,t) adds
 * wpe[pos[b,t]] and its gradient goes to dwpe[pos[b,t]] (packed documents: positions restart per
 * document). Every pos in [0, maxT); T itself may then exceed maxT. */
fsdp_status fsdp_encoder_forward_pos(float *out, const int *tokens, const int *pos, const void *wte,
                                     const void *wpe, fsdp_dtype pdt, int B, int T, int C, int Vrows,
                                     int maxT);
fsdp_status fsdp_encoder_backward_pos(float *dwte, int dwte_acc, float *dwpe, int dwpe_acc, const float *dout,
                                      const int *tokens, const int *pos, int B, int T, int C, int Vrows,
                                      int maxT);

/* ---------------------------------------------------------------- LayerNorm (eps 1e-5) */

#define FSDP_LAYERNORM_EPS 1e-5f

/* out[n,:] = (inp[n,:] - mean[n]) * rstd[n] * weight + bias, rstd = 1/sqrt(var + eps), var biased.
 * out, inp: float [N,C]; mean, rstd: float [N] (saved for backward; may be NULL when not needed);
 * weight, bias: pdt [C]. */
fsdp_status fsdp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const void *weight,
                                   const void *bias, fsdp_dtype pdt, int N, int C);
/* dinp[N,C] (+)= dL/dinp (dinp_acc: 1 adds, as into the residual stream); dweight[C], dbias[C]
 * (+)= sums over rows (dparam_acc, fp32 main_grad slices). dinp, dweight, dbias may each be NULL.
 * dout, inp: float [N,C]; mean, rstd: float [N] from the forward; weight: pdt [C]. */
fsdp_status fsdp_layernorm_backward(float *dinp, int dinp_acc, float *dweight, float *dbias, int dparam_acc,
                                    const float *dout, const float *inp, const void *weight, fsdp_dtype pdt,
                                    const float *mean, const float *rstd, int N, int C);

/* ---------------------------------------------------------------- GELU (tanh form, GPT-2) */

/* out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may alias inp. n elements. */
fsdp_status fsdp_gelu_forward(float *out, const float *inp, size_t n);
/* dinp[i] = gelu'(inp[i]) * dout[i] (overwrite). dinp may alias dout (not inp). */
fsdp_status fsdp_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* ---------------------------------------------------------------- residual */

/* out[i] = a[i] + b[i]; out may alias a or b. */
fsdp_status fsdp_residual_forward(float *out, const float *a, const float *b, size_t n);
/* da[i] (+)= dout[i] and db[i] (+)= dout[i] with one accumulate flag for both; either may be NULL;
 * da/db may alias dout only when accumulate == 0. */
fsdp_status fsdp_residual_backward(float *da, float *db, const float *dout, size_t n, int accumulate);

/* ---------------------------------------------------------------- causal multi-head self-attention */

/* qkv: float [B,T,3C], q|k|v each [B,T,C] with head h at channels [h*hs, (h+1)*hs), hs = C/NH
 * (C % NH == 0). out: float [B,T,C] (overwritten). att: float [B,NH,T,T], softmax probabilities,
 * saved for backward; entries with t2 > t are written 0. preatt: float [B,NH,T,T] scaled scores
 * q·k/sqrt(hs) before softmax (t2 <= t; others 0), or NULL to skip. Softmax subtracts the row max. */
fsdp_status fsdp_attention_forward(float *out, float *preatt, float *att, const float *qkv, int B, int T,
                                   int C, int NH);
/* The same with document ids doc int32 [B,T] (or NULL: exactly fsdp_attention_forward): query t attends
 * to key t2 <= t only when doc[b,t2] == doc[b,t]; other keys get probability exactly 0 (and preatt
 * -inf). The backward below needs no ids: it reads the probabilities. */
fsdp_status fsdp_attention_forward_doc(float *out, float *preatt, float *att, const float *qkv,
                                       const int32_t *doc, int B, int T, int C, int NH);
/* dqkv: float [B,T,3C] (overwritten); dout: float [B,T,C]; qkv and att as saved by the forward.
 * Scratch (fsdp_mem_alloc, activation, freed before returning): fsdp_attention_backward_scratch_bytes. */
fsdp_status fsdp_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                    int T, int C, int NH);
/* Bytes of scratch fsdp_attention_backward allocates at sequence length T, head size hs on nthr OpenMP
 * threads with the implementation it takes now: per thread T floats (generic per-row), (hs + 1) * T
 * rounded up to 16 (blocked AVX-512) or 64 * T (sgemm form). 0 for non-positive arguments. */
size_t fsdp_attention_backward_scratch_bytes(int T, int hs, int nthr);

/* How attention runs: per-row kernels (generic C, or the blocked AVX-512 form for head sizes that are a
 * multiple of 16), or oneDNN sgemm calls over the causal lower triangle in blocks of 64 query rows.
 * Both compute the same quantities (agreeing to rounding) and each is deterministic; forward and
 * backward may use different ones. AUTO takes GEMM from T >= FSDP_ATT_GEMM_MIN_T (where it was
 * measured faster: bench/bench_attention.c), the per-row kernels below. */
typedef enum { FSDP_ATT_AUTO = 0, FSDP_ATT_BLOCKED, FSDP_ATT_GEMM } fsdp_att_impl;
#define FSDP_ATT_GEMM_MIN_T 32
/* The implementation fsdp_attention_forward/backward take for sequence length T and head size hs. */
fsdp_att_impl fsdp_attention_impl_for(int T, int hs);
/* Tests and benchmarks: force one implementation for every later call (process-wide), or AUTO. */
fsdp_status fsdp_attention_force_impl(fsdp_att_impl impl);
const char *fsdp_attention_impl_name(fsdp_att_impl impl); /* "auto", "blocked", "gemm" */

/* ---------------------------------------------------------------- grouped-query attention (attention_gqa.c)
 * Causal attention of H query heads over KV key/value heads (H % KV == 0; query head h reads KV head
 * h / (H / KV)) with an explicit head size hd, on the fused layout of one q|k|v GEMM:
 *   qkv float [B,T,(H + 2 KV) hd]: per row q heads at [h hd, (h+1) hd), then k heads at H hd + g hd,
 *   then v heads at (H + KV) hd + g hd.
 * doc int32 [B,T] or NULL: query t attends to key s only when s <= t and doc[b,s] == doc[b,t] (packed
 * documents; ids need not be contiguous). Scores q.k / sqrt(hd), softmax with the row max subtracted.
 * The T x T probabilities are not kept: the forward saves lse float [B,H,T] (log of the softmax
 * denominator, max included) and the backward recomputes the probabilities from it, in blocks of 64
 * query rows over the keys they can see (oneDNN sgemm on the calling thread; row passes on the scalar,
 * AVX2 or AVX-512 path of fsdp_simd_active()).
 *   forward:  out float [B,T,H hd] (overwritten), lse (overwritten).
 *   backward: dqkv float [B,T,(H + 2 KV) hd] (overwritten): dq per query head, dk and dv of each KV
 *             head summed over its group's query heads; dout float [B,T,H hd]; qkv, lse, doc as given
 *             to the forward.
 * Scratch (fsdp_mem_alloc, category activation, freed before returning) on nthr = omp_get_max_threads()
 * threads: the *_scratch_bytes functions, exactly. Deterministic for a fixed thread count. */
fsdp_status fsdp_attention_gqa_forward(float *out, float *lse, const float *qkv, const int32_t *doc, int B,
                                       int T, int H, int KV, int hd);
fsdp_status fsdp_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                        const int32_t *doc, int B, int T, int H, int KV, int hd);
/* Floats of lse (B*H*T); 0 for non-positive arguments. */
size_t fsdp_attention_gqa_lse_floats(int B, int T, int H);
/* Forward: nthr * min(T,64) * T floats. Backward: nthr * 2 min(T,64) T floats, plus nthr * 2 T hd
 * (per-thread partial dk, dv) when B*KV is too few (b, KV head) pairs to keep the threads busy (fewer
 * than nthr, or under 80% of them busy in the last round). In bytes; 0 for non-positive arguments. */
size_t fsdp_attention_gqa_forward_scratch_bytes(int T, int hd, int nthr);
size_t fsdp_attention_gqa_backward_scratch_bytes(int B, int T, int KV, int hd, int nthr);

/* Decoding with a KV cache: attention of n new queries (positions pos..pos+n-1) over the cached keys
 * and values of positions 0..pos+i (causal). Query i, head h (of H) lies at qkv + i*ld_q + h*hd; key
 * and value of position t, KV head g (of KV; H % KV == 0, query head h reads g = h / (H/KV)) at
 * K + t*ld_kv + g*hd and V + t*ld_kv + g*hd; out row i at out + i*ld_out. Scores are scaled by scale.
 * att: scratch of Tmax floats per thread, nthr OpenMP threads. */
fsdp_status fsdp_decode_attention(float *out, int ld_out, const float *qkv, int ld_q, const float *K,
                                  const float *V, int ld_kv, float *att, int nthr, int n, int pos, int H,
                                  int KV, int hd, float scale, int Tmax);

/* ---------------------------------------------------------------- Llama family: RMSNorm, RoPE, SwiGLU
 * (llama_ops.c). Rows may be strided (ld = elements from one row start to the next, >= the row width),
 * so the model can work inside fused buffers (the per-head q/k of one qkv GEMM output). Profiled as
 * layernorm (RMSNorm), gelu (SwiGLU) and attention (RoPE). */

/* RMSNorm (weight only): out[n,:] = (inp[n,:] * rstd[n]) * weight, rstd[n] = 1/sqrt(mean_c inp[n,c]^2 + eps)
 * (the sum of squares in double). Row r of N lies at inp + r*ld_in (out + r*ld_out), C contiguous
 * elements each; ld >= C. rstd float [N] saved for backward (may be NULL). weight pdt [C]; eps finite,
 * >= 0. out may alias inp only if rstd is kept (backward needs inp). */
fsdp_status fsdp_rmsnorm_forward(float *out, int ld_out, float *rstd, const float *inp, int ld_in,
                                 const void *weight, fsdp_dtype pdt, int N, int C, float eps);
/* dinp (+)= dL/dinp (dinp_acc), rows at dinp + r*ld_dinp; dweight[C] (+)= sum over rows of
 * dout * inp * rstd (dweight_acc; fp32 main_grad). Either may be NULL; dinp may alias dout. weight and
 * rstd (from the forward) are always required. Scratch (activation, freed before returning):
 * fsdp_rmsnorm_backward_scratch_bytes(rows, C), rows = N (or N_tok * n_heads for the head form). The
 * row sums for dweight go in fixed chunks of rows, summed in order: the same bits on any thread count. */
fsdp_status fsdp_rmsnorm_backward(float *dinp, int ld_dinp, int dinp_acc, float *dweight, int dweight_acc,
                                  const float *dout, int ld_dout, const float *inp, int ld_in,
                                  const void *weight, fsdp_dtype pdt, const float *rstd, int N, int C);
size_t fsdp_rmsnorm_backward_scratch_bytes(int rows, int C);
/* Per-head RMSNorm (Qwen3 q_norm / k_norm, weight [hd] shared by all heads): N_tok tokens, each token's
 * row at base + t*ld holds n_heads heads of hd contiguous elements starting at the pointer given (ld >=
 * n_heads*hd). Same maths as above per (token, head) row r = t*n_heads + h. rstd float [N_tok*n_heads].
 * dweight sums over all tokens and heads. */
fsdp_status fsdp_head_rmsnorm_forward(float *out, int ld_out, float *rstd, const float *inp, int ld_in,
                                      const void *weight, fsdp_dtype pdt, int N_tok, int n_heads, int hd,
                                      float eps);
fsdp_status fsdp_head_rmsnorm_backward(float *dinp, int ld_dinp, int dinp_acc, float *dweight,
                                       int dweight_acc, const float *dout, int ld_dout, const float *inp,
                                       int ld_in, const void *weight, fsdp_dtype pdt, const float *rstd,
                                       int N_tok, int n_heads, int hd);

/* RoPE, Hugging Face rotate-half layout, in place. x: N_tok token rows at x + t*ld, each n_heads heads of
 * hd (even, <= FSDP_ROPE_MAX_HD) elements. For head element i < hd/2, angle a = pos[t] * inv_freq[i] (one
 * fp32 product): x[i] <- x[i]*cos a - x[i+hd/2]*sin a; x[i+hd/2] <- x[i+hd/2]*cos a + x[i]*sin a, each
 * product and sum rounded to fp32 as transformers' apply_rotary_pos_emb does; cos/sin of the fp32 angle
 * are computed in double and rounded once. pos int32 [N_tok] (>= 0). Backward applies the inverse
 * rotation (angle -a, the transpose of the forward map) in place to the gradient. */
#define FSDP_ROPE_MAX_HD 1024
typedef struct {
    int type; /* 0 none ("default"), 1 llama3 */
    float factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} fsdp_rope_scaling;
/* inv_freq float [hd/2] as transformers computes it: 1/(theta^(2i/hd)) in fp32 operations, then the
 * llama3 rescale of _compute_llama3_parameters when sc && sc->type == 1 (sc NULL: none). FSDP_EINVAL for
 * odd hd, theta <= 0, an unknown type or bad llama3 factors. */
fsdp_status fsdp_rope_inv_freq(float *inv_freq, int hd, double theta, const fsdp_rope_scaling *sc);
fsdp_status fsdp_rope_forward(float *x, int ld, const int *pos, const float *inv_freq, int N_tok, int n_heads,
                              int hd);
fsdp_status fsdp_rope_backward(float *dx, int ld, const int *pos, const float *inv_freq, int N_tok,
                               int n_heads, int hd);

/* SwiGLU: gu float [N, 2I] holds per row gate[0..I) then up[I..2I) (one GEMM with stacked [gate; up]
 * weights); out float [N, I] = silu(gate) * up, silu(x) = x / (1 + exp(-x)) (exp through vmath, <= 2 ulp).
 * Backward writes dgu [N, 2I] (overwrite; must not alias gu) from dout [N, I]. */
fsdp_status fsdp_swiglu_forward(float *out, const float *gu, int N, int I);
fsdp_status fsdp_swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int I);

/* ---------------------------------------------------------------- softmax + cross-entropy (padded vocab) */

/* A target that does not count (masked prompt tokens, padding): PyTorch's ignore_index (the same
 * definition as include/fsdp_model.h's). */
#ifndef FSDP_IGNORE_INDEX
#define FSDP_IGNORE_INDEX (-100)
#endif

/* Fused softmax + cross-entropy over logits float [N,Vp] where only the first V columns are real;
 * padded columns [V,Vp) are ignored whatever they hold (even inf/NaN). targets: int32 [N] in [0,V) or
 * FSDP_IGNORE_INDEX (that row: loss 0, dlogits row all 0, not counted).
 *   losses[n] = -log softmax(logits[n,:V])[targets[n]]   (float [N], may be NULL)
 *   *mean_loss = mean of losses over the counted rows (accumulated in double; 0 when none; may be NULL)
 *   dlogits[n,j] = dloss * (softmax_j - [j == target]) for j < V, 0 for j >= V   (float [N,Vp], may be
 *   NULL; may alias logits: each row is read completely before it is written)
 * dloss is dL/dlosses[n]: pass 1.0f / N for L = mean loss (the usual), 1/(N*n_micro) to fold in
 * micro-batch averaging. */
fsdp_status fsdp_softmax_crossentropy(float *losses, float *mean_loss, float *dlogits, const float *logits,
                                      const int *targets, int N, int V, int Vp, float dloss);
/* The same, also returning the number of counted rows (targets not FSDP_IGNORE_INDEX) in *n_counted
 * (may be NULL). With ignored rows, dloss is 1 / (the counted rows of the whole global batch) for the
 * mean over real tokens. */
fsdp_status fsdp_softmax_crossentropy_count(float *losses, float *mean_loss, int *n_counted, float *dlogits,
                                            const float *logits, const int *targets, int N, int V, int Vp,
                                            float dloss);

/* probs[n,j] = softmax(logits[n,:V] / temperature)_j for j < V, 0 for j in [V,Vp). For sampling.
 * probs: float [N,Vp] (may alias logits); temperature > 0. */
fsdp_status fsdp_softmax_forward(float *probs, const float *logits, int N, int V, int Vp, float temperature);

/* ---------------------------------------------------------------- the kernels table: one row per device
 * The models call their kernels through a context: the row of the device their engine runs on, the
 * stream the work is queued on, the row's library handle and GEMM workspace. A row is a table of the
 * kernels above with the context first (the same arguments, the same contracts); a device backend adds
 * its row (its own file) and one line in fsdp_kctx_init's list. The CPU row (kernels_cpu.c) runs every
 * kernel on the calling thread at the call, on host memory: stream, handle and workspace are unused
 * (its oneDNN engine, stream, primitive cache and grow-only workspace are process-wide, gemm.c). The
 * simulated device of the tests takes the CPU row: its memory is host memory, and the engine lets its
 * compute stream catch up before it hands out a view (fsdp_engine_config.host_kernels). */
typedef struct fsdp_kernels fsdp_kernels;

typedef struct {
    const fsdp_kernels *k; /* the device's row */
    fsdp_device_t *dev;    /* the device (the CPU's for the CPU row) */
    fsdp_stream_t *stream; /* where kernels are queued (NULL on the CPU) */
    void *handle;          /* the row's library handle (a cuBLASLt handle); NULL for the CPU row */
    void *ws;              /* the row's GEMM workspace and its size; NULL, 0 for the CPU row */
    size_t ws_bytes;
} fsdp_kctx;

enum { FSDP_KERN_HOST = 1u << 0 }; /* the row runs its kernels on the calling thread, at the call */

struct fsdp_kernels {
    const char *name; /* "cpu" */
    unsigned flags;   /* FSDP_KERN_* */
    /* What the trainer asks of the row: the GEMM peak for MFU (fsdp_gemm_peak) and the mixed-precision
     * GEMM path this process's GEMMs take (fsdp_gemm_mixed_choice_get). */
    fsdp_status (*gemm_peak)(const fsdp_kctx *x, fsdp_dtype pdt, double budget_s, fsdp_gemm_peak_result *out);
    fsdp_status (*gemm_choice)(const fsdp_kctx *x, fsdp_gemm_mixed_choice *out);
    /* The models' kernels: the functions above of the same names (fsdp_<name>). */
    fsdp_status (*matmul_forward)(const fsdp_kctx *x, float *out, const float *inp, const void *weight,
                                  const void *bias, fsdp_dtype pdt, int M, int K, int N);
    fsdp_status (*matmul_backward)(const fsdp_kctx *x, float *dinp, int dinp_acc, float *dweight,
                                   int dweight_acc, float *dbias, int dbias_acc, const float *dout,
                                   const float *inp, const void *weight, fsdp_dtype pdt, int M, int K, int N);
    fsdp_status (*encoder_forward_pos)(const fsdp_kctx *x, float *out, const int *tokens, const int *pos,
                                       const void *wte, const void *wpe, fsdp_dtype pdt, int B, int T, int C,
                                       int Vrows, int maxT);
    fsdp_status (*encoder_backward_pos)(const fsdp_kctx *x, float *dwte, int dwte_acc, float *dwpe,
                                        int dwpe_acc, const float *dout, const int *tokens, const int *pos,
                                        int B, int T, int C, int Vrows, int maxT);
    fsdp_status (*layernorm_forward)(const fsdp_kctx *x, float *out, float *mean, float *rstd,
                                     const float *inp, const void *weight, const void *bias, fsdp_dtype pdt,
                                     int N, int C);
    fsdp_status (*layernorm_backward)(const fsdp_kctx *x, float *dinp, int dinp_acc, float *dweight,
                                      float *dbias, int dparam_acc, const float *dout, const float *inp,
                                      const void *weight, fsdp_dtype pdt, const float *mean,
                                      const float *rstd, int N, int C);
    fsdp_status (*gelu_forward)(const fsdp_kctx *x, float *out, const float *inp, size_t n);
    fsdp_status (*gelu_backward)(const fsdp_kctx *x, float *dinp, const float *inp, const float *dout,
                                 size_t n);
    fsdp_status (*residual_forward)(const fsdp_kctx *x, float *out, const float *a, const float *b, size_t n);
    fsdp_status (*attention_forward_doc)(const fsdp_kctx *x, float *out, float *preatt, float *att,
                                         const float *qkv, const int32_t *doc, int B, int T, int C, int NH);
    fsdp_status (*attention_backward)(const fsdp_kctx *x, float *dqkv, const float *dout, const float *qkv,
                                      const float *att, int B, int T, int C, int NH);
    fsdp_status (*attention_gqa_forward)(const fsdp_kctx *x, float *out, float *lse, const float *qkv,
                                         const int32_t *doc, int B, int T, int H, int KV, int hd);
    fsdp_status (*attention_gqa_backward)(const fsdp_kctx *x, float *dqkv, const float *dout,
                                          const float *qkv, const float *lse, const int32_t *doc, int B,
                                          int T, int H, int KV, int hd);
    fsdp_status (*decode_attention)(const fsdp_kctx *x, float *out, int ld_out, const float *qkv, int ld_q,
                                    const float *K, const float *V, int ld_kv, float *att, int nthr, int n,
                                    int pos, int H, int KV, int hd, float scale, int Tmax);
    fsdp_status (*rmsnorm_forward)(const fsdp_kctx *x, float *out, int ld_out, float *rstd, const float *inp,
                                   int ld_in, const void *weight, fsdp_dtype pdt, int N, int C, float eps);
    fsdp_status (*rmsnorm_backward)(const fsdp_kctx *x, float *dinp, int ld_dinp, int dinp_acc,
                                    float *dweight, int dweight_acc, const float *dout, int ld_dout,
                                    const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                    const float *rstd, int N, int C);
    fsdp_status (*head_rmsnorm_forward)(const fsdp_kctx *x, float *out, int ld_out, float *rstd,
                                        const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                        int N_tok, int n_heads, int hd, float eps);
    fsdp_status (*head_rmsnorm_backward)(const fsdp_kctx *x, float *dinp, int ld_dinp, int dinp_acc,
                                         float *dweight, int dweight_acc, const float *dout, int ld_dout,
                                         const float *inp, int ld_in, const void *weight, fsdp_dtype pdt,
                                         const float *rstd, int N_tok, int n_heads, int hd);
    fsdp_status (*rope_forward)(const fsdp_kctx *x, float *xs, int ld, const int *pos, const float *inv_freq,
                                int N_tok, int n_heads, int hd);
    fsdp_status (*rope_backward)(const fsdp_kctx *x, float *dx, int ld, const int *pos, const float *inv_freq,
                                 int N_tok, int n_heads, int hd);
    fsdp_status (*swiglu_forward)(const fsdp_kctx *x, float *out, const float *gu, int N, int I);
    fsdp_status (*swiglu_backward)(const fsdp_kctx *x, float *dgu, const float *dout, const float *gu, int N,
                                   int I);
    fsdp_status (*softmax_crossentropy_count)(const fsdp_kctx *x, float *losses, float *mean_loss,
                                              int *n_counted, float *dlogits, const float *logits,
                                              const int *targets, int N, int V, int Vp, float dloss);
    fsdp_status (*softmax_forward)(const fsdp_kctx *x, float *probs, const float *logits, int N, int V,
                                   int Vp, float temperature);
};

/* The CPU row. */
const fsdp_kernels *fsdp_kernels_cpu(void);
/* A context on stream s of device d (NULL: the CPU): the row for d (by its name: "cpu" and the tests'
 * "sim" take the CPU row), no handle or workspace yet. FSDP_EUNSUPPORTED, naming the device, when no
 * row runs on it. */
fsdp_status fsdp_kctx_init(fsdp_kctx *x, fsdp_device_t *d, fsdp_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_KERNELS_H */
