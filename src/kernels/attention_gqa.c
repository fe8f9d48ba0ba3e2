/* attention_gqa.c — grouped-query, document-masked causal attention on the Llama family's fused qkv
 * layout, without the T x T probabilities: the forward keeps one log-sum-exp per (row, head), the
 * backward recomputes the probabilities from it. Work goes in blocks of GQA_R query rows, each over
 * the keys it can see ([lo, t1): lo the first key of the block's earliest document), as oneDNN sgemm
 * calls on the calling OpenMP thread; the row passes (mask, softmax, dS) are instantiated for the
 * scalar, AVX2 and AVX-512 paths of fsdp_simd_active(), the exp through vmath.c. */
#include "kernels/kernels.h"

#include "core/core.h"
#include "core/prof.h"
#include "kernels/vmath.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <string.h>

enum { GQA_R = 64 }; /* query rows per block */

static fsdp_status check_gqa(int B, int T, int H, int KV, int hd) {
    if (B <= 0 || T <= 0 || H <= 0 || KV <= 0 || hd <= 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "attention_gqa: dims must be positive, got B=%d T=%d H=%d KV=%d hd=%d", B, T, H,
                              KV, hd);
    if (H % KV != 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "attention_gqa: the query head count H=%d is not a multiple of the key/value "
                              "head count KV=%d",
                              H, KV);
    if ((size_t)(H + 2 * KV) * (size_t)hd > (size_t)1 << 24 || (size_t)B * (size_t)T > (size_t)1 << 30)
        return fsdp_set_error(FSDP_EINVAL, "attention_gqa: B=%d T=%d H=%d KV=%d hd=%d is too large", B, T, H,
                              KV, hd);
    return FSDP_OK;
}

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C (beta 0: C is not read). */
static inline dnnl_status_t sgemm(char ta, char tb, int M, int N, int K, float alpha, const float *A,
                                  size_t lda, const float *Bm, size_t ldb, float beta, float *Cm,
                                  size_t ldc) {
    return dnnl_sgemm(ta, tb, M, N, K, alpha, A, (dnnl_dim_t)lda, Bm, (dnnl_dim_t)ldb, beta, Cm,
                      (dnnl_dim_t)ldc);
}

/* The first key of the block [t0, t1) of one batch row: 0 without documents, else the smallest s
 * with doc[s] == doc[t] for some t in the block (the first position of each document the block's
 * rows belong to; documents need not be contiguous). */
static int block_lo(const int32_t *doc, int t0, int t1) {
    if (!doc) return 0;
    int lo = t0;
    for (int t = t0; t < t1; t++) {
        if (t > t0 && doc[t] == doc[t - 1]) continue;
        for (int s = 0; s < lo; s++)
            if (doc[s] == doc[t]) {
                lo = s;
                break;
            }
    }
    return lo;
}

/* Mask of one score row of query t over keys [lo, lo + n): keys after t and, with documents, keys
 * of another document become -inf (the row's own key t is always kept). Returns the row's length up
 * to and including t (t - lo + 1); the rest of the row is left as it is. */
static inline __attribute__((always_inline)) int mask_row(float *s, const int32_t *doc, int t, int lo) {
    const int len = t - lo + 1;
    if (doc) {
        const int32_t d = doc[t];
        const int32_t *dk = doc + lo;
#pragma omp simd
        for (int j = 0; j < len; j++)
            s[j] = dk[j] == d ? s[j] : -INFINITY;
    }
    return len;
}

/* Forward rows [t0, t0 + r) of one (b, h): S [r, n] (leading dimension n, keys [lo, lo + n)) holds
 * scale * q.k; into probabilities in place, lse[t] = max + log(sum exp). */
static inline __attribute__((always_inline)) void fwd_rows_body(float *S, float *lse, const int32_t *doc,
                                                                int t0, int r, int lo, int n) {
    for (int j = 0; j < r; j++) {
        const int t = t0 + j;
        float *s = S + (size_t)j * n;
        const int len = mask_row(s, doc, t, lo);
        const float mx = fsdp_vmax(s, (size_t)len);
        const double sum = fsdp_vexp_shift_sum(s, s, (size_t)len, mx);
        const float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int c = 0; c < len; c++)
            s[c] *= inv;
        for (int c = len; c < n; c++)
            s[c] = 0.0f;
        lse[t] = (float)((double)mx + log(sum));
    }
}

/* Backward rows: S -> P = exp(S - lse) (masked, 0 after t); G holds dP = dO.v and becomes
 * dS = P * (dP - sum(P * dP)) * scale, 0 where P is. */
static inline __attribute__((always_inline)) void bwd_rows_body(float *S, float *G, const float *lse,
                                                                const int32_t *doc, int t0, int r, int lo,
                                                                int n, float scale) {
    for (int j = 0; j < r; j++) {
        const int t = t0 + j;
        float *p = S + (size_t)j * n, *g = G + (size_t)j * n;
        const int len = mask_row(p, doc, t, lo);
        (void)fsdp_vexp_shift_sum(p, p, (size_t)len, lse[t]);
        double dsum = 0.0;
#pragma omp simd reduction(+ : dsum)
        for (int c = 0; c < len; c++)
            dsum += (double)p[c] * g[c];
        const float dsf = (float)dsum;
#pragma omp simd
        for (int c = 0; c < len; c++)
            g[c] = p[c] * (g[c] - dsf) * scale;
        for (int c = len; c < n; c++)
            p[c] = g[c] = 0.0f;
    }
}

static void fwd_rows_generic(float *S, float *lse, const int32_t *doc, int t0, int r, int lo, int n) {
    fwd_rows_body(S, lse, doc, t0, r, lo, n);
}
static void bwd_rows_generic(float *S, float *G, const float *lse, const int32_t *doc, int t0, int r, int lo,
                             int n, float scale) {
    bwd_rows_body(S, G, lse, doc, t0, r, lo, n, scale);
}
#if defined(__x86_64__) || defined(__i386__)
#define GQA_X86 1
#define T256    __attribute__((target("avx2,fma")))
#define T512    FSDP_TARGET_AVX512
T256 static void fwd_rows_avx2(float *S, float *lse, const int32_t *doc, int t0, int r, int lo, int n) {
    fwd_rows_body(S, lse, doc, t0, r, lo, n);
}
T256 static void bwd_rows_avx2(float *S, float *G, const float *lse, const int32_t *doc, int t0, int r,
                               int lo, int n, float scale) {
    bwd_rows_body(S, G, lse, doc, t0, r, lo, n, scale);
}
T512 static void fwd_rows_avx512(float *S, float *lse, const int32_t *doc, int t0, int r, int lo, int n) {
    fwd_rows_body(S, lse, doc, t0, r, lo, n);
}
T512 static void bwd_rows_avx512(float *S, float *G, const float *lse, const int32_t *doc, int t0, int r,
                                 int lo, int n, float scale) {
    bwd_rows_body(S, G, lse, doc, t0, r, lo, n, scale);
}
#endif

typedef void (*fwd_rows_fn)(float *, float *, const int32_t *, int, int, int, int);
typedef void (*bwd_rows_fn)(float *, float *, const float *, const int32_t *, int, int, int, int, float);

static void pick_rows(fwd_rows_fn *f, bwd_rows_fn *b) {
    *f = fwd_rows_generic, *b = bwd_rows_generic;
#ifdef GQA_X86
    switch (fsdp_simd_active()) {
    case FSDP_SIMD_AVX512: *f = fwd_rows_avx512, *b = bwd_rows_avx512; break;
    case FSDP_SIMD_AVX2: *f = fwd_rows_avx2, *b = bwd_rows_avx2; break;
    default: break;
    }
#endif
}

size_t fsdp_attention_gqa_lse_floats(int B, int T, int H) {
    if (B <= 0 || T <= 0 || H <= 0) return 0;
    return (size_t)B * (size_t)H * (size_t)T;
}

/* Scratch floats per thread: S of one block (GQA_R x T) forward; S and dS of one block and the
 * thread's partial dk and dv of one (b, KV head) (T x hd each) backward. */
size_t fsdp_attention_gqa_forward_scratch_bytes(int T, int hd, int nthr) {
    if (T <= 0 || hd <= 0 || nthr <= 0) return 0;
    const size_t r = (size_t)(T < GQA_R ? T : GQA_R);
    return (size_t)nthr * r * (size_t)T * sizeof(float);
}

/* The backward's two schedules (see fsdp_attention_gqa_backward): 1 when the (b, KV head) pairs are
 * the parallel tasks. */
static int bwd_by_pair(int B, int KV, int nthr) {
    const long pairs = (long)B * KV, rounds = (pairs + nthr - 1) / nthr;
    return pairs >= nthr && pairs * 5 >= rounds * nthr * 4; /* at least 80% of the threads busy */
}

size_t fsdp_attention_gqa_backward_scratch_bytes(int B, int T, int KV, int hd, int nthr) {
    if (B <= 0 || T <= 0 || KV <= 0 || hd <= 0 || nthr <= 0) return 0;
    const size_t r = (size_t)(T < GQA_R ? T : GQA_R);
    const size_t partials = bwd_by_pair(B, KV, nthr) ? 0 : 2 * (size_t)T * (size_t)hd;
    return (size_t)nthr * (2 * r * (size_t)T + partials) * sizeof(float);
}

static fsdp_status gemm_status(int bad, const char *what) {
    if (bad == dnnl_success) return FSDP_OK;
    return fsdp_set_error(FSDP_EINTERNAL, "attention_gqa (%s): oneDNN sgemm failed with status %d", what,
                          bad);
}

fsdp_status fsdp_attention_gqa_forward(float *out, float *lse, const float *qkv, const int32_t *doc, int B,
                                       int T, int H, int KV, int hd) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_gqa(B, T, H, KV, hd));
    if (!out || !lse || !qkv)
        return FSDP_ERR(FSDP_EINVAL, "attention_gqa: out, lse and qkv must be non-NULL");
    const size_t A = (size_t)H * hd, QKV = (size_t)(H + 2 * KV) * hd, G = (size_t)(H / KV);
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int nthr = omp_get_max_threads(), nqb = (T + GQA_R - 1) / GQA_R;
    const size_t per_thr = fsdp_attention_gqa_forward_scratch_bytes(T, hd, 1) / sizeof(float);
    float *scratch = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float), FSDP_MEM_ACTIVATION));
    fwd_rows_fn rows;
    bwd_rows_fn unused;
    pick_rows(&rows, &unused);
    const long ntask = (long)B * H * nqb;
    int bad = dnnl_success;
    /* tasks round-robin, the longest (last) query blocks first */
#pragma omp parallel for schedule(static, 1) num_threads(nthr)
    for (long i = 0; i < ntask; i++) {
        const int qb = nqb - 1 - (int)(i / ((long)B * H)), bh = (int)(i % ((long)B * H));
        const int b = bh / H, h = bh % H;
        const size_t g = (size_t)h / G;
        const int t0 = qb * GQA_R, r = T - t0 < GQA_R ? T - t0 : GQA_R, t1 = t0 + r;
        const int32_t *db = doc ? doc + (size_t)b * T : NULL;
        const int lo = block_lo(db, t0, t1), n = t1 - lo;
        const float *base = qkv + (size_t)b * T * QKV;
        const float *q = base + (size_t)t0 * QKV + (size_t)h * hd;
        const float *k = base + (size_t)lo * QKV + A + g * hd,
                    *v = base + (size_t)lo * QKV + A + KV * hd + g * hd;
        float *S = scratch + (size_t)omp_get_thread_num() * per_thr;
        dnnl_status_t st = sgemm('N', 'T', r, n, hd, scale, q, QKV, k, QKV, 0.0f, S, (size_t)n);
        if (st == dnnl_success) {
            rows(S, lse + ((size_t)b * H + h) * T, db, t0, r, lo, n);
            st = sgemm('N', 'N', r, hd, n, 1.0f, S, (size_t)n, v, QKV, 0.0f,
                       out + ((size_t)b * T + t0) * A + (size_t)h * hd, A);
        }
        if (st != dnnl_success) __atomic_store_n(&bad, (int)st, __ATOMIC_RELAXED);
    }
    fsdp_mem_free(scratch);
    return gemm_status(bad, "forward");
}

/* One backward task: query head h, rows [t0, t0 + r) of batch row b (base: its qkv rows, gbase: its
 * dqkv rows). Writes those rows of dq; adds the dk and dv of keys [lo, t1) into dk, dv (leading
 * dimension ldkv, row 0 = key 0). S, dS: GQA_R x T floats of scratch. */
static dnnl_status_t bwd_task(float *gbase, float *dk, float *dv, size_t ldkv, const float *base,
                              const float *dO, const float *L, const int32_t *db, float *S, float *dS,
                              bwd_rows_fn rows, int h, int g, int t0, int r, size_t A, size_t KVd, size_t QKV,
                              int hd, float scale) {
    const int t1 = t0 + r, lo = block_lo(db, t0, t1), n = t1 - lo;
    const float *q = base + (size_t)t0 * QKV + (size_t)h * hd;
    const float *k = base + (size_t)lo * QKV + A + (size_t)g * hd, *v = k + KVd;
    dnnl_status_t st = sgemm('N', 'T', r, n, hd, scale, q, QKV, k, QKV, 0.0f, S, (size_t)n);
    if (st == dnnl_success) st = sgemm('N', 'T', r, n, hd, 1.0f, dO, A, v, QKV, 0.0f, dS, (size_t)n);
    if (st != dnnl_success) return st;
    rows(S, dS, L, db, t0, r, lo, n, scale);
    /* dq = dS k;  dk += dS^T q;  dv += P^T dO */
    st = sgemm('N', 'N', r, hd, n, 1.0f, dS, (size_t)n, k, QKV, 0.0f,
               gbase + (size_t)t0 * QKV + (size_t)h * hd, QKV);
    if (st == dnnl_success)
        st = sgemm('T', 'N', n, hd, r, 1.0f, dS, (size_t)n, q, QKV, 1.0f, dk + (size_t)lo * ldkv, ldkv);
    if (st == dnnl_success)
        st = sgemm('T', 'N', n, hd, r, 1.0f, S, (size_t)n, dO, A, 1.0f, dv + (size_t)lo * ldkv, ldkv);
    return st;
}

/* Two schedules, chosen by bwd_by_pair (both deterministic for a fixed thread count):
 * - by pair: each (b, KV head) is one task that zeroes its dk, dv and runs its G query heads x query
 *   blocks in order, accumulating straight into dqkv (no barrier, no partial sums);
 * - by block, when there are too few pairs for the threads: one (b, KV head) at a time, its query
 *   heads x query blocks the parallel tasks (round-robin, longest first), dk and dv added into each
 *   thread's own partial buffers, then summed in thread order into dqkv. */
fsdp_status fsdp_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                        const int32_t *doc, int B, int T, int H, int KV, int hd) {
    FSDP_PROF_SCOPE(FSDP_PROF_ATTENTION);
    FSDP_TRY(check_gqa(B, T, H, KV, hd));
    if (!dqkv || !dout || !qkv || !lse)
        return FSDP_ERR(FSDP_EINVAL, "attention_gqa: dqkv, dout, qkv and lse must be non-NULL");
    const size_t A = (size_t)H * hd, QKV = (size_t)(H + 2 * KV) * hd, KVd = (size_t)KV * hd;
    const int G = H / KV;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int nthr = omp_get_max_threads(), nqb = (T + GQA_R - 1) / GQA_R;
    const size_t R = (size_t)(T < GQA_R ? T : GQA_R), Tn = (size_t)T * (size_t)hd;
    const size_t per_thr =
        fsdp_attention_gqa_backward_scratch_bytes(B, T, KV, hd, nthr) / nthr / sizeof(float);
    const int by_pair = bwd_by_pair(B, KV, nthr);
    float *scratch = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&scratch, (size_t)nthr * per_thr * sizeof(float), FSDP_MEM_ACTIVATION));
    fwd_rows_fn unused;
    bwd_rows_fn rows;
    pick_rows(&unused, &rows);
    int bad = dnnl_success;
    if (by_pair) {
#pragma omp parallel for schedule(static) num_threads(nthr)
        for (int bg = 0; bg < B * KV; bg++) {
            const int b = bg / KV, g = bg % KV;
            float *S = scratch + (size_t)omp_get_thread_num() * per_thr, *dS = S + R * (size_t)T;
            const float *base = qkv + (size_t)b * T * QKV;
            float *gbase = dqkv + (size_t)b * T * QKV, *dk = gbase + A + (size_t)g * hd, *dv = dk + KVd;
            for (int s = 0; s < T; s++) {
                memset(dk + (size_t)s * QKV, 0, (size_t)hd * sizeof(float));
                memset(dv + (size_t)s * QKV, 0, (size_t)hd * sizeof(float));
            }
            for (int h = g * G; h < (g + 1) * G; h++)
                for (int qb = 0; qb < nqb; qb++) {
                    const int t0 = qb * GQA_R, r = T - t0 < GQA_R ? T - t0 : GQA_R;
                    dnnl_status_t st =
                        bwd_task(gbase, dk, dv, QKV, base, dout + ((size_t)b * T + t0) * A + (size_t)h * hd,
                                 lse + ((size_t)b * H + h) * T, doc ? doc + (size_t)b * T : NULL, S, dS, rows,
                                 h, g, t0, r, A, KVd, QKV, hd, scale);
                    if (st != dnnl_success) __atomic_store_n(&bad, (int)st, __ATOMIC_RELAXED);
                }
        }
        fsdp_mem_free(scratch);
        return gemm_status(bad, "backward");
    }
    const long ntask = (long)G * nqb;
#pragma omp parallel num_threads(nthr)
    {
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        float *S = scratch + (size_t)tid * per_thr, *dS = S + R * (size_t)T, *pk = dS + R * (size_t)T,
              *pv = pk + Tn;
        for (int bg = 0; bg < B * KV; bg++) {
            const int b = bg / KV, g = bg % KV;
            const float *base = qkv + (size_t)b * T * QKV;
            float *gbase = dqkv + (size_t)b * T * QKV;
            memset(pk, 0, 2 * Tn * sizeof(float));
#pragma omp for schedule(static, 1)
            for (long i = 0; i < ntask; i++) {
                const int qb = nqb - 1 - (int)(i / G), h = g * G + (int)(i % G);
                const int t0 = qb * GQA_R, r = T - t0 < GQA_R ? T - t0 : GQA_R;
                dnnl_status_t st = bwd_task(gbase, pk, pv, (size_t)hd, base,
                                            dout + ((size_t)b * T + t0) * A + (size_t)h * hd,
                                            lse + ((size_t)b * H + h) * T, doc ? doc + (size_t)b * T : NULL,
                                            S, dS, rows, h, g, t0, r, A, KVd, QKV, hd, scale);
                if (st != dnnl_success) __atomic_store_n(&bad, (int)st, __ATOMIC_RELAXED);
            }
            /* the partials in thread order: dk, dv of KV head g (implicit barrier above) */
#pragma omp for schedule(static)
            for (int s = 0; s < T; s++) {
                float *dk = gbase + (size_t)s * QKV + A + (size_t)g * hd, *dv = dk + KVd;
                const float *k0 = scratch + 2 * R * (size_t)T + (size_t)s * hd;
                for (int e = 0; e < hd; e++)
                    dk[e] = k0[e], dv[e] = k0[Tn + e];
                for (int th = 1; th < nt; th++) {
                    const float *kt = k0 + (size_t)th * per_thr, *vt = kt + Tn;
#pragma omp simd
                    for (int e = 0; e < hd; e++) {
                        dk[e] += kt[e];
                        dv[e] += vt[e];
                    }
                }
            }
        }
    }
    fsdp_mem_free(scratch);
    return gemm_status(bad, "backward");
}

fsdp_status fsdp_decode_attention(float *out, int ld_out, const float *qkv, int ld_q, const float *K,
                                  const float *V, int ld_kv, float *att, int nthr, int n, int pos, int H,
                                  int KV, int hd, float scale, int Tmax) {
    if (!out || !qkv || !K || !V || !att)
        return FSDP_ERR(FSDP_EINVAL, "decode attention: out, qkv, K, V and att must be non-NULL");
    if (n < 1 || pos < 0 || pos > Tmax - n || H < 1 || KV < 1 || H % KV != 0 || hd < 1 || nthr < 1 ||
        ld_out < H * hd || ld_q < H * hd || ld_kv < KV * hd)
        return FSDP_ERR(FSDP_EINVAL,
                        "decode attention: n=%d pos=%d Tmax=%d H=%d KV=%d hd=%d nthr=%d ld_out=%d ld_q=%d "
                        "ld_kv=%d",
                        n, pos, Tmax, H, KV, hd, nthr, ld_out, ld_q, ld_kv);
    const int group = H / KV;
#pragma omp parallel for schedule(static) collapse(2) num_threads(nthr)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)i * ld_q + (size_t)h * hd;
            const size_t kh = (size_t)(h / group) * hd;
            float *a = att + (size_t)omp_get_thread_num() * (size_t)Tmax;
            const int ctx = pos + i + 1;
            float mx = -INFINITY;
            for (int t = 0; t < ctx; t++) {
                const float *k = K + (size_t)t * ld_kv + kh;
                float s = 0.0f;
                for (int e = 0; e < hd; e++)
                    s += q[e] * k[e];
                a[t] = s * scale;
                if (a[t] > mx) mx = a[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < ctx; t++) {
                a[t] = expf(a[t] - mx);
                sum += a[t];
            }
            const float inv = 1.0f / sum;
            float *o = out + (size_t)i * ld_out + (size_t)h * hd;
            for (int e = 0; e < hd; e++)
                o[e] = 0.0f;
            for (int t = 0; t < ctx; t++) {
                const float w = a[t] * inv, *v = V + (size_t)t * ld_kv + kh;
                for (int e = 0; e < hd; e++)
                    o[e] += w * v[e];
            }
        }
    return FSDP_OK;
}
