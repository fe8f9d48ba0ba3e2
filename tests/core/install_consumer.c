/* install_consumer.c — a program outside the source tree that uses an installed libfsdp: built by
 * install_check.sh with only `pkg-config --cflags --libs fsdp`, so it proves the installed header,
 * library and fsdp.pc are enough. Exit 0 when every call behaves as documented. */
#include <fsdp.h>

#include <stdio.h>
#include <string.h>

static int failures;
#define EXPECT(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "install_consumer: FAIL line %d: %s\n", __LINE__, #cond);                        \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    EXPECT(strcmp(fsdp_strerror(FSDP_OK), "ok") == 0);
    EXPECT(strlen(fsdp_strerror(FSDP_ENOMEM)) > 0);

    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: ties to even gives 1.0 (0x3f80). */
    EXPECT(fsdp_f32_to_bf16(1.0f + 1.0f / 256.0f) == 0x3f80);
    EXPECT(fsdp_bf16_to_f32(0x4040) == 3.0f);
    fsdp_bf16 h[3];
    float f[3] = {1.0f, -2.0f, 0.5f}, back[3] = {0};
    fsdp_f32_to_bf16_n(h, f, 3);
    fsdp_bf16_to_f32_n(back, h, 3);
    EXPECT(memcmp(back, f, sizeof f) == 0);

    void *p = NULL;
    EXPECT(fsdp_mem_alloc(&p, 1000, FSDP_MEM_OTHER) == FSDP_OK && p != NULL);
    EXPECT(fsdp_mem_current(FSDP_MEM_OTHER) == 1000);
    fsdp_mem_free(p);
    EXPECT(fsdp_mem_total_current() == 0);

#ifdef HAVE_COMM
    /* The self backend: world size 1, no launcher, no MPI calls. */
    fsdp_comm_config cc = fsdp_comm_config_default();
    cc.backend = FSDP_COMM_SELF;
    fsdp_comm_t *comm = NULL;
    fsdp_status s = fsdp_comm_init(&comm, &cc, &argc, &argv);
    EXPECT(s == FSDP_OK);
    if (s == FSDP_OK) {
        EXPECT(fsdp_comm_size(comm) == 1 && fsdp_comm_rank(comm) == 0);
        float x[4] = {1, 2, 3, 4}, y[4] = {0};
        EXPECT(fsdp_comm_all_reduce(comm, x, y, 4, FSDP_F32, FSDP_SUM) == FSDP_OK);
        EXPECT(memcmp(x, y, sizeof x) == 0);
        fsdp_comm_free(comm);
    } else {
        fprintf(stderr, "install_consumer: fsdp_comm_init: %s\n", fsdp_last_error());
    }
#else
    (void)argc;
    (void)argv;
    printf("install_consumer: libfsdp has no fsdp_comm_init yet; comm not checked\n");
#endif

    printf("install_consumer: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
