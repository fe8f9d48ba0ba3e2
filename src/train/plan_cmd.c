/* plan_cmd.c — the memory plan of a run (fsdp_train_plan_compute), `--plan` and `--plan --fit`, and the
 * check of a run's plan against --mem-limit or the machine's memory. */
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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fsdp_status fsdp_train_plan_compute(const fsdp_train_config *c, int world, int threads, int have_val,
                                    fsdp_engine_t *eng, fsdp_plan *out) {
    if (c == NULL || out == NULL || world < 1 || threads < 1)
        return FSDP_ERR(FSDP_EINVAL, "plan: need a config, an output, world >= 1 and threads >= 1");
    if (c->batch % (c->micro_batches * world) != 0)
        return fsdp_set_error(FSDP_EINVAL, "--batch %d is not divisible by --micro-batches %d x %d ranks",
                              c->batch, c->micro_batches, world);
    fsdp_model_config mc;
    FSDP_TRY(fsdp_train_model_config(c, &mc));
    fsdp_model_units us;
    FSDP_TRY(fsdp_model_units_init(&us, &mc));
    /* Per rank and micro-batch: b sequences of T tokens (the loader's split). */
    const int b = c->batch / (c->micro_batches * world), T = c->seq_len;
    const size_t bt = (size_t)b * (size_t)T;
    fsdp_plan_config pc = fsdp_plan_config_default();
    pc.world = world;
    pc.engine = fsdp_train_engine_config(c);
    pc.backend = world > 1 ? FSDP_COMM_MPI : FSDP_COMM_SELF;
    /* The transports the engine's communicators really use; without an engine (--plan): one host. */
    fsdp_comm_t *sc = eng ? fsdp_engine_shard_comm(eng) : NULL,
                *rc = eng ? fsdp_engine_replica_comm(eng) : NULL;
    pc.shm = sc ? fsdp_comm_shm_active(sc) : 1;
    pc.shard_group = sc ? fsdp_comm_size(sc) : c->shard_group;
    pc.replica_shm = rc ? fsdp_comm_shm_active(rc) : 1;
    pc.n_micro = c->micro_batches;
    pc.steps = c->steps > 1 ? 2 : 1;    /* prefetch starts with the second step */
    pc.schedule = FSDP_PLAN_ROOT_WRAPS; /* every family's hook order: the root unit wraps the blocks */
    /* activation: the model's own (its arena and attention backward's scratch that lives beside it
     * during backward) and the trainer's input and target tokens (int32 [b, T] each), with --pack doc
     * their document ids too (--pack auto counts as concat before the data are opened). */
    pc.activation_bytes = fsdp_model_activation_bytes(&mc, b, T, threads) +
                          (size_t)(c->pack == FSDP_PACK_DOC ? 3 : 2) * bt * sizeof(int32_t);
    /* other: the GEMM workspace and the loaders' read buffers (b*T + 1 int32 each). */
    pc.other_bytes = fsdp_model_other_bytes(&mc, b, T, pc.engine.compute_dtype, pc.engine.freeze) +
                     (size_t)(have_val ? 2 : 1) * (bt + 1) * sizeof(int32_t);
    fsdp_status s = fsdp_plan_compute(us.units, us.n_units, &pc, out);
    fsdp_model_units_free(&us);
    return s;
}

/* The category of a plan with the largest predicted peak. */
static fsdp_mem_cat largest_category(const fsdp_plan *p) {
    int best = 0;
    for (int k = 1; k < FSDP_MEM_NCAT; k++)
        if (p->predicted.peak[k] > p->predicted.peak[best]) best = k;
    return (fsdp_mem_cat)best;
}

static const char *strategy_flag(int s) {
    static const char *const n[] = {"full", "grad-op", "none", "hybrid"};
    return s >= 0 && s < 4 ? n[s] : "?";
}

/* --plan --fit BYTES: the first setting, in this order of preference, whose per-rank plan total fits:
 * for the given --strategy then each more sharded one (none -> grad-op -> full, hybrid -> full), for
 * the given --recompute then on, the fewest --micro-batches that divide the per-rank batch (the largest
 * micro-batch). c gets the choice and *plan its plan; *tried counts the plans computed. Nothing fits:
 * FSDP_EINVAL naming the budget, the smallest plan tried and its largest category. */
static fsdp_status plan_fit(fsdp_train_config *c, int world, int threads, fsdp_plan *plan, int *tried) {
    int strategies[4], ns = 0;
    strategies[ns++] = c->strategy;
    if (c->strategy == FSDP_NO_SHARD) strategies[ns++] = FSDP_SHARD_GRAD_OP;
    if (c->strategy != FSDP_FULL_SHARD) strategies[ns++] = FSDP_FULL_SHARD;
    const int recs[2] = {c->recompute, 1}, nr = c->recompute ? 1 : 2;
    const int per_rank = c->batch / world; /* sequences per rank and step (checked: batch % world == 0) */
    fsdp_train_config best = *c;
    fsdp_plan smallest;
    size_t smallest_total = SIZE_MAX;
    *tried = 0;
    for (int si = 0; si < ns; si++)
        for (int ri = 0; ri < nr; ri++)
            for (int m = 1; m <= per_rank; m++) {
                if (per_rank % m != 0) continue;
                fsdp_train_config t = *c;
                t.strategy = strategies[si];
                t.recompute = recs[ri];
                t.micro_batches = m;
                fsdp_plan p;
                FSDP_TRY(fsdp_train_plan_compute(&t, world, threads, t.eval_every > 0, NULL, &p));
                ++*tried;
                if (p.predicted.total <= (size_t)c->fit) {
                    *c = t;
                    *plan = p;
                    return FSDP_OK;
                }
                if (p.predicted.total < smallest_total) {
                    smallest_total = p.predicted.total;
                    smallest = p;
                    best = t;
                }
            }
    const fsdp_mem_cat big = largest_category(&smallest);
    return fsdp_set_error(
        FSDP_EINVAL,
        "--fit %lld: no setting fits: the smallest plan (--micro-batches %d, --recompute %d, "
        "--strategy %s, %d rank%s) needs %zu B per rank, its largest category %s %zu B; "
        "lower --batch or --seq-len, a smaller model, or more ranks (--world)",
        (long long)c->fit, best.micro_batches, best.recompute, strategy_flag(best.strategy), world,
        world == 1 ? "" : "s", smallest_total, fsdp_mem_cat_name(big), smallest.predicted.peak[big]);
}

/* --plan on this rank (no collective: every rank computes the same, rank 0 prints and writes). */
static fsdp_status plan_local(const fsdp_train_config *cfg_in, fsdp_comm_t *comm, FILE *out) {
    fsdp_train_config cfg = *cfg_in;
    fsdp_train_config *c = &cfg;
    const int world = c->world > 0 ? c->world : fsdp_comm_size(comm);
    const int rank0 = fsdp_comm_rank(comm) == 0;
    c->world = world;
    FSDP_TRY(fsdp_train_resolve_config(c, world)); /* the run's own resolution of the vocabulary and checks */
    /* The threads a real run would use: --threads, else the cores split over the ranks (all on this
     * node when planning for a world other than the launcher's). */
    int threads = fsdp_train_threads(c, comm);
    if (c->threads == 0 && world != fsdp_comm_size(comm)) {
        threads = fsdp_train_threads(c, NULL) / world;
        if (threads < 1) threads = 1;
    }
    fsdp_plan plan;
    int tried = 0;
    FSDP_TRY(fsdp_gemm_set_mixed_compute((fsdp_mixed_compute)c->mixed_compute)); /* other: its workspace */
    const fsdp_train_config asked = *c;
    if (c->fit > 0)
        FSDP_TRY(plan_fit(c, world, threads, &plan, &tried));
    else
        FSDP_TRY(fsdp_train_plan_compute(c, world, threads, c->eval_every > 0, NULL, &plan));
    if (!rank0) return FSDP_OK;
    if (out && c->fit > 0)
        fprintf(out,
                "--fit %lld B per rank: --micro-batches %d --recompute %d --strategy %s fits (%zu B, %.1f%% "
                "of the "
                "budget; %d plan%s tried; asked: --micro-batches %d --recompute %d --strategy %s)\n",
                (long long)c->fit, c->micro_batches, c->recompute, strategy_flag(c->strategy),
                plan.predicted.total, 100.0 * (double)plan.predicted.total / (double)c->fit, tried,
                tried == 1 ? "" : "s", asked.micro_batches, asked.recompute, strategy_flag(asked.strategy));
    if (out) {
        fprintf(
            out,
            "fsdp-train --plan: %d layers, width %d, %d heads, vocab %d, seq-len %d, batch %d (%d per rank "
            "and micro-batch), %d thread%s per rank; nothing allocated\n",
            c->layers, c->width, c->heads, c->vocab, c->seq_len, c->batch,
            c->batch / (c->micro_batches * world), threads, threads == 1 ? "" : "s");
        FSDP_TRY(fsdp_plan_print(out, &plan, NULL));
        fprintf(out, "activation is an estimate; the rest is exact (other: the GEMM workspace with oneDNN's "
                     "scratchpad, sized on this CPU's kernels)\n");
        /* what a run would be refused for (fsdp_train_check_mem_limit): --mem-limit, else the machine's
         * memory shared by the ranks planned for on this host */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const int local = world != fsdp_comm_size(comm) ? world : fsdp_comm_local_size(comm);
        const double limit = c->mem_limit > 0                    ? (double)c->mem_limit
                             : pages > 0 && psz > 0 && local > 0 ? (double)pages * (double)psz / local
                                                                 : 0;
        if (limit > 0 && (double)plan.predicted.total > limit) {
            const fsdp_mem_cat big = largest_category(&plan);
            fprintf(out,
                    "note: this plan exceeds the %.0f B per rank %s: a run of it would be refused (largest "
                    "category %s, %zu B); --fit finds settings that fit\n",
                    limit, c->mem_limit > 0 ? "of --mem-limit" : "of the machine's memory",
                    fsdp_mem_cat_name(big), plan.predicted.peak[big]);
        }
    }
    if (c->report) FSDP_TRY(fsdp_train_write_report(c->report, &plan, NULL));
    return FSDP_OK;
}

fsdp_status fsdp_train_plan(const fsdp_train_config *cfg, fsdp_comm_t *comm, FILE *out) {
    fsdp_io_inputs_reset();
    return fsdp_comm_agree(comm, plan_local(cfg, comm, out), "--plan");
}

/* Before the model is allocated: the run's memory plan (one-host transports) against --mem-limit, or
 * the machine's physical memory shared by this host's ranks; refused naming the largest category. */
fsdp_status fsdp_train_check_mem_limit(train_run *r) {
    const fsdp_train_config *c = &r->cfg;
    fsdp_plan p;
    FSDP_TRY(fsdp_train_plan_compute(c, r->world, r->threads, r->have_val, NULL, &p));
    const int local = fsdp_comm_local_size(r->comm) > 0 ? fsdp_comm_local_size(r->comm) : 1;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double machine = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    const double limit = c->mem_limit > 0 ? (double)c->mem_limit : machine / local;
    if (limit <= 0 || (double)p.predicted.total <= limit) return FSDP_OK;
    const fsdp_mem_cat big = largest_category(&p);
    return fsdp_set_error(
        FSDP_EINVAL,
        "the memory plan of this run needs %zu B per rank, more than the %.0f B %s: its largest "
        "category is %s (%zu B); nothing was allocated. Try --micro-batches, --recompute, "
        "--strategy full or more ranks (`fsdp-train --plan --fit %.0f ...` finds settings "
        "that fit), or set --mem-limit",
        p.predicted.total, limit,
        c->mem_limit > 0 ? "of --mem-limit"
        : local > 1      ? "per rank of the machine's memory (shared by this host's ranks)"
                         : "of the machine's memory",
        fsdp_mem_cat_name(big), p.predicted.peak[big], limit);
}
