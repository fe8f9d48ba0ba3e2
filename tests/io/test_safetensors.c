/* test_safetensors.c — the .safetensors reader (src/io/safetensors.h) on buffers built here: values
 * of every float dtype (F16's finite patterns checked exhaustively against an ldexp recomputation,
 * BF16's against its bit definition, every NaN/Inf refused naming tensor and element), element ranges
 * and strided reads, and each malformed header refused naming the field.
 * A file truncated while mapped reads as an error naming it, not a SIGBUS death.
 * The seeds in tests/fuzz/corpus/safetensors, written by the safetensors library, are checked too. */
#include "test_util.h"

#include "fsdp.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
    /* Every finite pattern converts exactly: F16 [0, 0x7c00) and [0x8000, 0xfc00); BF16 all but
     * exponent 0xff ([0x7f80, 0x8000) and [0xff80, 0x10000)). */
    int bad_h = 0, bad_b = 0;
    for (int half = 0; half < 2; half++) {
        const int lo = half * 0x8000;
        CHECK_OK(fsdp_st_read_f32(&st, ih, (uint64_t)lo, 0x7c00, out));
        for (int i = lo; i < lo + 0x7c00; i++)
            if ((double)out[i - lo] != f16_ref((uint16_t)i)) bad_h++;
        CHECK_OK(fsdp_st_read_f32(&st, ib, (uint64_t)lo, 0x7f80, out));
        for (int i = lo; i < lo + 0x7f80; i++) {
            uint32_t bits = (uint32_t)i << 16, got;
            memcpy(&got, &out[i - lo], 4);
            if (got != bits) bad_b++;
        }
    }
    CHECKF(bad_h == 0, "%d F16 values differ from the ldexp reference", bad_h);
    CHECKF(bad_b == 0, "%d BF16 values are not their bits << 16", bad_b);
    /* Non-finite values are refused naming the file, the tensor, the first such element and what it
     * is (issue 28 item 3a), for either dtype and for strided reads (the index is the tensor's). */
    CHECK_ERR(fsdp_st_read_f32(&st, ih, 0, 65536, out), FSDP_EFORMAT,
              "values: tensor \"h\" element 31744 is +Inf: non-finite");
    CHECK_ERR(fsdp_st_read_f32(&st, ih, 0x7c01, 4, out), FSDP_EFORMAT, "\"h\" element 31745 is NaN");
    CHECK_ERR(fsdp_st_read_f32(&st, ih, 0xfbff, 2, out), FSDP_EFORMAT, "\"h\" element 64512 is -Inf");
    CHECK_ERR(fsdp_st_read_f32(&st, ib, 0, 65536, out), FSDP_EFORMAT, "\"b\" element 32640 is +Inf");
    CHECK_ERR(fsdp_st_read_strided_f32(&st, ib, 0x7f00, 0x41, 4, out), FSDP_EFORMAT,
              "\"b\" element 32642 is NaN"); /* 0x7f00, 0x7f41, 0x7f82 (NaN), ... */
    CHECK_OK(fsdp_st_read_strided_f32(&st, ib, 0x7f00, 0x100, 2, out)); /* 0x7f00, 0x8000: finite */
    CHECK(out[0] == fsdp_bf16_to_f32(0x7f00) && out[1] == 0.0f && signbit(out[1]));
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

static volatile sig_atomic_t own_handler_calls;
static void own_handler(int sig) {
    (void)sig;
    own_handler_calls++;
}

/* Issue 28 item 2: a file truncated after fsdp_st_open mapped it (by another process, as here with
 * truncate(2) on its path) reads as FSDP_EIO naming it, not a SIGBUS death; the SIGBUS disposition
 * is the one there was before, during and after (only guarded reads see the library's handler). */
static void test_shrink(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/tmp_st_shrink_%d.safetensors", FSDP_BINARY_DIR, (int)getpid());
    static uint8_t buf[8 + 64 + 4 * 65536];
    static float v[65536];
    for (int i = 0; i < 65536; i++)
        v[i] = (float)i;
    size_t n =
        build(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[65536],\"data_offsets\":[0,262144]}}", v, sizeof v);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    struct sigaction mine, now;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = own_handler;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGBUS, &mine, NULL);
    fsdp_safetensors st;
    CHECK_OK(fsdp_st_open(&st, path));
    static float out[65536];
    CHECK_OK(fsdp_st_read_f32(&st, 0, 0, 65536, out));
    CHECK(out[65535] == 65535.0f);
    CHECK(truncate(path, 8192) == 0);                 /* the data's first pages stay, the rest is gone */
    CHECK_OK(fsdp_st_read_f32(&st, 0, 0, 1000, out)); /* still inside the file */
    CHECK_ERR(fsdp_st_read_f32(&st, 0, 60000, 16, out), FSDP_EIO, "shrank while it was being read");
    CHECK(strstr(fsdp_last_error(), path) != NULL);
    char at[64]; /* element 1 of the column is the first access past the end: its file offset */
    snprintf(at, sizeof at, "SIGBUS at byte %llu of", (unsigned long long)st.data_off + 4 * 4096);
    const char *want = at;
    CHECK_ERR(fsdp_st_read_strided_f32(&st, 0, 0, 4096, 16, out), FSDP_EIO, want);
    sigaction(SIGBUS, NULL, &now);
    CHECK(now.sa_handler == own_handler && !(now.sa_flags & SA_SIGINFO) && own_handler_calls == 0);
    raise(SIGBUS); /* outside a guarded read: the program's own handler, as before */
    CHECK(own_handler_calls == 1);
    fsdp_st_close(&st);
    signal(SIGBUS, SIG_DFL);
    /* A file that shrinks below its header between open's reads: a clean error too. */
    CHECK(truncate(path, 4) == 0);
    CHECK_ERR(fsdp_st_open(&st, path), FSDP_EFORMAT, "too short");
    /* Without the guard the same access kills (the test can fail): a child reads past the end of a
     * mapping of the truncated file and must die of SIGBUS; with the default disposition restored. */
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_RDWR);
        if (fd < 0 || ftruncate(fd, 65536) != 0) _exit(2);
        volatile const uint8_t *m = mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED || ftruncate(fd, 0) != 0) _exit(3);
        uint8_t x = m[40000];
        _exit(x == 0 ? 4 : 5);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    CHECKF(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGBUS, "the unguarded child did not die of SIGBUS (%d)",
           wst);
    unlink(path);
}

int main(void) {
    test_values();
    test_bad();
    test_library_files();
    test_shrink();
    return TEST_MAIN_END();
}
