/* layout.c — one unit's tensor specs, validated and laid out flat: the one function that
 * fsdp_engine_add_unit and the memory plan both call, so they accept the same specs with the same
 * messages and compute the same offsets (non-alias trainable tensors in declaration order, each at a
 * multiple of align, padded to a multiple of world: the trainable region; then the frozen tensors the
 * same way: the frozen region; an alias takes its target's offset and region; the trainable region's
 * gaps recorded, so the zero-fill before a reduction never has to look at the buffer). */
#include "shard/shard.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void fsdp_shard_range(size_t padded_numel, int rank, int world, size_t *offset, size_t *len) {
    /* padded_numel is a multiple of world for every flat buffer; the remainder split only keeps the
     * function total for other inputs (the first padded_numel % world ranks get one more). */
    size_t w = world > 0 ? (size_t)world : 1, r = rank > 0 ? (size_t)rank : 0;
    size_t base = padded_numel / w, rem = padded_numel % w;
    *offset = r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Checks spec t itself (name, shape, initialiser); *numel = its element count. */
static fsdp_status check_spec(const char *un, const fsdp_tensor_spec *specs, int t, size_t *numel) {
    const fsdp_tensor_spec *s = &specs[t];
    if (s->name == NULL || s->name[0] == '\0')
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': tensor %d has no name; every tensor needs a unique name", un,
                        t);
    for (int k = 0; k < t; k++)
        if (strcmp(specs[k].name, s->name) == 0)
            return FSDP_ERR(FSDP_EINVAL, "unit '%s': tensor name '%s' used twice (tensors %d and %d)", un,
                            s->name, k, t);
    if (s->ndim < 1 || s->ndim > FSDP_MAX_DIMS)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': ndim %d outside 1..%d", un, s->name, s->ndim,
                        FSDP_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->shape[d] < 1)
            return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': shape[%d] = %lld; dimensions must be >= 1",
                            un, s->name, d, (long long)s->shape[d]);
        if (!fsdp_mul_ok(n, (size_t)s->shape[d], &n))
            return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': element count overflows", un, s->name);
    }
    if ((unsigned)s->init > FSDP_INIT_UNIFORM)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': unknown init kind %d", un, s->name,
                        (int)s->init);
    if ((s->init == FSDP_INIT_NORMAL || s->init == FSDP_INIT_UNIFORM) &&
        !(s->std >= 0.0f && isfinite(s->std)))
        return FSDP_ERR(FSDP_EINVAL, "unit '%s' tensor '%s': std %g must be finite and >= 0", un, s->name,
                        (double)s->std);
    *numel = n;
    return FSDP_OK;
}

/* Resolves spec t's alias_of to the index of a non-alias tensor of this unit: first an earlier tensor
 * of this unit (names may contain dots), else "<this unit>.tensor"; a tie into another unit is refused
 * naming both units. */
static fsdp_status resolve_alias(const char *un, const fsdp_tensor_spec *specs, int t,
                                 const layout_tensor *lt, const layout_others *others, int *target_out) {
    const fsdp_tensor_spec *s = &specs[t];
    int target = -1;
    for (int k = 0; k < t; k++)
        if (strcmp(specs[k].name, s->alias_of) == 0) target = k;
    if (target < 0) {
        const char *dot = strchr(s->alias_of, '.');
        if (dot != NULL) {
            size_t len = (size_t)(dot - s->alias_of);
            const char *other =
                others && others->unit_named ? others->unit_named(others->ctx, s->alias_of, len) : NULL;
            if (other != NULL || strncmp(s->alias_of, un, len) != 0 || strlen(un) != len)
                return FSDP_ERR(FSDP_EINVAL,
                                "tensor '%s' of unit '%s' is tied to '%s' in unit '%.*s': a tensor cannot be "
                                "tied across units '%s' and '%.*s'; put both uses in one unit (declare the "
                                "tensor once there and the tie as an alias in the same unit)",
                                s->name, un, dot + 1, (int)len, s->alias_of, un, (int)len, s->alias_of);
            for (int k = 0; k < t; k++) /* "thisunit.tensor" */
                if (strcmp(specs[k].name, dot + 1) == 0) target = k;
        }
    }
    if (target < 0 && others && others->unit_with_tensor) { /* a bare name that lives in another unit */
        const char *other = others->unit_with_tensor(others->ctx, s->alias_of);
        if (other != NULL)
            return FSDP_ERR(FSDP_EINVAL,
                            "tensor '%s' of unit '%s' is tied to '%s' in unit '%s': a tensor cannot be tied "
                            "across units '%s' and '%s'; put both uses in one unit (declare the tensor once "
                            "there and the tie as an alias in the same unit)",
                            s->name, un, s->alias_of, other, un, other);
    }
    if (target < 0)
        return FSDP_ERR(
            FSDP_EINVAL,
            "unit '%s' tensor '%s': alias_of '%s' names no earlier tensor of this unit; declare the "
            "target before its alias",
            un, s->name, s->alias_of);
    if (lt[target].alias_of >= 0) target = lt[target].alias_of;
    if (lt[target].numel != lt[t].numel)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': alias '%s' has %zu elements but its target '%s' has %zu", un,
                        s->name, lt[t].numel, specs[target].name, lt[target].numel);
    *target_out = target;
    return FSDP_OK;
}

/* Lays out the non-alias tensors of one region (frozen 0 or 1) from *cur on; the gaps go to gaps. */
static fsdp_status lay_region(const char *un, const fsdp_tensor_spec *specs, int n, size_t align, int frozen,
                              layout_tensor *lt, shard_gap *gaps, int *ng, size_t *cur, size_t *params) {
    for (int t = 0; t < n; t++) {
        if (lt[t].alias_of >= 0 || lt[t].frozen != frozen) continue;
        size_t off = round_up(*cur, align);
        if (off < *cur || off + lt[t].numel < off)
            return FSDP_ERR(FSDP_EINVAL, "unit '%s': flat size overflows", un);
        if (off > *cur && gaps) gaps[(*ng)++] = (shard_gap){*cur, off - *cur};
        lt[t].offset = off;
        *cur = off + lt[t].numel;
        *params += lt[t].numel;
    }
    return FSDP_OK;
}

#define FREEZE_GLOB_MAX 255

fsdp_status shard_freeze_check(const char *freeze) {
    if (freeze == NULL || freeze[0] == '\0') return FSDP_OK;
    for (const char *p = freeze;;) {
        size_t len = strcspn(p, ",");
        if (len == 0)
            return FSDP_ERR(FSDP_EINVAL,
                            "freeze list \"%s\": an empty pattern (a leading, trailing or doubled comma); "
                            "give comma-separated globs over unit.tensor names such as \"h*.qkv_w\"",
                            freeze);
        if (len > FREEZE_GLOB_MAX)
            return FSDP_ERR(FSDP_EINVAL, "freeze list: a pattern of %zu characters (at most %d)", len,
                            FREEZE_GLOB_MAX);
        if (p[len] == '\0') return FSDP_OK;
        p += len + 1;
    }
}

int shard_freeze_match(const char *freeze, const char *unit, const char *tensor) {
    if (freeze == NULL || freeze[0] == '\0') return 0;
    char name[512], glob[FREEZE_GLOB_MAX + 1];
    snprintf(name, sizeof name, "%s.%s", unit ? unit : "", tensor);
    for (const char *p = freeze; *p;) {
        size_t len = strcspn(p, ",");
        if (len <= FREEZE_GLOB_MAX) {
            memcpy(glob, p, len);
            glob[len] = '\0';
            if (fnmatch(glob, name, 0) == 0) return 1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

fsdp_status shard_layout(const char *unit, const fsdp_tensor_spec *specs, int n, size_t align, int world,
                         const char *freeze, const layout_others *others, layout_tensor *lt, shard_gap *gaps,
                         int *n_gaps, layout_sizes *sz) {
    const char *un = unit ? unit : "";
    if (specs == NULL || n < 1)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': needs tensor specs and n >= 1 (got %d)", un, n);
    if (align == 0 || align > 4096)
        return FSDP_ERR(FSDP_EINVAL, "align must be 1..4096 elements (got %zu); 16 suits AVX-512", align);
    if (world < 1) return FSDP_ERR(FSDP_EINVAL, "world must be >= 1 (got %d)", world);
    for (int t = 0; t < n; t++) {
        lt[t].alias_of = -1;
        lt[t].offset = 0;
        FSDP_TRY(check_spec(un, specs, t, &lt[t].numel));
        lt[t].frozen = specs[t].frozen != 0 || shard_freeze_match(freeze, un, specs[t].name);
        if (specs[t].alias_of != NULL) {
            FSDP_TRY(resolve_alias(un, specs, t, lt, others, &lt[t].alias_of));
            lt[t].frozen = lt[lt[t].alias_of].frozen;
        }
    }
    layout_sizes z = {0};
    int ng = 0;
    size_t cur = 0;
    FSDP_TRY(lay_region(un, specs, n, align, 0, lt, gaps, &ng, &cur, &z.psi));
    z.numel = cur;
    z.padded = round_up(cur, (size_t)world);
    if (z.padded < cur) return FSDP_ERR(FSDP_EINVAL, "unit '%s': flat size overflows", un);
    if (z.padded > cur && gaps) gaps[ng++] = (shard_gap){cur, z.padded - cur};
    cur = z.padded;
    FSDP_TRY(lay_region(un, specs, n, align, 1, lt, NULL, NULL, &cur, &z.fpsi));
    z.fnumel = cur - z.padded;
    z.fpad = round_up(z.fnumel, (size_t)world);
    if (z.fpad < z.fnumel || z.padded + z.fpad < z.padded)
        return FSDP_ERR(FSDP_EINVAL, "unit '%s': flat size overflows", un);
    for (int t = 0; t < n; t++)
        if (lt[t].alias_of >= 0) lt[t].offset = lt[lt[t].alias_of].offset;
    if (n_gaps) *n_gaps = ng;
    if (sz) *sz = z;
    return FSDP_OK;
}
