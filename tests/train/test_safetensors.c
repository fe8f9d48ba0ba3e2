/* test_safetensors.c — the .safetensors reader (src/io/safetensors.h) on buffers built here: values
 * of every float dtype (F16 checked exhaustively against an ldexp recomputation, BF16 against its bit
 * definition), element ranges and strided reads, and each malformed header refused naming the field.
 * The seeds in tests/fuzz/corpus/safetensors, written by the safetensors library, are checked too. */
#include "test_util.h"

#include "fsdp.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* header JSON (padded to 8) + data into buf; returns the size. */
static size_t build(uint8_t *buf, const char *json, const void *data, size_t n) {
    size_t h = strlen(json), hp = (h + 7) / 8 * 8;
    uint64_t hl = hp;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, json, h);
    memset(buf + 8 + h, ' ', hp - h);
    memcpy(buf + 8 + hp, data, n);
    return 8 + hp + n;
}

/* Reference F16 decoding: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024. */
static double f16_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_values(void) {
    static uint8_t buf[1 << 19];
    /* "h": every F16 bit pattern; "b": BF16 patterns of the same 16 bits; "f": a 3x4 F32 matrix. */
    static uint16_t all[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    static uint8_t data[2 * 65536 * 2 + 48];
    memcpy(data, all, sizeof all);
    memcpy(data + sizeof all, all, sizeof all);
    float f[12];
    for (int i = 0; i < 12; i++)
        f[i] = (float)i * 0.5f - 1.0f;
    memcpy(data + 2 * sizeof all, f, sizeof f);
    char json[512];
    snprintf(json, sizeof json,
             "{\"__metadata__\":{\"format\":\"pt\"},\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_"
             "offsets\":[0,131072]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[256,256],\"data_offsets\":[131072,262144]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[262144,262192]}}");
    size_t n = build(buf, json, data, sizeof data);
    fsdp_safetensors st;
    CHECK_OK(fsdp_st_parse(&st, buf, n, "values"));
    CHECK(st.n == 3);
    int ih = fsdp_st_find(&st, "h"), ib = fsdp_st_find(&st, "b"), iff = fsdp_st_find(&st, "f");
    CHECK(ih >= 0 && ib >= 0 && iff >= 0 && fsdp_st_find(&st, "__metadata__") < 0);
    static float out[65536];
    CHECK_OK(fsdp_st_read_f32(&st, ih, 0, 65536, out));
    int bad_h = 0, bad_b = 0;
    for (int i = 0; i < 65536; i++) {
        double r = f16_ref((uint16_t)i);
        if (isnan(r) ? !isnan(out[i]) : (double)out[i] != r) bad_h++;
    }
    CHECKF(bad_h == 0, "%d F16 values differ from the ldexp reference", bad_h);
    CHECK_OK(fsdp_st_read_f32(&st, ib, 0, 65536, out));
    for (int i = 0; i < 65536; i++) {
        uint32_t bits = (uint32_t)i << 16, got;
        memcpy(&got, &out[i], 4);
        if (got != bits && !(isnan(out[i]) && ((i & 0x7f80) == 0x7f80))) bad_b++;
    }
    CHECKF(bad_b == 0, "%d BF16 values are not their bits << 16", bad_b);
    /* Ranges and columns of the F32 matrix. */
    CHECK_OK(fsdp_st_read_f32(&st, iff, 5, 3, out));
    CHECK(out[0] == f[5] && out[1] == f[6] && out[2] == f[7]);
    CHECK_OK(fsdp_st_read_strided_f32(&st, iff, 2, 4, 3, out)); /* column 2 */
    CHECK(out[0] == f[2] && out[1] == f[6] && out[2] == f[10]);
    CHECK_ERR(fsdp_st_read_f32(&st, iff, 10, 3, out), FSDP_EINVAL, "past");
    CHECK_ERR(fsdp_st_read_strided_f32(&st, iff, 2, 4, 4, out), FSDP_EINVAL, "past");
    fsdp_st_close(&st);
    fsdp_st_close(&st);
}

static void expect_bad(const char *json, size_t data_len, const char *needle) {
    static uint8_t buf[4096], data[1024];
    size_t n = build(buf, json, data, data_len);
    fsdp_safetensors st;
    fsdp_status s = fsdp_st_parse(&st, buf, n, "bad.safetensors");
    CHECKF(s == FSDP_EFORMAT, "%s: accepted (want an error with \"%s\")", json, needle);
    CHECKF(strstr(fsdp_last_error(), needle) && strstr(fsdp_last_error(), "bad.safetensors"),
           "%s: message \"%s\" lacks \"%s\" or the file name", json, fsdp_last_error(), needle);
    fsdp_st_close(&st);
}

static void test_bad(void) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
               "outside the 8 data bytes");
    expect_bad("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "dtype F16");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\","
               "\"shape\":[2],"
               "\"data_offsets\":[4,12]}}",
               16, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "unknown dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, "\"shape\"[0]");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":1}}", 16,
               "unknown key");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\","
               "\"shape\":[1],"
               "\"data_offsets\":[4,8]}}",
               8, "twice");
    expect_bad("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__");
    expect_bad("[1,2]", 0, "'{'");
    expect_bad("{\"a\":1} x", 0, "after the header");
    /* Lengths that do not fit the file. */
    uint8_t small[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    fsdp_safetensors st;
    CHECK_ERR(fsdp_st_parse(&st, small, sizeof small, "short.safetensors"), FSDP_EFORMAT,
              "runs past the end");
    CHECK_ERR(fsdp_st_parse(&st, small, 7, "short.safetensors"), FSDP_EFORMAT, "too short");
    CHECK_ERR(fsdp_st_open(&st, "/nonexistent/model.safetensors"), FSDP_EIO,
              "/nonexistent/model.safetensors");
    CHECK_ERR(fsdp_st_open(&st, "/tmp"), FSDP_EIO, "not a readable regular file");
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/fsdp_st_fifo_%d", (int)getpid());
    int made = mkfifo(fifo, 0600) == 0;
    CHECKF(made, "mkfifo %s failed", fifo);
    if (made) /* refused at once, not a blocking open */
        CHECK_ERR(fsdp_st_open(&st, fifo), FSDP_EIO, "not a readable regular file");
    unlink(fifo);
}

/* The seeds the safetensors library wrote: accepted, with the dtypes and shapes it was given. */
static void test_library_files(void) {
    fsdp_safetensors st;
    CHECK_OK(fsdp_st_open(&st, FSDP_SOURCE_DIR "/tests/fuzz/corpus/safetensors/valid_mixed"));
    int a = fsdp_st_find(&st, "a"), b = fsdp_st_find(&st, "b"), c = fsdp_st_find(&st, "c"),
        s = fsdp_st_find(&st, "s");
    CHECK(a >= 0 && b >= 0 && c >= 0 && s >= 0);
    if (a >= 0 && b >= 0 && c >= 0 && s >= 0) {
        CHECK(st.t[a].dtype == FSDP_ST_BF16 && st.t[a].ndim == 2 && st.t[a].shape[0] == 2 &&
              st.t[a].shape[1] == 3);
        CHECK(st.t[b].dtype == FSDP_ST_F16 && st.t[b].numel == 5);
        CHECK(st.t[c].dtype == FSDP_ST_OTHER && !strcmp(st.t[c].dtype_name, "I64"));
        CHECK(st.t[s].ndim == 0 && st.t[s].numel == 1);
        float v;
        CHECK_OK(fsdp_st_read_f32(&st, s, 0, 1, &v));
        CHECK(v == 1.5f);
        CHECK_ERR(fsdp_st_read_f32(&st, c, 0, 1, &v), FSDP_EFORMAT, "I64");
    }
    fsdp_st_close(&st);
    CHECK_ERR(fsdp_st_open(&st, FSDP_SOURCE_DIR "/tests/fuzz/corpus/safetensors/overlap"), FSDP_EFORMAT,
              "overlap");
}

int main(void) {
    test_values();
    test_bad();
    test_library_files();
    return TEST_MAIN_END();
}
