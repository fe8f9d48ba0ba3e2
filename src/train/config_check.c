/* config_check.c — the consistency checks of a parsed fsdp-train command line (config.h,
 * fsdp_train_config_check): each message names its flags. The flag table and its parsing are config.c. */
#include "train/config.h"

#include "core/core.h"
#include "data/chat.h"
#include "data/pack.h"
#include "fsdp_model.h"
#include "train/toml_read.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

fsdp_status fsdp_train_config_check(fsdp_train_config *c, int world) {
    switch (c->cmd) {
    case FSDP_CMD_TRAIN:
        if (c->width % c->heads != 0 && c->head_dim == 0)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--width %d is not divisible by --heads %d: pick a width that is", c->width,
                                  c->heads);
        if (c->max_seq_len == 0) c->max_seq_len = c->seq_len;
        if (c->seq_len > c->max_seq_len)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--seq-len %d is longer than --max-seq-len %d (the position table)",
                                  c->seq_len, c->max_seq_len);
        if (c->vocab == 1)
            return fsdp_set_error(FSDP_EINVAL, "--vocab 1 is too small: a model needs at least 2");
        if (c->batch % c->micro_batches != 0)
            return fsdp_set_error(FSDP_EINVAL, "--batch %d is not divisible by --micro-batches %d", c->batch,
                                  c->micro_batches);
        if (c->shard_group > 0 && c->strategy != FSDP_HYBRID_SHARD)
            return fsdp_set_error(FSDP_EINVAL, "--shard-group %d needs --strategy hybrid", c->shard_group);
        if (c->shard_group > 0 && world > 0 && world % c->shard_group != 0)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--shard-group %d does not divide the world size %d: every group must have "
                                  "the same number of ranks",
                                  c->shard_group, world);
        if (world > 0 && c->batch % (c->micro_batches * world) != 0)
            return fsdp_set_error(
                FSDP_EINVAL,
                "--batch %d is not divisible by --micro-batches %d x %d ranks = %d: every rank "
                "needs the same whole number of sequences per micro-batch",
                c->batch, c->micro_batches, world, c->micro_batches * world);
        if (c->stop_at > c->steps)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--stop-at %d is beyond --steps %d: the run would end at --steps first",
                                  c->stop_at, c->steps);
        if (c->min_lr > c->lr)
            return fsdp_set_error(FSDP_EINVAL, "--min-lr %g is above --lr %g", c->min_lr, c->lr);
        if (c->init_adapter && c->lora_rank <= 0)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--init-adapter %s needs --lora-rank (its adapter_config.json's r)",
                                  c->init_adapter);
        if (c->init_adapter && c->resume)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--init-adapter starts a run; --resume continues the checkpoint's "
                                  "adapters: pass one");
        if (c->world > 0 && world > 0 && c->world != world)
            return fsdp_set_error(
                FSDP_EINVAL,
                "--world %d but %d rank%s running: --world is for --plan (or must equal the "
                "launcher's number of ranks)",
                c->world, world, world == 1 ? " is" : "s are");
        if (!c->checkpoint_dir && c->resume)
            return fsdp_set_error(FSDP_EINVAL, "--resume needs --checkpoint-dir");
        if (c->fit > 0 && !c->plan)
            return fsdp_set_error(FSDP_EINVAL, "--fit %lld needs --plan (it solves the memory plan)",
                                  (long long)c->fit);
        if (c->keep_every > 0 && c->keep_last == 0)
            return fsdp_set_error(FSDP_EINVAL,
                                  "--keep-every %d needs --keep-last K: without it every checkpoint is kept",
                                  c->keep_every);
        break;
    case FSDP_CMD_PREPARE:
        if (c->n_texts == 0 && !c->jsonl)
            return fsdp_set_error(FSDP_EINVAL, "prepare needs --text FILE... or --jsonl FILE");
        if (c->n_texts > 0 && c->jsonl)
            return fsdp_set_error(FSDP_EINVAL, "prepare takes --text or --jsonl, not both");
        if (c->jsonl && !c->tokenizer)
            return fsdp_set_error(FSDP_EINVAL,
                                  "prepare --jsonl needs --tokenizer (the chat model's tokenizer.json)");
        if (c->jsonl && c->doc_sep)
            return fsdp_set_error(FSDP_EINVAL,
                                  "prepare: --doc-sep is for --text; every --jsonl row is a document");
        if (!c->out) return fsdp_set_error(FSDP_EINVAL, "prepare needs --out DIR");
        break;
    case FSDP_CMD_EXPORT:
        if (!c->checkpoint == !c->init_from)
            return fsdp_set_error(FSDP_EINVAL, "export needs one of --checkpoint DIR and --init-from DIR");
        if (!c->out) return fsdp_set_error(FSDP_EINVAL, "export needs --out FILE.safetensors");
        break;
    case FSDP_CMD_SAMPLE:
        if (!c->checkpoint == !c->init_from)
            return fsdp_set_error(FSDP_EINVAL, "sample needs one of --checkpoint DIR and --init-from DIR");
        break;
    default: return FSDP_ERR(FSDP_EINVAL, "unknown command %d", (int)c->cmd);
    }
    return FSDP_OK;
}
