/* ckpt_engine.c — checkpoints of a live engine: describes its units for the manifest, hands each
 * rank's fp32 master / AdamW shards to the format layer (checkpoint.c), and loads them back — on any
 * world size — after checking that the checkpoint is of this very model (units, tensors, shapes).
 * Shards in host memory are written from and read into in place; shards on a device the host cannot
 * address go through host chunks and the engine's copies (fsdp_unit_shard_read / _write): the same
 * files either way, so a checkpoint written on one device loads on another. */
#include "checkpoint/checkpoint.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* Unit descriptions of eng; names point into the engine (valid while it lives). Free with free_desc. */
static fsdp_status describe(fsdp_engine_t *eng, fsdp_ckpt_unit **out, int *n_out) {
    int n = fsdp_engine_num_units(eng);
    fsdp_ckpt_unit *units = calloc((size_t)n + 1, sizeof *units);
    if (!units) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d unit descriptions", n);
    for (int u = 0; u < n; u++) {
        fsdp_unit_t *U = fsdp_engine_unit(eng, u);
        units[u].name = (char *)fsdp_unit_name(U);
        units[u].numel = fsdp_unit_numel(U);
        units[u].padded_numel = fsdp_unit_padded_numel(U);
        units[u].n_tensors = fsdp_unit_num_tensors(U);
        const size_t fbase = fsdp_unit_padded_numel(U); /* where the frozen region starts */
        units[u].tensors = calloc((size_t)units[u].n_tensors + 1, sizeof(fsdp_ckpt_tensor));
        if (!units[u].tensors) {
            for (int k = 0; k < u; k++)
                free(units[k].tensors);
            free(units);
            return FSDP_ERR(FSDP_ENOMEM, "no memory for tensor descriptions");
        }
        for (int t = 0; t < units[u].n_tensors; t++) {
            fsdp_tensor_info ti;
            fsdp_status s = fsdp_unit_tensor_info(U, t, &ti);
            if (s != FSDP_OK) {
                for (int k = 0; k <= u; k++)
                    free(units[k].tensors);
                free(units);
                return s;
            }
            fsdp_ckpt_tensor *T = &units[u].tensors[t];
            T->name = (char *)ti.name;
            T->ndim = ti.ndim;
            memcpy(T->shape, ti.shape, sizeof T->shape);
            T->frozen = ti.frozen;
            /* a frozen tensor's offset within the frozen region: the same on any world size */
            T->offset = ti.frozen ? ti.offset - fbase : ti.offset;
            T->numel = ti.numel;
            T->alias_of = ti.alias_of;
            if (ti.frozen && ti.alias_of < 0 && T->offset + T->numel > units[u].frozen_numel)
                units[u].frozen_numel = T->offset + T->numel;
        }
    }
    *out = units;
    *n_out = n;
    return FSDP_OK;
}

/* A 20-bit hash of one frozen element: a splitmix64 finaliser over its index and bf16 bits. */
static inline uint64_t elem_hash(uint64_t idx, uint16_t bits) {
    uint64_t z = (idx << 16 | bits) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) >> 44;
}

fsdp_status fsdp_ckpt_frozen_digests(fsdp_engine_t *eng, uint64_t *out) {
    const int n = fsdp_engine_num_units(eng);
    /* sums of 20-bit terms in int64: no wrap below 2^43 elements, and the same in any order of
     * addition (so over ranks too) */
    int64_t *sum = calloc((size_t)n + 1, sizeof *sum);
    float *buf = malloc(4096 * sizeof *buf);
    fsdp_status s = sum && buf ? FSDP_OK : FSDP_ERR(FSDP_ENOMEM, "no memory for the frozen digests");
    for (int u = 0; u < n && s == FSDP_OK; u++) {
        fsdp_unit_t *U = fsdp_engine_unit(eng, u);
        fsdp_shard_view v;
        s = fsdp_unit_shard_info(U, &v);
        if (s != FSDP_OK || v.frozen_numel == 0) continue;
        /* the ranks holding the same frozen shard (replicas) each hash one slice of it */
        size_t off, len;
        fsdp_shard_range(v.frozen_numel, v.replica, v.replicas, &off, &len);
        off += v.frozen_offset;
        const size_t base = fsdp_unit_padded_numel(U);
        uint64_t acc = 0;
        for (size_t x = 0; x < len && s == FSDP_OK; x += 4096) {
            size_t k = len - x < 4096 ? len - x : 4096;
            s = fsdp_unit_shard_read(U, FSDP_SHARD_FROZEN, off + x, k, buf);
            for (size_t i = 0; s == FSDP_OK && i < k; i++) {
                uint16_t b = fsdp_f32_to_bf16(buf[i]);
                if (b != 0) acc += elem_hash(off + x + i - base, b);
            }
        }
        sum[u] = (int64_t)acc;
    }
    s = fsdp_comm_agree(fsdp_engine_comm(eng), s, "hashing the frozen weights");
    if (s == FSDP_OK && fsdp_comm_size(fsdp_engine_comm(eng)) > 1)
        s = fsdp_comm_all_reduce(fsdp_engine_comm(eng), sum, sum, (size_t)n, FSDP_I64, FSDP_SUM);
    for (int u = 0; u < n && s == FSDP_OK; u++)
        out[u] = (uint64_t)sum[u];
    free(buf);
    free(sum);
    return s;
}

static void free_desc(fsdp_ckpt_unit *units, int n) {
    for (int u = 0; units && u < n; u++)
        free(units[u].tensors);
    free(units);
}

static fsdp_status read_shard(void *ctx, int k, size_t offset, size_t n, float *dst) {
    static const fsdp_shard_array which[3] = {FSDP_SHARD_MASTER, FSDP_SHARD_ADAM_M, FSDP_SHARD_ADAM_V};
    return fsdp_unit_shard_read(ctx, which[k], offset, n, dst);
}

#define STAGE_CHUNK ((size_t)1 << 20) /* elements per host chunk of a load onto device memory */

/* Loads unit u's shard [v->offset, +v->numel) from r: in place into host memory, or through host
 * chunks and the device's copies. */
static fsdp_status load_unit(fsdp_ckpt_reader *r, fsdp_unit_t *U, int u, const fsdp_shard_view *v) {
    if (v->master) return fsdp_ckpt_read_range(r, u, v->offset, v->numel, v->master, v->adam_m, v->adam_v);
    size_t chunk = v->numel < STAGE_CHUNK ? v->numel : STAGE_CHUNK;
    float *stage = malloc(3 * (chunk ? chunk : 1) * sizeof(float));
    if (!stage) return FSDP_ERR(FSDP_ENOMEM, "no memory for a staging chunk of %zu elements", chunk);
    fsdp_status s = FSDP_OK;
    for (size_t c = 0; c < v->numel && s == FSDP_OK; c += chunk) {
        size_t n = v->numel - c < chunk ? v->numel - c : chunk, o = v->offset + c;
        s = fsdp_ckpt_read_range(r, u, o, n, stage, stage + chunk, stage + 2 * chunk);
        if (s == FSDP_OK) s = fsdp_unit_shard_write(U, FSDP_SHARD_MASTER, o, n, stage);
        if (s == FSDP_OK) s = fsdp_unit_shard_write(U, FSDP_SHARD_ADAM_M, o, n, stage + chunk);
        if (s == FSDP_OK) s = fsdp_unit_shard_write(U, FSDP_SHARD_ADAM_V, o, n, stage + 2 * chunk);
    }
    free(stage);
    return s;
}

fsdp_status fsdp_ckpt_save(fsdp_engine_t *eng, const char *ckpt_dir, const struct cJSON *config,
                           const fsdp_ckpt_state *st, char **final_dir) {
    fsdp_comm_t *comm = fsdp_engine_comm(eng);
    fsdp_ckpt_unit *units = NULL;
    int n = 0;
    fsdp_status s = describe(eng, &units, &n);
    fsdp_ckpt_part *parts = s == FSDP_OK ? calloc((size_t)n + 1, sizeof *parts) : NULL;
    if (s == FSDP_OK && !parts) s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d shard parts", n);
    for (int u = 0; s == FSDP_OK && u < n; u++) {
        fsdp_shard_view v;
        s = fsdp_unit_shard_info(fsdp_engine_unit(eng, u), &v);
        if (s != FSDP_OK) break;
        /* Each rank saves its slice of its shard: slice `replica` of the `replicas` ranks that hold the
         * same shard (NO_SHARD: the whole buffer split over the world; HYBRID_SHARD: its group's shard
         * split over the groups; else the whole shard), so the files tile the buffer once and the
         * checkpoint loads on any world size and strategy. */
        size_t off, len;
        fsdp_shard_range(v.numel, v.replica, v.replicas, &off, &len);
        off += v.offset;
        if (off < v.offset || off + len > v.offset + v.numel) {
            s = FSDP_ERR(FSDP_EINTERNAL, "unit %s: shard view [%zu, +%zu) lacks range [%zu, +%zu)",
                         units[u].name, v.offset, v.numel, off, len);
            break;
        }
        parts[u] = (fsdp_ckpt_part){.offset = off, .numel = len};
        if (v.master) { /* host memory: the writer reads the shard in place */
            parts[u].master = v.master + (off - v.offset);
            parts[u].adam_m = v.adam_m + (off - v.offset);
            parts[u].adam_v = v.adam_v + (off - v.offset);
        } else { /* device memory: copied out chunk by chunk as it is written */
            parts[u].read = read_shard;
            parts[u].ctx = fsdp_engine_unit(eng, u);
        }
    }
    /* A failure above is local; agree before the collective save so no rank waits forever. */
    s = fsdp_comm_agree(comm, s, "describing the model for a checkpoint");
    uint64_t *dig = s == FSDP_OK ? calloc((size_t)n + 1, sizeof *dig) : NULL;
    if (s == FSDP_OK && !dig) s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d digests", n);
    s = fsdp_comm_agree(comm, s, "describing the model for a checkpoint");
    if (s == FSDP_OK) s = fsdp_ckpt_frozen_digests(eng, dig);
    for (int u = 0; s == FSDP_OK && u < n; u++)
        units[u].frozen_digest = dig[u];
    free(dig);
    if (s == FSDP_OK) s = fsdp_ckpt_save_parts(comm, ckpt_dir, config, n, units, parts, st, final_dir);
    free(parts);
    free_desc(units, n);
    return s;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* First difference between the checkpoint's units and the engine's, as an FSDP_EFORMAT. */
static fsdp_status compare(fsdp_ckpt_reader *r, const fsdp_ckpt_unit *mine, int n, const char *dir) {
    const char *hint = "the checkpoint is of another model shape: pass the --layers/--width/--heads/--vocab/"
                       "--max-seq-len it was trained with";
    if (fsdp_ckpt_num_units(r) != n)
        return fsdp_set_error(FSDP_EFORMAT, "%s/manifest.json has %d units, this model %d: %s", dir,
                              fsdp_ckpt_num_units(r), n, hint);
    for (int u = 0; u < n; u++) {
        const fsdp_ckpt_unit *c = fsdp_ckpt_unit_desc(r, u), *m = &mine[u];
        /* frozen or not first: another --freeze also moves the offsets and lengths checked below */
        for (int t = 0; !strcmp(c->name, m->name) && c->n_tensors == m->n_tensors && t < m->n_tensors; t++)
            if (c->tensors[t].frozen != m->tensors[t].frozen &&
                !strcmp(c->tensors[t].name, m->tensors[t].name))
                return fsdp_set_error(FSDP_EFORMAT,
                                      "%s/manifest.json: tensor %s.%s is %s there and %s in this model: use "
                                      "the --freeze the checkpoint was trained with",
                                      dir, m->name, m->tensors[t].name,
                                      c->tensors[t].frozen ? "frozen" : "trainable",
                                      m->tensors[t].frozen ? "frozen" : "trainable");
        if (strcmp(c->name, m->name) || c->n_tensors != m->n_tensors || c->numel != m->numel)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "%s/manifest.json: unit %d is %s (%d tensors, %zu elements), this model's is %s "
                "(%d tensors, %zu elements): %s",
                dir, u, c->name, c->n_tensors, c->numel, m->name, m->n_tensors, m->numel, hint);
        for (int t = 0; t < m->n_tensors; t++) {
            const fsdp_ckpt_tensor *a = &c->tensors[t], *b = &m->tensors[t];
            int same = !strcmp(a->name, b->name) && a->ndim == b->ndim && a->offset == b->offset &&
                       a->alias_of == b->alias_of && a->frozen == b->frozen &&
                       !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
            if (!same) {
                char sa[96], sb[96];
                shape_str(sa, sizeof sa, a->ndim, a->shape);
                shape_str(sb, sizeof sb, b->ndim, b->shape);
                return fsdp_set_error(
                    FSDP_EFORMAT,
                    "%s/manifest.json: unit %s tensor %d is %s %s at offset %zu, this model's is %s "
                    "%s at offset %zu: %s",
                    dir, m->name, t, a->name, sa, a->offset, b->name, sb, b->offset, hint);
            }
        }
    }
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_load(fsdp_engine_t *eng, const char *step_dir, fsdp_ckpt_state *st) {
    fsdp_comm_t *comm = fsdp_engine_comm(eng);
    fsdp_ckpt_unit *units = NULL;
    fsdp_ckpt_reader *r = NULL;
    int n = 0;
    fsdp_status s = describe(eng, &units, &n);
    if (s == FSDP_OK) s = fsdp_ckpt_open(&r, step_dir);
    if (s == FSDP_OK) s = compare(r, units, n, step_dir);
    for (int u = 0; s == FSDP_OK && u < n; u++) {
        fsdp_shard_view v;
        s = fsdp_unit_shard_info(fsdp_engine_unit(eng, u), &v);
        if (s == FSDP_OK) s = load_unit(r, fsdp_engine_unit(eng, u), u, &v);
    }
    if (s == FSDP_OK) s = fsdp_ckpt_state_get(r, st);
    s = fsdp_comm_agree(comm, s, "loading the checkpoint");
    /* the frozen weights the caller restored must be those the checkpoint was trained with */
    uint64_t *dig = s == FSDP_OK ? calloc((size_t)n + 1, sizeof *dig) : NULL;
    if (s == FSDP_OK && !dig) s = FSDP_ERR(FSDP_ENOMEM, "no memory for %d digests", n);
    s = fsdp_comm_agree(comm, s, "loading the checkpoint");
    if (s == FSDP_OK) s = fsdp_ckpt_frozen_digests(eng, dig);
    for (int u = 0; s == FSDP_OK && u < n; u++)
        if (dig[u] != fsdp_ckpt_unit_desc(r, u)->frozen_digest)
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s: unit %s's frozen weights are not those the checkpoint was trained with "
                               "(digest %016llx, the manifest's %016llx): a checkpoint holds only the "
                               "trainable tensors; the frozen ones come from the run's --init-from folder "
                               "(or --seed), which must be the one it started from",
                               step_dir, units[u].name, (unsigned long long)dig[u],
                               (unsigned long long)fsdp_ckpt_unit_desc(r, u)->frozen_digest);
    free(dig);
    if (s == FSDP_OK) fsdp_engine_set_step_count(eng, st->step);
    fsdp_ckpt_close(r);
    free_desc(units, n);
    return s;
}
