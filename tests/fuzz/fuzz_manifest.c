/* fuzz_manifest.c — libFuzzer target for a checkpoint's manifest.json (fsdp_ckpt_open's JSON parsing,
 * unit and tensor tables, shard list; src/checkpoint/checkpoint.h). Each input replaces manifest.json of a
 * known-good checkpoint (fuzz_ckpt.h), so an input close to the seed reaches the shard checks and
 * the readers behind them. Also used on the checkpoint's `latest` pointer (fsdp_ckpt_resolve).
 * An input that holds no "manifest_crc32c" key is sealed first (fsdp_ckpt_manifest_seal, when it ends in
 * '}'), so the fuzzer reaches the parser behind the checksum; one that holds it is written as it is,
 * which exercises the checksum itself (corpus/manifest/sealed*).
 * FSDP_FUZZ_SEED_OUT=FILE writes the good manifest there (how corpus/manifest/ was made). */
#include "fuzz_ckpt.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_ckpt_make();
    const char *seed = getenv("FSDP_FUZZ_SEED_OUT");
    if (seed) {
        char p[600];
        size_t n;
        snprintf(p, sizeof p, "%s/manifest.json", fuzz_step_dir);
        char *text = fuzz_read(p, &n);
        fuzz_write(seed, text, n);
        free(text);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char p[600];
    snprintf(p, sizeof p, "%s/manifest.json", fuzz_step_dir);
    static const char key[] = "\"manifest_crc32c\"";
    int has_key = 0;
    for (size_t i = 0; !has_key && i + sizeof key - 1 <= size; i++)
        has_key = memcmp(data + i, key, sizeof key - 1) == 0;
    char *sealed = NULL;
    size_t sealed_len = 0;
    if (!has_key && fsdp_ckpt_manifest_seal((const char *)data, size, &sealed, &sealed_len) == FSDP_OK)
        fuzz_write(p, sealed, sealed_len);
    else
        fuzz_write(p, data, size);
    free(sealed);
    fsdp_ckpt_reader *r = NULL;
    fsdp_status s = fsdp_ckpt_open(&r, fuzz_step_dir);
    if (s == FSDP_OK) {
        FUZZ_REQUIRE(r != NULL);
        fuzz_ckpt_exercise(r);
        fsdp_ckpt_close(r);
    } else {
        FUZZ_REQUIRE(r == NULL && fsdp_last_error()[0] != '\0');
    }
    /* The same bytes as the `latest` pointer of the checkpoint folder: it must resolve to a folder
     * inside it or fail cleanly. */
    char ck[600], latest[700];
    fuzz_path(ck, sizeof ck, "ck");
    snprintf(latest, sizeof latest, "%s/latest", ck);
    fuzz_write(latest, data, size < 64 ? size : 64);
    char *sd = NULL;
    if (fsdp_ckpt_resolve(ck, &sd) == FSDP_OK) {
        FUZZ_REQUIRE(sd != NULL && strncmp(sd, ck, strlen(ck)) == 0 &&
                     strchr(sd + strlen(ck) + 1, '/') == NULL);
        free(sd);
    }
    return 0;
}
