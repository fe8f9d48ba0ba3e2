/* bench_step_comm.c — the communication of one training step with no compute: the all-gathers and
 * reduce-scatters a GPT-2-shaped model's units issue per step under FULL_SHARD / SHARD_GRAD_OP, in the
 * engine's order, back to back. Its step time is the "communication-only" time that the overlap of a
 * real step is judged against (bench/hosts_bench.sh puts it beside the compute-only time).
 *
 *   tests/mpirun.sh 2 build/bench/bench_step_comm [--layers L --embd C --heads H --vocab V --max-seq T]
 *       [--precision mixed|fp32] [--strategy full|grad-op] [--reduce-dtype f32|bf16] [--steps N (3)]
 *       [--max-inflight K (2)]
 *
 * Per step, as the engine does it (docs/DESIGN.md, "Unit lifecycle"): forward all-gathers unit 0 (the
 * root: wte = LM head, wpe, ln_f) and every block in order; backward, blocks in reverse, all-gathers
 * each block again (full only; the root stays gathered, and so do the first K blocks backward needs,
 * kept from forward) and reduce-scatters its fp32 (or bf16)
 * gradient; the root's reduce-scatter comes last. Parameters travel in the compute dtype (bf16 for
 * mixed). Up to K+1 collectives are in flight (K = 0: one at a time), each waited in issue order.
 * Buffers are the engine's padded flat sizes (fsdp_plan_unit_layout), allocated once.
 *
 * Prints, on rank 0: mean seconds per step over steps 2..N (step 1 warms the transport up), bytes each
 * rank sends per step (the (W-1)/W share of every collective), and the CPU this process and the whole
 * machine used per step (getrusage; /proc/stat busy jiffies): on namespace hosts that share one
 * machine's cores, the second says how much compute time the kernel's network work would take. */
#include "fsdp.h"
#include "bench_gpt_flags.h"
#include "fsdp_gpt.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
    gpt_config gc;
    fsdp_dtype pdt, rdt;
    int grad_op, steps, inflight;
} opts;

static int parse(opts *o, int argc, char **argv) {
    o->gc = gpt_config_default();
    o->pdt = FSDP_BF16, o->rdt = FSDP_F32, o->grad_op = 0, o->steps = 3, o->inflight = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (v == NULL) {
            fprintf(stderr, "bench_step_comm: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (bench_gpt_flag(&o->gc, a, v))
            ;
        else if (!strcmp(a, "--max-seq"))
            o->gc.max_seq_len = atoi(v);
        else if (!strcmp(a, "--precision") && (!strcmp(v, "mixed") || !strcmp(v, "fp32")))
            o->pdt = !strcmp(v, "fp32") ? FSDP_F32 : FSDP_BF16;
        else if (!strcmp(a, "--strategy") && (!strcmp(v, "full") || !strcmp(v, "grad-op")))
            o->grad_op = !strcmp(v, "grad-op");
        else if (!strcmp(a, "--reduce-dtype") && (!strcmp(v, "f32") || !strcmp(v, "bf16")))
            o->rdt = !strcmp(v, "bf16") ? FSDP_BF16 : FSDP_F32;
        else if (!strcmp(a, "--steps"))
            o->steps = atoi(v);
        else if (!strcmp(a, "--max-inflight"))
            o->inflight = atoi(v);
        else {
            fprintf(stderr, "bench_step_comm: bad option %s %s\n", a, v);
            return -1;
        }
    }
    if (o->steps < 2 || o->inflight < 0 || o->inflight > 64) {
        fprintf(stderr, "bench_step_comm: --steps must be >= 2 and --max-inflight in [0, 64]\n");
        return -1;
    }
    if (gpt_config_validate(&o->gc) != FSDP_OK) {
        fprintf(stderr, "bench_step_comm: %s\n", fsdp_last_error());
        return -1;
    }
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) { /* this process: user + system */
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + 1e-6 * (double)r.ru_utime.tv_usec + (double)r.ru_stime.tv_sec +
           1e-6 * (double)r.ru_stime.tv_usec;
}

static double machine_busy_s(void) { /* every core, every namespace: non-idle jiffies in seconds */
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6], &v[7])
              : 0;
    if (f) fclose(f);
    if (n < 4) return 0.0;
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* minus idle and iowait */
    return (double)busy / 100.0;                                       /* USER_HZ */
}

/* The in-flight window: issue order = wait order. */
typedef struct {
    fsdp_comm_req_t *q[65];
    int head, n, cap;
} window;

static fsdp_status win_wait_one(window *w) {
    fsdp_status st = fsdp_comm_wait(w->q[w->head]);
    w->head = (w->head + 1) % 65;
    w->n--;
    return st;
}

static fsdp_status win_push(window *w, fsdp_comm_req_t *r) {
    w->q[(w->head + w->n) % 65] = r;
    w->n++;
    return w->n > w->cap ? win_wait_one(w) : FSDP_OK;
}

static fsdp_status win_drain(window *w) {
    fsdp_status st = FSDP_OK;
    while (w->n > 0) {
        fsdp_status s = win_wait_one(w);
        if (st == FSDP_OK) st = s;
    }
    return st;
}

static fsdp_status gather(fsdp_comm_t *c, window *w, void *full, size_t shard, fsdp_dtype t, size_t *bytes) {
    fsdp_comm_req_t *r = NULL;
    int W = fsdp_comm_size(c);
    size_t es = fsdp_dtype_size(t);
    *bytes += (size_t)(W - 1) * shard * es;
    FSDP_TRY(
        fsdp_comm_iall_gather(c, (char *)full + (size_t)fsdp_comm_rank(c) * shard * es, full, shard, t, &r));
    return win_push(w, r);
}

static fsdp_status reduce(fsdp_comm_t *c, window *w, void *grad, size_t shard, fsdp_dtype t, size_t *bytes) {
    fsdp_comm_req_t *r = NULL;
    *bytes += (size_t)(fsdp_comm_size(c) - 1) * shard * fsdp_dtype_size(t);
    FSDP_TRY(fsdp_comm_ireduce_scatter(c, grad, grad, shard, t, FSDP_SUM, &r));
    return win_push(w, r);
}

static fsdp_status run(const opts *o, fsdp_comm_t *c) {
    int W = fsdp_comm_size(c), rank = fsdp_comm_rank(c), U = o->gc.n_layer + 1;
    gpt_units in;
    FSDP_TRY(gpt_units_init(&in, &o->gc));
    fsdp_status st = FSDP_OK;
    size_t align = fsdp_engine_config_default().align, *padded = calloc((size_t)U, sizeof *padded);
    void **full = calloc((size_t)U, sizeof *full), **grad = calloc((size_t)U, sizeof *grad);
    if (!padded || !full || !grad) st = FSDP_ERR(FSDP_ENOMEM, "bench_step_comm: out of memory");
    for (int u = 0; st == FSDP_OK && u < U; u++) {
        st = fsdp_plan_unit_layout(&in.units[u], align, W, NULL, &padded[u]);
        if (st == FSDP_OK) {
            full[u] = calloc(padded[u], fsdp_dtype_size(o->pdt));
            grad[u] = calloc(padded[u], fsdp_dtype_size(o->rdt));
            if (!full[u] || !grad[u]) st = FSDP_ERR(FSDP_ENOMEM, "bench_step_comm: out of memory");
        }
    }
    window w = {.cap = o->inflight + 1};
    double t_sum = 0, cpu_sum = 0, busy_sum = 0;
    size_t bytes = 0;
    for (int s = 0; st == FSDP_OK && s < o->steps; s++) {
        st = fsdp_comm_barrier(c);
        double t0 = now_s(), c0 = cpu_s(), b0 = machine_busy_s();
        size_t b = 0;
        for (int u = 0; st == FSDP_OK && u < U; u++)
            st = gather(c, &w, full[u], padded[u] / W, o->pdt, &b);
        for (int u = U - 1; st == FSDP_OK && u >= 1; u--) {
            /* the first max_inflight blocks of backward stay gathered from forward (lifecycle.c) */
            int kept = U - 1 - u < o->inflight;
            if (!o->grad_op && !kept) st = gather(c, &w, full[u], padded[u] / W, o->pdt, &b);
            if (st == FSDP_OK) st = reduce(c, &w, grad[u], padded[u] / W, o->rdt, &b);
        }
        if (st == FSDP_OK) st = reduce(c, &w, grad[0], padded[0] / W, o->rdt, &b);
        fsdp_status d = win_drain(&w);
        if (st == FSDP_OK) st = d;
        if (st == FSDP_OK) st = fsdp_comm_barrier(c);
        double t = now_s() - t0;
        if (s > 0) t_sum += t, cpu_sum += cpu_s() - c0, busy_sum += machine_busy_s() - b0;
        bytes = b;
    }
    if (st == FSDP_OK && rank == 0) {
        int n = o->steps - 1;
        printf("# bench_step_comm: %d ranks (%s), GPT-2 L %d C %d V %d Tmax %d, %s params, %s gradients, %s, "
               "max-inflight %d\n",
               W, fsdp_comm_backend_name(c), o->gc.n_layer, o->gc.n_embd, o->gc.vocab_size, o->gc.max_seq_len,
               fsdp_dtype_name(o->pdt), fsdp_dtype_name(o->rdt), o->grad_op ? "grad-op" : "full",
               o->inflight);
        printf(
            "comm-only step: %.3f s (mean of steps 2..%d); sent per rank per step %.1f MB; rank 0 CPU %.3f s "
            "per step; machine busy %.3f core-s per step\n",
            t_sum / n, o->steps, (double)bytes / 1e6, cpu_sum / n, busy_sum / n);
    }
    for (int u = 0; u < U && full && grad; u++)
        free(full[u]), free(grad[u]);
    free(full), free(grad), free(padded);
    gpt_units_free(&in);
    return st;
}

int main(int argc, char **argv) {
    opts o;
    int p = parse(&o, argc, argv);
    if (p != 0) {
        fprintf(
            p > 0 ? stdout : stderr,
            "usage: %s [--layers L --embd C --heads H --vocab V --max-seq T] [--precision mixed|fp32] "
            "[--strategy full|grad-op] [--reduce-dtype f32|bf16] [--steps N (3)] [--max-inflight K (2)]\n",
            argv[0]);
        return p > 0 ? 0 : 2;
    }
    fsdp_comm_t *c = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&c, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "bench_step_comm: %s\n", fsdp_last_error());
        return 1;
    }
    fsdp_status st = run(&o, c);
    if (st != FSDP_OK) {
        fprintf(stderr, "bench_step_comm rank %d: %s\n", fsdp_comm_rank(c), fsdp_last_error());
        fsdp_comm_abort(c, 1);
    }
    fsdp_comm_free(c);
    return st == FSDP_OK ? 0 : 1;
}
