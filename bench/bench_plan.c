/* bench_plan.c — the memory plan for a GPT-2-shaped model: a table of predicted per-rank peaks for
 * every strategy, main_grad policy and accumulation mode at several world sizes, beside the ZeRO
 * (2+2+12)·psi/N reference (no model is allocated); and with --measure, one real training step of a
 * gpt model on this communicator (run under mpirun) with predicted vs measured peaks, max over ranks.
 *
 *   build/bench/bench_plan [--layers L --embd C --heads H --vocab V --seq T --max-seq TMAX --batch B
 *                           --micro M --compute f32|bf16 --recompute 0|1 --worlds 1,2,4]
 * (--batch: sequences per rank and micro-batch; --max-seq: the position table, default --seq)
 *   tests/mpirun.sh 2 build/bench/bench_plan --measure --layers 2 --embd 64 --heads 4 --vocab 512 --seq 64
 *       [--strategy full_shard|shard_grad_op|no_shard] [--main-grad lazy|eager] [--accum sharded|no_sync]
 *       [--steps N (2)] [--max-inflight K (2)] [--trace FILE] [--report FILE.json]
 * --measure exits 1 if master, optim, grad_shard, param_full or main_grad differ from the plan. */
#include "fsdp.h"
#include "bench_gpt_flags.h"
#include "model/gpt2/gpt.h"

#include <stdlib.h>
#include <string.h>

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

typedef struct {
    gpt_config gc;
    int B, T, n_micro, measure;
    const char *trace, *report; /* --measure: Chrome-trace file, JSON report (rank 0) */
    fsdp_dtype compute;
    fsdp_strategy strategy;          /* --measure only */
    fsdp_main_grad_policy main_grad; /* --measure only */
    fsdp_accum_mode accum;           /* --measure only */
    int steps, max_inflight;         /* --measure: steps run; the engine's overlap depth */
    int worlds[8], n_worlds;
} opts;

static int parse(opts *o, int argc, char **argv) {
    o->gc = gpt_config_default();
    o->trace = o->report = NULL;
    o->B = 4, o->T = 1024, o->n_micro = 1, o->measure = 0, o->compute = FSDP_BF16;
    o->strategy = FSDP_FULL_SHARD, o->main_grad = FSDP_MAIN_GRAD_LAZY, o->accum = FSDP_ACCUM_SHARDED;
    o->worlds[0] = 1, o->worlds[1] = 2, o->worlds[2] = 4, o->n_worlds = 3;
    o->steps = 2, o->max_inflight = fsdp_engine_config_default().max_inflight;
    int max_seq = 0; /* the position table; 0: --seq */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--measure")) {
            o->measure = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "bench_plan: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (bench_gpt_flag(&o->gc, a, v))
            ;
        else if (!strcmp(a, "--seq"))
            o->T = atoi(v);
        else if (!strcmp(a, "--max-seq"))
            max_seq = atoi(v);
        else if (!strcmp(a, "--batch"))
            o->B = atoi(v);
        else if (!strcmp(a, "--micro"))
            o->n_micro = atoi(v);
        else if (!strcmp(a, "--recompute"))
            o->gc.recompute = atoi(v);
        else if (!strcmp(a, "--compute"))
            o->compute = !strcmp(v, "f32") ? FSDP_F32 : FSDP_BF16;
        else if (!strcmp(a, "--strategy"))
            o->strategy = !strcmp(v, "no_shard")        ? FSDP_NO_SHARD
                          : !strcmp(v, "shard_grad_op") ? FSDP_SHARD_GRAD_OP
                                                        : FSDP_FULL_SHARD;
        else if (!strcmp(a, "--main-grad"))
            o->main_grad = !strcmp(v, "eager") ? FSDP_MAIN_GRAD_EAGER : FSDP_MAIN_GRAD_LAZY;
        else if (!strcmp(a, "--accum"))
            o->accum = !strcmp(v, "no_sync") ? FSDP_ACCUM_NO_SYNC : FSDP_ACCUM_SHARDED;
        else if (!strcmp(a, "--steps"))
            o->steps = atoi(v);
        else if (!strcmp(a, "--max-inflight"))
            o->max_inflight = atoi(v);
        else if (!strcmp(a, "--trace"))
            o->trace = v;
        else if (!strcmp(a, "--report"))
            o->report = v;
        else if (!strcmp(a, "--worlds")) {
            o->n_worlds = 0;
            for (char *s = (char *)v; *s && o->n_worlds < 8;) {
                o->worlds[o->n_worlds++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
                else
                    break;
            }
        } else {
            fprintf(stderr, "bench_plan: unknown option %s\n", a);
            return -1;
        }
    }
    o->gc.max_seq_len = max_seq > 0 ? max_seq : o->T;
    if (o->T > o->gc.max_seq_len) {
        fprintf(stderr, "bench_plan: --seq %d is longer than --max-seq %d\n", o->T, o->gc.max_seq_len);
        return -1;
    }
    if (gpt_config_validate(&o->gc) != FSDP_OK) {
        fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
        return -1;
    }
    return 0;
}

/* The table: every strategy x main_grad x accum at each world size; no model allocated. */
static int table(const opts *o) {
    gpt_units in;
    if (gpt_units_init(&in, &o->gc) != FSDP_OK) {
        fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
        return 1;
    }
    size_t act = gpt_activation_bytes(&o->gc, o->B, o->T),
           other = gpt_other_bytes(&o->gc, o->B, o->T, o->compute);
    printf("GPT-2 shape: L %d, C %d, V %d, T %d, batch %d, %d micro-batch(es), compute %s, recompute %d; "
           "activations %.1f MiB (gpt_activation_bytes), GEMM workspace %.1f MiB (gpt_other_bytes, with "
           "oneDNN's scratchpad)\n\n",
           o->gc.n_layer, o->gc.n_embd, o->gc.vocab_size, o->T, o->B, o->n_micro, fsdp_dtype_name(o->compute),
           o->gc.recompute, mib(act), mib(other));
    printf(
        "| ranks | strategy | main_grad | accum | master+optim+grad MiB | param_full MiB | main_grad MiB | "
        "activation MiB | total MiB | ZeRO (2+2+12)psi/N MiB | model states / ZeRO | total / ZeRO |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const char *sn[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
    for (int wi = 0; wi < o->n_worlds; wi++)
        for (int s = 0; s < 3; s++)
            for (int mg = 0; mg < 2; mg++)
                for (int ac = 0; ac < 2; ac++) {
                    fsdp_plan_config pc = fsdp_plan_config_default();
                    pc.world = o->worlds[wi];
                    pc.engine.strategy = (fsdp_strategy)s;
                    pc.engine.compute_dtype = o->compute;
                    pc.engine.main_grad = (fsdp_main_grad_policy)mg;
                    pc.engine.accum = (fsdp_accum_mode)ac;
                    pc.n_micro = o->n_micro;
                    pc.activation_bytes = act;
                    pc.other_bytes = other;
                    fsdp_plan p;
                    if (fsdp_plan_compute(in.units, o->gc.n_layer + 1, &pc, &p) != FSDP_OK) {
                        fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
                        gpt_units_free(&in);
                        return 1;
                    }
                    const size_t *k = p.predicted.peak;
                    size_t states = k[FSDP_MEM_MASTER] + k[FSDP_MEM_OPTIM] + k[FSDP_MEM_GRAD_SHARD];
                    printf("| %d | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f |\n",
                           pc.world, sn[s], mg ? "EAGER" : "LAZY", ac ? "NO_SYNC" : "SHARDED", mib(states),
                           mib(k[FSDP_MEM_PARAM_FULL]), mib(k[FSDP_MEM_MAIN_GRAD]),
                           mib(k[FSDP_MEM_ACTIVATION]), mib(p.predicted.total), mib(p.zero_ref_bytes),
                           (double)states / (double)p.zero_ref_bytes,
                           (double)p.predicted.total / (double)p.zero_ref_bytes);
                }
    gpt_units_free(&in);
    return 0;
}

/* One real step of a gpt model on this communicator: predicted vs measured (max over ranks). */
static int measure(const opts *o, int *argc, char ***argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, argc, argv) != FSDP_OK) {
        fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
        return 1;
    }
    int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm), bad = 0;
    gpt_units in;
    fsdp_engine_t *eng = NULL;
    gpt_model_t *m = NULL;
    int *tok = NULL;
    if (gpt_units_init(&in, &o->gc) != FSDP_OK) {
        fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
        fsdp_comm_free(comm);
        return 1;
    }
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = o->compute;
    ec.strategy = o->strategy;
    ec.main_grad = o->main_grad;
    ec.accum = o->accum;
    ec.max_inflight = o->max_inflight;
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = world;
    pc.engine = ec;
    pc.backend = strcmp(fsdp_comm_backend_name(comm), "mpi") == 0 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    pc.shm = fsdp_comm_shm_active(comm);
    pc.n_micro = o->n_micro;
    pc.steps = o->steps > 1 ? 2 : 1;
    pc.activation_bytes = gpt_activation_bytes(&o->gc, o->B, o->T);
    pc.other_bytes = gpt_other_bytes(&o->gc, o->B, o->T, o->compute);
    fsdp_plan plan;
    fsdp_status st = fsdp_plan_compute(in.units, o->gc.n_layer + 1, &pc, &plan);
    fsdp_mem_reset_peaks();
    if (st == FSDP_OK) st = fsdp_engine_init(&eng, comm, &ec);
    if (st == FSDP_OK) st = gpt_init(&m, eng, &o->gc);
    if (st == FSDP_OK) st = fsdp_engine_init_params(eng);
    for (int i = 0; st == FSDP_OK && i <= o->gc.n_layer; i++) { /* the plan's layout is the engine's */
        size_t padded = 0;
        fsdp_plan_unit_layout(&in.units[i], ec.align, world, NULL, &padded);
        if (padded != fsdp_unit_padded_numel(fsdp_engine_unit(eng, i))) {
            fprintf(stderr, "bench_plan: unit %d layout differs from gpt.c's\n", i);
            bad = 1;
        }
    }
    size_t N = (size_t)o->B * (size_t)o->T;
    tok = malloc(2 * N * sizeof *tok);
    if (tok == NULL) st = FSDP_ENOMEM;
    for (size_t i = 0; tok && i < 2 * N; i++)
        tok[i] = (int)((i * 7919u + (size_t)rank * 104729u) % (size_t)o->gc.vocab_size);
    if (st == FSDP_OK && o->trace) st = fsdp_comm_barrier(comm); /* a common time origin, roughly */
    if (st == FSDP_OK && o->trace) st = fsdp_trace_enable(rank);
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    for (int s = 0; s < o->steps; s++) {
        if (st == FSDP_OK) st = fsdp_engine_begin_step(eng, o->n_micro);
        for (int mi = 0; st == FSDP_OK && mi < o->n_micro; mi++) {
            float loss;
            st = fsdp_engine_begin_micro(eng, mi);
            if (st == FSDP_OK) st = gpt_forward(m, tok, tok + N, o->B, o->T, &loss);
            if (st == FSDP_OK) st = gpt_backward(m, 1.0f);
        }
        float norm;
        if (st == FSDP_OK) st = fsdp_engine_clip_grad_norm(eng, 1.0f, &norm);
        if (st == FSDP_OK) st = fsdp_engine_adamw_step(eng, &oc);
    }
    fsdp_trace_disable();
    if (st == FSDP_OK && o->trace) st = fsdp_trace_write(o->trace, comm); /* collective */
    if (st != FSDP_OK) {
        fprintf(stderr, "bench_plan rank %d: %s\n", rank, fsdp_last_error());
        fsdp_comm_abort(comm, 1);
    }
    fsdp_mem_peaks meas;
    fsdp_mem_peaks_local(&meas);
    if (fsdp_mem_peaks_max(comm, &meas) != FSDP_OK) bad = 1;
    if (rank == 0) {
        fsdp_plan_print(stdout, &plan, &meas);
        if (o->report && fsdp_plan_write_json(o->report, &plan, &meas) != FSDP_OK) {
            fprintf(stderr, "bench_plan: %s\n", fsdp_last_error());
            bad = 1;
        }
        const fsdp_mem_cat exact[] = {FSDP_MEM_MASTER, FSDP_MEM_OPTIM, FSDP_MEM_GRAD_SHARD,
                                      FSDP_MEM_PARAM_FULL, FSDP_MEM_MAIN_GRAD};
        for (int k = 0; k < 5; k++)
            if (meas.peak[exact[k]] != plan.predicted.peak[exact[k]]) {
                fprintf(stderr, "bench_plan: %s measured %zu, predicted %zu\n", fsdp_mem_cat_name(exact[k]),
                        meas.peak[exact[k]], plan.predicted.peak[exact[k]]);
                bad = 1;
            }
    }
    free(tok);
    fsdp_trace_free();
    gpt_free(m);
    fsdp_engine_free(eng);
    gpt_units_free(&in);
    fsdp_comm_free(comm);
    return bad;
}

int main(int argc, char **argv) {
    opts o;
    if (parse(&o, argc, argv) != 0) return 2;
    return o.measure ? measure(&o, &argc, &argv) : table(&o);
}
