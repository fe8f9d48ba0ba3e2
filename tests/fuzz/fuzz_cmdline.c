/* fuzz_cmdline.c — libFuzzer target for fsdp-train's command line (fsdp_train_config_parse and check,
 * src/train/config.h). Input: the argument words separated by NUL bytes (argv[0] is added). Beyond
 * memory safety it checks two properties: every failure has a message, and a parsed train config
 * survives the manifest's JSON record (to_json -> from_json) with its model settings unchanged. */
#include "fuzz_common.h"

#include "fsdp.h"
#include "train/config.h"

#include <cjson/cJSON.h>

#define MAX_WORDS 64

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private NUL-terminated copy: argv points into it for as long as cfg is used. */
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_WORDS + 2];
    int argc = 0;
    argv[argc++] = "fsdp-train";
    for (size_t i = 0; i < size + 1 && argc < MAX_WORDS + 1;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;

    fsdp_train_config cfg;
    fsdp_status s = fsdp_train_config_parse(&cfg, argc, argv);
    if (s != FSDP_OK) {
        FUZZ_REQUIRE(s == FSDP_EINVAL && fsdp_last_error()[0] != '\0');
    } else if (!cfg.help) {
        fsdp_train_config_print(devnull, &cfg);
        fsdp_train_usage(devnull, cfg.cmd);
        for (int world = 1; world <= 4; world++) {
            fsdp_train_config c2 = cfg;
            s = fsdp_train_config_check(&c2, world);
            FUZZ_REQUIRE(s == FSDP_OK || (s == FSDP_EINVAL && strstr(fsdp_last_error(), "--") != NULL));
        }
        if (cfg.cmd == FSDP_CMD_TRAIN) {
            cJSON *j = fsdp_train_config_to_json(&cfg);
            FUZZ_REQUIRE(j != NULL);
            fsdp_train_config back = fsdp_train_config_default();
            s = fsdp_train_config_from_json(&back, j, "fuzz");
            if (cfg.vocab >= 2) { /* vocab 0 (auto) is resolved by the trainer before it saves */
                FUZZ_REQUIRE(s == FSDP_OK);
                FUZZ_REQUIRE(back.layers == cfg.layers && back.width == cfg.width && back.heads == cfg.heads);
                FUZZ_REQUIRE(back.vocab == cfg.vocab && back.seq_len == cfg.seq_len &&
                             back.max_seq_len == cfg.max_seq_len);
                FUZZ_REQUIRE(back.precision == cfg.precision && back.seed == cfg.seed);
            }
            cJSON_Delete(j);
        }
    }
    free(buf);
    return 0;
}
