/* hf.h — Hugging Face GPT-2 model folders as a starting point (`--init-from DIR`): DIR/config.json gives
 * the model's shape (configs this model cannot represent are refused, naming the field), and
 * DIR/model.safetensors or the shards named by DIR/model.safetensors.index.json give the weights.
 * Each rank reads only the elements of its own shards, and opens only the files that hold them. */
#ifndef FSDP_TRAIN_HF_H
#define FSDP_TRAIN_HF_H

#include "fsdp.h"
#include "train/config.h"

/* Reads DIR/config.json and sets cfg's model shape: layers, width, heads, vocab, max-seq-len
 * (= n_positions). FSDP_EFORMAT naming config.json and the field for anything this GPT-2 cannot
 * represent (model_type, activation_function, n_inner, layer_norm_epsilon, the attention scale
 * settings, cross-attention, a vocabulary over 65536); FSDP_EIO if it cannot be read. */
fsdp_status fsdp_hf_read_config(const char *dir, fsdp_train_config *cfg);

/* What one rank read: elements of the model's tensors it read (its shard's, the LM-head check not
 * counted) out of all of them (wte at the real vocabulary, no padding). */
typedef struct {
    uint64_t read_elems, model_elems;
} fsdp_hf_stats;

/* Collective: fills this rank's master shard of every unit of eng (gpt_init's units: "root",
 * "h0".."h<L-1>") from DIR's safetensors: Conv1D weights transposed to (out, in), wte's padded rows
 * and every padding element 0, F32/BF16/F16 widened to fp32. Tensor names with or without the
 * "transformer." prefix; "lm_head.weight" absent or equal to wte (checked on each rank's own rows);
 * the attention-mask buffers of older files ("attn.bias", "attn.masked_bias") ignored; any other
 * name refused. Errors (agreed across ranks) name the file and the tensor. */
fsdp_status fsdp_hf_load(fsdp_engine_t *eng, const char *dir, fsdp_hf_stats *stats); /* stats may be NULL */

/* A fingerprint of DIR for the manifest: CRC32C over config.json, the index (when sharded) and every
 * safetensors file's header (its 8-byte length and JSON, not the tensor data, which would mean reading
 * the whole model on one rank). Changes when the folder's config, tensor list, shapes or offsets do. */
fsdp_status fsdp_hf_fingerprint(const char *dir, uint32_t *crc);

#endif
