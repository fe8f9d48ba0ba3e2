/* hf.h — Hugging Face model folders as a starting point (`--init-from DIR`): DIR/config.json gives
 * the model's shape (configs this model cannot represent are refused, naming the field), and
 * DIR/model.safetensors or the shards named by DIR/model.safetensors.index.json give the weights.
 * Each rank reads only the elements of its own shards (and every file's header, to check config.json). */
#ifndef FSDP_TRAIN_HF_H
#define FSDP_TRAIN_HF_H

#include "fsdp.h"
#include "fsdp_model.h"
#include "train/config.h"

/* Reads DIR/config.json with the model family that claims its "architectures" (or "model_type") and
 * gives its model: FSDP_EFORMAT naming config.json and the field for anything that family cannot
 * represent, or when no family loads it; FSDP_EIO if it cannot be read. Then checks it against the
 * weights' safetensors headers (no tensor data read, nothing of the model's size allocated): every
 * tensor the config implies present with that shape, no other name; a difference is FSDP_EFORMAT
 * naming config.json, the field(s) whose value the shape disagrees with, the tensor and the file. */
fsdp_status fsdp_hf_model_config(const char *dir, fsdp_model_config *mc);
/* The same, as the trainer's settings (--model, --layers, --width, ... , --vocab, --max-seq-len). */
fsdp_status fsdp_hf_read_config(const char *dir, fsdp_train_config *cfg);

/* What one rank read: elements of the model's tensors it read (its shard's, the LM-head check not
 * counted) out of all of them (wte at the real vocabulary, no padding). */
typedef struct {
    uint64_t read_elems, model_elems;
} fsdp_hf_stats;

/* Collective: fills this rank's master shard of every unit of eng (the units of model mc, which must
 * be the model DIR/config.json describes) from DIR's safetensors through the family's tensor map
 * (fsdp_model_hf_map): transposed where the map says, fused tensors filled from their parts, padding 0,
 * F32/BF16/F16 widened to fp32 (a NaN or Inf refused naming the tensor and element); names with or
 * without the map's alt_prefix; a tied tensor absent or
 * equal to what it is tied to (checked on each rank's own rows); the map's skip names ignored; any other
 * name refused. Errors (agreed across ranks) name the file and the tensor. */
fsdp_status fsdp_hf_load(fsdp_engine_t *eng, const char *dir, const fsdp_model_config *mc,
                         fsdp_hf_stats *stats); /* stats may be NULL */

/* A fingerprint of DIR for the manifest: CRC32C over config.json, the index (when sharded) and every
 * safetensors file's header (its 8-byte length and JSON, not the tensor data, which would mean reading
 * the whole model on one rank). Changes when the folder's config, tensor list, shapes or offsets do. */
fsdp_status fsdp_hf_fingerprint(const char *dir, uint32_t *crc);

/* LoRA's projections of mc's family as PEFT names them (NULL-terminated): hf the module inside a layer
 * ("self_attn.q_proj", "attn.c_attn"), peft its target_modules name ("q_proj", "attn.c_proj"), ours the
 * adapter tensors' suffix (lora_a_<ours>, lora_b_<ours>), bit its FSDP_LORA_* bit. */
typedef struct {
    const char *hf, *peft, *ours;
    int bit;
} fsdp_hf_lora_module;
const fsdp_hf_lora_module *fsdp_hf_lora_modules(const fsdp_model_config *mc);
/* What PEFT's tensor names start with before the layer index ("base_model.model.model.layers."). */
const char *fsdp_hf_lora_prefix(const fsdp_model_config *mc);
/* mc's targeted projections (FSDP_LORA_* bits; 0 without LoRA; the family's all for 0). */
int fsdp_hf_lora_targets(const fsdp_model_config *mc);

/* Collective: the LoRA adapters of a PEFT folder (DIR/adapter_config.json, DIR/adapter_model.safetensors)
 * into eng's model mc (lora_rank > 0): its config must be LORA with mc's r, lora_alpha and
 * target_modules, no bias, DoRA or rsLoRA (fan_in_fan_out for GPT-2's Conv1D only); every targeted
 * projection's lora_A / lora_B of every layer present with its shape, and nothing else in the file. Errors
 * name the file and the field or tensor; nothing is loaded unless everything checks. */
fsdp_status fsdp_hf_load_adapter(fsdp_engine_t *eng, const char *dir, const fsdp_model_config *mc);

#endif
