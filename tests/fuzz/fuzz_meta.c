/* fuzz_meta.c — libFuzzer target for a data folder's meta.json (fsdp_data_meta_vocab, src/data/data.h),
 * the other file `fsdp-train` reads from a prepared data folder. Input: the file's bytes. */
#include "fuzz_common.h"

#include "fsdp.h"
#include "data/data.h"

#include <limits.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_path(path, sizeof path, "meta.json");
    fuzz_write(path, data, size);
    int vocab = -1;
    fsdp_status s = fsdp_data_meta_vocab(fuzz_dir(), &vocab);
    if (s == FSDP_OK)
        FUZZ_REQUIRE(vocab >= 1 && vocab <= INT_MAX);
    else
        FUZZ_REQUIRE(s == FSDP_EFORMAT && vocab == 0 && fsdp_last_error()[0] != '\0');
    return 0;
}
