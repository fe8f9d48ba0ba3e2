/* tokens.c — token files in llm.c's two layouts (16- and 32-bit ids) (docs/DESIGN.md section 8): read with
 * pread per range, validated (header, size, every id below the vocabulary), written atomically. */
#include "io/tokens.h"

#include "core/core.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; this build assumes a little-endian host"
#endif

/* Converts n raw tokens (tf->width bytes each) to int32, checking ids; first_index is the token index
 * of raw[0]. */
static fsdp_status check_convert(const fsdp_token_file *tf, const void *raw, size_t n, uint64_t first_index,
                                 int32_t *out) {
    const uint16_t *r16 = raw;
    const uint32_t *r32 = raw;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = tf->width == 2 ? r16[i] : r32[i];
        if (id >= (uint32_t)tf->vocab)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: token %llu has id %u, not below the vocabulary size %d (--vocab): the "
                                  "file was made for a larger vocabulary, or is corrupt",
                                  tf->path, (unsigned long long)(first_index + i), id, tf->vocab);
        if (out) out[i] = (int32_t)id;
    }
    return FSDP_OK;
}

/* Opens path (an open fd in *fd, closed by the caller) and reads its 256-int header and size; kind
 * ("token", "mask") names the file in messages. */
static fsdp_status open_header(const char *path, const char *kind, int *fd, int32_t *hdr, uint64_t *size) {
    fsdp_status s = fsdp_io_open_input(path, fd);
    if (s != FSDP_OK) {
        if (errno == ENOENT)
            s = fsdp_set_error(FSDP_EIO,
                               "cannot open %s file %s: %s (run `fsdp-train prepare` or tools/setup.sh "
                               "first, or pass --data DIR)",
                               kind, path, strerror(ENOENT));
        return s;
    }
    struct stat st;
    if (fstat(*fd, &st) != 0) return fsdp_set_error(FSDP_EIO, "cannot stat %s: %s", path, strerror(errno));
    *size = (uint64_t)st.st_size;
    if (*size < FSDP_TOKENS_HEADER_BYTES)
        return fsdp_set_error(FSDP_EFORMAT, "%s is %llu bytes, shorter than the %d-byte %s file header", path,
                              (unsigned long long)*size, FSDP_TOKENS_HEADER_BYTES, kind);
    return fsdp_io_pread_all(*fd, hdr, FSDP_TOKENS_HEADER_BYTES, 0, path);
}

fsdp_status fsdp_tokens_open(fsdp_token_file *tf, const char *path, int vocab) {
    memset(tf, 0, sizeof *tf);
    tf->fd = -1;
    if (vocab <= 0) return FSDP_ERR(FSDP_EINVAL, "vocabulary size %d for %s is not positive", vocab, path);
    tf->path = fsdp_strdupf("%s", path);
    if (!tf->path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    tf->vocab = vocab;
    int32_t hdr[FSDP_TOKENS_HEADER_INTS];
    uint64_t size = 0;
    fsdp_status s = open_header(path, "token", &tf->fd, hdr, &size);
    if (s != FSDP_OK) goto fail;
    if (hdr[0] == FSDP_TOKENS_MAGIC && hdr[1] == FSDP_TOKENS_VERSION) {
        tf->width = 2;
    } else if (hdr[0] == FSDP_TOKENS32_MAGIC && hdr[1] == FSDP_TOKENS32_VERSION) {
        tf->width = 4;
    } else if (hdr[0] == FSDP_TOKENS_MAGIC || hdr[0] == FSDP_TOKENS32_MAGIC) {
        s = fsdp_set_error(
            FSDP_EFORMAT,
            "%s: token file version %d is not supported with magic %d (want magic %d version %d: "
            "uint16 tokens, or magic %d version %d: uint32 tokens)",
            path, hdr[1], hdr[0], FSDP_TOKENS_MAGIC, FSDP_TOKENS_VERSION, FSDP_TOKENS32_MAGIC,
            FSDP_TOKENS32_VERSION);
        goto fail;
    } else {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: bad magic %d (want %d or %d): not a token file", path, hdr[0],
                           FSDP_TOKENS_MAGIC, FSDP_TOKENS32_MAGIC);
        goto fail;
    }
    if (hdr[2] < 0) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: negative token count %d in the header", path, hdr[2]);
        goto fail;
    }
    tf->ntok = (uint64_t)hdr[2];
    uint64_t want = FSDP_TOKENS_HEADER_BYTES + (uint64_t)tf->width * tf->ntok;
    if (size != want) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: header says %llu tokens (%llu bytes of file) but the file has %llu bytes: "
                           "truncated or corrupt; prepare it again",
                           path, (unsigned long long)tf->ntok, (unsigned long long)want,
                           (unsigned long long)size);
        goto fail;
    }
    if (tf->ntok <= FSDP_TOKENS_FULL_CHECK_MAX) {
        uint32_t raw[4096];
        size_t w = (size_t)tf->width;
        for (uint64_t p = 0; p < tf->ntok; p += 4096) {
            size_t n = (size_t)(tf->ntok - p < 4096 ? tf->ntok - p : 4096);
            s = fsdp_io_pread_all(tf->fd, raw, w * n, FSDP_TOKENS_HEADER_BYTES + w * p, path);
            if (s != FSDP_OK) goto fail;
            s = check_convert(tf, raw, n, p, NULL);
            if (s != FSDP_OK) goto fail;
        }
    }
    return FSDP_OK;
fail:
    fsdp_tokens_close(tf);
    return s;
}

fsdp_status fsdp_tokens_read(const fsdp_token_file *tf, uint64_t pos, size_t n, int32_t *out) {
    if (pos > tf->ntok || n > tf->ntok - pos)
        return FSDP_ERR(FSDP_EINVAL, "%s: tokens [%llu, %llu) are past its end (%llu tokens)", tf->path,
                        (unsigned long long)pos, (unsigned long long)(pos + n), (unsigned long long)tf->ntok);
    uint32_t raw[4096];
    size_t w = (size_t)tf->width;
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        FSDP_TRY(fsdp_io_pread_all(tf->fd, raw, w * k, FSDP_TOKENS_HEADER_BYTES + w * (pos + i), tf->path));
        FSDP_TRY(check_convert(tf, raw, k, pos + i, out + i));
    }
    return FSDP_OK;
}

void fsdp_tokens_close(fsdp_token_file *tf) {
    if (tf->fd >= 0) close(tf->fd);
    tf->fd = -1;
    free(tf->path);
    tf->path = NULL;
}

fsdp_status fsdp_tokens_write(const char *path, const void *tokens, size_t n, int width) {
    if (width != 2 && width != 4)
        return FSDP_ERR(FSDP_EINVAL, "%s: token width %d is not 2 or 4 bytes", path, width);
    if (n > INT32_MAX)
        return FSDP_ERR(FSDP_EINVAL, "%s: %zu tokens do not fit the header's int32 count", path, n);
    size_t bytes = FSDP_TOKENS_HEADER_BYTES + (size_t)width * n;
    char *buf = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&buf, bytes, FSDP_MEM_OTHER));
    int32_t hdr[FSDP_TOKENS_HEADER_INTS] = {width == 2 ? FSDP_TOKENS_MAGIC : FSDP_TOKENS32_MAGIC,
                                            width == 2 ? FSDP_TOKENS_VERSION : FSDP_TOKENS32_VERSION,
                                            (int32_t)n};
    memcpy(buf, hdr, sizeof hdr);
    if (n) memcpy(buf + sizeof hdr, tokens, (size_t)width * n);
    fsdp_status s = fsdp_io_write_file_atomic(path, buf, bytes, 0);
    fsdp_mem_free(buf);
    return s;
}

/* ---------------------------------------------------------------- mask files */

static fsdp_status check_mask(const fsdp_mask_file *mf, const uint8_t *f, size_t n, uint64_t first_index) {
    for (size_t i = 0; i < n; i++)
        if (f[i] & ~FSDP_MASK_BITS)
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: token %llu has mask flags 0x%02x, with bits other than loss (1) and "
                                  "document start (2): not a mask file this version writes, or corrupt",
                                  mf->path, (unsigned long long)(first_index + i), f[i]);
    return FSDP_OK;
}

fsdp_status fsdp_mask_open(fsdp_mask_file *mf, const char *path, uint64_t ntok) {
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
    mf->path = fsdp_strdupf("%s", path);
    if (!mf->path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    int32_t hdr[FSDP_TOKENS_HEADER_INTS];
    uint64_t size = 0;
    fsdp_status s = open_header(path, "mask", &mf->fd, hdr, &size);
    if (s != FSDP_OK) goto fail;
    if (hdr[0] != FSDP_MASK_MAGIC) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: bad magic %d (want %d): not a mask file", path, hdr[0],
                           FSDP_MASK_MAGIC);
        goto fail;
    }
    if (hdr[1] != FSDP_MASK_VERSION) {
        s = fsdp_set_error(FSDP_EFORMAT, "%s: mask file version %d is not supported (want %d)", path, hdr[1],
                           FSDP_MASK_VERSION);
        goto fail;
    }
    if (hdr[2] < 0 || (uint64_t)hdr[2] != ntok) {
        s = fsdp_set_error(
            FSDP_EFORMAT,
            "%s: header says %d tokens but its token file has %llu: the two files are not from "
            "one `prepare`; prepare the data again",
            path, hdr[2], (unsigned long long)ntok);
        goto fail;
    }
    mf->ntok = ntok;
    if (size != FSDP_TOKENS_HEADER_BYTES + ntok) {
        s = fsdp_set_error(FSDP_EFORMAT,
                           "%s: %llu tokens want %llu bytes of file but it has %llu: truncated or "
                           "corrupt; prepare it again",
                           path, (unsigned long long)ntok,
                           (unsigned long long)(FSDP_TOKENS_HEADER_BYTES + ntok), (unsigned long long)size);
        goto fail;
    }
    if (ntok <= FSDP_TOKENS_FULL_CHECK_MAX) {
        uint8_t raw[16384];
        for (uint64_t p = 0; p < ntok; p += sizeof raw) {
            size_t n = (size_t)(ntok - p < sizeof raw ? ntok - p : sizeof raw);
            s = fsdp_io_pread_all(mf->fd, raw, n, FSDP_TOKENS_HEADER_BYTES + p, path);
            if (s != FSDP_OK) goto fail;
            s = check_mask(mf, raw, n, p);
            if (s != FSDP_OK) goto fail;
        }
    }
    return FSDP_OK;
fail:
    fsdp_mask_close(mf);
    return s;
}

fsdp_status fsdp_mask_read(const fsdp_mask_file *mf, uint64_t pos, size_t n, uint8_t *out) {
    if (pos > mf->ntok || n > mf->ntok - pos)
        return FSDP_ERR(FSDP_EINVAL, "%s: flags [%llu, %llu) are past its end (%llu tokens)", mf->path,
                        (unsigned long long)pos, (unsigned long long)(pos + n), (unsigned long long)mf->ntok);
    if (n) FSDP_TRY(fsdp_io_pread_all(mf->fd, out, n, FSDP_TOKENS_HEADER_BYTES + pos, mf->path));
    return check_mask(mf, out, n, pos);
}

void fsdp_mask_close(fsdp_mask_file *mf) {
    if (mf->fd >= 0) close(mf->fd);
    mf->fd = -1;
    free(mf->path);
    mf->path = NULL;
}

fsdp_status fsdp_mask_write(const char *path, const uint8_t *flags, size_t n) {
    if (n > INT32_MAX)
        return FSDP_ERR(FSDP_EINVAL, "%s: %zu flags do not fit the header's int32 count", path, n);
    for (size_t i = 0; i < n; i++)
        if (flags[i] & ~FSDP_MASK_BITS)
            return FSDP_ERR(FSDP_EINVAL,
                            "%s: flag %zu is 0x%02x, with bits other than loss and document start", path, i,
                            flags[i]);
    size_t bytes = FSDP_TOKENS_HEADER_BYTES + n;
    char *buf = NULL;
    FSDP_TRY(fsdp_mem_alloc((void **)&buf, bytes, FSDP_MEM_OTHER));
    int32_t hdr[FSDP_TOKENS_HEADER_INTS] = {FSDP_MASK_MAGIC, FSDP_MASK_VERSION, (int32_t)n};
    memcpy(buf, hdr, sizeof hdr);
    if (n) memcpy(buf + sizeof hdr, flags, n);
    fsdp_status s = fsdp_io_write_file_atomic(path, buf, bytes, 0);
    fsdp_mem_free(buf);
    return s;
}
