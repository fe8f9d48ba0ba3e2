/* bench_gpt_flags.h — the GPT-2 shape flags the benches share (--layers --embd --heads --vocab). */
#ifndef FSDP_BENCH_GPT_FLAGS_H
#define FSDP_BENCH_GPT_FLAGS_H

#include "fsdp_gpt.h"

#include <stdlib.h>
#include <string.h>

/* Applies flag a with value v to gc when it is one of the shape flags: 1 if it was, else 0. */
static inline int bench_gpt_flag(gpt_config *gc, const char *a, const char *v) {
    if (!strcmp(a, "--layers"))
        gc->n_layer = atoi(v);
    else if (!strcmp(a, "--embd"))
        gc->n_embd = atoi(v);
    else if (!strcmp(a, "--heads"))
        gc->n_head = atoi(v);
    else if (!strcmp(a, "--vocab"))
        gc->vocab_size = atoi(v), gc->padded_vocab_size = 0;
    else
        return 0;
    return 1;
}

#endif
