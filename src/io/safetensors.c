/* safetensors.c — the .safetensors reader (safetensors.h): a header read and validated field by field
 * against the file size, then mmap, and fp32 reads of any element range (a SIGBUS of a file that shrank
 * caught, io/mapguard.h) with exact BF16/F16 widening that refuse
 * a NaN or Inf naming the tensor and element. */
#include "io/safetensors.h"

#include "core/core.h"
#include "io/io.h"
#include "io/json.h"
#include "io/mapguard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *name;
    fsdp_st_dtype dtype;
    unsigned bytes;
} dtype_def;
/* Every dtype the format defines: the others are sized (so offsets are checked) but not converted. */
static const dtype_def dtypes[] = {
    {"F32", FSDP_ST_F32, 4},    {"BF16", FSDP_ST_BF16, 2},     {"F16", FSDP_ST_F16, 2},
    {"F64", FSDP_ST_OTHER, 8},  {"I64", FSDP_ST_OTHER, 8},     {"U64", FSDP_ST_OTHER, 8},
    {"I32", FSDP_ST_OTHER, 4},  {"U32", FSDP_ST_OTHER, 4},     {"I16", FSDP_ST_OTHER, 2},
    {"U16", FSDP_ST_OTHER, 2},  {"I8", FSDP_ST_OTHER, 1},      {"U8", FSDP_ST_OTHER, 1},
    {"BOOL", FSDP_ST_OTHER, 1}, {"F8_E4M3", FSDP_ST_OTHER, 1}, {"F8_E5M2", FSDP_ST_OTHER, 1},
};

/* A JSON number that is a whole number in [0, max] (JSON numbers are doubles: exact up to 2^53). */
static int json_u64(const cJSON *v, uint64_t max, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0 || d > (double)max) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_begin(const void *a, const void *b) {
    const fsdp_st_tensor *x = *(const fsdp_st_tensor *const *)a, *y = *(const fsdp_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const fsdp_st_tensor *const *)a)->name, (*(const fsdp_st_tensor *const *)b)->name);
}

void fsdp_st_close(fsdp_safetensors *st) {
    if (!st) return;
    if (st->t)
        for (int i = 0; i < st->n; i++)
            free(st->t[i].name);
    free(st->t);
    if (st->mapped) munmap((void *)st->base, st->mapped);
    if (st->head != st->base) free((void *)st->head);
    free(st->path);
    memset(st, 0, sizeof *st);
}

/* One header entry -> *t; the message names what and the tensor. */
static fsdp_status parse_entry(const cJSON *e, fsdp_st_tensor *t, uint64_t data_len, const char *what) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e))
        return fsdp_set_error(FSDP_EFORMAT, "%s: header entry \"%s\" is not an object", what, nm);
    for (const cJSON *k = e->child; k; k = k->next)
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") && strcmp(k->string, "data_offsets"))
            return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": unknown key \"%s\"", what, nm, k->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": \"dtype\" missing or not a string", what, nm);
    const dtype_def *d = NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dt->valuestring, dtypes[i].name)) d = &dtypes[i];
    if (!d)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": unknown dtype \"%.16s\"", what, nm,
                              dt->valuestring);
    t->dtype = d->dtype;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", d->name);
    if (!cJSON_IsArray(sh))
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": \"shape\" missing or not an array", what, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > FSDP_ST_MAX_DIMS)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": \"shape\" has %d dimensions (at most %d)",
                              what, nm, nd, FSDP_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int k = 0;
    for (const cJSON *x = sh->child; x; x = x->next, k++) {
        uint64_t v;
        if (!json_u64(x, data_len, &v))
            return fsdp_set_error(FSDP_EFORMAT,
                                  "%s: tensor \"%s\": \"shape\"[%d] is not a whole number in 0..%llu", what,
                                  nm, k, (unsigned long long)data_len);
        t->shape[k] = (int64_t)v;
        /* numel * bytes must fit the data section: checked step by step, no overflow possible. */
        if (v != 0 && numel > data_len / v)
            numel = data_len + 1;
        else
            numel *= v;
    }
    t->numel = numel;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": \"data_offsets\" is not a [begin, end] pair",
                              what, nm);
    uint64_t b, en;
    if (!json_u64(of->child, UINT64_MAX, &b) || !json_u64(of->child->next, UINT64_MAX, &en))
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\": \"data_offsets\" are not whole numbers >= 0",
                              what, nm);
    if (b > en || en > data_len)
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: tensor \"%s\": \"data_offsets\" [%llu, %llu] outside the %llu data bytes after "
            "the header (file truncated, or the header is wrong)",
            what, nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_len);
    if (numel > data_len || numel * d->bytes != en - b)
        return fsdp_set_error(
            FSDP_EFORMAT,
            "%s: tensor \"%s\": \"data_offsets\" span %llu bytes but dtype %s and \"shape\" "
            "need %llu",
            what, nm, (unsigned long long)(en - b), d->name,
            numel > data_len ? (unsigned long long)-1 : (unsigned long long)(numel * d->bytes));
    t->begin = b;
    t->end = en;
    return FSDP_OK;
}

/* The header's JSON object from head (head_len bytes: the file's first 8 + header length, or all of it
 * when fewer) of a file of st->size bytes: the length in range, one object, unique keys, only the
 * format's padding after it. Sets st->data_off. */
static fsdp_status header_json(fsdp_safetensors *st, size_t head_len, cJSON **out) {
    const char *what = st->path;
    const size_t size = st->size;
    *out = NULL;
    if (size < 8)
        return fsdp_set_error(
            FSDP_EFORMAT, "%s: %zu bytes: too short for the 8-byte header length (truncated?)", what, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | st->head[i];
    if (hlen < 2 || hlen > FSDP_ST_MAX_HEADER || hlen > size - 8)
        return fsdp_set_error(
            FSDP_EFORMAT, "%s: header length %llu %s (file %zu bytes): not a safetensors file, or truncated",
            what, (unsigned long long)hlen,
            hlen > size - 8 ? "runs past the end of the file" : "is out of range", size);
    if (head_len < 8 + hlen) /* fsdp_st_open read it just now: the file changed in between */
        return fsdp_set_error(FSDP_EIO, "%s shrank while its header was being read", what);
    st->data_off = 8 + hlen;
    const char *h = (const char *)st->head + 8;
    if (h[0] != '{') return fsdp_set_error(FSDP_EFORMAT, "%s: header does not start with '{'", what);
    const char *endp = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &endp, 0);
    fsdp_status s = FSDP_OK;
    if (!j || !cJSON_IsObject(j))
        s = fsdp_set_error(FSDP_EFORMAT, "%s: header is not a JSON object (error near byte %lld)", what,
                           endp ? (long long)(endp - h) + 8 : -1);
    if (s == FSDP_OK) s = fsdp_json_check_unique(j, what);
    /* After the object only the format's space padding may follow. */
    for (const char *p = endp; s == FSDP_OK && p && p < h + hlen; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0')
            s = fsdp_set_error(FSDP_EFORMAT, "%s: bytes after the header's JSON object (at byte %lld)", what,
                               (long long)(p - h) + 8);
    if (s != FSDP_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return FSDP_OK;
}

/* The tensors of header j (every key but "__metadata__", whose values must be strings), at most
 * FSDP_ST_MAX_TENSORS. */
static fsdp_status count_tensors(const cJSON *j, const char *what, int *out) {
    int n = 0;
    for (const cJSON *e = j->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e))
                return fsdp_set_error(FSDP_EFORMAT, "%s: \"__metadata__\" is not an object", what);
            for (const cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return fsdp_set_error(FSDP_EFORMAT, "%s: \"__metadata__\".\"%s\" is not a string", what,
                                          m->string);
            continue;
        }
        if (++n > FSDP_ST_MAX_TENSORS)
            return fsdp_set_error(FSDP_EFORMAT, "%s: more than %d tensors", what, FSDP_ST_MAX_TENSORS);
    }
    *out = n;
    return FSDP_OK;
}

/* No duplicate names (JSON allows them; the format does not) and no byte shared by two tensors (empty
 * tensors take none), over order, the n tensors in any order (sorted here). */
static fsdp_status check_layout(fsdp_st_tensor **order, int n, const char *what) {
    qsort(order, (size_t)n, sizeof *order, cmp_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(order[i]->name, order[i - 1]->name))
            return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" appears twice in the header", what,
                                  order[i]->name);
    qsort(order, (size_t)n, sizeof *order, cmp_begin);
    const fsdp_st_tensor *prev = NULL;
    for (int i = 0; i < n; i++) {
        const fsdp_st_tensor *t = order[i];
        if (t->begin == t->end) continue;
        if (prev && t->begin < prev->end)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s: tensors \"%s\" [%llu, %llu] and \"%s\" [%llu, %llu] overlap (\"data_offsets\")", what,
                prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end, t->name,
                (unsigned long long)t->begin, (unsigned long long)t->end);
        prev = t;
    }
    return FSDP_OK;
}

/* Validates the header in head (head_len bytes: the file's first 8 + header length, or all of it when
 * fewer) of a file of `size` bytes; st->path, ->head, ->size are set. */
static fsdp_status parse(fsdp_safetensors *st, size_t head_len) {
    const char *what = st->path;
    cJSON *j = NULL;
    fsdp_st_tensor **order = NULL;
    int n = 0;
    fsdp_status s = header_json(st, head_len, &j);
    if (s == FSDP_OK) s = count_tensors(j, what, &n);
    if (s == FSDP_OK) {
        st->t = calloc((size_t)n + 1, sizeof *st->t);
        order = calloc((size_t)n + 1, sizeof *order);
        if (!st->t || !order) s = FSDP_ERR(FSDP_ENOMEM, "%s: no memory for %d tensor entries", what, n);
    }
    const uint64_t data_len = st->size - st->data_off;
    for (const cJSON *e = j ? j->child : NULL; s == FSDP_OK && e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        fsdp_st_tensor *t = &st->t[st->n];
        t->name = strdup(e->string);
        if (!t->name) {
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for a tensor name");
            break;
        }
        st->n++;
        s = parse_entry(e, t, data_len, what);
        order[st->n - 1] = t;
    }
    if (s == FSDP_OK) s = check_layout(order, n, what);
    free(order);
    cJSON_Delete(j);
    return s;
}

fsdp_status fsdp_st_parse(fsdp_safetensors *st, const void *buf, size_t size, const char *what) {
    memset(st, 0, sizeof *st);
    st->path = strdup(what ? what : "(buffer)");
    if (!st->path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    st->base = st->head = buf;
    st->size = size;
    fsdp_status s = parse(st, size);
    if (s != FSDP_OK) fsdp_st_close(st); /* the caller's buffer: mapped is 0 */
    return s;
}

fsdp_status fsdp_st_open(fsdp_safetensors *st, const char *path) {
    memset(st, 0, sizeof *st);
    /* Non-blocking open: a FIFO or device is refused below instead of blocking here. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fsdp_set_error(FSDP_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fsdp_set_error(FSDP_EIO, "%s is not a readable regular file", path);
    }
    /* The header is read, not mapped: parsing it touches no mapping, so a file that shrinks now is a
     * short read here or a caught SIGBUS in the reads (fsdp_io_map_guard), never a crash. */
    const size_t size = (size_t)sb.st_size;
    st->size = size;
    st->path = strdup(path);
    uint8_t first[8] = {0};
    size_t head_len = size < 8 ? size : 8;
    uint64_t hlen = 0;
    fsdp_status s = st->path ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_io_pread_all(fd, first, head_len, 0, path);
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | first[i];
    uint8_t *head = NULL;
    if (s == FSDP_OK && size >= 8 && hlen >= 2 && hlen <= FSDP_ST_MAX_HEADER && hlen <= size - 8) {
        head_len = 8 + (size_t)hlen;
        head = malloc(head_len);
        if (!head)
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for the %llu-byte header of %s", (unsigned long long)hlen,
                         path);
        if (s == FSDP_OK) s = fsdp_io_pread_all(fd, head, head_len, 0, path);
    } else if (s == FSDP_OK) {
        head = malloc(8);
        if (!head)
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for a header");
        else
            memcpy(head, first, 8);
    }
    st->head = head;
    if (s == FSDP_OK) s = parse(st, head_len);
    void *map = NULL;
    if (s == FSDP_OK && size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            s = fsdp_set_error(FSDP_EIO, "cannot map %s: %s", path, strerror(errno));
        }
    }
    close(fd); /* the mapping keeps the file */
    if (s != FSDP_OK) {
        fsdp_st_close(st);
        return s;
    }
    st->base = map;
    st->mapped = map ? size : 0;
    return FSDP_OK;
}

int fsdp_st_find(const fsdp_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return i;
    return -1;
}

/* IEEE half -> float, exact (subnormals, infinities, NaN). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else { /* subnormal: m * 2^-24 */
            float f = (float)m * 0x1p-24f;
            return sign ? -f : f;
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static fsdp_status check_read(const fsdp_safetensors *st, int i, uint64_t first, uint64_t stride, size_t n) {
    if (!st || i < 0 || i >= st->n) return FSDP_ERR(FSDP_EINVAL, "tensor index %d out of range", i);
    const fsdp_st_tensor *t = &st->t[i];
    if (t->dtype == FSDP_ST_OTHER)
        return fsdp_set_error(FSDP_EFORMAT, "%s: tensor \"%s\" has dtype %s: only F32, BF16 and F16 are read",
                              st->path, t->name, t->dtype_name);
    if (n == 0) return FSDP_OK;
    if (stride < 1 || first >= t->numel || (uint64_t)(n - 1) > (t->numel - 1 - first) / stride)
        return FSDP_ERR(FSDP_EINVAL, "%s: tensor \"%s\": elements %llu + %zu x %llu past its %llu", st->path,
                        t->name, (unsigned long long)first, n, (unsigned long long)stride,
                        (unsigned long long)t->numel);
    return FSDP_OK;
}

/* One read's conversion: what runs under the SIGBUS guard (only reads the mapping, writes out and bad).
 * Weights are checked to be finite (issue 28 item 3a) chunk by chunk while the chunk is in cache: the
 * check costs no second pass over memory. */
typedef struct {
    const uint8_t *p; /* the tensor's first byte */
    fsdp_st_dtype dtype;
    uint64_t first, stride;
    size_t n;
    float *out;
    size_t bad; /* out: the index in out of the first NaN/Inf, or n */
} convert_args;

static void convert_chunk(const uint8_t *p, fsdp_st_dtype dtype, uint64_t first, uint64_t stride, size_t n,
                          float *out) {
    switch (dtype) {
    case FSDP_ST_F32:
        if (stride == 1) {
            memcpy(out, p + 4 * first, 4 * n);
        } else {
            for (size_t k = 0; k < n; k++)
                memcpy(&out[k], p + 4 * (first + k * stride), 4);
        }
        break;
    case FSDP_ST_BF16:
        for (size_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, p + 2 * (first + k * stride), 2);
            out[k] = fsdp_bf16_to_f32(h);
        }
        break;
    case FSDP_ST_F16:
        for (size_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, p + 2 * (first + k * stride), 2);
            out[k] = f16_to_f32(h);
        }
        break;
    case FSDP_ST_OTHER: break; /* refused by check_read */
    }
}

static void convert(void *arg) {
    convert_args *a = arg;
    enum { CHUNK = 8192 }; /* 32 KiB of fp32: in L1/L2 when checked */
    a->bad = a->n;
    for (size_t c0 = 0; c0 < a->n; c0 += CHUNK) {
        const size_t m = a->n - c0 < CHUNK ? a->n - c0 : CHUNK;
        convert_chunk(a->p, a->dtype, a->first + c0 * a->stride, a->stride, m, a->out + c0);
        const size_t j = fsdp_first_nonfinite(a->out + c0, m);
        if (j < m) {
            a->bad = c0 + j;
            return;
        }
    }
}

static fsdp_status nonfinite_error(const fsdp_safetensors *st, const fsdp_st_tensor *t, uint64_t index,
                                   float v) {
    return fsdp_set_error(FSDP_EFORMAT,
                          "%s: tensor \"%s\" element %llu is %s: non-finite weights are refused (a "
                          "diverged or damaged model)",
                          st->path, t->name, (unsigned long long)index, fsdp_nonfinite_name(v));
}

fsdp_status fsdp_st_read_strided_f32(const fsdp_safetensors *st, int i, uint64_t first, uint64_t stride,
                                     size_t n, float *out) {
    FSDP_TRY(check_read(st, i, first, stride, n));
    const fsdp_st_tensor *t = &st->t[i];
    convert_args a = {st->base + st->data_off + t->begin, t->dtype, first, stride, n, out, n};
    if (st->mapped)
        FSDP_TRY(fsdp_io_map_guard(st->base, st->mapped, st->path, convert, &a));
    else
        convert(&a); /* the caller's buffer */
    if (a.bad < n) return nonfinite_error(st, t, first + a.bad * stride, out[a.bad]);
    return FSDP_OK;
}

/* The transposed read: segments of the transpose's rows, each a strided column of the file's tensor. */
typedef struct {
    const uint8_t *p;
    fsdp_st_dtype dtype;
    uint64_t R, C, e0, e1; /* the file's tensor is R x C; elements [e0, e1) of its C x R transpose */
    float *out;
    uint64_t bad; /* out: the first NaN/Inf's element of the transpose, or e1 */
} transposed_args;

static void convert_transposed(void *arg) {
    transposed_args *a = arg;
    a->bad = a->e1;
    for (uint64_t e = a->e0; e < a->e1;) {
        const uint64_t r = e / a->R, c0 = e % a->R, c1 = a->R - c0 < a->e1 - e ? a->R : c0 + (a->e1 - e);
        convert_args seg = {a->p, a->dtype, c0 * a->C + r, a->C, (size_t)(c1 - c0), a->out + (e - a->e0), 0};
        convert(&seg);
        if (seg.bad < seg.n) {
            a->bad = e + seg.bad;
            return;
        }
        e += c1 - c0;
    }
}

fsdp_status fsdp_st_read_transposed_f32(const fsdp_safetensors *st, int i, uint64_t e0, uint64_t e1,
                                        float *out) {
    if (!st || i < 0 || i >= st->n) return FSDP_ERR(FSDP_EINVAL, "tensor index %d out of range", i);
    const fsdp_st_tensor *t = &st->t[i];
    if (t->ndim != 2 || e0 > e1 || e1 > t->numel)
        return FSDP_ERR(FSDP_EINVAL,
                        "%s: tensor \"%s\": elements [%llu, %llu) of a transpose need a 2-D tensor of at "
                        "least that many",
                        st->path, t->name, (unsigned long long)e0, (unsigned long long)e1);
    FSDP_TRY(check_read(st, i, 0, 1, e1 > e0 ? 1 : 0)); /* the dtype */
    if (e0 == e1) return FSDP_OK;
    transposed_args a = {st->base + st->data_off + t->begin,
                         t->dtype,
                         (uint64_t)t->shape[0],
                         (uint64_t)t->shape[1],
                         e0,
                         e1,
                         out,
                         e1};
    if (st->mapped)
        FSDP_TRY(fsdp_io_map_guard(st->base, st->mapped, st->path, convert_transposed, &a));
    else
        convert_transposed(&a);
    if (a.bad < e1) return nonfinite_error(st, t, (a.bad % a.R) * a.C + a.bad / a.R, out[a.bad - e0]);
    return FSDP_OK;
}

fsdp_status fsdp_st_read_f32(const fsdp_safetensors *st, int i, uint64_t first, size_t n, float *out) {
    return fsdp_st_read_strided_f32(st, i, first, 1, n, out);
}
