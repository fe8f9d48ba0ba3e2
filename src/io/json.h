/* json.h — the one way the project reads a JSON file (tokenizer.json, config.json, manifest.json,
 * meta.json, a safetensors header): cJSON's parse, then a check that no object repeats a key (cJSON keeps
 * both and answers lookups with the first, so a repeated key would silently pick one of two values). */
#ifndef FSDP_IO_JSON_H
#define FSDP_IO_JSON_H

#include "fsdp.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* FSDP_EFORMAT naming what (a path) and the first key that some object of j holds twice; FSDP_ENOMEM.
 * Linear in the size of the tree (a hash set per large object). */
fsdp_status fsdp_json_check_unique(const cJSON *j, const char *what);

/* text[0..len) parsed into *out (cJSON_Delete it) and checked with fsdp_json_check_unique. Not valid
 * JSON: FSDP_EFORMAT "WHAT is not valid JSON (near byte N)". */
fsdp_status fsdp_json_parse(const char *text, size_t len, const char *what, cJSON **out);

#endif
