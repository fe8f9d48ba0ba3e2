/* test_status.c — status names and the per-thread last-error message. */
#include "core/core.h"
#include "test_util.h"

static fsdp_status fails_here(int x) { return FSDP_ERR(FSDP_EINVAL, "x=%d is odd; pass an even x", x); }
static fsdp_status wraps(int x) {
    fsdp_status s = fails_here(x);
    return s == FSDP_OK ? s : FSDP_WRAP(s, "unit '%s'", "h3");
}

int main(void) {
    CHECK(strcmp(fsdp_strerror(FSDP_OK), "ok") == 0);
    for (int s = FSDP_OK; s <= FSDP_EINTERNAL; s++)
        CHECK(strcmp(fsdp_strerror((fsdp_status)s), "unknown status") != 0);
    CHECK(strcmp(fsdp_strerror((fsdp_status)999), "unknown status") == 0);
    fsdp_clear_error();
    CHECK(fsdp_last_error()[0] == '\0');
    CHECK(fails_here(3) == FSDP_EINVAL);
    CHECK(strcmp(fsdp_last_error(), "fails_here: x=3 is odd; pass an even x") == 0);
    CHECK(fsdp_set_error(FSDP_EIO, "file %s", "a.bin") == FSDP_EIO);
    CHECK(strcmp(fsdp_last_error(), "file a.bin") == 0);
    /* A wrap keeps the inner message intact behind its context (the inner text lives in the same
     * buffer the wrap writes, so this is what goes wrong with a plain FSDP_ERR("%s", last_error)). */
    CHECK(wraps(5) == FSDP_EINVAL);
    CHECKF(strcmp(fsdp_last_error(), "wraps: unit 'h3': fails_here: x=5 is odd; pass an even x") == 0,
           "got: %s", fsdp_last_error());
    CHECK(FSDP_WRAP(FSDP_EIO, "outer %d", 2) == FSDP_EIO);
    CHECK(strcmp(fsdp_last_error(),
                 "main: outer 2: wraps: unit 'h3': fails_here: x=5 is odd; pass an even x") == 0);
    return TEST_MAIN_END();
}
