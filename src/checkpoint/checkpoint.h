/* checkpoint.h — sharded, crash-safe, reshardable checkpoints (docs/DESIGN.md section 8).
 *
 * On disk, one folder per step under the checkpoint folder:
 *   CKPT/step_000100/manifest.json      config, world size, step, every unit's tensors (name, shape,
 *                                       offset in the unit's flat buffer), padded sizes, every
 *                                       shard file's size and CRC32C, and last its own checksum:
 *                                       "manifest_crc32c": "xxxxxxxx" (8 hex digits, the CRC32C of
 *                                       every byte before the key), then "\n}\n"
 *   CKPT/step_000100/rank_00000.bin ... one per rank: 128-byte header (magic "FSDPSHRD", version,
 *                                       rank, world, units, step, payload size, payload CRC32C,
 *                                       header CRC32C), then the payload:
 *                                         units x {u64 shard offset, u64 shard numel, u64 padded numel}
 *                                         per unit: fp32 master[numel], adam_m[numel], adam_v[numel]
 *                                         trainer state: i64 step, u64 data pos, u64 data epoch, u64 rng[2]
 *   CKPT/latest                         the name of the newest complete step folder
 * A save (under the run's lock, fsdp_ckpt_lock) first removes every leftover .tmp_step_* folder and
 * latest.tmp.* file, then writes CKPT/.tmp_step_000100/, fsyncs every file and the folder, renames it
 * to its final name and only then, after every rank has finished, replaces `latest` (temporary file
 * + rename). A crash or full disk at any point leaves the previous checkpoint and `latest` as they were.
 * Loading re-slices by global offset within each unit's flat buffer, so any world size can read a
 * checkpoint written by any other. */
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H

#include "fsdp.h"

#include <stdint.h>

struct cJSON;

#define FSDP_CKPT_MAGIC        "FSDPSHRD"
#define FSDP_CKPT_VERSION      1
#define FSDP_CKPT_HEADER_BYTES 128

/* Trainer state saved with every shard (the same on every rank). */
typedef struct {
    int64_t step;                  /* optimizer steps done */
    uint64_t data_pos, data_epoch; /* fsdp_loader_state */
    uint64_t rng[2];               /* trainer RNG */
} fsdp_ckpt_state;

/* Description of a unit's tensors as stored in the manifest. */
typedef struct {
    char *name;
    int ndim;
    int64_t shape[FSDP_MAX_DIMS];
    size_t offset, numel; /* within the unit's flat buffer; a frozen tensor's within the frozen region */
    int alias_of;         /* -1, or the index of the tensor it aliases */
    int frozen;           /* 1: frozen (fsdp_tensor_spec.frozen): its values are not in the checkpoint */
} fsdp_ckpt_tensor;

typedef struct {
    char *name;
    size_t numel;        /* unpadded flat length (of the trainable region: the shards hold it alone) */
    size_t padded_numel; /* flat length at the saving world size (a multiple of it) */
    int n_tensors;
    fsdp_ckpt_tensor *tensors;
    /* The frozen region (0 when nothing is frozen): its unpadded length, and the digest of its values
     * (ckpt_engine.c: the same on any world size and compute dtype) that a load checks the frozen
     * values it was given against. A checkpoint holds only the trainable region; the frozen one comes
     * from where the run started (an --init-from folder, a seed) and is restored before the load. */
    size_t frozen_numel;
    uint64_t frozen_digest;
} fsdp_ckpt_unit;

/* One rank's part of one unit: [offset, offset+numel) of the flat buffer, fp32. The arrays are host
 * pointers, or all NULL with read set: then the writer asks read(ctx, k, offset, n, dst) for n elements
 * of array k (0 master, 1 AdamW m, 2 AdamW v) from flat element offset into a host chunk of its own
 * (shards on a device whose memory the host cannot address: ckpt_engine.c). */
typedef struct {
    size_t offset, numel;
    const float *master, *adam_m, *adam_v;
    fsdp_status (*read)(void *ctx, int k, size_t offset, size_t n, float *dst);
    void *ctx;
} fsdp_ckpt_part;

/* ---- engine-free layer (tests, export) */

/* Collective save of this rank's parts (comm NULL: a world of 1). units: every unit (the same on all
 * ranks); parts[u]: this rank's shard of unit u; config: the JSON record stored in the manifest
 * (not consumed). On success *final_dir (may be NULL) gets the step folder's path (free()).
 * An existing step folder of the same step is never overwritten (FSDP_EIO). */
fsdp_status fsdp_ckpt_save_parts(fsdp_comm_t *comm, const char *ckpt_dir, const struct cJSON *config,
                                 int n_units, const fsdp_ckpt_unit *units, const fsdp_ckpt_part *parts,
                                 const fsdp_ckpt_state *st, char **final_dir);

/* The two writing steps save_parts runs, exposed for tests that fake other world sizes in one process:
 * one rank's shard file (written and fsynced; *crc and *bytes: its payload CRC32C and file size), and
 * the manifest of a step folder (sealed by fsdp_ckpt_manifest_seal). */
fsdp_status fsdp_ckpt_write_shard(const char *path, int rank, int world, int n_units,
                                  const fsdp_ckpt_unit *units, const fsdp_ckpt_part *parts,
                                  const fsdp_ckpt_state *st, uint32_t *crc, uint64_t *bytes);
fsdp_status fsdp_ckpt_write_manifest(const char *path, int world, const struct cJSON *config, int n_units,
                                     const fsdp_ckpt_unit *units, const fsdp_ckpt_state *st,
                                     const uint32_t *crcs, const uint64_t *bytes);

/* A manifest's text with its checksum as the last field: json (len bytes, a JSON object ending in '}'
 * and optional white space) with that brace replaced by ',\n\t"manifest_crc32c": "xxxxxxxx"\n}\n',
 * the CRC32C of every byte before the key. *out: malloc'd (free()). FSDP_EINVAL if json does not end
 * in '}'. (Tests use it to make a changed manifest that still passes the checksum.) */
fsdp_status fsdp_ckpt_manifest_seal(const char *json, size_t len, char **out, size_t *out_len);

typedef struct fsdp_ckpt_reader fsdp_ckpt_reader;
/* Opens a step folder: verifies manifest.json's checksum (a manifest without one, or whose bytes do
 * not match it, is FSDP_EFORMAT "manifest checksum ...", naming the file, before anything in it is
 * used), parses it and checks every shard file's presence, header and size
 * (payload checksums are verified on first read from a file). Errors name the file and the fault. */
fsdp_status fsdp_ckpt_open(fsdp_ckpt_reader **out, const char *step_dir);
void fsdp_ckpt_close(fsdp_ckpt_reader *r);
int fsdp_ckpt_world(const fsdp_ckpt_reader *r);
int fsdp_ckpt_num_units(const fsdp_ckpt_reader *r);
const fsdp_ckpt_unit *fsdp_ckpt_unit_desc(const fsdp_ckpt_reader *r, int u);
const struct cJSON *fsdp_ckpt_config(const fsdp_ckpt_reader *r); /* the manifest's "config" */
const char *fsdp_ckpt_dir(const fsdp_ckpt_reader *r);
/* The trainer state (from shard 0, checksum-verified). */
fsdp_status fsdp_ckpt_state_get(fsdp_ckpt_reader *r, fsdp_ckpt_state *st);
/* Reads elements [start, start+n) of unit u's flat buffer, from whichever shard files hold them,
 * into master/adam_m/adam_v (each may be NULL). Elements past the unit's unpadded numel read as 0.
 * A NaN or Inf in what is read is FSDP_EFORMAT naming the shard file, the tensor, the element's index
 * in it and the array (master weights, AdamW m or v). */
fsdp_status fsdp_ckpt_read_range(fsdp_ckpt_reader *r, int u, size_t start, size_t n, float *master,
                                 float *adam_m, float *adam_v);

/* dir holding manifest.json -> itself; a checkpoint folder with `latest` -> its newest step folder.
 * *step_dir: malloc'd. FSDP_EIO naming dir when it holds neither. */
fsdp_status fsdp_ckpt_resolve(const char *dir, char **step_dir);
/* 1 if name is an entry of a checkpoint folder that the save protocol owns (latest, step_*, the
 * temporaries, set-aside folders, lock and probe files): no other output may be written there. */
int fsdp_ckpt_managed_name(const char *name);
/* Every step folder `latest` has ever named is listed in ckpt_dir/.committed (appended when `latest`
 * moves to it): a committed checkpoint, even after `latest` was pointed back to an older step, is never
 * overwritten or set aside by a save (only retention removes checkpoints); a step folder newer than
 * `latest` that is not listed is a save killed between its rename and `latest` (set aside as
 * .uncommitted_step_*). fsdp_ckpt_newer_committed: how many committed step folders of ckpt_dir that
 * still exist are newer than step folder step_dir (a path ending in step_NNNNNN; any other: 0), their
 * names comma-separated into names (cap bytes; may be NULL). */
int fsdp_ckpt_newer_committed(const char *ckpt_dir, const char *step_dir, char *names, size_t cap);
/* 1 if ckpt_dir has a `latest` pointer. */
int fsdp_ckpt_has_latest(const char *ckpt_dir);

/* One run per checkpoint folder: an exclusive flock(2) on ckpt_dir/.lock.rank_NNNNN (created if
 * need be), which the kernel releases when the process ends however it ends. Every rank that writes
 * into the folder takes its own, for the whole run; the file then names the holder (pid, host,
 * rank). Taken: FSDP_EIO naming the folder and the holder. *fd: pass it to fsdp_ckpt_unlock. */
fsdp_status fsdp_ckpt_lock(const char *ckpt_dir, int rank, int *fd);
/* Empties the lock file (it then names nobody) and releases the lock. fd -1: a no-op. */
void fsdp_ckpt_unlock(int fd);

/* Retention (--keep-last, --keep-every), rank 0 only, under the folder's lock, after a save has
 * committed: removes the step folders older than the one `latest` names beyond the keep_last newest
 * (`latest`'s counted; keep_last >= 1), except steps that are multiples of keep_every (0: none kept
 * for that reason). Never touches `latest`'s folder or one newer than it, nor anything that is not a
 * real folder named step_NNNNNN (a symbolic link is left alone). Each is first renamed to
 * .tmp_step_NNNNNN.pruned (and the folder fsynced), so an interrupted removal never leaves a partial
 * checkpoint under a step name; the next save removes what is left (it removes every .tmp_step_*).
 * Removal is fsdp_rm_tree1. *removed (may be NULL): folders removed; their names, space-separated,
 * into names (cap bytes, may be NULL). FSDP_EIO when `latest` cannot be read (nothing removed). */
fsdp_status fsdp_ckpt_prune(const char *ckpt_dir, int keep_last, int keep_every, int *removed, char *names,
                            size_t cap);

/* ---- engine glue (ckpt_engine.c) */

/* Collective: saves every unit's shard of eng (master, AdamW moments) with st; a unit's frozen region
 * is not saved, only its digest. */
fsdp_status fsdp_ckpt_save(fsdp_engine_t *eng, const char *ckpt_dir, const struct cJSON *config,
                           const fsdp_ckpt_state *st, char **final_dir);
/* Collective: loads step_dir into eng, re-slicing if the world size differs; sets the engine's step
 * count; *st gets the trainer state. Every unit and tensor must match the manifest (name, shape,
 * offset, frozen or not), else FSDP_EFORMAT naming manifest.json and the first difference. Frozen
 * tensors are not in the checkpoint: the caller restores them first (from the run's source), and
 * their digest must equal the manifest's, else FSDP_EINVAL naming the unit. If any rank fails,
 * every rank returns an error. */
fsdp_status fsdp_ckpt_load(fsdp_engine_t *eng, const char *step_dir, fsdp_ckpt_state *st);
/* Collective: out[u] = the digest of unit u's frozen region (0 where none): a sum over its nonzero
 * elements of a 20-bit hash of (index in the region, the value rounded to bf16), so the same values
 * give the same digest on any world size, strategy and compute dtype. */
fsdp_status fsdp_ckpt_frozen_digests(fsdp_engine_t *eng, uint64_t *out);

#endif
