/* test_config.c — fsdp-train's flag parsing: defaults, every value kind, the consistency checks
 * (each message names its flag), commands, the JSON record round trip, --config FILE.toml (the same
 * settings as the flags, flags override, errors name FILE:LINE), and a small fuzz loop of random
 * argument vectors that must only ever succeed or fail cleanly. */
#include "test_util.h"

#include "fsdp.h"
#include "train/config.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fsdp_status parse(fsdp_train_config *c, const char *line) {
    static char buf[4096];
    static char *argv[128];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    argv[argc++] = "fsdp-train";
    for (char *t = strtok(buf, " "); t && argc < 127; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    return fsdp_train_config_parse(c, argc, argv);
}

static void test_values(void) {
    fsdp_train_config c, d = fsdp_train_config_default();
    CHECK_OK(parse(&c, ""));
    CHECK(c.cmd == FSDP_CMD_TRAIN && c.layers == d.layers && c.max_seq_len == d.seq_len);
    CHECK_OK(parse(&c, "train --layers 6 --width=96 --heads 3 --seq-len 64 --max-seq-len 128 --lr 1e-3 "
                       "--precision fp32 --strategy grad-op --main-grad eager --accum no-sync --recompute "
                       "--seed 99 --data /x --metrics m.jsonl --reduce-dtype bf16 --resume=0"));
    CHECK(c.layers == 6 && c.width == 96 && c.heads == 3 && c.seq_len == 64 && c.max_seq_len == 128);
    CHECK(c.lr == 1e-3 && c.precision == FSDP_PRECISION_FP32 && c.strategy == FSDP_SHARD_GRAD_OP);
    CHECK(c.main_grad == FSDP_MAIN_GRAD_EAGER && c.accum == FSDP_ACCUM_NO_SYNC && c.recompute == 1);
    CHECK(c.seed == 99 && !strcmp(c.data, "/x") && !strcmp(c.metrics, "m.jsonl") &&
          c.reduce_dtype == FSDP_BF16);
    CHECK(c.resume == 0);
    CHECK_OK(parse(&c, "--strategy none --resume"));
    CHECK(c.strategy == FSDP_NO_SHARD && c.resume == 1);
    CHECK_OK(parse(&c, "--help"));
    CHECK(c.help == 1);
    CHECK_OK(parse(&c, "prepare --text a b c --out d --val-fraction 0.1 --doc-sep %"));
    CHECK(c.cmd == FSDP_CMD_PREPARE && c.n_texts == 3 && !strcmp(c.texts[2], "c") && !strcmp(c.out, "d"));
    CHECK(c.val_fraction == 0.1 && !strcmp(c.doc_sep, "%"));
    CHECK_OK(parse(&c, "export --checkpoint ck --out m.safetensors"));
    CHECK(c.cmd == FSDP_CMD_EXPORT && !strcmp(c.checkpoint, "ck"));
    CHECK_OK(parse(&c, "sample --checkpoint ck --prompt hi --tokens 5 --temperature 0.5 --top-k 3 --seed 4"));
    CHECK(c.cmd == FSDP_CMD_SAMPLE && c.tokens == 5 && c.top_k == 3 && c.temperature == 0.5 && c.seed == 4);
}

static void test_errors(void) {
    fsdp_train_config c;
    CHECK_ERR(parse(&c, "--width 100 --heads 3"), FSDP_EINVAL, "--width 100 is not divisible by --heads 3");
    CHECK_ERR(parse(&c, "--seq-len 300 --max-seq-len 256"), FSDP_EINVAL,
              "--seq-len 300 is longer than --max-seq-len");
    CHECK_ERR(parse(&c, "--batch 0"), FSDP_EINVAL, "--batch 0 is outside");
    CHECK_ERR(parse(&c, "--batch -3"), FSDP_EINVAL, "--batch");
    CHECK_ERR(parse(&c, "--batch 10 --micro-batches 4"), FSDP_EINVAL, "--micro-batches 4");
    CHECK_ERR(parse(&c, "--layers abc"), FSDP_EINVAL, "--layers: \"abc\" is not a whole number");
    CHECK_ERR(parse(&c, "--layers 3x"), FSDP_EINVAL, "--layers");
    CHECK_ERR(parse(&c, "--lr nan"), FSDP_EINVAL, "--lr");
    /* 1e-310 is finite (a subnormal double) but would vanish in the float optimizer: "too small". */
    CHECK_ERR(parse(&c, "--lr 1e-310"), FSDP_EINVAL, "--lr 1e-310 is too small");
    CHECK_ERR(parse(&c, "--lr 1e-400"), FSDP_EINVAL, "--lr 1e-400 is too small");
    CHECK_ERR(parse(&c, "--clip 1e-39"), FSDP_EINVAL, "--clip 1e-39 is too small");
    CHECK_ERR(parse(&c, "--clip 1e400"), FSDP_EINVAL, "--clip: \"1e400\" is not a finite number");
    CHECK_OK(parse(&c, "--lr 1e-37 --min-lr 0"));
    CHECK(c.lr == 1e-37 && c.min_lr == 0);
    CHECK_ERR(parse(&c, "--lr"), FSDP_EINVAL, "--lr needs a value");
    CHECK_ERR(parse(&c, "--precision half"), FSDP_EINVAL, "fp32|mixed");
    CHECK_ERR(parse(&c, "--bogus 1"), FSDP_EINVAL, "unknown flag --bogus");
    CHECK_ERR(parse(&c, "--text a"), FSDP_EINVAL, "unknown flag --text for `fsdp-train train`");
    CHECK_ERR(parse(&c, "frobnicate"), FSDP_EINVAL, "unknown command \"frobnicate\"");
    CHECK_ERR(parse(&c, "--layers 2 stray"), FSDP_EINVAL, "unexpected argument \"stray\"");
    CHECK_ERR(parse(&c, "--recompute=maybe"), FSDP_EINVAL, "--recompute");
    CHECK_ERR(parse(&c, "--min-lr 1 --lr 0.1"), FSDP_EINVAL, "--min-lr");
    CHECK_ERR(parse(&c, "--data="), FSDP_EINVAL, "--data needs a non-empty value");
    CHECK_ERR(parse(&c, "prepare --out d"), FSDP_EINVAL, "--text");
    CHECK_ERR(parse(&c, "prepare --text --out d"), FSDP_EINVAL, "--text needs at least one file");
    CHECK_ERR(parse(&c, "export --checkpoint x"), FSDP_EINVAL, "--out");
    CHECK_ERR(parse(&c, "sample"), FSDP_EINVAL, "--checkpoint");
    /* The world-size check happens once the world is known. */
    CHECK_OK(parse(&c, "--batch 6 --micro-batches 2"));
    CHECK_OK(fsdp_train_config_check(&c, 3));
    CHECK_ERR(fsdp_train_config_check(&c, 2), FSDP_EINVAL,
              "--batch 6 is not divisible by --micro-batches 2 x 2 ranks");
}

static void test_json(void) {
    fsdp_train_config c, d = fsdp_train_config_default();
    CHECK_OK(parse(
        &c, "--layers 3 --width 48 --heads 6 --vocab 300 --seq-len 20 --max-seq-len 40 --precision fp32"));
    cJSON *j = fsdp_train_config_to_json(&c);
    CHECK(j != NULL);
    char *text = cJSON_PrintUnformatted(j);
    cJSON *back = cJSON_Parse(text);
    CHECK_OK(fsdp_train_config_from_json(&d, back, "manifest.json"));
    CHECK(d.layers == 3 && d.width == 48 && d.heads == 6 && d.vocab == 300 && d.seq_len == 20 &&
          d.max_seq_len == 40 && d.precision == FSDP_PRECISION_FP32 && d.seed == c.seed);
    cJSON_ReplaceItemInObject(back, "heads", cJSON_CreateNumber(5)); /* 48 % 5 != 0 */
    CHECK_ERR(fsdp_train_config_from_json(&d, back, "m.json"), FSDP_EFORMAT, "inconsistent model shape");
    cJSON_ReplaceItemInObject(back, "heads", cJSON_CreateString("six"));
    CHECK_ERR(fsdp_train_config_from_json(&d, back, "m.json"), FSDP_EFORMAT, "\"heads\" has the wrong type");
    cJSON_DeleteItemFromObject(back, "layers");
    CHECK_ERR(fsdp_train_config_from_json(&d, back, "m.json"), FSDP_EFORMAT, "lacks \"layers\"");
    cJSON_Delete(back);
    cJSON_free(text);
    cJSON_Delete(j);
    /* Usage and settings print without trouble and mention the flag names. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fsdp_train_usage(f, FSDP_CMD_TRAIN);
    fsdp_train_config_print(f, &c);
    fclose(f);
    const char *names[] = {"--data",
                           "--layers",
                           "--width",
                           "--heads",
                           "--vocab",
                           "--seq-len",
                           "--batch",
                           "--micro-batches",
                           "--lr",
                           "--warmup",
                           "--weight-decay",
                           "--clip",
                           "--precision",
                           "--strategy",
                           "--main-grad",
                           "--accum",
                           "--recompute",
                           "--steps",
                           "--eval-every",
                           "--seed",
                           "--checkpoint-dir",
                           "--checkpoint-every",
                           "--resume",
                           "--metrics"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECKF(strstr(buf, names[i]) != NULL, "%s", names[i]);
    free(buf);
}

static char tmp_dir[64];

/* Writes text to tmp_dir/name; returns the path (static buffer, one at a time). */
static const char *write_toml(const char *name, const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* The manifest's JSON record of a config, as text (to compare two configs setting by setting). */
static char *record(const fsdp_train_config *c) {
    cJSON *j = fsdp_train_config_to_json(c);
    cJSON_DeleteItemFromObject(j, "config"); /* the file's name: the only setting that differs */
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return t;
}

static void test_toml(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_config_XXXXXX");
    CHECK(mkdtemp(tmp_dir) != NULL);
    /* Every kind of setting through the file equals the same settings as flags. */
    const char *flags = "--layers 6 --width 96 --heads 3 --seq-len 64 --max-seq-len 128 --lr 0.001 "
                        "--precision fp32 --strategy grad-op --recompute --seed 99 --data /x/y "
                        "--metrics m.jsonl --clip 0 --eps 1e-7 --threads 2";
    const char *toml =
        "# every kind: integers, floats (one written as an integer), strings, an enum, a bool\n"
        "layers = 6\nwidth = 96\nheads = 3\nseq-len = 64\nmax_seq_len = 128\n"
        "lr = 1e-3\nprecision = \"fp32\"\nstrategy = 'grad-op'\nrecompute = true\n"
        "seed = 99\ndata = \"/x/y\"\nmetrics = \"m.jsonl\"\nclip = 0\neps = 1e-7\n"
        "threads = 2\n";
    fsdp_train_config a, b;
    CHECK_OK(parse(&a, flags));
    char line[512];
    snprintf(line, sizeof line, "--config %s", write_toml("all.toml", toml));
    CHECK_OK(parse(&b, line));
    char *ra = record(&a), *rb = record(&b);
    CHECKF(!strcmp(ra, rb), "flags %s\nfile  %s", ra, rb);
    free(ra);
    free(rb);
    CHECK(b.config_file && strstr(b.config_file, "all.toml"));
    /* Flags override the file, wherever they stand. */
    snprintf(line, sizeof line, "--layers 2 --config=%s/all.toml --data /z --recompute=0", tmp_dir);
    CHECK_OK(parse(&b, line));
    CHECK(b.layers == 2 && !strcmp(b.data, "/z") && b.recompute == 0 && b.width == 96 && b.seed == 99);
    /* The file's values go through the flags' checks, and the consistency check sees the result. */
    snprintf(line, sizeof line, "--config %s", write_toml("range.toml", "\n\nlayers = 0\n"));
    CHECK_ERR(parse(&b, line), FSDP_EINVAL, "range.toml:3: --layers 0 is outside its range");
    snprintf(line, sizeof line, "--config %s", write_toml("shape.toml", "width = 100\nheads = 3\n"));
    CHECK_ERR(parse(&b, line), FSDP_EINVAL, "--width 100 is not divisible by --heads 3");
    CHECK_OK(parse(&b, strcat(line, " --heads 4"))); /* ... unless a flag fixes it */
    /* Wrong TOML types, unknown keys, tables, syntax: each message names the file and the line. */
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"layers = \"6\"\n", "bad.toml:1: \"layers\" must be an integer"},
        {"layers = 6.0\n", "\"layers\" must be an integer"},
        {"lr = \"fast\"\n", "\"lr\" must be a number"},
        {"recompute = 1\n", "\"recompute\" must be true or false"},
        {"precision = 1\n", "\"precision\" must be a string"},
        {"precision = \"fp8\"\n", "--precision: \"fp8\" is not one of fp32|mixed"},
        {"data = [\"a\"]\n", "\"data\" must be a single value, not an array"},
        {"\nwidht = 96\n", "bad.toml:2: unknown setting \"widht\""},
        {"text = [\"a\"]\n", "unknown setting \"text\" for `fsdp-train train`"},
        {"config = \"other.toml\"\n", "cannot name another"},
        {"[model]\nlayers = 6\n", "\"model\" is a table"},
        {"when = 1979-05-27\n", "\"when\" is a date or time"},
        {"layers = 6\nlayers = 7\n", "bad.toml:2:"},
        {"layers = \n", "bad.toml:1:"},
        {"lr = inf\n", "--lr: \"inf\" is not a finite number"},
        /* issue 39 item 5: a NUL would cut the C string ("ck\0.old" trained into "ck"), and two
         * spellings of one setting would leave one of them silently unused */
        {"checkpoint-dir = \"ck\\u0000.old\"\n", "bad.toml:1:18: \"checkpoint-dir\": a string holding NUL"},
        {"text = [\"b\\u0000c\", \"a\"]\n", "\"text\": a string holding NUL"},
        {"seq-len = 16\nseq_len = 32\n",
         "bad.toml:2: \"seq_len\" sets --seq-len, which \"seq-len\" (line 1)"},
        {"micro_batches = 2\n\nmicro-batches = 2\n",
         "bad.toml:3: \"micro-batches\" sets --micro-batches, which \"micro_batches\" (line 1)"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(line, sizeof line, "--config %s", write_toml("bad.toml", bad[k].text));
        fsdp_status s = parse(&b, line);
        CHECKF(s == FSDP_EINVAL && strstr(fsdp_last_error(), bad[k].needle), "%s -> %s", bad[k].text,
               fsdp_last_error());
    }
    snprintf(line, sizeof line, "--config %s/none.toml", tmp_dir);
    CHECK_ERR(parse(&b, line), FSDP_EINVAL, "cannot open");
    CHECK_ERR(parse(&b, "--config /dev/null"), FSDP_EINVAL, "not a regular file");
    CHECK_ERR(parse(&b, "--config a.toml --config b.toml"), FSDP_EINVAL, "--config given twice");
    CHECK_ERR(parse(&b, "--config"), FSDP_EINVAL, "--config needs a value");
    /* --help wins over a file that does not exist. */
    CHECK_OK(parse(&b, "--config /nonexistent.toml --help"));
    CHECK(b.help == 1);
    /* Another command's settings, an array of strings for --text. */
    snprintf(line, sizeof line, "prepare --config %s",
             write_toml("prep.toml", "text = [\"a.txt\", 'b.txt']\nout = \"d\"\nval_fraction = 0.25\n"));
    CHECK_OK(parse(&b, line));
    CHECK(b.cmd == FSDP_CMD_PREPARE && b.n_texts == 2 && !strcmp(b.texts[0], "a.txt") &&
          !strcmp(b.texts[1], "b.txt") && b.texts[2] == NULL && !strcmp(b.out, "d") &&
          b.val_fraction == 0.25);
    CHECK_ERR(parse(&b, strcat(line, " --layers 3")), FSDP_EINVAL, "unknown flag --layers");
    /* The resolved settings print and go into the record with the file's name. */
    snprintf(line, sizeof line, "--config %s/all.toml", tmp_dir);
    CHECK_OK(parse(&b, line));
    cJSON *j = fsdp_train_config_to_json(&b);
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(j, "config");
    CHECK(cJSON_IsString(cf) && strstr(cf->valuestring, "all.toml"));
    cJSON_Delete(j);
    char cmdline[256];
    snprintf(cmdline, sizeof cmdline, "rm -rf %s", tmp_dir);
    CHECK(system(cmdline) == 0);
}

/* Random argument vectors from a pool of words: parse must return OK or EINVAL with a message. */
static void test_fuzz(void) {
    const char *pool[] = {"--layers",
                          "--width",
                          "--heads",
                          "3",
                          "0",
                          "-1",
                          "99999999999",
                          "1e9",
                          "x",
                          "",
                          "--batch",
                          "--lr",
                          "nan",
                          "--precision",
                          "mixed",
                          "--text",
                          "prepare",
                          "export",
                          "--resume",
                          "--resume=",
                          "--=",
                          "--",
                          "-",
                          "--out",
                          "sample",
                          "--top-k",
                          "1.5",
                          "--checkpoint",
                          "--seq-len=",
                          "--max-seq-len",
                          "--micro-batches",
                          "%",
                          "--doc-sep"};
    const int npool = (int)(sizeof pool / sizeof pool[0]);
    uint64_t st = 12345;
    int clean = 1;
    for (int it = 0; it < 20000; it++) {
        char *argv[9];
        int argc = 1 + (int)(st % 8);
        argv[0] = "fsdp-train";
        for (int i = 1; i < argc; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            argv[i] = (char *)pool[(st >> 33) % (uint64_t)npool];
        }
        argv[argc] = NULL;
        fsdp_train_config c;
        fsdp_status s = fsdp_train_config_parse(&c, argc, argv);
        if (!(s == FSDP_OK || (s == FSDP_EINVAL && fsdp_last_error()[0] != '\0'))) clean = 0;
        if (s == FSDP_OK && !c.help && c.cmd == FSDP_CMD_TRAIN &&
            (c.width % c.heads || c.seq_len > c.max_seq_len))
            clean = 0;
    }
    CHECK(clean);
}

int main(void) {
    test_values();
    test_errors();
    test_json();
    test_toml();
    test_fuzz();
    return TEST_MAIN_END();
}
