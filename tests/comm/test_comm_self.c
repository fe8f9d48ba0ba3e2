/* test_comm_self.c — the `self` backend without a launcher: AUTO picks it, every collective is exact
 * (world size 1), non-blocking requests complete, and every wrong use is FSDP_EINVAL with a message;
 * the rank-order sums past 64 contributions, which no launched test reaches. */
#include "comm/comm_impl.h"
#include "test_util.h"

#include <stdint.h>

#define N 37

static void fill(float *f, fsdp_bf16 *b, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)((int)(i * 7 + (size_t)salt) % 101) - 50.25f;
        b[i] = fsdp_f32_to_bf16((float)((int)(i * 3 + (size_t)salt) % 61) - 30.0f);
    }
}

/* One collective kind on both dtypes, out of place and in place: with world 1 the result is the
 * input, bit for bit, for every op. */
static void check_identity(fsdp_comm_t *c) {
    float fs[N], fr[N];
    fsdp_bf16 bs[N], br[N];
    fsdp_reduce_op ops[] = {FSDP_SUM, FSDP_AVG, FSDP_MAX};
    for (int o = 0; o < 3; o++) {
        fill(fs, bs, N, o);
        memset(fr, 0xff, sizeof fr);
        memset(br, 0xff, sizeof br);
        CHECK_OK(fsdp_comm_reduce_scatter(c, fs, fr, N, FSDP_F32, ops[o]));
        CHECK(memcmp(fs, fr, sizeof fr) == 0);
        CHECK_OK(fsdp_comm_reduce_scatter(c, bs, br, N, FSDP_BF16, ops[o]));
        CHECK(memcmp(bs, br, sizeof br) == 0);
        memset(fr, 0xff, sizeof fr);
        memset(br, 0xff, sizeof br);
        CHECK_OK(fsdp_comm_all_reduce(c, fs, fr, N, FSDP_F32, ops[o]));
        CHECK(memcmp(fs, fr, sizeof fr) == 0);
        CHECK_OK(fsdp_comm_all_reduce(c, bs, br, N, FSDP_BF16, ops[o]));
        CHECK(memcmp(bs, br, sizeof br) == 0);
        /* in place */
        memcpy(fr, fs, sizeof fr);
        CHECK_OK(fsdp_comm_all_reduce(c, fr, fr, N, FSDP_F32, ops[o]));
        CHECK(memcmp(fs, fr, sizeof fr) == 0);
        memcpy(br, bs, sizeof br);
        CHECK_OK(fsdp_comm_reduce_scatter(c, br, br, N, FSDP_BF16, ops[o]));
        CHECK(memcmp(bs, br, sizeof br) == 0);
    }
    fill(fs, bs, N, 9);
    memset(fr, 0, sizeof fr);
    CHECK_OK(fsdp_comm_all_gather(c, fs, fr, N, FSDP_F32));
    CHECK(memcmp(fs, fr, sizeof fr) == 0);
    memcpy(br, bs, sizeof br);
    CHECK_OK(fsdp_comm_all_gather(c, br, br, N, FSDP_BF16)); /* in place: send == recv + 0*count */
    CHECK(memcmp(bs, br, sizeof br) == 0);
    memcpy(fr, fs, sizeof fr);
    CHECK_OK(fsdp_comm_broadcast(c, fr, N, FSDP_F32, 0));
    CHECK(memcmp(fs, fr, sizeof fr) == 0);
    CHECK_OK(fsdp_comm_barrier(c));
}

static void check_nonblocking(fsdp_comm_t *c) {
    float fs[N], fr[N];
    fsdp_bf16 bs[N], br[N];
    fill(fs, bs, N, 5);
    fsdp_comm_req_t *a = NULL, *b = NULL;
    CHECK_OK(fsdp_comm_iall_gather(c, fs, fr, N, FSDP_F32, &a));
    CHECK_OK(fsdp_comm_ireduce_scatter(c, bs, br, N, FSDP_BF16, FSDP_AVG, &b));
    CHECK(a != NULL && b != NULL);
    int done = 0, polls = 0;
    while (!done && polls++ < 1000)
        CHECK_OK(fsdp_comm_test(a, &done));
    CHECK(done == 1);
    CHECK_OK(fsdp_comm_wait(b));
    CHECK(memcmp(fs, fr, sizeof fr) == 0);
    CHECK(memcmp(bs, br, sizeof br) == 0);
    /* count 0 is a no-op that still gives a (completed) request */
    fsdp_comm_req_t *z = NULL;
    CHECK_OK(fsdp_comm_ireduce_scatter(c, NULL, NULL, 0, FSDP_F32, FSDP_SUM, &z));
    CHECK(z != NULL);
    CHECK_OK(fsdp_comm_wait(z));
}

/* Accumulating reduce-scatter at world 1: acc += send * scale, the product rounded first. */
static void check_acc(fsdp_comm_t *c) {
    float fs[N], acc[N + 1], a0[N + 1];
    fsdp_bf16 bs[N];
    fill(fs, bs, N, 3);
    fill(a0, bs, N, 11);
    a0[N] = 7.0f;
    memcpy(acc, a0, sizeof acc);
    fsdp_comm_req_t *q = NULL;
    CHECK_OK(fsdp_comm_ireduce_scatter_acc(c, fs, acc, N, 1.0f / 3.0f, &q));
    CHECK_OK(fsdp_comm_wait(q));
    size_t bad = 0;
    for (int i = 0; i < N; i++) {
        volatile float p = fs[i] * (1.0f / 3.0f);
        bad += acc[i] != a0[i] + p;
    }
    CHECKF(bad == 0 && acc[N] == 7.0f, "self reduce-scatter-acc: %zu wrong", bad);
}

/* The reduction kernels beyond 64 contributions (a world larger than any test launches): groups of
 * contributions through an fp32 partial sum must give exactly the left-to-right fp32 sum, and the
 * accumulating form that sum times scale added. Run through a request of a stand-in communicator. */
static void check_wide_sums(void) {
    enum { K = 130, M = 2500 }; /* two full groups, a third partial; a partial second tile */
    static float in[K][M], out[M], acc[M];
    const float *src[K];
    uint64_t st = 99;
    for (int s = 0; s < K; s++) {
        src[s] = in[s];
        for (int i = 0; i < M; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            in[s][i] = ldexpf((float)((st >> 33) % 2001) / 1000.0f - 1.0f, (int)((st >> 20) % 31) - 15);
        }
    }
    int worlds[] = {64, 65, K};
    for (int w = 0; w < 3; w++) {
        fsdp_comm_t fake = {.size = worlds[w]};
        fsdp_comm_req_t r = {.c = &fake, .t = FSDP_F32, .op = FSDP_SUM};
        comm_req_reduce(&r, out, (const void *const *)src, M);
        for (int i = 0; i < M; i++)
            acc[i] = (float)i;
        r.acc = 1;
        r.acc_scale = 0.3f;
        comm_req_reduce(&r, acc, (const void *const *)src, M);
        size_t bad = 0;
        for (int i = 0; i < M; i++) {
            float a = in[0][i];
            for (int s = 1; s < worlds[w]; s++)
                a = a + in[s][i];
            volatile float p = a * 0.3f;
            bad += out[i] != a;
            bad += acc[i] != (float)i + p;
        }
        CHECKF(bad == 0, "sum of %d contributions: %zu wrong", worlds[w], bad);
        r.acc_discard = 1; /* a timed-out request writes nothing more */
        memcpy(out, acc, sizeof out);
        comm_req_reduce(&r, acc, (const void *const *)src, M);
        CHECK(memcmp(out, acc, sizeof out) == 0);
    }
}

static void check_einval(fsdp_comm_t *c) {
    float buf[2 * N] = {0};
    fsdp_comm_req_t *r = NULL;
    CHECK_ERR(fsdp_comm_all_gather(NULL, buf, buf, 1, FSDP_F32), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_all_gather(c, NULL, buf, 1, FSDP_F32), FSDP_EINVAL, "send is NULL");
    CHECK_ERR(fsdp_comm_all_gather(c, buf, NULL, 1, FSDP_F32), FSDP_EINVAL, "recv is NULL");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, NULL, buf, 3, FSDP_F32, FSDP_SUM), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_all_reduce(c, buf, NULL, 3, FSDP_BF16, FSDP_SUM), FSDP_EINVAL, "NULL");
    CHECK_ERR(fsdp_comm_broadcast(c, NULL, 3, FSDP_F32, 0), FSDP_EINVAL, "NULL");
    /* count 0: a no-op, NULL buffers allowed */
    CHECK_OK(fsdp_comm_all_gather(c, NULL, NULL, 0, FSDP_F32));
    CHECK_OK(fsdp_comm_all_reduce(c, NULL, NULL, 0, FSDP_BF16, FSDP_MAX));
    CHECK_OK(fsdp_comm_broadcast(c, NULL, 0, FSDP_F32, 0));
    /* count * size overflow */
    CHECK_ERR(fsdp_comm_all_reduce(c, buf, buf + N, SIZE_MAX / 2, FSDP_F32, FSDP_SUM), FSDP_EINVAL,
              "overflows");
    CHECK_ERR(fsdp_comm_all_gather(c, buf, buf + N, (size_t)PTRDIFF_MAX / 2 + 1, FSDP_BF16), FSDP_EINVAL,
              "overflows");
    /* bad dtype, op, root */
    CHECK_ERR(fsdp_comm_all_gather(c, buf, buf + N, 1, (fsdp_dtype)7), FSDP_EINVAL, "dtype");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, buf, buf + N, 1, FSDP_F32, (fsdp_reduce_op)9), FSDP_EINVAL, "op");
    CHECK_ERR(fsdp_comm_all_reduce(c, buf, buf + N, 1, FSDP_BF16, (fsdp_reduce_op)-1), FSDP_EINVAL, "op");
    CHECK_ERR(fsdp_comm_broadcast(c, buf, 1, FSDP_F32, 1), FSDP_EINVAL, "root 1");
    CHECK_ERR(fsdp_comm_broadcast(c, buf, 1, FSDP_F32, -1), FSDP_EINVAL, "root -1");
    /* partial overlaps that are not the documented in-place positions */
    CHECK_ERR(fsdp_comm_all_gather(c, buf + 1, buf, 4, FSDP_F32), FSDP_EINVAL, "in-place position");
    CHECK_ERR(fsdp_comm_reduce_scatter(c, buf, buf + 1, 4, FSDP_F32, FSDP_SUM), FSDP_EINVAL, "overlaps");
    CHECK_ERR(fsdp_comm_all_reduce(c, buf + 1, buf, 4, FSDP_BF16, FSDP_SUM), FSDP_EINVAL, "overlaps");
    /* non-blocking argument errors */
    CHECK_ERR(fsdp_comm_iall_gather(c, buf, buf + N, 1, FSDP_F32, NULL), FSDP_EINVAL, "req is NULL");
    CHECK_ERR(fsdp_comm_ireduce_scatter(c, buf, buf + N, 1, FSDP_F32, FSDP_SUM, NULL), FSDP_EINVAL, "req");
    r = (fsdp_comm_req_t *)1;
    CHECK_ERR(fsdp_comm_iall_gather(c, NULL, buf, 1, FSDP_F32, &r), FSDP_EINVAL, "NULL");
    CHECK(r == NULL);
    CHECK_ERR(fsdp_comm_ireduce_scatter(c, buf, buf + N, 1, FSDP_F32, (fsdp_reduce_op)5, &r), FSDP_EINVAL,
              "op");
    CHECK(r == NULL);
    int done = 7;
    CHECK_ERR(fsdp_comm_test(NULL, &done), FSDP_EINVAL, "NULL");
    CHECK(done == 0);
    CHECK_ERR(fsdp_comm_wait(NULL), FSDP_EINVAL, "NULL");
    CHECK_OK(fsdp_comm_iall_gather(c, buf, buf + N, 1, FSDP_F32, &r));
    CHECK_ERR(fsdp_comm_test(r, NULL), FSDP_EINVAL, "done is NULL");
    CHECK_OK(fsdp_comm_wait(r));
}

int main(void) {
    /* Run as ctest does, without a launcher: AUTO must choose self. */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("FSDP_TEST_SKIP_COLLECTIVE");
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cfg = fsdp_comm_config_default();
    cfg.timeout_s = 5.0;
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    CHECK(c != NULL);
    if (c == NULL) return TEST_MAIN_END();
    CHECK(strcmp(fsdp_comm_backend_name(c), "self") == 0);
    CHECK(fsdp_comm_rank(c) == 0 && fsdp_comm_size(c) == 1 && fsdp_comm_local_size(c) == 1);
    fsdp_comm_set_label(c, "unit test / self");
    CHECK(strcmp(c->label, "unit test / self") == 0);
    check_identity(c);
    check_nonblocking(c);
    check_acc(c);
    check_wide_sums();
    check_einval(c);
    fsdp_comm_free(c);
    fsdp_comm_free(NULL);

    /* Explicit self, and config errors. */
    cfg.backend = FSDP_COMM_SELF;
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    CHECK(c != NULL && strcmp(fsdp_comm_backend_name(c), "self") == 0);
    fsdp_comm_free(c);
    fsdp_comm_config bad = fsdp_comm_config_default();
    bad.version = 2;
    c = (fsdp_comm_t *)1;
    CHECK_ERR(fsdp_comm_init(&c, &bad, NULL, NULL), FSDP_EINVAL, "version");
    CHECK(c == NULL);
    bad = fsdp_comm_config_default();
    bad.backend = (fsdp_comm_backend)42;
    CHECK_ERR(fsdp_comm_init(&c, &bad, NULL, NULL), FSDP_EINVAL, "backend");
    bad = fsdp_comm_config_default();
    CHECK(bad.stuck_exit == 0); /* the watchdog that may end the process is the program's choice */
    bad.stuck_exit = 256;
    CHECK_ERR(fsdp_comm_init(&c, &bad, NULL, NULL), FSDP_EINVAL, "stuck_exit 256");
    bad.stuck_exit = -1;
    CHECK_ERR(fsdp_comm_init(&c, &bad, NULL, NULL), FSDP_EINVAL, "stuck_exit -1");
    bad.stuck_exit = 255; /* valid; the self backend has nothing to watch */
    CHECK_OK(fsdp_comm_init(&c, &bad, NULL, NULL));
    fsdp_comm_free(c);
    CHECK_ERR(fsdp_comm_init(NULL, &cfg, NULL, NULL), FSDP_EINVAL, "out");
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "zero:1", 1);
    CHECK_ERR(fsdp_comm_init(&c, &cfg, NULL, NULL), FSDP_EINVAL, "FSDP_TEST_SKIP_COLLECTIVE");
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:@", 1);
    CHECK_ERR(fsdp_comm_init(&c, &cfg, NULL, NULL), FSDP_EINVAL, "after '@'");
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:@:stall", 1);
    CHECK_ERR(fsdp_comm_init(&c, &cfg, NULL, NULL), FSDP_EINVAL, "after '@'");
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:@(prefetch):stall", 1);
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    fsdp_comm_free(c);
    c = NULL;
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:-1", 1);
    CHECK_ERR(fsdp_comm_init(&c, &cfg, NULL, NULL), FSDP_EINVAL, "malformed");
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:3:hang", 1);
    CHECK_OK(fsdp_comm_init(&c, &cfg, NULL, NULL));
    CHECK(c->fault->skip_hang == 1 && c->fault->skip_stall == 0 && c->fault->skip_seq == 3);
    fsdp_comm_free(c);
    setenv("FSDP_TEST_SKIP_COLLECTIVE", "0:3:hung", 1);
    CHECK_ERR(fsdp_comm_init(&c, &cfg, NULL, NULL), FSDP_EINVAL, "malformed");
    unsetenv("FSDP_TEST_SKIP_COLLECTIVE");
    return TEST_MAIN_END();
}
