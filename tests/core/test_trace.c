/* test_trace.c — the Chrome-trace recorder on one process: nothing is recorded while disabled, nested
 * begin/end events and unit-phase events come out with their names, categories and B/E phases, names
 * are JSON-escaped, and the memory counters follow the allocator (the bytes held per category after
 * each allocation and free). With a path argument it also leaves the file there for
 * tests/core/check_trace.py (tests/core/trace.cmake). */
#include "core/trace_impl.h" /* core_trace_serialise, core_trace_write_file */
#include "test_util.h"

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

int main(int argc, char **argv) {
    /* Disabled: every call is a no-op. */
    fsdp_trace_begin("ignored", "x");
    fsdp_trace_end("ignored", "x");
    CHECK(fsdp_trace_enabled() == 0 && fsdp_trace_num_events() == 0);

    void *pre = NULL;
    CHECK_OK(fsdp_mem_alloc(&pre, 1000, FSDP_MEM_MASTER)); /* held before recording: the baseline */
    CHECK_OK(fsdp_trace_enable(3));
    CHECK(fsdp_trace_enabled() == 1);
    fsdp_trace_begin("step", "train");
    fsdp_trace_unit_begin("h0", "all-gather");
    void *full = NULL, *mg = NULL;
    CHECK_OK(fsdp_mem_alloc(&full, 4096, FSDP_MEM_PARAM_FULL));
    fsdp_trace_unit_end("h0", "all-gather");
    fsdp_trace_unit_begin("h0", "forward");
    fsdp_trace_unit_end("h0", "forward");
    fsdp_trace_unit_begin("h0", "backward");
    CHECK_OK(fsdp_mem_alloc(&mg, 8192, FSDP_MEM_MAIN_GRAD));
    fsdp_trace_unit_end("h0", "backward");
    fsdp_trace_unit_begin("h0", "reduce-scatter");
    fsdp_mem_free(mg);
    fsdp_trace_unit_end("h0", "reduce-scatter");
    fsdp_mem_free(full);
    fsdp_trace_begin("say \"hi\"\n", "train"); /* must come out escaped */
    fsdp_trace_end("say \"hi\"\n", "train");
    fsdp_trace_end("step", "train");
    CHECK(fsdp_trace_num_events() == 12);
    fsdp_trace_disable();
    fsdp_trace_begin("after", "x"); /* not recorded */
    CHECK(fsdp_trace_num_events() == 12);

    char *text = NULL;
    size_t len = 0;
    CHECK_OK(core_trace_serialise(&text, &len));
    CHECK(text != NULL && len == strlen(text));
    if (text) {
        CHECK(count(text, "\"ph\": \"B\"") == 6 && count(text, "\"ph\": \"E\"") == 6);
        CHECK(count(text, "\"name\": \"forward h0\", \"cat\": \"forward\"") == 2);
        CHECK(count(text, "\"name\": \"reduce-scatter h0\", \"cat\": \"reduce-scatter\"") == 2);
        CHECK(count(text, "\"pid\": 3") > 0 && count(text, "\"pid\": 0") == 0);
        CHECK(strstr(text, "say \\\"hi\\\"\\u000a") != NULL);
        CHECK(strstr(text, "after") == NULL && strstr(text, "ignored") == NULL);
        /* Counters: the baseline (master 1000), then the state after each of the 4 allocator events
         * (a nanosecond clock: no two share a timestamp). */
        CHECK(count(text, "\"ph\": \"C\"") == 5);
        CHECK(count(text, "\"master\": 1000, \"optim\": 0") == 5);
        CHECK(count(text, "\"param_full\": 4096, \"main_grad\": 8192") == 1);
        CHECK(count(text, "\"param_full\": 4096, \"main_grad\": 0") == 2);
        /* The last counter: everything freed except the baseline. */
        const char *last = text, *p;
        while ((p = strstr(last + 1, "\"ph\": \"C\"")) != NULL)
            last = p;
        CHECK(strstr(
                  last,
                  "\"master\": 1000, \"optim\": 0, \"grad_shard\": 0, \"param_full\": 0, \"main_grad\": 0") !=
              NULL);
        const char *path = argc > 1 ? argv[1] : FSDP_BINARY_DIR "/tests/test_trace.json";
        CHECK_OK(core_trace_write_file(path, text, len));
        CHECK_ERR(core_trace_write_file("/nonexistent-dir/t.json", text, len), FSDP_EIO, "/nonexistent-dir");
    }
    free(text);
    fsdp_mem_free(pre);
    fsdp_trace_free();
    CHECK(fsdp_trace_num_events() == 0);
    return TEST_MAIN_END();
}
