/* test_flags.c — every flag of every fsdp-train command is range- and format-checked with a message
 * naming the flag: the flags are read from the usage text itself (so a new flag is covered without
 * touching this test), each gets the bad values of its kind, and the consistency rules between flags
 * (width vs heads, sequence vs position table, batch vs micro-batches vs world, lr vs min-lr) say
 * which flags disagree and why. */
#include "test_util.h"

#include "fsdp.h"
#include "train/config.h"

#include <stdlib.h>
#include <string.h>

typedef enum { K_NUM, K_STR, K_ENUM, K_BOOL, K_LIST } kind;
typedef struct {
    char name[64];     /* without the dashes */
    char choices[128]; /* K_ENUM: "a|b" */
    kind k;
} flag;

/* The flags of command c, from fsdp_train_usage's lines "  --name [X|a|b|FILE...] help [default]". */
static int usage_flags(fsdp_train_cmd c, flag *out, int cap) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fsdp_train_usage(f, c);
    fclose(f);
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        if (strncmp(line, "  --", 4) != 0) continue;
        flag *g = &out[n];
        memset(g, 0, sizeof *g);
        char arg[128] = "";
        if (sscanf(line + 4, "%63s %127s", g->name, arg) < 1 || !strcmp(g->name, "help")) continue;
        const char *def = strrchr(line, '[');
        char dv[128] = "";
        if (def) sscanf(def + 1, "%127[^]]", dv);
        char *end;
        if (!strcmp(arg, "X")) {
            (void)strtod(dv, &end);
            g->k = dv[0] && *end == '\0' ? K_NUM : K_STR; /* a numeric default: a numeric flag */
        } else if (!strcmp(arg, "FILE...")) {
            g->k = K_LIST;
        } else if (strchr(arg, '|')) {
            g->k = K_ENUM;
            snprintf(g->choices, sizeof g->choices, "%s", arg);
        } else {
            g->k = K_BOOL; /* "--name" then its help text */
        }
        n++;
    }
    free(text);
    return n;
}

/* Parses "CMD --name=value" (eq) or "CMD --name value"; value NULL: the flag is the last word. */
static fsdp_status parse3(fsdp_train_cmd c, const char *name, const char *value, int eq) {
    static char w0[64], w1[256], w2[256];
    char *argv[5];
    int argc = 0;
    argv[argc++] = "fsdp-train";
    snprintf(w0, sizeof w0, "%s", fsdp_train_cmd_name(c));
    argv[argc++] = w0;
    if (value && eq) {
        snprintf(w1, sizeof w1, "--%s=%s", name, value);
        argv[argc++] = w1;
    } else {
        snprintf(w1, sizeof w1, "--%s", name);
        argv[argc++] = w1;
        if (value) {
            snprintf(w2, sizeof w2, "%s", value);
            argv[argc++] = w2;
        }
    }
    argv[argc] = NULL;
    fsdp_train_config cfg;
    return fsdp_train_config_parse(&cfg, argc, argv);
}

/* The value is refused (FSDP_EINVAL) with a message naming --name and containing why (or NULL). */
static void refused(fsdp_train_cmd c, const char *name, const char *value, int eq, const char *why) {
    fsdp_status s = parse3(c, name, value, eq);
    char needle[80];
    snprintf(needle, sizeof needle, "--%s", name);
    CHECKF(s == FSDP_EINVAL, "fsdp-train %s --%s%s%s accepted", fsdp_train_cmd_name(c), name, eq ? "=" : " ",
           value ? value : "");
    CHECKF(strstr(fsdp_last_error(), needle) != NULL, "%s %s%s%s: message \"%s\" does not name the flag",
           fsdp_train_cmd_name(c), needle, eq ? "=" : " ", value ? value : "", fsdp_last_error());
    if (why)
        CHECKF(strstr(fsdp_last_error(), why) != NULL, "--%s %s: message \"%s\" lacks \"%s\"", name,
               value ? value : "", fsdp_last_error(), why);
}

static void test_every_flag(void) {
    static const char *const nums[] = {"abc", "", "nan", "inf", "-inf", "1e999", "12abc", "0x"};
    int total = 0, seen_num = 0, seen_enum = 0, seen_bool = 0, seen_str = 0, seen_list = 0;
    for (int c = 0; c < FSDP_CMD_NCMD; c++) {
        flag fl[128];
        int n = usage_flags((fsdp_train_cmd)c, fl, 128);
        CHECKF(n >= 3, "command %s: only %d flags in its usage", fsdp_train_cmd_name((fsdp_train_cmd)c), n);
        total += n;
        for (int i = 0; i < n; i++) {
            const char *nm = fl[i].name;
            switch (fl[i].k) {
            case K_NUM:
                seen_num++;
                for (size_t v = 0; v < sizeof nums / sizeof nums[0]; v++)
                    refused((fsdp_train_cmd)c, nm, nums[v], 1, NULL);
                /* Range: every numeric flag has a lower bound above this, and an upper one below 1e300. */
                refused((fsdp_train_cmd)c, nm, "-9223372036854775808", 1, "outside its range");
                refused((fsdp_train_cmd)c, nm, "1e300", 1, NULL);
                refused((fsdp_train_cmd)c, nm, NULL, 0, "needs a value"); /* the last word */
                break;
            case K_STR:
                seen_str++;
                refused((fsdp_train_cmd)c, nm, "", 1, "non-empty");
                refused((fsdp_train_cmd)c, nm, NULL, 0, "needs a value");
                break;
            case K_ENUM:
                seen_enum++;
                refused((fsdp_train_cmd)c, nm, "bogus", 0, fl[i].choices); /* lists the choices */
                refused((fsdp_train_cmd)c, nm, "", 1, NULL);
                break;
            case K_BOOL:
                seen_bool++;
                refused((fsdp_train_cmd)c, nm, "2", 1, NULL);
                refused((fsdp_train_cmd)c, nm, "yes please", 1, NULL);
                break;
            case K_LIST:
                seen_list++;
                refused((fsdp_train_cmd)c, nm, NULL, 0, "at least one file");
                refused((fsdp_train_cmd)c, nm, "a.txt", 1, "separate words");
                break;
            }
        }
        /* A flag that only other commands take: refused for this one, by name. */
        for (int o = 0; o < FSDP_CMD_NCMD; o++) {
            flag other[128];
            int m = o == c ? 0 : usage_flags((fsdp_train_cmd)o, other, 128);
            for (int j = 0; j < m; j++) {
                int here = 0;
                for (int k = 0; k < n; k++)
                    here |= !strcmp(fl[k].name, other[j].name);
                if (!here) refused((fsdp_train_cmd)c, other[j].name, "1", 0, "unknown flag");
            }
        }
    }
    fprintf(stderr, "flags checked: %d (numeric %d, string %d, choice %d, switch %d, list %d)\n", total,
            seen_num, seen_str, seen_enum, seen_bool, seen_list);
    CHECK(seen_num > 20 && seen_str > 3 && seen_enum >= 5 && seen_bool >= 2 && seen_list >= 1);
}

static fsdp_status parse_line(fsdp_train_config *c, const char *line) {
    static char buf[1024];
    static char *argv[64];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    argv[argc++] = "fsdp-train";
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    return fsdp_train_config_parse(c, argc, argv);
}

/* The consistency rules: each message names both flags (and the world size) and says why. */
static void test_consistency(void) {
    fsdp_train_config c;
    CHECK_ERR(parse_line(&c, "--width 100 --heads 3"), FSDP_EINVAL,
              "--width 100 is not divisible by --heads 3");
    CHECK_ERR(parse_line(&c, "--seq-len 300 --max-seq-len 256"), FSDP_EINVAL,
              "--seq-len 300 is longer than --max-seq-len 256");
    CHECK_ERR(parse_line(&c, "--batch 10 --micro-batches 4"), FSDP_EINVAL,
              "--batch 10 is not divisible by --micro-batches 4");
    CHECK_ERR(parse_line(&c, "--lr 1e-4 --min-lr 1e-3"), FSDP_EINVAL, "--min-lr 0.001 is above --lr 0.0001");
    CHECK_ERR(parse_line(&c, "--vocab 1"), FSDP_EINVAL, "--vocab 1");
    CHECK_ERR(parse_line(&c, "--steps 10 --stop-at 11"), FSDP_EINVAL, "--stop-at 11 is beyond --steps 10");
    CHECK_OK(parse_line(&c, "--steps 10 --stop-at 10"));
    /* A warmup longer than a short (debugging) run is allowed: the LR just never reaches --lr. */
    CHECK_OK(parse_line(&c, "--steps 3 --warmup 20"));
    CHECK_ERR(parse_line(&c, "prepare --out d"), FSDP_EINVAL, "--text");
    CHECK_ERR(parse_line(&c, "prepare --text a"), FSDP_EINVAL, "--out");
    CHECK_ERR(parse_line(&c, "export --out m.safetensors"), FSDP_EINVAL, "--checkpoint");
    CHECK_ERR(parse_line(&c, "sample"), FSDP_EINVAL, "--checkpoint");
    /* World size: every rank needs the same whole number of sequences per micro-batch. For each world
     * 1..8 and batch/micro pair, the rule is exactly batch % (micro * world) == 0. */
    for (int world = 1; world <= 8; world++)
        for (int batch = 1; batch <= 12; batch++)
            for (int micro = 1; micro <= 3; micro++) {
                char line[128];
                snprintf(line, sizeof line, "--batch %d --micro-batches %d", batch, micro);
                if (batch % micro != 0) continue;
                CHECK_OK(parse_line(&c, line));
                fsdp_status s = fsdp_train_config_check(&c, world);
                int fits = batch % (micro * world) == 0;
                CHECKF((s == FSDP_OK) == fits, "batch %d micro %d world %d: %s", batch, micro, world,
                       fsdp_last_error());
                if (!fits) {
                    char want[128];
                    snprintf(want, sizeof want, "--micro-batches %d x %d ranks", micro, world);
                    CHECKF(strstr(fsdp_last_error(), "--batch") && strstr(fsdp_last_error(), want),
                           "message \"%s\" lacks --batch / \"%s\"", fsdp_last_error(), want);
                }
            }
    /* Boundaries are inclusive and exact: the last accepted and first refused values of a few ranges. */
    CHECK_OK(parse_line(&c, "--seed 9007199254740992"));
    CHECK_ERR(parse_line(&c, "--seed 9007199254740993"), FSDP_EINVAL, "--seed");
    CHECK_OK(parse_line(&c, "--comm-timeout -1"));
    CHECK_ERR(parse_line(&c, "--comm-timeout -1.5"), FSDP_EINVAL, "--comm-timeout");
    CHECK_OK(parse_line(&c, "--layers 1024"));
    CHECK_ERR(parse_line(&c, "--layers 1025"), FSDP_EINVAL, "--layers 1025 is outside");
    CHECK_ERR(parse_line(&c, "--layers 4294967297"), FSDP_EINVAL, "--layers"); /* not wrapped to 1 */
}

int main(void) {
    test_every_flag();
    test_consistency();
    return TEST_MAIN_END();
}
