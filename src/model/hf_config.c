/* hf_config.c — the config.json field readers of hf_config.h. */
#include "model/hf_config.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

static const cJSON *get(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

fsdp_status fsdp_hfc_int(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out) {
    const cJSON *v = get(j, key);
    if (!v) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is missing", path, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" must be a whole number in %d..%d", path, key, lo, hi);
    *out = (int)v->valuedouble;
    return FSDP_OK;
}

fsdp_status fsdp_hfc_int_opt(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out) {
    return get(j, key) ? fsdp_hfc_int(j, path, key, lo, hi, out) : FSDP_OK;
}

fsdp_status fsdp_hfc_num_opt(const cJSON *j, const char *path, const char *key, double lo, double hi,
                             double *out) {
    const cJSON *v = get(j, key);
    if (!v) return FSDP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" must be a number in %g..%g", path, key, lo, hi);
    *out = v->valuedouble;
    return FSDP_OK;
}

fsdp_status fsdp_hfc_bool_opt(const cJSON *j, const char *path, const char *key, int *out) {
    const cJSON *v = get(j, key);
    if (!v) return FSDP_OK;
    if (!cJSON_IsBool(v)) return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is not true or false", path, key);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return FSDP_OK;
}

fsdp_status fsdp_hfc_bool_is(const cJSON *j, const char *path, const char *key, int want, const char *why) {
    int b = want;
    FSDP_TRY(fsdp_hfc_bool_opt(j, path, key, &b));
    if (b != want)
        return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is %s: this model cannot represent that (%s)", path,
                              key, want ? "false" : "true", why);
    return FSDP_OK;
}

fsdp_status fsdp_hfc_str_in(const cJSON *j, const char *path, const char *key, const char *const *allowed,
                            const char *why) {
    const cJSON *v = get(j, key);
    if (!v) return FSDP_OK;
    for (const char *const *a = allowed; cJSON_IsString(v) && *a; a++)
        if (!strcmp(v->valuestring, *a)) return FSDP_OK;
    return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is %s%.40s%s: %s", path, key,
                          cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "not a string",
                          cJSON_IsString(v) ? "\"" : "", why);
}

fsdp_status fsdp_hfc_absent(const cJSON *j, const char *path, const char *key, const char *why) {
    const cJSON *v = get(j, key);
    if (!v || (cJSON_IsBool(v) && !cJSON_IsTrue(v))) return FSDP_OK;
    return fsdp_set_error(FSDP_EFORMAT, "%s: \"%s\" is set: this model cannot represent that (%s)", path, key,
                          why);
}
