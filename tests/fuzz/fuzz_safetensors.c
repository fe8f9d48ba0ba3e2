/* fuzz_safetensors.c — libFuzzer target for the .safetensors reader (src/io/safetensors.h) that
 * `--init-from` maps: the file through fsdp_st_open (mmap), then every tensor read back as fp32, whole
 * and strided. Input: the file's bytes. Properties: an accepted file's tensors lie inside its data
 * section, match dtype x shape, never overlap, and read without error (or with the NaN/Inf refusal);
 * a refused one says why. */
#include "fuzz_common.h"

#include "fsdp.h"
#include "io/safetensors.h"

static const unsigned elem_bytes[] = {4, 2, 2}; /* F32, BF16, F16 */

/* A read of an accepted tensor succeeds, or refuses a NaN/Inf value, naming it. */
static int read_ok(fsdp_status s) {
    return s == FSDP_OK || (s == FSDP_EFORMAT && strstr(fsdp_last_error(), "non-finite weights are refused"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_path(path, sizeof path, "model.safetensors");
    fuzz_write(path, data, size);
    fsdp_safetensors st;
    fsdp_status s = fsdp_st_open(&st, path);
    if (s != FSDP_OK) {
        FUZZ_REQUIRE(s == FSDP_EFORMAT && fsdp_last_error()[0] != '\0');
        fsdp_st_close(&st);
        return 0;
    }
    FUZZ_REQUIRE(st.size == size && st.data_off >= 10 && st.data_off <= size);
    const uint64_t data_len = size - st.data_off;
    float buf[256];
    for (int i = 0; i < st.n; i++) {
        const fsdp_st_tensor *t = &st.t[i];
        FUZZ_REQUIRE(t->begin <= t->end && t->end <= data_len);
        FUZZ_REQUIRE(fsdp_st_find(&st, t->name) == i); /* names are unique */
        for (int j = 0; j < i && j < 64; j++) {
            const fsdp_st_tensor *u = &st.t[j];
            FUZZ_REQUIRE(t->begin == t->end || u->begin == u->end || t->end <= u->begin ||
                         u->end <= t->begin);
        }
        if (t->dtype == FSDP_ST_OTHER) {
            FUZZ_REQUIRE(fsdp_st_read_f32(&st, i, 0, 1, buf) == FSDP_EFORMAT);
            continue;
        }
        FUZZ_REQUIRE(t->numel * elem_bytes[t->dtype] == t->end - t->begin);
        size_t n = t->numel < 256 ? (size_t)t->numel : 256;
        FUZZ_REQUIRE(read_ok(fsdp_st_read_f32(&st, i, 0, n, buf)));
        if (t->numel > 0) {
            uint64_t stride = t->numel > 3 ? 3 : 1, cnt = (t->numel - 1) / stride + 1;
            FUZZ_REQUIRE(
                read_ok(fsdp_st_read_strided_f32(&st, i, 0, stride, cnt < 256 ? (size_t)cnt : 256, buf)));
            FUZZ_REQUIRE(fsdp_st_read_f32(&st, i, t->numel - 1, 2, buf) == FSDP_EINVAL); /* past the end */
        }
    }
    fsdp_st_close(&st);
    fsdp_st_close(&st); /* twice: must be harmless */
    return 0;
}
