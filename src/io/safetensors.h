/* safetensors.h — a reader of Hugging Face .safetensors files: the file is mapped (mmap) and its header
 * (u64 little-endian length, then a JSON object of name -> {dtype, shape, data_offsets}) is validated in
 * full against the file size before any tensor is touched: every offset pair in range and matching its
 * dtype and shape, no two tensors overlapping, no duplicate names. Tensors are read as fp32 (F32, BF16
 * and F16 are converted exactly, a NaN or Inf refused), any element range of them, so a caller can read
 * only its own shard. */
#ifndef FSDP_IO_SAFETENSORS_H
#define FSDP_IO_SAFETENSORS_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>

#define FSDP_ST_MAX_DIMS    8
#define FSDP_ST_MAX_HEADER  ((uint64_t)100 << 20) /* the reference implementation's limit */
#define FSDP_ST_MAX_TENSORS 1000000

typedef enum {
    FSDP_ST_F32 = 0,
    FSDP_ST_BF16,
    FSDP_ST_F16,
    FSDP_ST_OTHER /* a valid safetensors dtype this reader does not convert (I64, F64, BOOL, ...) */
} fsdp_st_dtype;

typedef struct {
    char *name;
    fsdp_st_dtype dtype;
    char dtype_name[8]; /* as in the header ("F32", "I64", ...) */
    int ndim;
    int64_t shape[FSDP_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* byte offsets in the data section */
} fsdp_st_tensor;

typedef struct {
    char *path;          /* named in every error */
    const uint8_t *base; /* the whole file (mapped, or the caller's buffer): read it only through
                            fsdp_st_read_* (guarded against a file that shrinks while mapped) */
    const uint8_t *head; /* the first data_off bytes (the length and the header JSON): fsdp_st_open's
                            own copy (read with pread), or base for a caller's buffer */
    size_t size;         /* file bytes */
    size_t mapped;       /* bytes mapped by fsdp_st_open (0: not ours) */
    uint64_t data_off;   /* 8 + header length */
    int n;
    fsdp_st_tensor *t; /* (n), in header order */
} fsdp_safetensors;

/* Reads path's header (pread) and validates it (as fsdp_st_parse), then maps the file read-only for the
 * tensor reads. FSDP_EIO: missing or unreadable; FSDP_EFORMAT: anything wrong in the file, the message
 * naming the file and the field (tensor, key). */
fsdp_status fsdp_st_open(fsdp_safetensors *st, const char *path);
/* The same validation over a buffer the caller keeps alive (the fuzzer's input); `what` names it. */
fsdp_status fsdp_st_parse(fsdp_safetensors *st, const void *buf, size_t size, const char *what);
void fsdp_st_close(fsdp_safetensors *st); /* unmaps and frees; safe on a zeroed or closed struct */

int fsdp_st_find(const fsdp_safetensors *st, const char *name); /* index, or -1 */

/* Elements [first, first + n) of tensor i (row-major) as fp32 into out. FSDP_EIO naming the file when
 * it shrank after it was opened (the mapping's SIGBUS, caught: io/mapguard.h); FSDP_EINVAL past the end;
 * FSDP_EFORMAT for a dtype other than F32/BF16/F16 (naming tensor and dtype), and for a NaN or Inf
 * among them (naming the tensor and the first such element's flat index; out is then filled). */
fsdp_status fsdp_st_read_f32(const fsdp_safetensors *st, int i, uint64_t first, size_t n, float *out);
/* Elements first, first + stride, ..., first + (n-1)*stride of tensor i (a column of a row-major
 * matrix: how a transposed tensor's row is read) as fp32 into out; stride >= 1. */
fsdp_status fsdp_st_read_strided_f32(const fsdp_safetensors *st, int i, uint64_t first, uint64_t stride,
                                     size_t n, float *out);
/* Elements [e0, e1) (row-major) of the transpose of 2-D tensor i (the file holds R x C; its transpose
 * is C x R: element e is the file's element (e % R) * C + e / R), as fp32 into out, in one guarded
 * pass (how GPT-2's Conv1D weights load). Errors as fsdp_st_read_f32's, a NaN/Inf named by its index
 * in the file's tensor. */
fsdp_status fsdp_st_read_transposed_f32(const fsdp_safetensors *st, int i, uint64_t e0, uint64_t e1,
                                        float *out);

#endif
