/* prof.c — per-kernel-class exclusive time (prof.h): a thread-local chain of open scopes, totals in
 * atomic nanosecond counters so any thread may add to them. */
#include "core/prof.h"

#include "core/core.h"

#include <stdatomic.h>

static _Atomic uint64_t pr_ns[FSDP_PROF_NCLASS], pr_calls[FSDP_PROF_NCLASS];
static _Thread_local fsdp_prof_scope *pr_top; /* innermost open scope of this thread */

void fsdp_prof_enter(fsdp_prof_scope *s, fsdp_prof_class cls) {
    s->parent = pr_top;
    s->child_s = 0.0;
    s->cls = (int)cls;
    pr_top = s;
    s->t0 = fsdp_time_s();
}

void fsdp_prof_leave(fsdp_prof_scope *s) {
    double dt = fsdp_time_s() - s->t0, own = dt - s->child_s;
    if (own < 0) own = 0;
    if (s->cls >= 0 && s->cls < FSDP_PROF_NCLASS) {
        atomic_fetch_add_explicit(&pr_ns[s->cls], (uint64_t)(own * 1e9), memory_order_relaxed);
        atomic_fetch_add_explicit(&pr_calls[s->cls], 1, memory_order_relaxed);
    }
    pr_top = s->parent;
    if (pr_top) pr_top->child_s += dt;
}

void fsdp_prof_get(fsdp_prof_counts *out) {
    for (int c = 0; c < FSDP_PROF_NCLASS; c++) {
        out->seconds[c] = (double)atomic_load_explicit(&pr_ns[c], memory_order_relaxed) * 1e-9;
        out->calls[c] = atomic_load_explicit(&pr_calls[c], memory_order_relaxed);
    }
}

void fsdp_prof_reset(void) {
    for (int c = 0; c < FSDP_PROF_NCLASS; c++) {
        atomic_store_explicit(&pr_ns[c], 0, memory_order_relaxed);
        atomic_store_explicit(&pr_calls[c], 0, memory_order_relaxed);
    }
}

const char *fsdp_prof_class_name(fsdp_prof_class c) {
    static const char *const names[FSDP_PROF_NCLASS] = {"gemm_f32", "gemm_bf16", "attention",  "layernorm",
                                                        "gelu",     "residual",  "softmax_ce", "encoder",
                                                        "adamw",    "cast",      "comm"};
    return (int)c >= 0 && c < FSDP_PROF_NCLASS ? names[c] : "?";
}
