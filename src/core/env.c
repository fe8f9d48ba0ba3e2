/* env.c — the library's FSDP_* environment knobs: one table (name, type, range, default, meaning;
 * docs/ENV.md is its text) and one parser. A set variable whose value does not parse, or lies outside
 * its range, is an FSDP_EINVAL naming the variable and what it takes, never a silent default. Unset
 * or empty means the default. */
#include "core/core.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const fsdp_env_var VARS[] = {
    {"FSDP_COMM_SHM", FSDP_ENV_BOOL, 0, 1, NULL, "1",
     "the shared-memory transport between the ranks of one host (0: every collective through MPI)"},
    {"FSDP_COMM_SHM_SLOT_KIB", FSDP_ENV_INT, 4, 1L << 20, NULL, "4096",
     "KiB per slot of the shared-memory transport's segment (two slots per rank)"},
    {"FSDP_COMM_SHM_CMA", FSDP_ENV_BOOL, 0, 1, NULL, "1",
     "the shared-memory transport's single-copy path (peers read with process_vm_readv)"},
    {"FSDP_COMM_SHM_CMA_MIN_KIB", FSDP_ENV_INT, 0, 1L << 30, NULL, "64",
     "KiB per rank block from which the single-copy path is used"},
    {"FSDP_COMM_SHM_HEAP", FSDP_ENV_BOOL, 0, 1, NULL, "1",
     "direct reads: every rank maps its peers' shared heaps and reads their buffers with plain loads"},
    {"FSDP_COMM_PROGRESS_THREAD", FSDP_ENV_BOOL, 0, 1, NULL, "1",
     "across hosts, a thread that polls the in-flight MPI requests while the caller computes"},
    {"FSDP_COMM_PROGRESS_US", FSDP_ENV_INT, 1, 100000, NULL, "100",
     "microseconds between the progress thread's polls"},
    {"FSDP_SHM_HEAP_MIB", FSDP_ENV_INT, 1, 1L << 30, NULL, "machine memory / ranks of the host",
     "MiB of address space reserved for each process's host-shared heap"},
    {"FSDP_GEMM_SPLIT_N", FSDP_ENV_INT, 0, INT_MAX, NULL, "1024",
     "an fp32 GEMM operand wider than this many columns is multiplied in column blocks (0: never)"},
    {"FSDP_MIXED_COMPUTE", FSDP_ENV_CHOICE, 0, 0, "auto|bf16|f32", "auto",
     "the mixed-precision GEMM maths when the program leaves it on auto (--mixed-compute)"},
    {"FSDP_TEST_NONFINITE", FSDP_ENV_TEXT, 0, 0, NULL, "unset",
     "test fault: <step>:loss or <step>:norm, that training step's global loss or grad norm reads NaN"},
    {"FSDP_TEST_DEVICE", FSDP_ENV_TEXT, 0, 0, NULL, "unset",
     "test device: sim:SEED or sim-nohost:SEED, fsdp-train's engine on the simulated device (device.h)"},
    {"FSDP_TEST_SKIP_COLLECTIVE", FSDP_ENV_TEXT, 0, 0, NULL, "unset",
     "test fault: <rank>:<n>[:stall|:hang] or <rank>:@TEXT[:stall], a rank skips a collective (comm.c)"},
    {"FSDP_STRICT_ENV", FSDP_ENV_BOOL, 0, 1, NULL, "0",
     "1: an FSDP_* variable that is neither a knob here nor the test harness's is an error, not a warning"},
};
#define N_VARS ((int)(sizeof VARS / sizeof VARS[0]))

int fsdp_env_count(void) { return N_VARS; }
const fsdp_env_var *fsdp_env_at(int i) { return i >= 0 && i < N_VARS ? &VARS[i] : NULL; }

static const fsdp_env_var *find(const char *name) {
    for (int i = 0; i < N_VARS; i++)
        if (strcmp(VARS[i].name, name) == 0) return &VARS[i];
    return NULL;
}

const char *fsdp_env_value(const char *name) {
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The index of v in choices ("a|b|c"), or -1. */
static int choice_index(const char *choices, const char *v) {
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return i;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

/* Parses var's set value v into *out (BOOL, INT: the number; CHOICE: the index). */
static fsdp_status parse(const fsdp_env_var *var, const char *v, long *out) {
    switch (var->type) {
    case FSDP_ENV_BOOL:
        if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) {
            *out = v[0] - '0';
            return FSDP_OK;
        }
        return fsdp_set_error(FSDP_EINVAL, "environment variable %s=\"%s\" is not 0 or 1 (%s; default %s)",
                              var->name, v, var->meaning, var->def);
    case FSDP_ENV_INT: {
        char *end = NULL;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (end == v || *end != '\0' || errno != 0 || x < var->lo || x > var->hi)
            return fsdp_set_error(
                FSDP_EINVAL, "environment variable %s=\"%s\" is not an integer in %ld..%ld (%s; default %s)",
                var->name, v, var->lo, var->hi, var->meaning, var->def);
        *out = (long)x;
        return FSDP_OK;
    }
    case FSDP_ENV_CHOICE: {
        int k = choice_index(var->choices, v);
        if (k < 0)
            return fsdp_set_error(FSDP_EINVAL,
                                  "environment variable %s=\"%s\" is not one of %s (%s; default %s)",
                                  var->name, v, var->choices, var->meaning, var->def);
        *out = k;
        return FSDP_OK;
    }
    case FSDP_ENV_TEXT: *out = 0; return FSDP_OK; /* its reader checks the grammar */
    }
    return FSDP_OK;
}

static fsdp_status get(const char *name, fsdp_env_type want, long def, long *out) {
    const fsdp_env_var *var = find(name);
    FSDP_INVARIANT(var != NULL && var->type == want); /* a knob read in code is in the table */
    *out = def;
    const char *v = fsdp_env_value(name);
    return v == NULL ? FSDP_OK : parse(var, v, out);
}

fsdp_status fsdp_env_bool(const char *name, int def, int *out) {
    long x;
    fsdp_status s = get(name, FSDP_ENV_BOOL, def, &x);
    *out = s == FSDP_OK ? (int)x : def;
    return s;
}

fsdp_status fsdp_env_int(const char *name, long def, long *out) {
    long x;
    fsdp_status s = get(name, FSDP_ENV_INT, def, &x);
    *out = s == FSDP_OK ? x : def;
    return s;
}

fsdp_status fsdp_env_choice(const char *name, int def, int *out) {
    long x;
    fsdp_status s = get(name, FSDP_ENV_CHOICE, def, &x);
    *out = s == FSDP_OK ? (int)x : def;
    return s;
}

/* Prefixes and names of the test and benchmark harness's variables (docs/ENV.md), read by programs
 * outside the library: never "unknown". */
static const char *const harness_prefixes[] = {"FSDP_FAULT_", "FSDP_TEST_", "FSDP_FUZZ_", "FSDP_SKIP_",
                                               "FSDP_BENCH_"};
static const char *const harness_names[] = {"FSDP_CHECK_EXPORT", "FSDP_COMMIT", "FSDP_SANITIZE"};

extern char **environ;

int fsdp_env_unknown(char *buf, size_t cap) {
    int n = 0;
    size_t used = 0;
    if (buf && cap) buf[0] = '\0';
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "FSDP_", 5) != 0) continue;
        const size_t len = strcspn(*e, "=");
        int known = 0;
        for (int i = 0; i < N_VARS && !known; i++)
            known = strlen(VARS[i].name) == len && !strncmp(VARS[i].name, *e, len);
        for (size_t i = 0; i < sizeof harness_prefixes / sizeof harness_prefixes[0] && !known; i++)
            known = !strncmp(*e, harness_prefixes[i], strlen(harness_prefixes[i]));
        for (size_t i = 0; i < sizeof harness_names / sizeof harness_names[0] && !known; i++)
            known = strlen(harness_names[i]) == len && !strncmp(harness_names[i], *e, len);
        if (known) continue;
        if (buf && used + len + 3 < cap) {
            used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", n ? ", " : "", (int)len, *e);
        }
        n++;
    }
    return n;
}

fsdp_status fsdp_env_check(void) {
    for (int i = 0; i < N_VARS; i++) {
        const char *v = fsdp_env_value(VARS[i].name);
        long x;
        if (v != NULL) FSDP_TRY(parse(&VARS[i], v, &x));
    }
    int strict = 0;
    FSDP_TRY(fsdp_env_bool("FSDP_STRICT_ENV", 0, &strict));
    char names[512];
    if (strict && fsdp_env_unknown(names, sizeof names) > 0)
        return fsdp_set_error(FSDP_EINVAL,
                              "FSDP_STRICT_ENV=1: unknown FSDP_* variable%s %s (docs/ENV.md lists the knobs; "
                              "a misspelled one would be ignored)",
                              strchr(names, ',') ? "s" : "", names);
    return FSDP_OK;
}

size_t fsdp_write_bounded(int fd, const void *buf, size_t n, int timeout_ms) {
    const char *p = buf;
    size_t done = 0;
    double end = fsdp_time_s() + timeout_ms * 1e-3;
    while (done < n) {
        double left = end - fsdp_time_s();
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int r = left > 0 ? poll(&pf, 1, (int)(left * 1e3) + 1) : 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || !(pf.revents & POLLOUT)) break; /* not writable in time, or an error */
        /* writable: a pipe takes at least PIPE_BUF bytes now, so a write of that much does not block */
        size_t len = n - done < PIPE_BUF ? n - done : PIPE_BUF;
        ssize_t w = write(fd, p + done, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    return done;
}
