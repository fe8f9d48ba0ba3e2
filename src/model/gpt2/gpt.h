/* gpt.h — the GPT-2 model's API is the installed header include/fsdp_gpt.h; this in-tree name stays
 * so that code including "model/gpt2/gpt.h" keeps building. */
#ifndef FSDP_MODEL_GPT_H
#define FSDP_MODEL_GPT_H
#include "fsdp_gpt.h"

/* gpt_forward with document ids doc int32 [B,T] (or NULL: gpt_forward itself), for the model-family
 * interface's packed batches (fsdp_model_batch.doc): a position attends only to earlier positions of its
 * row with the same id, and learned positions restart at 0 where the id changes. Library-internal. */
fsdp_status gpt_forward_doc(gpt_model_t *m, const int *tokens, const int *targets, const int *doc, int B,
                            int T, float *loss);
#endif
