/* toml_read.h — a TOML file as a flat list of (key, value text) pairs, read with toml++ (Debian's
 * libtomlplusplus-dev, TOML 1.0). A small C interface over the C++ library, so that the trainer's
 * settings file goes through a maintained, complete TOML parser and its C code sees only text that the
 * command line's own value parsing then checks. */
#ifndef FSDP_TOML_READ_H
#define FSDP_TOML_READ_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FSDP_TOML_STRING = 0, /* the string itself */
    FSDP_TOML_INTEGER,    /* decimal, "%lld" */
    FSDP_TOML_FLOAT,      /* "%.17g" (round-trips through strtod; inf and nan as "inf", "nan") */
    FSDP_TOML_BOOL,       /* "1" or "0" */
    FSDP_TOML_ARRAY_ITEM  /* one string of an array of strings, in order (the array's key each time) */
} fsdp_toml_kind;

/* Called once per top-level key (in key order; TOML forbids a key twice) and per element of an array
 * of strings (in order); a nonzero
 * return stops the walk and is returned. line: the value's line in the file (1-based). */
typedef int (*fsdp_toml_visit_fn)(void *ctx, const char *key, const char *value, fsdp_toml_kind kind,
                                  int line);

/* Parses the file at path (a regular file of at most 1 MiB) and visits its top-level keys. Tables,
 * arrays of anything but strings, and dates or times are refused. Returns 0, the visitor's nonzero
 * value, or -1 with a message in err ("PATH:LINE:COL: what"; err may be NULL). */
int fsdp_toml_visit(const char *path, fsdp_toml_visit_fn fn, void *ctx, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
