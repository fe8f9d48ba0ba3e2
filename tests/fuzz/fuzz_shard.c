/* fuzz_shard.c — libFuzzer target for checkpoint shard files (header, unit table, payload checksum,
 * state; src/checkpoint/checkpoint.h) as fsdp_ckpt_open and the readers see them. Each input replaces
 * rank_00000.bin of a known-good checkpoint (fuzz_ckpt.h).
 * Input: byte 0 = fix-up flags, bytes 1.. = the shard file. Checksums would stop a fuzzer at the
 * header, so the flags let it repair them: bit 0 recomputes the payload CRC32C into the header, bit 1
 * the header CRC32C, bit 2 rewrites the manifest's record of the file (bytes, crc32c) to match (the
 * manifest is always resealed: fsdp_ckpt_manifest_seal).
 * FSDP_FUZZ_SEED_OUT=FILE writes flag byte 0 + the good shard there (how corpus/shard/ was made). */
#include "fuzz_ckpt.h"

static cJSON *base_manifest;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_ckpt_make();
    char p[600];
    size_t n;
    snprintf(p, sizeof p, "%s/manifest.json", fuzz_step_dir);
    char *text = fuzz_read(p, &n);
    base_manifest = cJSON_Parse(text);
    free(text);
    if (!base_manifest) abort();
    cJSON_DeleteItemFromObjectCaseSensitive(base_manifest, "manifest_crc32c"); /* resealed per input */
    const char *seed = getenv("FSDP_FUZZ_SEED_OUT");
    if (seed) {
        snprintf(p, sizeof p, "%s/rank_00000.bin", fuzz_step_dir);
        char *shard = fuzz_read(p, &n);
        char *out = malloc(n + 1);
        out[0] = 0;
        memcpy(out + 1, shard, n);
        fuzz_write(seed, out, n + 1);
        free(out);
        free(shard);
    }
    return 0;
}

static void put32(uint8_t *b, size_t off, uint32_t v) { memcpy(b + off, &v, 4); }
static uint32_t get32(const uint8_t *b, size_t off) {
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t flags = data[0];
    size_t n = size - 1;
    uint8_t *f = malloc(n ? n : 1);
    memcpy(f, data + 1, n);
    const size_t H = FSDP_CKPT_HEADER_BYTES;
    if (n >= H && (flags & 1)) put32(f, 28, fsdp_crc32c(0, f + H, n - H)); /* H_PCRC */
    if (n >= H && (flags & 2)) put32(f, 124, fsdp_crc32c(0, f, 124));      /* H_HCRC */
    char p[600];
    snprintf(p, sizeof p, "%s/rank_00000.bin", fuzz_step_dir);
    fuzz_write(p, f, n);

    cJSON *m = cJSON_Duplicate(base_manifest, 1);
    if (flags & 4) {
        cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "shards"), 0);
        cJSON_ReplaceItemInObjectCaseSensitive(e, "bytes", cJSON_CreateNumber((double)n));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "crc32c",
                                               cJSON_CreateNumber(n >= 32 ? (double)get32(f, 28) : 0.0));
    }
    char *text = cJSON_Print(m), *sealed = NULL;
    size_t sealed_len = 0;
    if (!text || fsdp_ckpt_manifest_seal(text, strlen(text), &sealed, &sealed_len) != FSDP_OK) abort();
    snprintf(p, sizeof p, "%s/manifest.json", fuzz_step_dir);
    fuzz_write(p, sealed, sealed_len);
    free(sealed);
    free(text);
    cJSON_Delete(m);
    free(f);

    fsdp_ckpt_reader *r = NULL;
    fsdp_status s = fsdp_ckpt_open(&r, fuzz_step_dir);
    if (s == FSDP_OK) {
        fuzz_ckpt_exercise(r);
        fsdp_ckpt_close(r);
    } else {
        FUZZ_REQUIRE(r == NULL && fsdp_last_error()[0] != '\0');
    }
    return 0;
}
