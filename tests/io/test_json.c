/* test_json.c — the strict JSON reader (src/io/json.h): a key repeated in any object of the tree is
 * FSDP_EFORMAT naming the file and the key, in small objects (pairwise check) and large ones (hash set),
 * at any depth, after deep nesting and in arrays of objects; the same key in different objects, and
 * valid files, load. Text after the value (but white space) is FSDP_EFORMAT naming its byte. */
#include "test_util.h"

#include "fsdp.h"
#include "io/json.h"

static fsdp_status parse(const char *text) {
    cJSON *j = NULL;
    fsdp_status s = fsdp_json_parse(text, strlen(text), "x.json", &j);
    if (s == FSDP_OK)
        CHECK(j != NULL);
    else
        CHECK(j == NULL);
    cJSON_Delete(j);
    return s;
}

/* {"k0": 0, ..., "k<n-1>": n-1} with key dup (if >= 0) repeated at the end. */
static char *big_object(int n, int dup) {
    size_t cap = (size_t)n * 24 + 64, len = 0;
    char *t = malloc(cap);
    len += (size_t)snprintf(t + len, cap - len, "{");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(t + len, cap - len, "%s\"k%d\": %d", i ? ", " : "", i, i);
    if (dup >= 0) len += (size_t)snprintf(t + len, cap - len, ", \"k%d\": 1", dup);
    snprintf(t + len, cap - len, "}");
    return t;
}

int main(void) {
    CHECK_OK(parse("{\"a\": 1, \"b\": {\"a\": 2, \"b\": [ {\"a\": 3}, {\"a\": 4} ]}}"));
    CHECK_OK(parse("[1, 2, {\"x\": null}, [], {}]"));
    CHECK_OK(parse("7"));
    CHECK_ERR(parse("{\"a\": 1, \"a\": 2}"), FSDP_EFORMAT, "x.json: the key \"a\" appears twice");
    CHECK_ERR(parse("{\"a\": {\"b\": [ {\"c\": 1}, {\"d\": 1, \"d\": 2} ]}}"), FSDP_EFORMAT,
              "\"d\" appears twice");
    /* a repeated key in a sibling after a deep descent and return */
    CHECK_ERR(parse("{\"a\": [[[[{\"z\": [[{}]]}]]]], \"b\": {\"q\": 1, \"q\": 1}}"), FSDP_EFORMAT, "\"q\"");
    CHECK_ERR(parse("{\"a\": 1, \"b\": 2, \"a\": 3}"), FSDP_EFORMAT, "\"a\"");
    CHECK_ERR(parse("{\"a\": 1"), FSDP_EFORMAT, "x.json is not valid JSON");
    /* text after the value is damage; white space after it (a padded safetensors header) is not */
    CHECK_ERR(parse("{\"vocab\": 300} trailing"), FSDP_EFORMAT, "text after the value at byte 15");
    CHECK_ERR(parse("{\"a\": 1}{\"a\": 2}"), FSDP_EFORMAT, "text after the value at byte 8");
    CHECK_ERR(parse("7 8"), FSDP_EFORMAT, "text after the value at byte 2");
    CHECK_OK(parse("{\"a\": 1}  \n\t\r  "));
    {
        const char nul_tail[] = "{\"a\": 1}\0junk";
        cJSON *j = NULL;
        CHECK_ERR(fsdp_json_parse(nul_tail, sizeof nul_tail - 1, "x.json", &j), FSDP_EFORMAT,
                  "text after the value at byte 8");
        CHECK(j == NULL);
    }
    /* large objects go through the hash set */
    char *t = big_object(5000, -1);
    CHECK_OK(parse(t));
    free(t);
    t = big_object(5000, 4321);
    CHECK_ERR(parse(t), FSDP_EFORMAT, "\"k4321\" appears twice");
    free(t);
    t = big_object(17, 0);
    CHECK_ERR(parse(t), FSDP_EFORMAT, "\"k0\" appears twice");
    free(t);
    /* deep nesting: cJSON's limit (1000) refuses deeper files; at 900 levels the walk needs no recursion */
    char deep[4000];
    int n = 0;
    for (int i = 0; i < 900; i++)
        deep[n++] = '[';
    n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"a\": 1, \"a\": 2}");
    for (int i = 0; i < 900; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    CHECK_ERR(parse(deep), FSDP_EFORMAT, "\"a\" appears twice");
    return TEST_MAIN_END();
}
