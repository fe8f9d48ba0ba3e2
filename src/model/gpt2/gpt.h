/* gpt.h — the GPT-2 model's API is the installed header include/fsdp_gpt.h; this in-tree name stays
 * so that code including "model/gpt2/gpt.h" keeps building. */
#ifndef FSDP_MODEL_GPT_H
#define FSDP_MODEL_GPT_H
#include "fsdp_gpt.h"
#endif
