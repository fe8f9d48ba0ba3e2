/* mpi_comm_int.c — the integer and byte dtypes (I32, I64, U8) on every collective under mpirun -np
 * 1..4. Each rank derives every rank's data from (rank, element index) and recomputes the expected
 * result in exact integer arithmetic (int64 for I32, unsigned 128-bit for I64 sums), so no golden
 * files. Values are chosen so a trip through float or double would change them: I32 values above 2^24,
 * I64 values above 2^53 whose sums are exact only as integers. Runs on the shared-memory transport's
 * communicator (integers must leave it for Open MPI's collectives), with shm 0, and with the int
 * limit lowered (chunked all-reduce, the all-to-all reduce-scatter with a local integer reduction,
 * derived datatypes for the moves). Plus the refusals: AVG on integers, any reduction on U8. */
#include "comm/comm_impl.h"
#include "test_util.h"

#include <stdint.h>

static int R, W; /* this rank, world size */

/* I32: spread over [-2^29, 2^29) with low bits set (not a float above 2^24); sums over <= 4 ranks fit. */
static int32_t v32(int r, size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u + (uint32_t)r * 40503u + 12345u);
    return (int32_t)(h % (1u << 30)) - (1 << 29);
}
/* I64: around +-2^61 with odd low bits (not a double above 2^53); sums over <= 4 ranks fit. */
static int64_t v64(int r, size_t i) {
    uint64_t h = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull;
    return (int64_t)(h >> 2) - ((int64_t)1 << 61);
}
static uint8_t v8(int r, size_t i) { return (uint8_t)(i * 31 + (size_t)r * 7 + 1); }

static void *xalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static int64_t val(fsdp_dtype t, int r, size_t i) { return t == FSDP_I32 ? v32(r, i) : v64(r, i); }

/* Expected reduction over all ranks of element i, exact. */
static int64_t expect(fsdp_dtype t, fsdp_reduce_op op, size_t i) {
    int64_t acc = val(t, 0, i);
    for (int s = 1; s < W; s++) {
        int64_t v = val(t, s, i);
        acc = op == FSDP_MAX ? (v > acc ? v : acc) : acc + v; /* the values are chosen so sums fit */
    }
    return acc;
}

static void put(void *b, fsdp_dtype t, size_t i, int64_t v) {
    if (t == FSDP_I32)
        ((int32_t *)b)[i] = (int32_t)v;
    else
        ((int64_t *)b)[i] = v;
}
static int64_t get(const void *b, fsdp_dtype t, size_t i) {
    return t == FSDP_I32 ? ((const int32_t *)b)[i] : ((const int64_t *)b)[i];
}

static void test_all_reduce(fsdp_comm_t *c, fsdp_dtype t, fsdp_reduce_op op, size_t count, int in_place,
                            int nonblocking) {
    size_t es = fsdp_dtype_size(t);
    char *send = xalloc(count * es), *recv = in_place ? send : xalloc(count * es);
    for (size_t i = 0; i < count; i++)
        put(send, t, i, val(t, R, i));
    if (nonblocking) {
        fsdp_comm_req_t *q = NULL;
        fsdp_status s = fsdp_comm_iall_reduce(c, send, recv, count, t, op, &q);
        CHECK_OK(s);
        if (s == FSDP_OK) CHECK_OK(fsdp_comm_wait(q));
    } else {
        CHECK_OK(fsdp_comm_all_reduce(c, send, recv, count, t, op));
    }
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += get(recv, t, i) != expect(t, op, i);
    CHECKF(bad == 0, "all-reduce %s %s count %zu in_place %d nb %d: %zu wrong (first: got %lld want %lld)",
           fsdp_dtype_name(t), op == FSDP_MAX ? "MAX" : "SUM", count, in_place, nonblocking, bad,
           (long long)get(recv, t, 0), (long long)expect(t, op, 0));
    if (!in_place) free(recv);
    free(send);
}

static void test_reduce_scatter(fsdp_comm_t *c, fsdp_dtype t, fsdp_reduce_op op, size_t count, int in_place) {
    size_t es = fsdp_dtype_size(t), n = (size_t)W * count;
    char *send = xalloc(n * es), *recv = in_place ? send : xalloc(count * es);
    for (size_t i = 0; i < n; i++)
        put(send, t, i, val(t, R, i));
    CHECK_OK(fsdp_comm_reduce_scatter(c, send, recv, count, t, op));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += get(recv, t, i) != expect(t, op, (size_t)R * count + i);
    CHECKF(bad == 0, "reduce-scatter %s %s count %zu in_place %d: %zu wrong", fsdp_dtype_name(t),
           op == FSDP_MAX ? "MAX" : "SUM", count, in_place, bad);
    if (!in_place) free(recv);
    free(send);
}

/* All-gather and broadcast move bits: every dtype, each rank's block / the root's buffer intact. */
static int64_t moved(fsdp_dtype t, int r, size_t i) { return t == FSDP_U8 ? v8(r, i) : val(t, r, i); }
static void put_any(void *b, fsdp_dtype t, size_t i, int64_t v) {
    if (t == FSDP_U8)
        ((uint8_t *)b)[i] = (uint8_t)v;
    else
        put(b, t, i, v);
}
static int64_t get_any(const void *b, fsdp_dtype t, size_t i) {
    return t == FSDP_U8 ? ((const uint8_t *)b)[i] : get(b, t, i);
}

static void test_all_gather(fsdp_comm_t *c, fsdp_dtype t, size_t count, int in_place) {
    size_t es = fsdp_dtype_size(t);
    char *recv = xalloc((size_t)W * count * es);
    char *send = in_place ? recv + (size_t)R * count * es : xalloc(count * es);
    memset(recv, 0xee, (size_t)W * count * es);
    for (size_t i = 0; i < count; i++)
        put_any(send, t, i, moved(t, R, i));
    CHECK_OK(fsdp_comm_all_gather(c, send, recv, count, t));
    size_t bad = 0;
    for (int s = 0; s < W; s++)
        for (size_t i = 0; i < count; i++)
            bad += get_any(recv, t, (size_t)s * count + i) != moved(t, s, i);
    CHECKF(bad == 0, "all-gather %s count %zu in_place %d: %zu wrong", fsdp_dtype_name(t), count, in_place,
           bad);
    if (!in_place) free(send);
    free(recv);
}

static void test_broadcast(fsdp_comm_t *c, fsdp_dtype t, size_t count, int root) {
    size_t es = fsdp_dtype_size(t);
    char *buf = xalloc(count * es);
    for (size_t i = 0; i < count; i++)
        put_any(buf, t, i, moved(t, R, i)); /* each rank its own data: only root's may survive */
    CHECK_OK(fsdp_comm_broadcast(c, buf, count, t, root));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += get_any(buf, t, i) != moved(t, root, i);
    CHECKF(bad == 0, "broadcast %s count %zu root %d: %zu wrong", fsdp_dtype_name(t), count, root, bad);
    free(buf);
}

/* counts {1, 7, 1000} and, with big, 70001 */
static void run_all(fsdp_comm_t *c, const char *what, int big) {
    fsdp_dtype it[] = {FSDP_I32, FSDP_I64};
    fsdp_reduce_op ops[] = {FSDP_SUM, FSDP_MAX};
    size_t counts[] = {1, 7, 1000, 70001};
    int nc = big ? 4 : 3;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < nc; k++) {
                for (int ip = 0; ip < 2; ip++) {
                    test_all_reduce(c, it[a], ops[b], counts[k], ip, 0);
                    test_reduce_scatter(c, it[a], ops[b], counts[k], ip);
                }
                test_all_reduce(c, it[a], ops[b], counts[k], 0, 1);
            }
    fsdp_dtype mt[] = {FSDP_I32, FSDP_I64, FSDP_U8};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < nc; k++) {
            test_all_gather(c, mt[a], counts[k], 0);
            test_all_gather(c, mt[a], counts[k], 1);
            for (int root = 0; root < W; root++)
                test_broadcast(c, mt[a], counts[k], root);
        }
    if (R == 0) printf("%s: integer and byte collectives checked at np %d\n", what, W);
}

static void test_refusals(fsdp_comm_t *c) {
    int64_t b[16] = {0};
    CHECK_ERR(fsdp_comm_all_reduce(c, b, b, 2, FSDP_I32, FSDP_AVG), FSDP_EINVAL, "AVG");
    CHECK_ERR(fsdp_comm_all_reduce(c, b, b, 2, FSDP_I64, FSDP_AVG), FSDP_EINVAL, "AVG");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, b, b, 1, FSDP_I64, FSDP_AVG), FSDP_EINVAL, "AVG");
    CHECK_ERR(fsdp_comm_all_reduce(c, b, b, 2, FSDP_U8, FSDP_SUM), FSDP_EINVAL, "U8");
    CHECK_ERR(fsdp_comm_all_reduce(c, b, b, 2, FSDP_U8, FSDP_MAX), FSDP_EINVAL, "U8");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, b, b, 1, FSDP_U8, FSDP_MAX), FSDP_EINVAL, "U8");
    CHECK_ERR(fsdp_comm_all_gather(c, b, b + 8, 1, (fsdp_dtype)5), FSDP_EINVAL, "dtype");
    /* a refused call communicated nothing: the ranks are still in step */
    int64_t x = R, m = -1;
    CHECK_OK(fsdp_comm_all_reduce(c, &x, &m, 1, FSDP_I64, FSDP_MAX));
    CHECK(m == W - 1);
}

int main(int argc, char **argv) {
    CHECK(fsdp_dtype_size(FSDP_I32) == 4 && fsdp_dtype_size(FSDP_I64) == 8 && fsdp_dtype_size(FSDP_U8) == 1);
    CHECK(strcmp(fsdp_dtype_name(FSDP_I32), "i32") == 0 && strcmp(fsdp_dtype_name(FSDP_I64), "i64") == 0 &&
          strcmp(fsdp_dtype_name(FSDP_U8), "u8") == 0);
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_MPI;
    cc.timeout_s = 120;
    fsdp_comm_t *c = NULL;
    if (fsdp_comm_init(&c, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "fsdp_comm_init: %s\n", fsdp_last_error());
        return 1;
    }
    R = fsdp_comm_rank(c);
    W = fsdp_comm_size(c);
    test_set_rank(R);
    test_refusals(c);
    run_all(c, fsdp_comm_shm_active(c) ? "shm communicator" : "default communicator", 1);
    /* 1000 elements above a limit of 300: a chunked all-reduce (4 chunks, the last partial), the
     * all-to-all reduce-scatter with the local integer reduction, derived datatypes for the moves */
    comm_test_set_int_limit(c, 300);
    run_all(c, "int limit 300", 0);
    comm_test_set_int_limit(c, 0);

    fsdp_comm_t *c2 = NULL; /* Open MPI's collectives throughout; before c goes (freeing c finalises MPI) */
    cc.shm = 0;
    CHECK_OK(fsdp_comm_init(&c2, &cc, NULL, NULL));
    if (c2 != NULL) {
        CHECK(!fsdp_comm_shm_active(c2));
        run_all(c2, "shm 0", 1);
    }
    fsdp_comm_free(c2);
    CHECK(fsdp_mem_current(FSDP_MEM_COMM) == 0); /* staging all returned */
    fsdp_comm_free(c);
    return TEST_MAIN_END();
}
