/* test_errors.c — the trainer's wrap (FSDP_WRAP_USER: context in front of the inner message, no
 * function name, the new status returned) and the name of FSDP_EPEER, the status of a rank that was
 * fine while another failed. */
#include "core/core.h"
#include "test_util.h"

static fsdp_status inner(void) { return fsdp_set_error(FSDP_EINVAL, "--steps: \"x\" is not a number"); }

int main(void) {
    CHECK(strcmp(fsdp_strerror(FSDP_EPEER), "another rank failed") == 0);
    CHECK(inner() == FSDP_EINVAL);
    CHECK(FSDP_WRAP_USER(FSDP_EFORMAT, "%s: config value is invalid", "run.json") == FSDP_EFORMAT);
    CHECKF(strcmp(fsdp_last_error(), "run.json: config value is invalid: --steps: \"x\" is not a number") ==
               0,
           "got: %s", fsdp_last_error());
    /* twice: each wrap keeps everything inside it */
    CHECK(FSDP_WRAP_USER(FSDP_EFORMAT, "resuming") == FSDP_EFORMAT);
    CHECKF(strcmp(fsdp_last_error(),
                  "resuming: run.json: config value is invalid: --steps: \"x\" is not a number") == 0,
           "got: %s", fsdp_last_error());
    return TEST_MAIN_END();
}
