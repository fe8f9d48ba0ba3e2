/* gemm.c — oneDNN matmul for the linear layers: forward, input gradient and the weight gradient
 * written straight into an fp32 main_grad (beta 0 = plain matmul, beta 1 = sum post-op), with a
 * primitive cache keyed by (shape, dtypes, transposes, bias, beta) and a bf16-via-f32 fallback. */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"

#include <limits.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One cached primitive: C[M,N] (beta)= op(A)[M,K] · op(B)[K,N] (+ bias[N]).
 * A is stored [M,K] (ta = 0) or [K,M] (ta = 1); B is stored [K,N] (tb = 0) or [N,K] (tb = 1). */
typedef struct {
    int M, K, N;
    int ta, tb, beta;
    int lda, ldb, ldc;                 /* leading dimensions (row strides of the stored matrices) */
    dnnl_data_type_t adt, bdt, biasdt; /* biasdt == dnnl_data_type_undef: no bias */
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, bias, c, scratch; /* handles set at every execution */
    size_t scratch_bytes;
    struct gemm_entry *next;
} gemm_entry;

/* Workspace slots (category other), grow-only, kept until fsdp_kernels_shutdown: bf16 copies of the
 * activation operands, f32 copies on the fallback path, the f32-compute path's widened weight rows,
 * oneDNN's scratchpad. */
enum { SLOT_A = 0, SLOT_B, SLOT_A32, SLOT_B32, SLOT_BIAS32, SLOT_W32, SLOT_C32, SLOT_PAD, NSLOT };

static struct {
    int ready;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_entry *cache;
    fsdp_gemm_cache_stats stats;
    void *slot[NSLOT];
    size_t slot_bytes[NSLOT];
    int bf16_probe; /* -1 unknown, 0 oneDNN refuses bf16 matmul, 1 works */
    int force_fallback;
    fsdp_mixed_compute mixed; /* fsdp_gemm_set_mixed_compute */
    int mixed_resolved;       /* choice below is valid */
    fsdp_gemm_mixed_choice choice;
    char impl[2][128];      /* fsdp_gemm_impl_name results for F32, BF16 */
    int strided_ok;         /* -1 unknown; 1: oneDNN's f32 matmul is the same kernel with strided A and C */
    int dry;                /* fsdp_gemm_workspace_bytes: GEMMs record their slots, touch no data */
    size_t dry_slot[NSLOT]; /* the largest request per slot while dry */
} G = {.bf16_probe = -1, .strided_ok = -1};

static pthread_mutex_t G_lock = PTHREAD_MUTEX_INITIALIZER;

#define DNNL_TRY(call, what)                                                                                 \
    do {                                                                                                     \
        dnnl_status_t ds_ = (call);                                                                          \
        if (ds_ != dnnl_success) {                                                                           \
            st = FSDP_ERR(ds_ == dnnl_out_of_memory ? FSDP_ENOMEM : FSDP_EINTERNAL,                          \
                          "oneDNN %s failed: %s (%s)", (what), dnnl_status2str(ds_), #call);                 \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

static fsdp_status init_locked(void) {
    fsdp_status st = FSDP_OK;
    if (G.ready) return FSDP_OK;
    DNNL_TRY(dnnl_engine_create(&G.engine, dnnl_cpu, 0), "CPU engine creation");
    DNNL_TRY(dnnl_stream_create(&G.stream, G.engine, dnnl_stream_default_flags), "stream creation");
    G.ready = 1;
    return FSDP_OK;
fail:
    if (G.engine) dnnl_engine_destroy(G.engine);
    G.engine = NULL;
    return st;
}

fsdp_status fsdp_kernels_init(void) {
    pthread_mutex_lock(&G_lock);
    fsdp_status st = init_locked();
    pthread_mutex_unlock(&G_lock);
    return st;
}

static void entry_free(gemm_entry *e) {
    if (!e) return;
    if (e->scratch) dnnl_memory_destroy(e->scratch);
    if (e->c) dnnl_memory_destroy(e->c);
    if (e->bias) dnnl_memory_destroy(e->bias);
    if (e->b) dnnl_memory_destroy(e->b);
    if (e->a) dnnl_memory_destroy(e->a);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    free(e);
}

static void cache_clear_locked(void) {
    while (G.cache) {
        gemm_entry *n = G.cache->next;
        entry_free(G.cache);
        G.cache = n;
    }
    G.stats.entries = 0;
}

void fsdp_kernels_shutdown(void) {
    pthread_mutex_lock(&G_lock);
    cache_clear_locked();
    for (int i = 0; i < NSLOT; i++) {
        fsdp_mem_free(G.slot[i]);
        G.slot[i] = NULL;
        G.slot_bytes[i] = 0;
    }
    if (G.stream) dnnl_stream_destroy(G.stream);
    if (G.engine) dnnl_engine_destroy(G.engine);
    G.stream = NULL;
    G.engine = NULL;
    G.ready = 0;
    G.bf16_probe = -1;
    G.strided_ok = -1;
    G.mixed_resolved = 0; /* the setting (fsdp_gemm_set_mixed_compute) stays */
    memset(&G.stats, 0, sizeof G.stats);
    G.impl[0][0] = G.impl[1][0] = '\0';
    pthread_mutex_unlock(&G_lock);
}

/* Grow-only scratch slot of at least `bytes`. Contents are not preserved. */
static fsdp_status slot_get(int s, size_t bytes, void **out) {
    if (G.dry) { /* only the size: the GEMM runs nothing, and takes the branches a real slot takes */
        static _Alignas(64) char never_touched[64];
        if (G.dry_slot[s] < bytes) G.dry_slot[s] = bytes;
        *out = never_touched;
        return FSDP_OK;
    }
    if (G.slot_bytes[s] < bytes) {
        fsdp_mem_free(G.slot[s]);
        G.slot[s] = NULL;
        G.slot_bytes[s] = 0;
        FSDP_TRY(fsdp_mem_alloc(&G.slot[s], bytes, FSDP_MEM_OTHER));
        G.slot_bytes[s] = bytes;
    }
    *out = G.slot[s];
    return FSDP_OK;
}

/* Row-major [rows, cols] descriptor with row stride ld (>= cols), or its transpose view when `trans`
 * (stored [cols, rows] with row stride ld >= rows). */
static dnnl_status_t md_2d(dnnl_memory_desc_t *md, int rows, int cols, int trans, int ld,
                           dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {ld, 1};
    if (trans) {
        strides[0] = 1;
        strides[1] = ld;
    }
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* Creates the primitive for key k (no cache involvement). */
static fsdp_status entry_create(const gemm_key *k, gemm_entry **out) {
    fsdp_status st = FSDP_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    gemm_entry *e = calloc(1, sizeof *e);
    *out = NULL;
    if (!e) return FSDP_ERR(FSDP_ENOMEM, "cannot allocate a GEMM cache entry");
    e->key = *k;

    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    DNNL_TRY(md_2d(&amd, k->M, k->K, k->ta, k->lda, k->adt), "A descriptor");
    DNNL_TRY(md_2d(&bmd, k->K, k->N, k->tb, k->ldb, k->bdt), "B descriptor");
    DNNL_TRY(md_2d(&cmd, k->M, k->N, 0, k->ldc, dnnl_f32), "C descriptor");
    int has_bias = k->biasdt != dnnl_data_type_undef;
    if (has_bias) DNNL_TRY(md_2d(&biasmd, 1, k->N, 0, k->N, k->biasdt), "bias descriptor");

    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &amd, &bmd, has_bias ? &biasmd : NULL, &cmd), "matmul descriptor");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "attribute creation");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    if (k->beta) {
        /* C = 1 * C + A·B: the fused main_grad accumulation. */
        DNNL_TRY(dnnl_post_ops_create(&po), "post-ops creation");
        DNNL_TRY(dnnl_post_ops_append_sum(po, 1.0f), "sum post-op");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po), "post-ops attribute");
    }
    dnnl_status_t ds = dnnl_primitive_desc_create(&pd, &desc, attr, G.engine, NULL);
    if (ds == dnnl_unimplemented) {
        st = FSDP_ERR(FSDP_EUNSUPPORTED,
                      "oneDNN has no matmul for %s x %s -> f32 (M=%d K=%d N=%d, beta %d) on ISA %s; "
                      "the bf16-via-f32 fallback handles bf16 on such CPUs",
                      dnnl_dt2str(k->adt), dnnl_dt2str(k->bdt), k->M, k->K, k->N, k->beta,
                      dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
        goto fail;
    }
    DNNL_TRY(ds, "matmul primitive descriptor");
    DNNL_TRY(dnnl_primitive_create(&e->prim, pd), "matmul primitive");

    const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = spmd ? dnnl_memory_desc_get_size(spmd) : 0;
    DNNL_TRY(dnnl_memory_create(&e->a, &amd, G.engine, DNNL_MEMORY_NONE), "memory A");
    DNNL_TRY(dnnl_memory_create(&e->b, &bmd, G.engine, DNNL_MEMORY_NONE), "memory B");
    DNNL_TRY(dnnl_memory_create(&e->c, &cmd, G.engine, DNNL_MEMORY_NONE), "memory C");
    if (has_bias) DNNL_TRY(dnnl_memory_create(&e->bias, &biasmd, G.engine, DNNL_MEMORY_NONE), "memory bias");
    if (e->scratch_bytes)
        DNNL_TRY(dnnl_memory_create(&e->scratch, spmd, G.engine, DNNL_MEMORY_NONE), "memory scratchpad");

    dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    *out = e;
    return FSDP_OK;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    entry_free(e);
    return st;
}

static fsdp_status entry_get(const gemm_key *k, gemm_entry **out) {
    for (gemm_entry *e = G.cache; e; e = e->next) {
        if (memcmp(&e->key, k, sizeof *k) == 0) {
            G.stats.hits++;
            *out = e;
            return FSDP_OK;
        }
    }
    FSDP_TRY(entry_create(k, out));
    (*out)->next = G.cache;
    G.cache = *out;
    G.stats.misses++;
    G.stats.entries++;
    return FSDP_OK;
}

/* Whether oneDNN builds a bf16 x bf16 -> f32 matmul here (with and without the sum post-op). */
static int bf16_native_locked(void) {
    if (G.bf16_probe < 0) {
        G.bf16_probe = 1;
        for (int beta = 0; beta < 2; beta++) {
            gemm_key k = {64, 64, 64, 0, 1, beta, 64, 64, 64, dnnl_bf16, dnnl_bf16, dnnl_bf16};
            gemm_entry *e = NULL;
            if (entry_create(&k, &e) != FSDP_OK) G.bf16_probe = 0;
            entry_free(e);
        }
        fsdp_clear_error();
    }
    return G.bf16_probe;
}

static fsdp_status mixed_resolve_locked(void); /* below, with the probe */

static fsdp_gemm_path path_locked(fsdp_dtype pdt) {
    if (pdt == FSDP_F32) return FSDP_GEMM_F32;
    if (mixed_resolve_locked() != FSDP_OK) return FSDP_GEMM_F32_COMPUTE; /* the error stays with the GEMMs */
    return G.choice.path;
}

fsdp_gemm_path fsdp_gemm_path_for(fsdp_dtype pdt) {
    pthread_mutex_lock(&G_lock);
    fsdp_gemm_path p = FSDP_GEMM_F32_COMPUTE;
    if (pdt == FSDP_F32)
        p = FSDP_GEMM_F32;
    else if (init_locked() == FSDP_OK)
        p = path_locked(pdt);
    pthread_mutex_unlock(&G_lock);
    return p;
}

const char *fsdp_gemm_path_name(fsdp_gemm_path p) {
    switch (p) {
    case FSDP_GEMM_F32: return "f32";
    case FSDP_GEMM_BF16: return "bf16";
    case FSDP_GEMM_BF16_VIA_F32: return "bf16-via-f32";
    case FSDP_GEMM_F32_COMPUTE: return "f32-compute";
    }
    return "unknown";
}

const char *fsdp_kernels_isa_name(void) {
    const char *s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    return strncmp(s, "cpu_isa_", 8) == 0 ? s + 8 : s; /* "cpu_isa_avx2" -> "avx2" */
}

const char *fsdp_gemm_impl_name(fsdp_dtype pdt) {
    const char *res = "unavailable";
    pthread_mutex_lock(&G_lock);
    if (init_locked() == FSDP_OK) {
        int i = pdt == FSDP_BF16;
        dnnl_data_type_t dt = (i && path_locked(pdt) == FSDP_GEMM_BF16) ? dnnl_bf16 : dnnl_f32;
        fsdp_clear_error(); /* a bad FSDP_MIXED_COMPUTE is reported by the GEMMs */
        gemm_key k = {256, 768, 768, 0, 1, 0, 768, 768, 768, dt, dt, dnnl_data_type_undef};
        gemm_entry *e = NULL;
        if (entry_create(&k, &e) == FSDP_OK) {
            const_dnnl_primitive_desc_t pd = NULL;
            const char *name = NULL;
            if (dnnl_primitive_get_primitive_desc(e->prim, &pd) == dnnl_success &&
                dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name) {
                snprintf(G.impl[i], sizeof G.impl[i], "%s", name);
                res = G.impl[i];
            }
        }
        entry_free(e);
        fsdp_clear_error();
    }
    pthread_mutex_unlock(&G_lock);
    return res;
}

fsdp_status fsdp_gemm_force_bf16_fallback(int on) {
    pthread_mutex_lock(&G_lock);
    G.force_fallback = on != 0;
    G.mixed_resolved = 0;
    cache_clear_locked();
    pthread_mutex_unlock(&G_lock);
    return FSDP_OK;
}

void fsdp_gemm_get_cache_stats(fsdp_gemm_cache_stats *out) {
    pthread_mutex_lock(&G_lock);
    *out = G.stats;
    pthread_mutex_unlock(&G_lock);
}

/* Conversions split over OpenMP threads; each chunk is the bit-exact core routine. */
#define CVT_CHUNK ((size_t)1 << 15)
static void to_bf16_par(fsdp_bf16 *dst, const float *src, size_t n) {
    if (G.dry) return;
    FSDP_PROF_SCOPE(FSDP_PROF_CAST);
    long nc = (long)((n + CVT_CHUNK - 1) / CVT_CHUNK);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (long c = 0; c < nc; c++) {
        size_t o = (size_t)c * CVT_CHUNK, len = n - o < CVT_CHUNK ? n - o : CVT_CHUNK;
        fsdp_f32_to_bf16_n(dst + o, src + o, len);
    }
}
static void to_f32_par(float *dst, const fsdp_bf16 *src, size_t n) {
    if (G.dry) return;
    FSDP_PROF_SCOPE(FSDP_PROF_CAST);
    long nc = (long)((n + CVT_CHUNK - 1) / CVT_CHUNK);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (long c = 0; c < nc; c++) {
        size_t o = (size_t)c * CVT_CHUNK, len = n - o < CVT_CHUNK ? n - o : CVT_CHUNK;
        fsdp_bf16_to_f32_n(dst + o, src + o, len);
    }
}

/* A plain f32 B wider than split_n columns (GEMM_SPLIT_N; FSDP_GEMM_SPLIT_N overrides it, 0 turns the
 * split off: for side-by-side measurements) is multiplied in blocks of at most GEMM_SPLIT_W. */
#define GEMM_SPLIT_N 1024
#define GEMM_SPLIT_W 768
static int split_n = -1; /* resolved at the first GEMM, under G_lock */
static fsdp_status split_columns(int *out) {
    if (split_n < 0) {
        long n = GEMM_SPLIT_N;
        FSDP_TRY(fsdp_env_int("FSDP_GEMM_SPLIT_N", GEMM_SPLIT_N, &n));
        split_n = (int)n;
    }
    *out = split_n;
    return FSDP_OK;
}
static fsdp_status gemm_run(float *C, const void *A, const void *B, const void *bias, dnnl_data_type_t ddt,
                            int ta, int tb, int M, int K, int N, int lda, int ldb, int ldc, int beta);

/* Runs C (beta)= op(A)·op(B) (+ bias) with operands of dtype `dt` (F32, or BF16 raw bits), fp32 C,
 * leading dimensions lda, ldb, ldc (0: the natural ones). widen: the bf16 operands are widened to f32
 * (exactly) first — the bf16-via-f32 path, natural leading dimensions only. Lock held. */
static fsdp_status gemm_exec(float *C, const void *A, const void *B, const void *bias, fsdp_dtype dt,
                             int widen, int ta, int tb, int M, int K, int N, int lda, int ldb, int ldc,
                             int beta) {
    dnnl_data_type_t ddt = dt == FSDP_BF16 ? dnnl_bf16 : dnnl_f32;
    if (!lda) lda = ta ? M : K;
    if (!ldb) ldb = tb ? K : N;
    if (!ldc) ldc = N;
    if (dt == FSDP_BF16 && widen) {
        FSDP_INVARIANT(lda == (ta ? M : K) && ldb == (tb ? K : N));
        void *a32, *b32, *bias32 = NULL;
        FSDP_TRY(slot_get(SLOT_A32, (size_t)M * K * sizeof(float), &a32));
        FSDP_TRY(slot_get(SLOT_B32, (size_t)K * N * sizeof(float), &b32));
        to_f32_par(a32, A, (size_t)M * K);
        to_f32_par(b32, B, (size_t)K * N);
        if (bias) {
            FSDP_TRY(slot_get(SLOT_BIAS32, (size_t)N * sizeof(float), &bias32));
            to_f32_par(bias32, bias, (size_t)N);
        }
        A = a32;
        B = b32;
        bias = bias32;
        ddt = dnnl_f32;
    }
    int split = 0;
    FSDP_TRY(split_columns(&split));
    if (ddt == dnnl_f32 && !tb && split > 0 && N > split) {
        /* Column blocks of a plain f32 B: each block is its own GEMM (the same dot products, over all
         * of K, so the result is the same). Wide plain f32 B operands (such as mlp.proj's dinp and
         * weight gradient at GPT-2 widths) run slower as one oneDNN brgemm call than as blocks of at
         * most GEMM_SPLIT_W columns; on AVX2 both take gemm:jit at one rate. FSDP_GEMM_SPLIT_N=0 turns
         * the split off for side-by-side measurements (docs/benchmarks-history.md has them). */
        int nb = (N + GEMM_SPLIT_W - 1) / GEMM_SPLIT_W, w = (N + nb - 1) / nb;
        for (int j = 0; j < N; j += w)
            FSDP_TRY(gemm_run(C + j, A, (const float *)B + j, bias ? (const float *)bias + j : NULL, ddt, ta,
                              tb, M, K, N - j < w ? N - j : w, lda, ldb, ldc, beta));
        return FSDP_OK;
    }
    return gemm_run(C, A, B, bias, ddt, ta, tb, M, K, N, lda, ldb, ldc, beta);
}

/* One oneDNN matmul C[M,N] (+)= A·B (+ bias), operands already of dtype ddt. */
static fsdp_status gemm_run(float *C, const void *A, const void *B, const void *bias, dnnl_data_type_t ddt,
                            int ta, int tb, int M, int K, int N, int lda, int ldb, int ldc, int beta) {
    fsdp_status st = FSDP_OK;
    gemm_key k = {M, K, N, ta, tb, beta != 0, lda, ldb, ldc, ddt, ddt, bias ? ddt : dnnl_data_type_undef};
    gemm_entry *e;
    FSDP_TRY(entry_get(&k, &e));
    void *pad = NULL;
    if (e->scratch_bytes) FSDP_TRY(slot_get(SLOT_PAD, e->scratch_bytes, &pad));
    if (G.dry) return FSDP_OK; /* the primitive (and so its scratchpad) is what a real call would take */

    DNNL_TRY(dnnl_memory_set_data_handle(e->a, (void *)A), "set A");
    DNNL_TRY(dnnl_memory_set_data_handle(e->b, (void *)B), "set B");
    DNNL_TRY(dnnl_memory_set_data_handle(e->c, C), "set C");
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}, {0, NULL}, {0, NULL}};
    int nargs = 3;
    if (bias) {
        DNNL_TRY(dnnl_memory_set_data_handle(e->bias, (void *)bias), "set bias");
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    }
    if (e->scratch) {
        DNNL_TRY(dnnl_memory_set_data_handle(e->scratch, pad), "set scratchpad");
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    DNNL_TRY(dnnl_primitive_execute(e->prim, G.stream, nargs, args), "matmul execution");
    DNNL_TRY(dnnl_stream_wait(G.stream), "stream wait");
    return FSDP_OK;
fail:
    return st;
}

/* ---------------------------------------------------------------- the f32-compute path
 * bf16 weights, fp32 activations: the weight is widened to f32 (exactly) into SLOT_W32 and multiplied
 * by the unrounded fp32 activations with an f32 GEMM, so each weight is widened once per forward and
 * once per dinp — as often as an fp32 copy of each gathered unit would be, without such a copy. A
 * weight of at most widen_bytes as f32 (every transformer-block weight up to C = 1448) is widened
 * whole; a larger one (the LM head) in blocks of rows. oneDNN 2.x's brgemm matmul takes only dense A
 * and C (a strided view falls back to a much slower gemm:jit), so there a block's output columns
 * (forward) or dout columns (dinp) go through a dense [M, rows] buffer (SLOT_C32); where the f32 kernel
 * is gemm:jit anyway (AVX2) the block reads and writes them in place. */
#define WIDEN_BYTES_DEFAULT ((size_t)32 << 20)
static size_t widen_bytes = WIDEN_BYTES_DEFAULT; /* read and written under G_lock */

void fsdp_gemm_set_widen_bytes(size_t bytes) {
    pthread_mutex_lock(&G_lock);
    widen_bytes = bytes ? bytes : WIDEN_BYTES_DEFAULT;
    pthread_mutex_unlock(&G_lock);
}

static int widen_rows_locked(int K, int N) {
    if (K <= 0 || N <= 0) return 0;
    size_t rows = widen_bytes / ((size_t)K * sizeof(float));
    if (rows < 16) rows = 16;
    if (rows >= (size_t)N) return N;
    size_t nblk = ((size_t)N + rows - 1) / rows; /* blocks of equal size, rounded to 16 rows */
    rows = (((size_t)N + nblk - 1) / nblk + 15) / 16 * 16;
    return rows < (size_t)N ? (int)rows : N;
}

int fsdp_gemm_widen_rows(int K, int N) {
    pthread_mutex_lock(&G_lock);
    int r = widen_rows_locked(K, N);
    pthread_mutex_unlock(&G_lock);
    return r;
}

/* dst[m, 0:n] = src[m, 0:n] for m < M, row strides ldd and lds. */
static void copy_cols(float *dst, int ldd, const float *src, int lds, int M, int n) {
    if (G.dry) return;
#pragma omp parallel for schedule(static) if ((size_t)M * n > CVT_CHUNK)
    for (int m = 0; m < M; m++)
        memcpy(dst + (size_t)m * ldd, src + (size_t)m * lds, (size_t)n * sizeof(float));
}

/* Name of the implementation oneDNN picks for an f32 matmul of key k ("" if none). */
static void impl_of(const gemm_key *k, char *out, size_t cap) {
    gemm_entry *e = NULL;
    const_dnnl_primitive_desc_t pd = NULL;
    const char *name = NULL;
    out[0] = '\0';
    if (entry_create(k, &e) == FSDP_OK && dnnl_primitive_get_primitive_desc(e->prim, &pd) == dnnl_success &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name)
        snprintf(out, cap, "%s", name);
    entry_free(e);
    fsdp_clear_error();
}

/* Whether a weight block may read dout's columns and write out's columns in place (strided A and C):
 * only when oneDNN runs such views with the same kernel as dense ones (gemm:jit on AVX2 does; the
 * AVX-512 brgemm does not and falls back to a slower one), else they go through SLOT_C32. */
static int strided_ok_locked(void) {
    if (G.strided_ok < 0) {
        gemm_key dense = {64, 64, 64, 0, 1, 0, 64, 64, 64, dnnl_f32, dnnl_f32, dnnl_data_type_undef};
        gemm_key strided = dense;
        strided.lda = strided.ldc = 256;
        char a[128], b[128];
        impl_of(&dense, a, sizeof a);
        impl_of(&strided, b, sizeof b);
        G.strided_ok = a[0] && strcmp(a, b) == 0;
    }
    return G.strided_ok;
}

void fsdp_gemm_widen_workspace(int M, int K, int N, size_t *w32_bytes, size_t *c32_bytes) {
    pthread_mutex_lock(&G_lock);
    int rows = widen_rows_locked(K, N), dense = 0;
    if (rows > 0 && rows < N && M > 0 && init_locked() == FSDP_OK) dense = !strided_ok_locked();
    fsdp_clear_error();
    pthread_mutex_unlock(&G_lock);
    *w32_bytes = rows > 0 ? (size_t)rows * (size_t)K * sizeof(float) : 0;
    *c32_bytes = dense ? (size_t)M * (size_t)rows * sizeof(float) : 0;
}

/* out[M,N] = inp[M,K] · W[N,K]^T (+ bias), output columns block by block. */
static fsdp_status f32c_forward(float *out, const float *inp, const fsdp_bf16 *W, const fsdp_bf16 *bias,
                                int M, int K, int N) {
    int rows = widen_rows_locked(K, N);
    void *w32, *b32 = NULL, *c32 = NULL;
    FSDP_TRY(slot_get(SLOT_W32, (size_t)rows * K * sizeof(float), &w32));
    if (rows < N && !strided_ok_locked())
        FSDP_TRY(slot_get(SLOT_C32, (size_t)M * rows * sizeof(float), &c32));
    if (bias) {
        FSDP_TRY(slot_get(SLOT_BIAS32, (size_t)N * sizeof(float), &b32));
        to_f32_par(b32, bias, (size_t)N);
    }
    for (int n0 = 0; n0 < N; n0 += rows) {
        int n = N - n0 < rows ? N - n0 : rows;
        to_f32_par(w32, W + (size_t)n0 * K, (size_t)n * K);
        float *bb = b32 ? (float *)b32 + n0 : NULL;
        if (c32) {
            FSDP_TRY(gemm_exec(c32, inp, w32, bb, FSDP_F32, 0, 0, 1, M, K, n, 0, 0, 0, 0));
            copy_cols(out + n0, N, c32, n, M, n);
        } else {
            FSDP_TRY(gemm_exec(out + n0, inp, w32, bb, FSDP_F32, 0, 0, 1, M, K, n, 0, 0, N, 0));
        }
    }
    return FSDP_OK;
}

/* dinp[M,K] (+)= dout[M,N] · W[N,K]: a sum over blocks of W's rows (dout's columns); the first block
 * takes the caller's flag, the others add. */
static fsdp_status f32c_dinp(float *dinp, int acc, const float *dout, const fsdp_bf16 *W, int M, int K,
                             int N) {
    int rows = widen_rows_locked(K, N);
    void *w32, *a32 = NULL;
    FSDP_TRY(slot_get(SLOT_W32, (size_t)rows * K * sizeof(float), &w32));
    if (rows < N && !strided_ok_locked())
        FSDP_TRY(slot_get(SLOT_C32, (size_t)M * rows * sizeof(float), &a32));
    for (int n0 = 0; n0 < N; n0 += rows) {
        int n = N - n0 < rows ? N - n0 : rows;
        to_f32_par(w32, W + (size_t)n0 * K, (size_t)n * K);
        const float *A = dout + n0;
        int lda = N;
        if (a32) {
            copy_cols(a32, n, dout + n0, N, M, n);
            A = a32;
            lda = n;
        }
        FSDP_TRY(gemm_exec(dinp, A, w32, NULL, FSDP_F32, 0, 0, 0, M, n, K, lda, 0, 0, n0 ? 1 : acc));
    }
    return FSDP_OK;
}

/* The forward with parameter dtype pdt on `path` (F32: plain). Lock held, engine ready. */
static fsdp_status forward_locked(float *out, const float *inp, const void *weight, const void *bias,
                                  fsdp_dtype pdt, fsdp_gemm_path path, int M, int K, int N) {
    if (pdt == FSDP_F32) return gemm_exec(out, inp, weight, bias, FSDP_F32, 0, 0, 1, M, K, N, 0, 0, 0, 0);
    if (path == FSDP_GEMM_F32_COMPUTE) return f32c_forward(out, inp, weight, bias, M, K, N);
    void *a16;
    FSDP_TRY(slot_get(SLOT_A, (size_t)M * K * sizeof(fsdp_bf16), &a16));
    to_bf16_par(a16, inp, (size_t)M * K);
    /* weight [N,K] is B^T: tb = 1. */
    return gemm_exec(out, a16, weight, bias, FSDP_BF16, path == FSDP_GEMM_BF16_VIA_F32, 0, 1, M, K, N, 0, 0,
                     0, 0);
}

/* ---------------------------------------------------------------- choosing the mixed-precision path */

const char *fsdp_mixed_compute_name(fsdp_mixed_compute m) {
    switch (m) {
    case FSDP_MIXED_COMPUTE_AUTO: return "auto";
    case FSDP_MIXED_COMPUTE_BF16: return "bf16";
    case FSDP_MIXED_COMPUTE_F32: return "f32";
    }
    return "unknown";
}

fsdp_status fsdp_gemm_set_mixed_compute(fsdp_mixed_compute m) {
    if (m != FSDP_MIXED_COMPUTE_AUTO && m != FSDP_MIXED_COMPUTE_BF16 && m != FSDP_MIXED_COMPUTE_F32)
        return FSDP_ERR(FSDP_EINVAL, "mixed compute %d is not auto, bf16 or f32", (int)m);
    pthread_mutex_lock(&G_lock);
    G.mixed = m;
    G.mixed_resolved = 0;
    pthread_mutex_unlock(&G_lock);
    return FSDP_OK;
}

/* Best-of-PROBE_REPS seconds of the forward of a GPT-2-124M qkv GEMM (M=256 rows, K=768, N=2304) with
 * bf16 parameters on the native bf16 path (rounding the activations included) and on the f32-compute
 * path (widening the weight included), interleaved so that load hits both alike. The buffers and the
 * workspace they grew are freed again. */
enum { PROBE_M = 256, PROBE_K = 768, PROBE_N = 2304, PROBE_REPS = 5 };

static fsdp_status probe_locked(double *bf16_s, double *f32_s) {
    float *X = NULL, *Y = NULL;
    fsdp_bf16 *W = NULL;
    fsdp_status st = fsdp_mem_alloc((void **)&X, (size_t)PROBE_M * PROBE_K * sizeof(float), FSDP_MEM_OTHER);
    if (st == FSDP_OK)
        st = fsdp_mem_alloc((void **)&Y, (size_t)PROBE_M * PROBE_N * sizeof(float), FSDP_MEM_OTHER);
    if (st == FSDP_OK)
        st = fsdp_mem_alloc((void **)&W, (size_t)PROBE_N * PROBE_K * sizeof(fsdp_bf16), FSDP_MEM_OTHER);
    if (st == FSDP_OK) {
        for (size_t i = 0; i < (size_t)PROBE_M * PROBE_K; i++)
            X[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)PROBE_N * PROBE_K; i++)
            W[i] = fsdp_f32_to_bf16((float)((i * 69069u) % 991) * 1e-3f - 0.5f);
    }
    double best[2] = {1e30, 1e30};
    const fsdp_gemm_path paths[2] = {FSDP_GEMM_BF16, FSDP_GEMM_F32_COMPUTE};
    for (int r = -1; r < PROBE_REPS && st == FSDP_OK; r++) /* r = -1: primitive creation, untimed */
        for (int p = 0; p < 2 && st == FSDP_OK; p++) {
            double t0 = fsdp_time_s();
            st = forward_locked(Y, X, W, NULL, FSDP_BF16, paths[p], PROBE_M, PROBE_K, PROBE_N);
            double t = fsdp_time_s() - t0;
            if (r >= 0 && t < best[p]) best[p] = t;
        }
    fsdp_mem_free(W);
    fsdp_mem_free(Y);
    fsdp_mem_free(X);
    cache_clear_locked(); /* the probe's shapes are not the model's */
    for (int i = 0; i < NSLOT; i++) {
        fsdp_mem_free(G.slot[i]);
        G.slot[i] = NULL;
        G.slot_bytes[i] = 0;
    }
    *bf16_s = best[0];
    *f32_s = best[1];
    return st;
}

/* The native bf16 path must beat the f32-compute path by this factor to be chosen. */
#define PROBE_MARGIN 0.9

static fsdp_status mixed_resolve_locked(void) {
    if (G.mixed_resolved) return FSDP_OK;
    fsdp_gemm_mixed_choice c = {.path = FSDP_GEMM_F32_COMPUTE, .setting = G.mixed, .source = "the setting"};
    if (c.setting == FSDP_MIXED_COMPUTE_AUTO) {
        int k = 0; /* auto|bf16|f32 */
        FSDP_TRY(fsdp_env_choice("FSDP_MIXED_COMPUTE", 0, &k));
        if (k != 0) {
            c.setting = k == 1 ? FSDP_MIXED_COMPUTE_BF16 : FSDP_MIXED_COMPUTE_F32;
            c.source = "FSDP_MIXED_COMPUTE";
        }
    }
    int native = bf16_native_locked() && !G.force_fallback;
    if (c.setting == FSDP_MIXED_COMPUTE_AUTO) {
        if (!native) {
            c.source = "no bf16 matmul on this ISA";
        } else {
            double tb, tf;
            FSDP_TRY(probe_locked(&tb, &tf));
            c.probe_bf16_ms = tb * 1e3;
            c.probe_f32_ms = tf * 1e3;
            c.source = "a probe";
            if (tb <= PROBE_MARGIN * tf) c.path = FSDP_GEMM_BF16;
        }
    } else if (c.setting == FSDP_MIXED_COMPUTE_BF16) {
        c.path = native ? FSDP_GEMM_BF16 : FSDP_GEMM_BF16_VIA_F32;
    }
    G.choice = c;
    G.mixed_resolved = 1;
    return FSDP_OK;
}

fsdp_status fsdp_gemm_mixed_choice_get(fsdp_gemm_mixed_choice *out) {
    if (!out) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    pthread_mutex_lock(&G_lock);
    fsdp_status st = init_locked();
    if (st == FSDP_OK) st = mixed_resolve_locked();
    if (st == FSDP_OK) *out = G.choice;
    pthread_mutex_unlock(&G_lock);
    return st;
}

static fsdp_status check_dims(const char *fn, int M, int K, int N, fsdp_dtype pdt) {
    if (M <= 0 || K <= 0 || N <= 0)
        return fsdp_set_error(FSDP_EINVAL, "%s: dims must be positive, got M=%d K=%d N=%d", fn, M, K, N);
    if (pdt != FSDP_F32 && pdt != FSDP_BF16)
        return fsdp_set_error(FSDP_EINVAL, "%s: parameter dtype %d is neither FSDP_F32 nor FSDP_BF16", fn,
                              (int)pdt);
    return FSDP_OK;
}

fsdp_status fsdp_matmul_forward(float *out, const float *inp, const void *weight, const void *bias,
                                fsdp_dtype pdt, int M, int K, int N) {
    FSDP_PROF_SCOPE(pdt == FSDP_BF16 ? FSDP_PROF_GEMM_BF16 : FSDP_PROF_GEMM_F32);
    FSDP_TRY(check_dims(__func__, M, K, N, pdt));
    if (!out || !inp || !weight)
        return FSDP_ERR(FSDP_EINVAL, "out, inp and weight must be non-NULL (out=%p inp=%p weight=%p)",
                        (void *)out, (const void *)inp, weight);
    if ((const float *)out == inp) return FSDP_ERR(FSDP_EINVAL, "out must not alias inp");
    pthread_mutex_lock(&G_lock);
    fsdp_status st = init_locked();
    if (st == FSDP_OK && pdt == FSDP_BF16) st = mixed_resolve_locked();
    if (st == FSDP_OK) st = forward_locked(out, inp, weight, bias, pdt, path_locked(pdt), M, K, N);
    pthread_mutex_unlock(&G_lock);
    return st;
}

/* dbias[N] (+)= column sums of dout[M,N]: columns split over threads, rows summed in order in double
 * (the same order on every path; the AVX-512 form only widens the column loop). */
enum { BIAS_CB = 64 };

static inline __attribute__((always_inline)) void bias_grad_block(float *dbias, const float *dout, int cb,
                                                                  int M, int N, int acc) {
    double s[BIAS_CB] = {0};
    int c0 = cb * BIAS_CB, c1 = c0 + BIAS_CB < N ? c0 + BIAS_CB : N;
    for (int m = 0; m < M; m++) {
        const float *r = dout + (size_t)m * N + c0;
#pragma omp simd
        for (int c = 0; c < c1 - c0; c++)
            s[c] += r[c];
    }
    for (int c = c0; c < c1; c++)
        dbias[c] = (float)(acc ? dbias[c] + s[c - c0] : s[c - c0]);
}

static void bias_grad_generic(float *dbias, const float *dout, int M, int N, int acc) {
    int nb = (N + BIAS_CB - 1) / BIAS_CB;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < nb; cb++)
        bias_grad_block(dbias, dout, cb, M, N, acc);
}

#if defined(__x86_64__) || defined(__i386__)
FSDP_TARGET_AVX512 static void bias_grad_avx512(float *dbias, const float *dout, int M, int N, int acc) {
    int nb = (N + BIAS_CB - 1) / BIAS_CB;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < nb; cb++)
        bias_grad_block(dbias, dout, cb, M, N, acc);
}
#endif

static void bias_grad(float *dbias, const float *dout, int M, int N, int acc) {
#if defined(__x86_64__) || defined(__i386__)
    if (fsdp_simd_active() == FSDP_SIMD_AVX512) {
        bias_grad_avx512(dbias, dout, M, N, acc);
        return;
    }
#endif
    bias_grad_generic(dbias, dout, M, N, acc);
}

/* The GEMMs of fsdp_matmul_backward (its dinp and dweight) on `path`. Lock held, engine ready. */
static fsdp_status backward_locked(float *dinp, int dinp_acc, float *dweight, int dweight_acc,
                                   const float *dout, const float *inp, const void *weight, fsdp_dtype pdt,
                                   fsdp_gemm_path path, int M, int K, int N) {
    fsdp_status st = FSDP_OK;
    if (path == FSDP_GEMM_F32 || path == FSDP_GEMM_F32_COMPUTE) {
        /* fp32 activations as they are; only the weight is bf16 on the f32-compute path. */
        if (dinp && path == FSDP_GEMM_F32)
            st = gemm_exec(dinp, dout, weight, NULL, FSDP_F32, 0, 0, 0, M, N, K, 0, 0, 0, dinp_acc);
        else if (dinp)
            st = f32c_dinp(dinp, dinp_acc, dout, weight, M, K, N);
        if (st == FSDP_OK && dweight)
            st = gemm_exec(dweight, dout, inp, NULL, FSDP_F32, 0, 1, 0, N, M, K, 0, 0, 0, dweight_acc);
        return st;
    }
    const void *dY = dout, *X = inp;
    int widen = path == FSDP_GEMM_BF16_VIA_F32;
    {
        void *d16 = NULL, *x16 = NULL;
        st = slot_get(SLOT_A, (size_t)M * N * sizeof(fsdp_bf16), &d16);
        if (st == FSDP_OK && dweight) st = slot_get(SLOT_B, (size_t)M * K * sizeof(fsdp_bf16), &x16);
        if (st == FSDP_OK) {
            to_bf16_par(d16, dout, (size_t)M * N);
            dY = d16;
            if (dweight) {
                to_bf16_par(x16, inp, (size_t)M * K);
                X = x16;
            }
        }
    }
    /* dinp[M,K] (+)= dY[M,N] · W[N,K]: A = dY (ta 0), B = W stored [K'=N, N'=K] (tb 0). */
    if (st == FSDP_OK && dinp)
        st = gemm_exec(dinp, dY, weight, NULL, FSDP_BF16, widen, 0, 0, M, N, K, 0, 0, 0, dinp_acc);
    /* dW[N,K] (+)= dY^T · X: A = dY stored [M,N] = [K',M'] (ta 1), B = X [M,K] (tb 0). */
    if (st == FSDP_OK && dweight)
        st = gemm_exec(dweight, dY, X, NULL, FSDP_BF16, widen, 1, 0, N, M, K, 0, 0, 0, dweight_acc);
    return st;
}

fsdp_status fsdp_matmul_backward(float *dinp, int dinp_acc, float *dweight, int dweight_acc, float *dbias,
                                 int dbias_acc, const float *dout, const float *inp, const void *weight,
                                 fsdp_dtype pdt, int M, int K, int N) {
    FSDP_PROF_SCOPE(pdt == FSDP_BF16 ? FSDP_PROF_GEMM_BF16 : FSDP_PROF_GEMM_F32);
    FSDP_TRY(check_dims(__func__, M, K, N, pdt));
    if (!dout) return FSDP_ERR(FSDP_EINVAL, "dout must be non-NULL");
    if (dinp && !weight) return FSDP_ERR(FSDP_EINVAL, "dinp requested but weight is NULL");
    if (dweight && !inp) return FSDP_ERR(FSDP_EINVAL, "dweight requested but inp is NULL");
    if (dinp && dinp == dout) return FSDP_ERR(FSDP_EINVAL, "dinp must not alias dout");

    if (dbias) bias_grad(dbias, dout, M, N, dbias_acc);
    if (!dinp && !dweight) return FSDP_OK;

    pthread_mutex_lock(&G_lock);
    fsdp_status st = init_locked();
    if (st == FSDP_OK && pdt == FSDP_BF16) st = mixed_resolve_locked();
    if (st == FSDP_OK)
        st = backward_locked(dinp, dinp_acc, dweight, dweight_acc, dout, inp, weight, pdt, path_locked(pdt),
                             M, K, N);
    pthread_mutex_unlock(&G_lock);
    return st;
}

size_t fsdp_gemm_workspace_bytes(size_t rows, const fsdp_gemm_shape *shapes, int n_shapes,
                                 fsdp_dtype compute) {
    static _Alignas(64) float dummy[16]; /* never read or written while dry */
    float *x = dummy;
    size_t bytes = 0;
    if (rows < 1 || rows > INT_MAX || n_shapes < 1) return 0;
    pthread_mutex_lock(&G_lock);
    fsdp_status st = init_locked();
    if (st == FSDP_OK && compute == FSDP_BF16) st = mixed_resolve_locked();
    if (st == FSDP_OK) {
        const fsdp_dtype pdt = compute == FSDP_BF16 ? FSDP_BF16 : FSDP_F32;
        const fsdp_gemm_path path = path_locked(pdt);
        const int M = (int)rows;
        G.dry = 1;
        memset(G.dry_slot, 0, sizeof G.dry_slot);
        for (int i = 0; i < n_shapes && st == FSDP_OK; i++) {
            const int K = shapes[i].k, N = shapes[i].n;
            st = forward_locked(x, x, x, shapes[i].bias ? x : NULL, pdt, path, M, K, N);
            /* the weight gradient overwrites (first touch) or accumulates (later micro-batches, a tied
             * weight's second use): each its own primitive */
            for (int acc = 0; acc < (shapes[i].frozen ? 1 : 2) && st == FSDP_OK; acc++)
                st = backward_locked(x, shapes[i].dinp_acc, shapes[i].frozen ? NULL : x, acc, x, x, x, pdt,
                                     path, M, K, N);
        }
        G.dry = 0;
        for (int s = 0; s < NSLOT; s++)
            bytes += G.dry_slot[s];
    }
    pthread_mutex_unlock(&G_lock);
    if (st != FSDP_OK) fsdp_clear_error(); /* the GEMMs themselves report it */
    return st == FSDP_OK ? bytes : 0;
}
