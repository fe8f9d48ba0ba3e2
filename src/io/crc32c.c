/* crc32c.c — CRC32C (Castagnoli), the checksum of checkpoint shards, manifests and folder fingerprints:
 * SSE4.2's crc32 instruction where the CPU has it (checked at run time), else slicing-by-8 tables. */
#include "io/io.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_hw;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_tab[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
#if defined(__x86_64__)
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--, p++)
        c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

uint32_t fsdp_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw) return ~crc_hw_run(c, p, n);
#endif
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff] ^
            crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
            crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
    }
    for (; n > 0; n--, p++)
        c = (c >> 8) ^ crc_tab[0][(c ^ *p) & 0xff];
    return ~c;
}
