/* gpt.h — GPT-2 inside the library: its block table for the decoder driver (gpt.c) and what
 * gpt2_family.c takes from it. The GPT-2 API that programs use is include/fsdp_gpt.h (gpt_api.c, a thin
 * layer over include/fsdp_model.h); the config, units and tensor indices it declares live in gpt.c. */
#ifndef FSDP_MODEL_GPT_H
#define FSDP_MODEL_GPT_H
#include "fsdp_gpt.h"
#include "fsdp_model.h"
#include "model/decoder.h"

extern const fsdp_block_table fsdp_gpt2_blocks;

/* c with padded_vocab_size 0 resolved (V rounded up to 128), as gpt_get_config shows it. */
gpt_config gpt_config_resolve(const gpt_config *c);

/* Bytes in category other (the GEMM workspace and the short-lived buffers beside it) for (B, T)
 * batches of the GPT-2 config c on the path compute dtype `compute` takes. */
size_t gpt2_other_bytes(const fsdp_model_config *c, int B, int T, fsdp_dtype compute, const char *freeze);
#endif
