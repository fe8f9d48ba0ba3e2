/* hf_config.h — reading a Hugging Face config.json's fields, for the families' hf_read_config: each
 * helper refuses a missing, mistyped or out-of-range value with a message naming the file and key. */
#ifndef FSDP_MODEL_HF_CONFIG_H
#define FSDP_MODEL_HF_CONFIG_H

#include "fsdp.h"

#include <cjson/cJSON.h>

/* A required whole number in [lo, hi]. */
fsdp_status fsdp_hfc_int(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out);
/* An optional whole number in [lo, hi]; *out keeps its value when the key is absent or null. */
fsdp_status fsdp_hfc_int_opt(const cJSON *j, const char *path, const char *key, int lo, int hi, int *out);
/* An optional number in [lo, hi]; *out keeps its value when absent or null. */
fsdp_status fsdp_hfc_num_opt(const cJSON *j, const char *path, const char *key, double lo, double hi,
                             double *out);
/* An optional boolean; *out keeps its value when absent or null. */
fsdp_status fsdp_hfc_bool_opt(const cJSON *j, const char *path, const char *key, int *out);
/* An optional boolean that must equal want when present (why: what this model does instead). */
fsdp_status fsdp_hfc_bool_is(const cJSON *j, const char *path, const char *key, int want, const char *why);
/* An optional string that must be one of allowed (NULL-terminated) when present. */
fsdp_status fsdp_hfc_str_in(const cJSON *j, const char *path, const char *key, const char *const *allowed,
                            const char *why);
/* The key must be absent or null (a feature this model does not have, named in why). */
fsdp_status fsdp_hfc_absent(const cJSON *j, const char *path, const char *key, const char *why);

#endif
