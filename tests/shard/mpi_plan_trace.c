/* mpi_plan_trace.c — one Chrome-trace file for every rank under mpirun 1..4: each rank records a
 * training step of a small engine (the engine's own per-unit phase events plus the test's "step"
 * span) and its memory; fsdp_trace_write gathers them to rank 0, which checks every rank's events and
 * counters are in the file. With a path argument the file is left there for check_trace.py
 * (tests/shard/plan_trace.cmake). */
#include "fsdp.h"
#include "test_util.h"

static const fsdp_tensor_spec SPECS[] = {
    {.name = "w", .ndim = 2, .shape = {5, 7}, .init = FSDP_INIT_NORMAL, .std = 0.02f},
    {.name = "b", .ndim = 1, .shape = {5}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
};

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void step(fsdp_engine_t *e, fsdp_unit_t **u, int n) {
    CHECK_OK(fsdp_engine_begin_step(e, 1));
    for (int i = 0; i < n; i++) {
        CHECK_OK(fsdp_unit_pre_forward(u[i]));
        CHECK_OK(fsdp_unit_post_forward(u[i]));
    }
    for (int i = n - 1; i >= 0; i--) {
        CHECK_OK(fsdp_unit_pre_backward(u[i]));
        for (int t = 0; t < 2; t++) {
            float *g = NULL;
            int acc = 0;
            CHECK_OK(fsdp_unit_main_grad(u[i], t, &g, &acc));
            for (int k = 0; g && k < (t ? 5 : 35); k++)
                g[k] = 0.01f * (float)k;
        }
        CHECK_OK(fsdp_unit_post_backward(u[i]));
    }
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    CHECK_OK(fsdp_engine_adamw_step(e, &oc));
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = test_comm_init(&argc, &argv);
    if (comm == NULL) return 1;
    int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm);

    fsdp_engine_t *e = NULL;
    fsdp_unit_t *u[2] = {0};
    CHECK_OK(fsdp_engine_init(&e, comm, NULL));
    CHECK_OK(fsdp_engine_add_unit(e, "h0", SPECS, 2, NULL, &u[0]));
    CHECK_OK(fsdp_engine_add_unit(e, "h1", SPECS, 2, NULL, &u[1]));
    CHECK_OK(fsdp_engine_init_params(e));

    CHECK_OK(fsdp_comm_barrier(comm)); /* a common time origin, roughly */
    CHECK_OK(fsdp_trace_enable(rank));
    char name[32];
    snprintf(name, sizeof name, "step on rank %d", rank);
    fsdp_trace_begin(name, "train");
    if (u[1]) step(e, u, 2);
    fsdp_trace_end(name, "train");
    fsdp_trace_disable();
    CHECK(fsdp_trace_num_events() >= 2);

    char path[512];
    if (argc > 1) /* default: one name per world size, so concurrent ctest runs do not collide */
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/tests/mpi_plan_trace_np%d.json", FSDP_BINARY_DIR, world);
    CHECK_OK(fsdp_trace_write(path, comm));
    CHECK_OK(fsdp_comm_barrier(comm));
    if (rank == 0) {
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        char *s = f ? calloc(1, 1 << 20) : NULL;
        if (s) {
            size_t n = fread(s, 1, (1 << 20) - 1, f);
            CHECK(n > 0 && n < (1 << 20) - 1);
            CHECK(strncmp(s, "{\"displayTimeUnit\"", 18) == 0 && strstr(s, "\n]}\n") != NULL);
            for (int r = 0; r < world; r++) {
                char want[96];
                snprintf(want, sizeof want,
                         "\"name\": \"step on rank %d\", \"cat\": \"train\", \"ph\": \"B\"", r);
                CHECKF(count(s, want) == 1, "rank %d's step event missing", r);
                snprintf(want, sizeof want, "\"args\": {\"name\": \"rank %d\", \"clock_origin_s\": ", r);
                CHECKF(count(s, want) == 1, "rank %d's process name (and clock origin) missing", r);
                /* every rank's counters: master held by its engine is in the baseline */
                snprintf(want, sizeof want,
                         "\"ph\": \"C\", \"ts\": 0.000, \"pid\": %d, \"args\": {\"master\": ", r);
                CHECKF(count(s, want) == 1, "rank %d's baseline counter missing", r);
            }
            CHECK(count(s, "\"ph\": \"B\"") == count(s, "\"ph\": \"E\""));
            free(s);
        }
        if (f) fclose(f);
    }
    fsdp_trace_free();
    fsdp_engine_free(e);
    fsdp_comm_free(comm);
    return TEST_MAIN_END();
}
