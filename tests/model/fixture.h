/* fixture.h — header-only reader of the GPT-2 reference fixture written by tools/gpt2_reference.py
 * (layout documented there): validates magic, version, header and record sizes against the file size
 * and returns typed records by name; gpt_fixture_load_unit loads a unit's "w.<unit>.<tensor>" weights.
 * Errors are fsdp_status with a message, never an abort. */
#ifndef FSDP_TEST_MODEL_FIXTURE_H
#define FSDP_TEST_MODEL_FIXTURE_H

#include "fsdp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT_FIXTURE_MAGIC            0x32545047 /* "GPT2" */
#define GPT_FIXTURE_VERSION          1
#define GPT_FIXTURE_HEADER_BYTES     256
#define GPT_FIXTURE_REC_HEADER_BYTES 64

typedef enum { FX_F32 = 0, FX_I32 = 1, FX_F64 = 2, FX_BF16 = 3 } gpt_fixture_dtype;

typedef struct {
    char name[33];
    int dtype; /* gpt_fixture_dtype */
    int ndim;
    int shape[4];
    size_t numel;
    const void *data; /* into gpt_fixture.blob; unaligned-safe copies via gpt_fixture_get_* */
} gpt_fixture_record;

typedef struct {
    int L, C, NH, V, Vp, T_max, B, T, steps, seed;
    float lr, beta1, beta2, eps, weight_decay, grad_clip, ln_eps;
    int n_records;
    gpt_fixture_record *recs; /* n_records */
    unsigned char *blob;      /* the whole file */
} gpt_fixture;

static inline size_t gpt_fixture_dtype_size(int dt) {
    switch (dt) {
    case FX_F32: return 4;
    case FX_I32: return 4;
    case FX_F64: return 8;
    case FX_BF16: return 2;
    default: return 0;
    }
}

static inline void gpt_fixture_free(gpt_fixture *fx) {
    if (!fx) return;
    free(fx->recs);
    free(fx->blob);
    memset(fx, 0, sizeof *fx);
}

/* Reads and validates the whole file. On failure *fx is left empty (safe to free); messages are formatted
 * before the blob is freed, since they may name a record inside it. */
static inline fsdp_status gpt_fixture_load(const char *path, gpt_fixture *fx) {
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fsdp_set_error(FSDP_EIO, "fixture %s: cannot open (regenerate with tools/gpt2_reference.py)",
                              path);
    if (fseek(f, 0, SEEK_END) != 0) goto io_fail;
    long len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) goto io_fail;
    size_t size = (size_t)len;
    if (size < GPT_FIXTURE_HEADER_BYTES) {
        fclose(f);
        return fsdp_set_error(FSDP_EFORMAT, "fixture %s: %zu bytes, shorter than the %d-byte header", path,
                              size, GPT_FIXTURE_HEADER_BYTES);
    }
    fx->blob = malloc(size);
    if (!fx->blob) {
        fclose(f);
        return fsdp_set_error(FSDP_ENOMEM, "fixture %s: cannot allocate %zu bytes", path, size);
    }
    if (fread(fx->blob, 1, size, f) != size) goto io_fail;
    fclose(f);
    f = NULL;

    int32_t h[64];
    memcpy(h, fx->blob, sizeof h);
    if ((uint32_t)h[0] != GPT_FIXTURE_MAGIC) {
        fsdp_status fail_ =
            fsdp_set_error(FSDP_EFORMAT, "fixture %s: bad magic 0x%08x (want 0x%08x): not a GPT-2 fixture",
                           path, (unsigned)h[0], (unsigned)GPT_FIXTURE_MAGIC);
        gpt_fixture_free(fx);
        return fail_;
    }
    if (h[1] != GPT_FIXTURE_VERSION || h[2] != GPT_FIXTURE_HEADER_BYTES) {
        int v = h[1], hb = h[2];
        fsdp_status fail_ = fsdp_set_error(
            FSDP_EFORMAT, "fixture %s: version %d, header %d bytes (want %d, %d): regenerate it", path, v, hb,
            GPT_FIXTURE_VERSION, GPT_FIXTURE_HEADER_BYTES);
        gpt_fixture_free(fx);
        return fail_;
    }
    fx->n_records = h[3];
    fx->L = h[4], fx->C = h[5], fx->NH = h[6], fx->V = h[7], fx->Vp = h[8], fx->T_max = h[9];
    fx->B = h[10], fx->T = h[11], fx->steps = h[12], fx->seed = h[13];
    float hf[7];
    memcpy(hf, &h[16], sizeof hf);
    fx->lr = hf[0], fx->beta1 = hf[1], fx->beta2 = hf[2], fx->eps = hf[3];
    fx->weight_decay = hf[4], fx->grad_clip = hf[5], fx->ln_eps = hf[6];
    if (fx->n_records <= 0 || fx->n_records > 100000 || fx->L <= 0 || fx->C <= 0 || fx->NH <= 0 ||
        fx->C % fx->NH != 0 || fx->V <= 0 || fx->Vp < fx->V || fx->T <= 0 || fx->T > fx->T_max ||
        fx->B <= 0 || fx->steps < 0) {
        fsdp_status fail_ = fsdp_set_error(FSDP_EFORMAT, "fixture %s: inconsistent config in header", path);
        gpt_fixture_free(fx);
        return fail_;
    }
    fx->recs = calloc((size_t)fx->n_records, sizeof *fx->recs);
    if (!fx->recs) {
        fsdp_status fail_ = fsdp_set_error(FSDP_ENOMEM, "fixture %s: cannot allocate the record table", path);
        gpt_fixture_free(fx);
        return fail_;
    }
    size_t off = GPT_FIXTURE_HEADER_BYTES;
    for (int i = 0; i < fx->n_records; i++) {
        gpt_fixture_record *r = &fx->recs[i];
        if (size - off < GPT_FIXTURE_REC_HEADER_BYTES) {
            fsdp_status fail_ = fsdp_set_error(
                FSDP_EFORMAT, "fixture %s: truncated at record %d header (offset %zu)", path, i, off);
            gpt_fixture_free(fx);
            return fail_;
        }
        const unsigned char *p = fx->blob + off;
        int32_t ri[6];
        uint64_t nbytes;
        memcpy(r->name, p, 32);
        r->name[32] = '\0';
        memcpy(ri, p + 32, sizeof ri);
        memcpy(&nbytes, p + 56, sizeof nbytes);
        r->dtype = ri[0], r->ndim = ri[1];
        size_t es = gpt_fixture_dtype_size(r->dtype), numel = 1;
        int ok = es != 0 && r->ndim >= 1 && r->ndim <= 4;
        for (int d = 0; ok && d < 4; d++) {
            r->shape[d] = ri[2 + d];
            if (r->shape[d] <= 0 || r->shape[d] > (1 << 28))
                ok = 0;
            else if (d < r->ndim)
                numel *= (size_t)r->shape[d];
        }
        if (!ok || nbytes != numel * es) {
            fsdp_status fail_ =
                fsdp_set_error(FSDP_EFORMAT, "fixture %s: record %d: bad dtype, shape or size", path, i);
            gpt_fixture_free(fx);
            return fail_;
        }
        off += GPT_FIXTURE_REC_HEADER_BYTES;
        if (size - off < nbytes) {
            fsdp_status fail_ = fsdp_set_error(
                FSDP_EFORMAT, "fixture %s: record %d (%s) needs %llu bytes, %zu left: truncated", path, i,
                r->name, (unsigned long long)nbytes, size - off);
            gpt_fixture_free(fx);
            return fail_;
        }
        r->numel = numel;
        r->data = fx->blob + off;
        off += nbytes;
    }
    if (off != size) {
        fsdp_status fail_ = fsdp_set_error(
            FSDP_EFORMAT, "fixture %s: %zu trailing bytes after the last record", path, size - off);
        gpt_fixture_free(fx);
        return fail_;
    }
    return FSDP_OK;
io_fail:
    if (f) fclose(f);
    fsdp_status fail_ = fsdp_set_error(FSDP_EIO, "fixture %s: read failed", path);
    gpt_fixture_free(fx);
    return fail_;
}

/* Record `name`; FSDP_EINVAL if absent or if its dtype (dtype < 0: any) or element count (numel 0:
 * any) is not what the caller expects. */
static inline fsdp_status gpt_fixture_find(const gpt_fixture *fx, const char *name, int dtype, size_t numel,
                                           const gpt_fixture_record **out) {
    *out = NULL;
    for (int i = 0; i < fx->n_records; i++) {
        const gpt_fixture_record *r = &fx->recs[i];
        if (strcmp(r->name, name) != 0) continue;
        if ((dtype >= 0 && r->dtype != dtype) || (numel && r->numel != numel))
            return fsdp_set_error(FSDP_EINVAL,
                                  "fixture record %s: dtype %d, %zu elements (want dtype %d, %zu)", name,
                                  r->dtype, r->numel, dtype, numel);
        *out = r;
        return FSDP_OK;
    }
    return fsdp_set_error(FSDP_EINVAL, "fixture has no record %s: regenerate it with tools/gpt2_reference.py",
                          name);
}

/* Copies record `name` (f32, f64 or bf16) converted to float into out[numel]. */
static inline fsdp_status gpt_fixture_get_f32(const gpt_fixture *fx, const char *name, size_t numel,
                                              float *out) {
    const gpt_fixture_record *r;
    fsdp_status s = gpt_fixture_find(fx, name, -1, numel, &r);
    if (s != FSDP_OK) return s;
    if (r->dtype == FX_I32)
        return fsdp_set_error(FSDP_EINVAL, "fixture record %s holds integers, not floats", name);
    const unsigned char *p = r->data;
    for (size_t i = 0; i < numel; i++) {
        if (r->dtype == FX_F32) {
            memcpy(&out[i], p + 4 * i, 4);
        } else if (r->dtype == FX_F64) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        } else { /* bf16: the high half of an f32 */
            uint16_t b;
            memcpy(&b, p + 2 * i, 2);
            uint32_t u = (uint32_t)b << 16;
            memcpy(&out[i], &u, 4);
        }
    }
    return FSDP_OK;
}

static inline fsdp_status gpt_fixture_get_f64(const gpt_fixture *fx, const char *name, size_t numel,
                                              double *out) {
    const gpt_fixture_record *r;
    fsdp_status s = gpt_fixture_find(fx, name, FX_F64, numel, &r);
    if (s != FSDP_OK) return s;
    memcpy(out, r->data, numel * 8);
    return FSDP_OK;
}

static inline fsdp_status gpt_fixture_get_i32(const gpt_fixture *fx, const char *name, size_t numel,
                                              int *out) {
    const gpt_fixture_record *r;
    fsdp_status s = gpt_fixture_find(fx, name, FX_I32, numel, &r);
    if (s != FSDP_OK) return s;
    memcpy(out, r->data, numel * 4);
    return FSDP_OK;
}

/* Loads every non-alias tensor of unit u from the fixture's "w.<unit>.<tensor>" records (all ranks
 * pass the same data); `who` names the caller in the out-of-memory message. */
static inline fsdp_status gpt_fixture_load_unit(const gpt_fixture *fx, fsdp_unit_t *u, const char *who) {
    for (int t = 0; t < fsdp_unit_num_tensors(u); t++) {
        fsdp_tensor_info ti;
        fsdp_status s = fsdp_unit_tensor_info(u, t, &ti);
        if (s != FSDP_OK) return s;
        if (ti.alias_of >= 0) continue;
        char name[64];
        snprintf(name, sizeof name, "w.%s.%s", fsdp_unit_name(u), ti.name);
        float *buf = malloc(ti.numel * sizeof(float));
        if (!buf) return fsdp_set_error(FSDP_ENOMEM, "%s: %zu floats", who, ti.numel);
        s = gpt_fixture_get_f32(fx, name, ti.numel, buf);
        if (s == FSDP_OK) s = fsdp_unit_load_tensor(u, t, buf, -1);
        free(buf);
        if (s != FSDP_OK) return s;
    }
    return FSDP_OK;
}

#endif
