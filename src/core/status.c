/* status.c — status codes, their names, and the per-thread last-error message. */
#include "core/core.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *fsdp_strerror(fsdp_status s) {
    switch (s) {
    case FSDP_OK: return "ok";
    case FSDP_EINVAL: return "invalid argument";
    case FSDP_ENOMEM: return "out of memory";
    case FSDP_ESTATE: return "call not allowed in this state";
    case FSDP_ECOMM: return "communication error";
    case FSDP_ETIMEOUT: return "collective timed out";
    case FSDP_EIO: return "i/o error";
    case FSDP_EFORMAT: return "malformed data";
    case FSDP_EUNSUPPORTED: return "unsupported";
    case FSDP_EINTERNAL: return "internal error";
    case FSDP_EPEER: return "another rank failed";
    }
    return "unknown status";
}

const char *fsdp_last_error(void) { return last_error; }
void fsdp_clear_error(void) { last_error[0] = '\0'; }

fsdp_status fsdp_set_error(fsdp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

fsdp_status fsdp_set_error_at(fsdp_status s, const char *where, const char *fmt, ...) {
    /* "where: " then the message; both truncated to fit. */
    int n = snprintf(last_error, sizeof last_error, "%s: ", where);
    if (n < 0 || (size_t)n >= sizeof last_error) return s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return s;
}

fsdp_status fsdp_wrap_error_at(fsdp_status s, const char *where, const char *fmt, ...) {
    /* The inner message lives in last_error: copy it out before formatting over it. */
    char inner[sizeof last_error];
    memcpy(inner, last_error, sizeof inner);
    char ctx[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    /* "where: ctx: inner", or "ctx: inner" without a where; truncated to fit. */
    int n = snprintf(last_error, sizeof last_error, "%s%s%s: %s", where ? where : "", where ? ": " : "", ctx,
                     inner);
    (void)n; /* truncation is the documented behaviour */
    return s;
}

void fsdp_invariant_failed(const char *cond, const char *file, int line) {
    fprintf(stderr, "fsdp: internal invariant failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
