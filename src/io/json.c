/* json.c — strict JSON reading (json.h): cJSON's parse plus the repeated-key check. */
#include "io/json.h"

#include "core/core.h"
#include "io/io.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The keys of one object; *dup set to a repeated one. Small objects compare pairwise; larger ones
 * (a vocabulary of 150k entries) go through an open-addressing set. */
static fsdp_status object_unique(const cJSON *o, const char **dup) {
    size_t n = 0;
    for (const cJSON *c = o->child; c; c = c->next)
        n++;
    *dup = NULL;
    if (n < 2) return FSDP_OK;
    if (n <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) {
                    *dup = a->string;
                    return FSDP_OK;
                }
        return FSDP_OK;
    }
    size_t cap = 32;
    while (cap < 2 * n)
        cap <<= 1;
    const char **set = calloc(cap, sizeof *set);
    if (!set) return FSDP_ERR(FSDP_ENOMEM, "no memory to check an object of %zu keys", n);
    for (const cJSON *c = o->child; c && !*dup; c = c->next) {
        if (!c->string) continue;
        for (size_t i = key_hash(c->string) & (cap - 1);; i = (i + 1) & (cap - 1)) {
            if (!set[i]) {
                set[i] = c->string;
                break;
            }
            if (!strcmp(set[i], c->string)) {
                *dup = c->string;
                break;
            }
        }
    }
    free(set);
    return FSDP_OK;
}

fsdp_status fsdp_json_check_unique(const cJSON *j, const char *what) {
    /* Depth-first without recursion (a deeply nested file must not exhaust the stack): walk down through
     * child, across through next, up through a stack of parents kept in a growable array. */
    size_t cap = 64, depth = 0;
    const cJSON **stack = malloc(cap * sizeof *stack);
    if (!stack) return FSDP_ERR(FSDP_ENOMEM, "no memory to check %s", what);
    fsdp_status s = FSDP_OK;
    const cJSON *n = j;
    while (n) {
        if (cJSON_IsObject(n)) {
            const char *dup = NULL;
            s = object_unique(n, &dup);
            if (s == FSDP_OK && dup)
                s = fsdp_set_error(FSDP_EFORMAT, "%s: the key \"%.60s\" appears twice in one object", what,
                                   dup);
            if (s != FSDP_OK) break;
        }
        if ((cJSON_IsObject(n) || cJSON_IsArray(n)) && n->child) {
            if (depth == cap) {
                const cJSON **g = realloc(stack, 2 * cap * sizeof *stack);
                if (!g) {
                    s = FSDP_ERR(FSDP_ENOMEM, "no memory to check %s", what);
                    break;
                }
                stack = g, cap *= 2;
            }
            stack[depth++] = n;
            n = n->child;
            continue;
        }
        while (n && n != j && !n->next)
            n = depth ? stack[--depth] : NULL;
        if (!n || n == j) break;
        n = n->next;
    }
    free(stack);
    return s;
}

fsdp_status fsdp_json_parse(const char *text, size_t len, const char *what, cJSON **out) {
    *out = NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j)
        return fsdp_set_error(FSDP_EFORMAT, "%s is not valid JSON (near byte %ld)", what,
                              end ? (long)(end - text) : -1L);
    /* After the value only white space (a safetensors header pads with spaces): `{"vocab": 300} junk` is
     * a damaged file, not a vocabulary of 300. */
    size_t off = end ? (size_t)(end - text) : len;
    while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r'))
        off++;
    if (off < len) {
        cJSON_Delete(j);
        return fsdp_set_error(FSDP_EFORMAT, "%s is not valid JSON (text after the value at byte %zu)", what,
                              off);
    }
    fsdp_status s = fsdp_json_check_unique(j, what);
    if (s != FSDP_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return FSDP_OK;
}

fsdp_status fsdp_json_read_file(const char *path, int missing_ok, cJSON **out) {
    *out = NULL;
    if (missing_ok && access(path, F_OK) != 0) return FSDP_OK;
    char *text = NULL;
    size_t len = 0;
    FSDP_TRY(fsdp_io_read_file(path, &text, &len));
    fsdp_status s = fsdp_json_parse(text, len, path, out);
    fsdp_mem_free(text);
    return s;
}

fsdp_status fsdp_json_get_whole(const cJSON *j, const char *path, const char *key, long lo, long hi,
                                const char *why, long *out, int *found) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (found) *found = v != NULL;
    if (!v && found) return FSDP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi) ||
        v->valuedouble != floor(v->valuedouble))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" must be a whole number from %ld to %ld (%s)", path,
                              key, lo, hi, why);
    *out = (long)v->valuedouble;
    return FSDP_OK;
}
