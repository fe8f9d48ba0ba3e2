/* host.c — the run's host set-up: the learning-rate schedule, cores, OpenMP threads and affinity, the
 * GEMM path every rank takes and the speed figures (MFU's GEMM peak), byte and time formats. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "kernels/kernels.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

double fsdp_train_lr(const fsdp_train_config *c, int s) {
    if (c->warmup > 0 && s <= c->warmup) return c->lr * (double)s / (double)c->warmup;
    if (c->steps <= c->warmup) return c->lr;
    double p = (double)(s - c->warmup) / (double)(c->steps - c->warmup);
    if (p > 1) p = 1;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

int fsdp_train_affinity_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return fsdp_train_online_cores();
}

int fsdp_train_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int fsdp_train_threads(const fsdp_train_config *cfg, fsdp_comm_t *comm) {
    if (cfg->threads > 0) return cfg->threads;
    int local = comm ? fsdp_comm_local_size(comm) : 1;
    int t = fsdp_train_affinity_cores() / (local > 0 ? local : 1);
    return t > 0 ? t : 1;
}

void fsdp_train_check_affinity(FILE *err, int threads, fsdp_comm_t *comm) {
    const int allowed = fsdp_train_affinity_cores(), online = fsdp_train_online_cores();
    const int rank = comm ? fsdp_comm_rank(comm) : 0, local = comm ? fsdp_comm_local_size(comm) : 1;
    if (err == NULL) return;
    /* More threads than cores: they time-share, and every OpenMP barrier waits for a descheduled one,
     * so a step runs far slower than on as many cores as threads (TRAINER.md, "Threads"). */
    if (threads > allowed)
        fprintf(err,
                "fsdp-train: warning: rank %d runs %d OpenMP threads on %d core%s (its CPU affinity), so "
                "they time-share: give it more cores (under mpirun: --bind-to none, or --map-by "
                "slot:PE=%d) or lower --threads\n",
                rank, threads, allowed, allowed == 1 ? "" : "s", threads);
    else if (rank == 0 && allowed * local < online)
        fprintf(err,
                "fsdp-train: note: rank 0 may run on %d of the %d cores online (its CPU affinity; %d rank%s "
                "on this node); under mpirun, --bind-to none lets the ranks use every core\n",
                allowed, online, local, local == 1 ? "" : "s");
}

void fsdp_train_omp_wait_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") != NULL) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* exec failed: run as we are (the configuration print says so) */
}

void fsdp_train_fmt_bytes(char *buf, size_t cap, size_t b) {
    if (b >= ((size_t)1 << 30))
        snprintf(buf, cap, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, cap, "%.1f MiB", (double)b / (1 << 20));
}

void fsdp_train_fmt_eta(char *buf, size_t cap, double s) {
    if (s < 0 || !isfinite(s)) s = 0;
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%dh%02dm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, cap, "%dm%02ds", t / 60, t % 60);
}

/* How the GEMMs compute, the same on every rank: --mixed-compute, and under auto rank 0's choice (its
 * probe may answer differently from another rank's, and then the ranks' numerics would differ). Rank 0
 * prints the choice and why. */
fsdp_status fsdp_train_agree_gemm_path(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    const int mixed = c->precision == FSDP_PRECISION_MIXED;
    fsdp_gemm_mixed_choice ch0 = {0}, ch = {0}; /* rank 0's own resolution; the agreed one */
    fsdp_kctx kx; /* the path is the kernels row's answer (the row of the device the model runs on) */
    fsdp_status s = fsdp_kctx_init(&kx, r->rm.dev, NULL);
    if (s == FSDP_OK) s = fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)c->mixed_compute);
    if (s == FSDP_OK && mixed && r->rank == 0) s = kx.k->gemm_choice(&kx, &ch0);
    FSDP_TRY(fsdp_comm_agree(r->comm, s, "choosing the mixed-precision GEMM path"));
    r->gemm_path = fsdp_gemm_path_name(FSDP_GEMM_F32);
    if (mixed) {
        int32_t m = ch0.path == FSDP_GEMM_F32_COMPUTE ? FSDP_MIXED_COMPUTE_F32 : FSDP_MIXED_COMPUTE_BF16;
        FSDP_TRY(fsdp_comm_broadcast(r->comm, &m, 1, FSDP_I32, 0));
        s = fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)m);
        if (s == FSDP_OK) s = kx.k->gemm_choice(&kx, &ch);
        FSDP_TRY(fsdp_comm_agree(r->comm, s, "setting the mixed-precision GEMM path"));
        r->gemm_path = fsdp_gemm_path_name(ch.path);
    }
    if (!r->o) return FSDP_OK;
    fsdp_dtype pdt = mixed ? FSDP_BF16 : FSDP_F32;
    fprintf(r->o, "  GEMMs: %s path (oneDNN %s, ISA %s)", r->gemm_path, fsdp_gemm_impl_name(pdt),
            fsdp_kernels_isa_name());
    if (mixed) {
        fprintf(r->o, "; --mixed-compute %s, decided by %s",
                fsdp_mixed_compute_name((fsdp_mixed_compute)c->mixed_compute), ch0.source);
        if (ch0.probe_bf16_ms > 0)
            fprintf(r->o, " (bf16 %.2f ms, f32-compute %.2f ms)", ch0.probe_bf16_ms, ch0.probe_f32_ms);
    }
    fprintf(r->o, "\n");
    return FSDP_OK;
}

/* ---------------------------------------------------------------- the GEMM peak's cache */

/* A probe of a quarter second on a shared machine measures the moment, not the CPU: three runs of one
 * step measured 90, 190 and 280 GFLOP/s (issue 40). The cache keeps the best peak each (CPU model, GEMM
 * path, threads per rank, ranks on the host) has shown; MFU divides by the larger of it and this run's
 * probe, so a busy moment does not inflate MFU, and the denominator stays the same run after run. */

/* The cache file: --peak-cache, else $XDG_CACHE_HOME/fsdp/gemm-peak.json, else ~/.cache/fsdp/...;
 * NULL when off or there is no home. malloc'd. */
static char *peak_cache_path(const fsdp_train_config *c) {
    if (c->peak_cache) return strcmp(c->peak_cache, "off") == 0 ? NULL : fsdp_strdupf("%s", c->peak_cache);
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && x[0] == '/') return fsdp_strdupf("%s/fsdp/gemm-peak.json", x);
    return h && h[0] == '/' ? fsdp_strdupf("%s/.cache/fsdp/gemm-peak.json", h) : NULL;
}

static void peak_cache_key(const train_run *r, char *key, size_t cap) {
    char model[128] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    if (f) fclose(f);
    int local = fsdp_comm_local_size(r->comm);
    snprintf(key, cap, "%s | %s path | %d thread%s per rank | %d rank%s on the host", model, r->gemm_path,
             r->threads, r->threads == 1 ? "" : "s", local, local == 1 ? "" : "s");
}

/* The cache's JSON (NULL when absent or unreadable). Plain stdio: the cache is neither one of the
 * run's inputs nor one of its outputs (fsdp_io's checks), and its bytes are not the run's memory. */
static cJSON *peak_cache_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n < sizeof buf - 1 ? cJSON_ParseWithLength(buf, n) : NULL;
}

/* The cached best for key (0 when none, or the file is absent or not the cache's JSON: a warning). */
static double peak_cache_get(const char *path, const char *key, int *runs, FILE *warn) {
    *runs = 0;
    if (access(path, F_OK) != 0) return 0;
    cJSON *j = peak_cache_read(path);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gflops"),
                *k = cJSON_GetObjectItemCaseSensitive(e, "runs");
    double v = 0;
    if (!cJSON_IsObject(j)) {
        if (warn)
            fprintf(warn, "  warning: --peak-cache %s is not a JSON object: ignored (and rewritten)\n", path);
    } else if (e &&
               !(cJSON_IsNumber(g) && g->valuedouble > 0 && g->valuedouble < 1e12 && cJSON_IsNumber(k))) {
        if (warn)
            fprintf(warn, "  warning: --peak-cache %s: the entry for this CPU is malformed: ignored\n", path);
    } else if (e) {
        v = g->valuedouble;
        *runs = k->valueint;
    }
    cJSON_Delete(j);
    return v;
}

/* Records gflops (the best so far) and runs for key, keeping the other entries; a failure is a warning
 * (the cache only steadies MFU). */
static void peak_cache_put(const char *path, const char *key, double gflops, int runs, FILE *warn) {
    char *dir = fsdp_strdupf("%s", path), *tmp = fsdp_strdupf("%s.tmp.%ld", path, (long)getpid());
    cJSON *j = peak_cache_read(path);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = cJSON_CreateObject();
    }
    cJSON *e = cJSON_CreateObject();
    char *out = NULL;
    if (j && e && cJSON_AddNumberToObject(e, "gflops", gflops) && cJSON_AddNumberToObject(e, "runs", runs)) {
        cJSON_DeleteItemFromObjectCaseSensitive(j, key);
        if (cJSON_AddItemToObject(j, key, e)) e = NULL, out = cJSON_Print(j);
    }
    cJSON_Delete(e);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (out && slash && slash != dir) { /* its folder, and the one above it (~/.cache) */
        *slash = '\0';
        char *up = strrchr(dir, '/');
        if (up && up != dir) {
            *up = '\0';
            (void)mkdir(dir, 0755);
            *up = '/';
        }
        (void)mkdir(dir, 0755);
    }
    /* a temporary beside it, renamed over it: a reader never sees half a file */
    FILE *f = out && tmp ? fopen(tmp, "wb") : NULL;
    int ok = f && fwrite(out, 1, strlen(out), f) == strlen(out);
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok && warn)
        fprintf(warn, "  warning: --peak-cache %s not updated: %s\n", path,
                out ? strerror(errno) : "no memory");
    if (!ok && tmp) unlink(tmp);
    free(out);
    free(tmp);
    free(dir);
    cJSON_Delete(j);
}

/* MFU's denominator, the outlier guard's window and the straggler's buffer. The peak: every rank
 * times a few square GEMMs on its GEMM path and threads at once (ranks sharing a host contend as they
 * will in the steps), or takes --peak-gflops; the sum over ranks is MFU's peak, recorded in the
 * manifest's config ("gemm-peak"). */
fsdp_status fsdp_train_setup_perf(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    r->mem_total = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    r->flops_per_token = fsdp_model_flops_per_token(fsdp_model_get_config(r->rm.model), c->seq_len);
    r->waits = calloc((size_t)r->world, sizeof *r->waits);
    if (!r->waits) return FSDP_ERR(FSDP_ENOMEM, "no memory for %d ranks' wait times", r->world);
    if (c->skip_update_z > 0) {
        r->guard = malloc(sizeof *r->guard);
        if (!r->guard) return FSDP_ERR(FSDP_ENOMEM, "no memory for the outlier guard");
        FSDP_TRY(fsdp_outlier_init(r->guard, c->skip_update_window));
    }
    fsdp_gemm_peak_result pk = {0};
    fsdp_status s = FSDP_OK;
    const char *source = c->peak_gflops > 0 ? "--peak-gflops" : c->peak_gflops < 0 ? "off" : "measured";
    char *cache = c->peak_gflops == 0 ? peak_cache_path(c) : NULL, key[320] = "";
    double cached = 0;
    int runs = 0, used_cache = 0;
    if (c->peak_gflops == 0) {
        fsdp_kctx kx; /* the peak of the kernels row the model runs on */
        s = fsdp_kctx_init(&kx, r->rm.dev, NULL);
        if (s == FSDP_OK) s = fsdp_comm_barrier(r->comm);
        if (s == FSDP_OK)
            s = kx.k->gemm_peak(&kx, c->precision == FSDP_PRECISION_MIXED ? FSDP_BF16 : FSDP_F32, 0.25, &pk);
        r->peak_rank_gflops = pk.gflops;
        if (s == FSDP_OK && cache) {
            peak_cache_key(r, key, sizeof key);
            cached = peak_cache_get(cache, key, &runs, r->rank == 0 ? r->o : NULL);
            used_cache = cached > pk.gflops;
            if (used_cache) r->peak_rank_gflops = cached;
            if (r->rank == 0)
                peak_cache_put(cache, key, used_cache ? cached : pk.gflops, runs + 1, r->o ? r->o : stderr);
        }
    } else if (c->peak_gflops > 0) {
        r->peak_rank_gflops = c->peak_gflops;
    }
    s = fsdp_comm_agree(r->comm, s, "measuring the GEMM peak");
    if (s != FSDP_OK) {
        free(cache);
        return s;
    }
    float mine = (float)r->peak_rank_gflops, sum = mine, lo = mine, neg = -mine,
          cache_used = (float)used_cache;
    if (r->world > 1) {
        fsdp_comm_set_label(r->comm, "train / GEMM peak: sum and minimum over ranks");
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &mine, &sum, 1, FSDP_F32, FSDP_SUM));
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &neg, &neg, 1, FSDP_F32, FSDP_MAX));
        FSDP_TRY(fsdp_comm_all_reduce(r->comm, &cache_used, &cache_used, 1, FSDP_F32, FSDP_MAX));
        lo = -neg;
    }
    if (cache_used > 0) source = "cache";
    r->peak_total_gflops = sum;
    cJSON *pj = cJSON_CreateObject();
    if (!pj || !cJSON_AddItemToObject(r->cj, "gemm-peak", pj) ||
        !cJSON_AddStringToObject(pj, "source", source) ||
        !cJSON_AddStringToObject(pj, "path", r->gemm_path) ||
        !cJSON_AddNumberToObject(pj, "rank0-gflops", r->peak_rank_gflops) ||
        !cJSON_AddNumberToObject(pj, "min-rank-gflops", lo) ||
        !cJSON_AddNumberToObject(pj, "total-gflops", sum) ||
        !cJSON_AddNumberToObject(pj, "gemm-size", pk.size) || !cJSON_AddNumberToObject(pj, "reps", pk.reps) ||
        !cJSON_AddNumberToObject(pj, "seconds", pk.total_s) ||
        !cJSON_AddNumberToObject(pj, "probe-rank0-gflops", pk.gflops) ||
        !cJSON_AddStringToObject(pj, "cache", cache ? cache : "off") ||
        !cJSON_AddNumberToObject(pj, "flops-per-token", r->flops_per_token)) {
        free(cache);
        return FSDP_ERR(FSDP_ENOMEM, "no memory for the config record");
    }
    if (r->o) {
        if (c->peak_gflops == 0 && used_cache)
            fprintf(
                r->o,
                "  GEMM peak (MFU's denominator): %.1f GFLOP/s on rank 0, the best of %d run%s on this CPU "
                "(--peak-cache %s; this run's probe: %.1f, best of %d %d^3 GEMMs on the %s path, %.2f s), "
                "%.1f GFLOP/s over %d rank%s (slowest rank %.1f)\n",
                r->peak_rank_gflops, runs, runs == 1 ? "" : "s", cache, pk.gflops, pk.reps, pk.size,
                r->gemm_path, pk.total_s, sum, r->world, r->world == 1 ? "" : "s", lo);
        else if (c->peak_gflops == 0)
            fprintf(
                r->o,
                "  GEMM peak (MFU's denominator): %.1f GFLOP/s on rank 0 (best of %d %d^3 GEMMs on the %s "
                "path, %.2f s; --peak-cache %s), %.1f GFLOP/s over %d rank%s (slowest rank %.1f)\n",
                r->peak_rank_gflops, pk.reps, pk.size, r->gemm_path, pk.total_s, cache ? cache : "off", sum,
                r->world, r->world == 1 ? "" : "s", lo);
        else if (c->peak_gflops > 0)
            fprintf(r->o, "  GEMM peak (MFU's denominator): --peak-gflops %g per rank, %.1f over %d rank%s\n",
                    c->peak_gflops, sum, r->world, r->world == 1 ? "" : "s");
        else
            fprintf(r->o, "  GEMM peak: not measured (--peak-gflops -1): no MFU\n");
        fprintf(r->o, "  model FLOPs per token (forward + backward, %s): %.4g\n",
                fsdp_model_get_config(r->rm.model)->family->name, r->flops_per_token);
    }
    free(cache);
    return FSDP_OK;
}

/* ---------------------------------------------------------------- SIGINT */

/* SIGINT (Ctrl-C) while a run or a sample is under way: recorded, and the work stops at its next agreed
 * point (fsdp_train_signal_stop) on every rank, so that a save in progress completes (no temporary is
 * left) and the output is flushed on the way out. SA_RESETHAND: a second one ends the process at once.
 * SIGTERM keeps its default: it is how launchers and schedulers end a rank, at once (Open MPI follows it
 * with SIGKILL after a second), also one blocked in a collective that would reach no agreed point;
 * output is line-buffered where it matters (the log's "saved" lines are flushed as they are printed). */
static volatile sig_atomic_t caught_signal;
static struct sigaction before_int;
static int catching;

static void on_signal(int sig) { caught_signal = sig; }

void fsdp_train_signals_catch(int on) {
    if (on && !catching) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART | SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        caught_signal = 0;
        sigaction(SIGINT, &sa, &before_int);
        /* a signal ignored when we started stays ignored (a shell's background job, nohup) */
        if (before_int.sa_handler == SIG_IGN) sigaction(SIGINT, &before_int, NULL);
        catching = 1;
    } else if (!on && catching) {
        sigaction(SIGINT, &before_int, NULL);
        catching = 0;
    }
}

fsdp_status fsdp_train_signal_stop(fsdp_comm_t *comm, const char *where) {
    const int sig = caught_signal;
    fsdp_status s = sig ? fsdp_set_error(FSDP_EIO, "stopped by SIGINT %s", where) : FSDP_OK;
    return comm ? fsdp_comm_agree(comm, s, "stopping on a signal") : s;
}
