/* comm_util.c — what the front end (comm.c) and every transport share, below all of them: collective
 * names, the process's MPI lock, and the deterministic reductions (fp32 accumulation in rank order)
 * that every reduce-scatter and all-reduce path ends in. */
#include "comm/comm_impl.h"

#include <string.h>

const char *comm_coll_name(comm_coll k) {
    switch (k) {
    case COLL_ALL_GATHER: return "all-gather";
    case COLL_REDUCE_SCATTER: return "reduce-scatter";
    case COLL_ALL_REDUCE: return "all-reduce";
    case COLL_BROADCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    }
    return "collective";
}

/* One lock for every communicator of the process: MPI_THREAD_SERIALIZED is a promise about the whole
 * process, and sub-communicators (fsdp_comm_split) share it with their parent. Taken only while some
 * progress thread exists (the count changes only on the caller's thread, between collectives). */
pthread_mutex_t comm_mpi_mu = PTHREAD_MUTEX_INITIALIZER;
int comm_mpi_threads;

void comm_lock(fsdp_comm_t *c) {
    (void)c;
    if (comm_mpi_threads > 0) pthread_mutex_lock(&comm_mpi_mu);
}
void comm_unlock(fsdp_comm_t *c) {
    (void)c;
    if (comm_mpi_threads > 0) pthread_mutex_unlock(&comm_mpi_mu);
}

/* --------------------------------------------------------------------------------- reduction helper */

/* Integer SUM/MAX: exact, so the order does not matter; sums wrap in unsigned arithmetic rather than
 * overflow (the documented contract is that they fit). Contribution s as in reduce_impl. */
#define REDUCE_INT(T, UT)                                                                                    \
    do {                                                                                                     \
        T *d = dst;                                                                                          \
        for (int s = 0; s < world; s++) {                                                                    \
            const T *p = src ? (const T *)src[s] : (const T *)base + (size_t)s * stride;                     \
            if (s == 0)                                                                                      \
                memmove(d, p, n * sizeof(T));                                                                \
            else if (op == FSDP_MAX)                                                                         \
                for (size_t i = 0; i < n; i++)                                                               \
                    d[i] = p[i] > d[i] ? p[i] : d[i];                                                        \
            else                                                                                             \
                for (size_t i = 0; i < n; i++)                                                               \
                    d[i] = (T)((UT)d[i] + (UT)p[i]);                                                         \
        }                                                                                                    \
    } while (0)

static void reduce_int(void *dst, const void *const *src, const void *base, size_t stride, int world,
                       size_t n, fsdp_dtype t, fsdp_reduce_op op) {
    if (t == FSDP_I32)
        REDUCE_INT(int32_t, uint32_t);
    else
        REDUCE_INT(int64_t, uint64_t);
}

/* F32 rank-order sum of world contributions (src[s], or base + s*stride elements) into dst, or, with
 * scale, added into the accumulator dst as fsdp_f32_sum_axpy_n does. One pass through the vector
 * kernels with up to PMAX contributions at a time; beyond, tile by tile through an fp32 partial sum
 * (stored fp32 between groups, as the kernels keep it: the same bits). */
static void f32_sum(void *dst, const void *const *src, const void *base, size_t stride, int world, size_t n,
                    const float *scale) {
    enum { PMAX = 64, TILE = 2048 };
    const float *p[PMAX];
    for (int s = 0; s < world && s < PMAX; s++)
        p[s] = src ? (const float *)src[s] : (const float *)base + (size_t)s * stride;
    if (world <= PMAX) {
        if (scale)
            fsdp_f32_sum_axpy_n(dst, p, world, n, *scale);
        else
            fsdp_f32_sum_n(dst, p, world, n);
        return;
    }
    float part[TILE];
    const float *one[1] = {part};
    for (size_t i0 = 0; i0 < n; i0 += TILE) {
        size_t m = n - i0 < TILE ? n - i0 : TILE;
        for (int s0 = 0; s0 < world; s0 += s0 == 0 ? PMAX : PMAX - 1) {
            int k = 0;
            if (s0 > 0) p[k++] = part;
            for (int s = s0; s < world && k < PMAX; s++)
                p[k++] = (src ? (const float *)src[s] : (const float *)base + (size_t)s * stride) + i0;
            fsdp_f32_sum_n(part, p, k, m);
        }
        if (scale)
            fsdp_f32_sum_axpy_n((float *)dst + i0, one, 1, m, *scale);
        else
            memcpy((float *)dst + i0, part, m * sizeof(float));
    }
}

/* Contribution s is src[s] when src != NULL, else base + s*stride (elements). */
static void reduce_impl(void *dst, const void *const *src, const void *base, size_t stride, int world,
                        size_t n, fsdp_dtype t, fsdp_reduce_op op) {
    /* Tiles keep the fp32 accumulator in L1 while the contributions stream past in rank order. The
     * bulk bf16 helpers are bit-identical to the scalar conversions (one fp32 add per element). */
    if (t == FSDP_I32 || t == FSDP_I64) {
        reduce_int(dst, src, base, stride, world, n, t, op);
        return;
    }
    if (t == FSDP_F32 && op != FSDP_MAX) {
        f32_sum(dst, src, base, stride, world, n, NULL);
        if (op == FSDP_AVG) {
            float *d = dst;
            for (size_t i = 0; i < n; i++)
                d[i] /= (float)world;
        }
        return;
    }
    if (t == FSDP_BF16 && op == FSDP_SUM && world <= 64) { /* one fused pass, the same bits */
        const fsdp_bf16 *p[64];
        for (int s = 0; s < world; s++)
            p[s] = src ? (const fsdp_bf16 *)src[s] : (const fsdp_bf16 *)base + (size_t)s * stride;
        fsdp_bf16_sum_n(dst, p, world, n);
        return;
    }
    enum { TILE = 2048 };
    float acc[TILE]; /* fp32 partial results of one tile */
    size_t es = fsdp_dtype_size(t);
    for (size_t i0 = 0; i0 < n; i0 += TILE) {
        size_t m = n - i0 < TILE ? n - i0 : TILE;
        for (int s = 0; s < world; s++) {
            const char *p = src ? (const char *)src[s] : (const char *)base + (size_t)s * stride * es;
            const float *sf = (const float *)p + i0;
            const fsdp_bf16 *sb = (const fsdp_bf16 *)p + i0;
            if (s == 0) { /* start from rank 0's value: keeps -0.0 and adds nothing to it */
                if (t == FSDP_BF16)
                    fsdp_bf16_to_f32_n(acc, sb, m);
                else
                    memcpy(acc, sf, m * sizeof(float));
            } else if (op != FSDP_MAX && t == FSDP_BF16) {
                fsdp_bf16_add_f32_n(acc, sb, m);
            } else if (op != FSDP_MAX) {
                for (size_t i = 0; i < m; i++)
                    acc[i] += sf[i];
            } else {
                for (size_t i = 0; i < m; i++) { /* a NaN anywhere makes the result NaN */
                    float v = t == FSDP_BF16 ? fsdp_bf16_to_f32(sb[i]) : sf[i];
                    acc[i] = (v > acc[i] || v != v) && acc[i] == acc[i] ? v : acc[i];
                }
            }
        }
        if (op == FSDP_AVG)
            for (size_t i = 0; i < m; i++)
                acc[i] /= (float)world;
        if (t == FSDP_BF16)
            fsdp_f32_to_bf16_n((fsdp_bf16 *)dst + i0, acc, m);
        else
            memcpy((float *)dst + i0, acc, m * sizeof(float));
    }
}

void comm_reduce_blocks(void *dst, const void *src, size_t stride, int world, size_t n, fsdp_dtype t,
                        fsdp_reduce_op op) {
    reduce_impl(dst, NULL, src, stride, world, n, t, op);
}

void comm_reduce_ptrs(void *dst, const void *const *src, int world, size_t n, fsdp_dtype t,
                      fsdp_reduce_op op) {
    reduce_impl(dst, src, NULL, 0, world, n, t, op);
}

void comm_req_reduce(const fsdp_comm_req_t *r, void *dst, const void *const *src, size_t n) {
    if (!r->acc)
        reduce_impl(dst, src, NULL, 0, r->c->size, n, r->t, r->op);
    else if (!r->acc_discard)
        f32_sum(dst, src, NULL, 0, r->c->size, n, &r->acc_scale);
}

void comm_req_reduce_blocks(const fsdp_comm_req_t *r, void *dst, const void *src, size_t stride, size_t n) {
    if (!r->acc)
        reduce_impl(dst, NULL, src, stride, r->c->size, n, r->t, r->op);
    else if (!r->acc_discard)
        f32_sum(dst, NULL, src, stride, r->c->size, n, &r->acc_scale);
}

void comm_rows_prepend(fsdp_comm_t *c, const comm_transport *tp) {
    if (c->nrows >= COMM_ROWS) return; /* every row is in already: not reached */
    memmove(c->rows + 1, c->rows, (size_t)c->nrows * sizeof c->rows[0]);
    c->rows[0] = tp;
    c->nrows++;
}
