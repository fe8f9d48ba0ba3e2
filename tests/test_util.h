/* test_util.h — the tiny harness every C test uses. CHECK records a failure with file:line and goes
 * on; TEST_MAIN_END prints "N passed, N failed" and returns non-zero if anything failed, so ctest sees
 * the failure. MPI tests pass their rank to test_set_rank() so messages say which rank failed. */
#ifndef FSDP_TEST_UTIL_H
#define FSDP_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_pass_, test_fail_, test_rank_ = -1;

static inline void test_set_rank(int r) { test_rank_ = r; }

#define TEST_PREFIX_() (test_rank_ >= 0 ? fprintf(stderr, "[rank %d] ", test_rank_) : 0)

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            test_pass_++;                                                                                    \
        } else {                                                                                             \
            test_fail_++;                                                                                    \
            TEST_PREFIX_();                                                                                  \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                  \
        }                                                                                                    \
    } while (0)

#define CHECKF(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            test_pass_++;                                                                                    \
        } else {                                                                                             \
            test_fail_++;                                                                                    \
            TEST_PREFIX_();                                                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

/* A library call that must succeed; prints fsdp_last_error() otherwise. */
#define CHECK_OK(expr)                                                                                       \
    do {                                                                                                     \
        fsdp_status s_ = (expr);                                                                             \
        CHECKF(s_ == FSDP_OK, "%s -> %s: %s", #expr, fsdp_strerror(s_), fsdp_last_error());                  \
    } while (0)

/* A call that must fail with status `want`, and whose message must contain `needle` (or NULL). */
#define CHECK_ERR(expr, want, needle)                                                                        \
    do {                                                                                                     \
        fsdp_status s_ = (expr);                                                                             \
        CHECKF(s_ == (want), "%s -> %s (want %s): %s", #expr, fsdp_strerror(s_), fsdp_strerror(want),        \
               fsdp_last_error());                                                                           \
        if ((needle) != NULL)                                                                                \
            CHECKF(strstr(fsdp_last_error(), (needle) ? (needle) : "") != NULL,                              \
                   "message \"%s\" lacks \"%s\"", fsdp_last_error(), (needle) ? (needle) : "");              \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
static inline int test_close(double a, double b, double rtol, double atol) {
    if (isnan(a) || isnan(b)) return 0;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

#ifdef FSDP_H
/* The communicator of an MPI test (MPI under mpirun, self without a launcher), with this process's
 * rank set for failure messages. NULL (after printing why) if it cannot be created. */
static inline fsdp_comm_t *test_comm_init(int *argc, char ***argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, argc, argv) != FSDP_OK) {
        fprintf(stderr, "comm init: %s\n", fsdp_last_error());
        return NULL;
    }
    test_set_rank(fsdp_comm_rank(comm));
    return comm;
}
#endif

/* Prints the summary line; use as `return TEST_MAIN_END();` */
#define TEST_MAIN_END()                                                                                      \
    (TEST_PREFIX_(), fprintf(stderr, "%d passed, %d failed\n", test_pass_, test_fail_),                      \
     (test_fail_ == 0 && test_pass_ > 0) ? 0 : 1)

#endif
