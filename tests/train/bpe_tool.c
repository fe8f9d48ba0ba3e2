/* bpe_tool.c — the C side of the BPE tests (tests/train/bpe_check.sh): loads a tokenizer.json and, for each
 * file, encodes it, writes the ids (int32 little-endian) to FILE.ids when asked, decodes them and checks
 * that the bytes come back exactly. usage: bpe_tool TOKENIZER.json [--ids] FILE...   exit 0: all round trips
 * exact. With --bench N: encodes every file N times and prints MB/s (bench/bench_bpe.sh). With --id NAME
 * (repeatable): prints "NAME ID" (fsdp_bpe_token_id); --eot prints "eot ID" (fsdp_bpe_eot).
 * bpe_tool --classes: every code point's pre-tokenizer class and Digits flag, "HEX Cd" per line
 * (tools/unicode_probe.py writes the same from `tokenizers`). */
#include "fsdp.h"
#include "data/bpe.h"
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--classes")) { /* every code point: tests/train/unicode_classes.sh */
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp++)
            if (cp < 0xD800 || cp > 0xDFFF)
                printf("%X %c%c\n", (unsigned)cp, fsdp_bpe_char_class(cp),
                       fsdp_bpe_char_numeric(cp) ? 'd' : '-');
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: bpe_tool TOKENIZER.json [--ids] [--bench N] FILE...\n");
        return 2;
    }
    fsdp_bpe *b = NULL;
    if (fsdp_bpe_load(&b, argv[1]) != FSDP_OK) {
        fprintf(stderr, "bpe_tool: %s\n", fsdp_last_error());
        return 1;
    }
    int ids = 0, reps = 0, fails = 0, i = 2;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        if (!strcmp(argv[i], "--ids")) ids = 1;
        if (!strcmp(argv[i], "--bench") && i + 1 < argc) reps = atoi(argv[++i]);
        if (!strcmp(argv[i], "--id") && i + 1 < argc) {
            printf("%s %d\n", argv[i + 1], fsdp_bpe_token_id(b, argv[i + 1]));
            i++;
        }
        if (!strcmp(argv[i], "--eot")) printf("eot %d\n", fsdp_bpe_eot(b));
    }
    double bytes = 0, secs = 0;
    for (; i < argc; i++) {
        char *text = NULL;
        size_t n = 0, k = 0;
        if (fsdp_io_read_file(argv[i], &text, &n) != FSDP_OK) {
            fprintf(stderr, "bpe_tool: %s\n", fsdp_last_error());
            return 1;
        }
        int32_t *tok = malloc(sizeof *tok * (fsdp_bpe_max_ids(b, n) + 1));
        char *back = malloc(n + 1);
        if (!tok || !back) return 1;
        for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
            double t0 = fsdp_time_s();
            if (fsdp_bpe_encode(b, text, n, tok, &k) != FSDP_OK) {
                fprintf(stderr, "bpe_tool: %s: %s\n", argv[i], fsdp_last_error());
                return 1;
            }
            secs += fsdp_time_s() - t0;
            bytes += (double)n;
        }
        size_t m = 0;
        int ok = 1;
        for (size_t t = 0; t < k && ok; t++) {
            size_t len = 0;
            const char *p = fsdp_bpe_token_bytes(b, tok[t], &len);
            if (!p || m + len > n)
                ok = 0;
            else
                memcpy(back + m, p, len), m += len;
        }
        ok = ok && m == n && memcmp(back, text, n) == 0;
        if (!ok) {
            size_t d = 0;
            while (d < m && d < n && back[d] == text[d])
                d++;
            fprintf(stderr, "FAIL %s: decode(encode(x)) != x (first difference at byte %zu of %zu)\n",
                    argv[i], d, n);
            fails++;
        }
        if (ids) {
            char *out = fsdp_strdupf("%s.ids", argv[i]);
            FILE *f = out ? fopen(out, "wb") : NULL;
            if (!f || fwrite(tok, 4, k, f) != k || fclose(f) != 0) {
                fprintf(stderr, "bpe_tool: cannot write %s.ids\n", argv[i]);
                return 1;
            }
            free(out);
        }
        printf("%s: %zu bytes -> %zu tokens, round trip %s\n", argv[i], n, k, ok ? "exact" : "BROKEN");
        free(tok);
        free(back);
        fsdp_mem_free(text);
    }
    if (reps > 0)
        printf("fsdp.c BPE: %.2f MB in %.3f s = %.2f MB/s (one thread)\n", bytes / 1e6, secs,
               bytes / 1e6 / secs);
    fsdp_bpe_free(b);
    return fails ? 1 : 0;
}
