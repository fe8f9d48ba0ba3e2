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

/* The JSON file at path read (fsdp_io_read_file) and parsed (fsdp_json_parse, what = path) into *out
 * (cJSON_Delete it). missing_ok: a file that does not exist gives *out NULL and FSDP_OK. */
fsdp_status fsdp_json_read_file(const char *path, int missing_ok, cJSON **out);

/* Object j's key as a whole number in lo..hi into *out; *found (may be NULL) 0 when j has no such key,
 * *out unchanged. Anything else (not a number, a fraction: 300.9 is damage, not 300; out of range) is
 * FSDP_EFORMAT "PATH: \"KEY\" must be a whole number from LO to HI (WHY)". A required key: found NULL,
 * and a missing one is that error too. */
fsdp_status fsdp_json_get_whole(const cJSON *j, const char *path, const char *key, long lo, long hi,
                                const char *why, long *out, int *found);

#endif
