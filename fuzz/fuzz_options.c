/* libFuzzer target: the command-line option parser (src/cli/args.c) with a
 * table of every option kind and range form, on argv made of the input's
 * NUL-separated words. A parse that succeeds leaves every given number
 * inside its range (never NaN) and marks what it wrote; a refusal says why. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

enum { MAX_WORDS = 32 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int count = 0, flag = 0;
    double ratio = 0, any = 0;
    const char *name = NULL;
    DfStringList list = {0};
    const DfOption options[] = {
        {"count", DF_OPT_INT, &count, "N", "an int in 1..4096", 0, DF_RANGE(1, 4096)},
        {"ratio", DF_OPT_DOUBLE, &ratio, "R", "a double in (0, 10]", 0, DF_RANGE_POSITIVE(10)},
        {"any", DF_OPT_DOUBLE, &any, "X", "any finite double", 0},
        {"name", DF_OPT_STRING, &name, "S", "a string", 0},
        {"item", DF_OPT_STRING_LIST, &list, "S", "repeatable", 0},
        {"flag", DF_OPT_FLAG, &flag, NULL, "a flag", 0},
    };
    const DfCommandSpec spec = {"fuzz", "fuzzed options", "PATH", NULL, options, DF_COUNT(options)};
    char *text = malloc(size + 1), *argv[MAX_WORDS + 1];
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    argv[argc++] = "fuzz";
    for (size_t i = 0; i < size && argc < MAX_WORDS; i += strlen(text + i) + 1) argv[argc++] = text + i;
    argv[argc] = NULL;
    DfParsedArgs parsed;
    DfError err = {{0}};
    if (df_parse_args(&spec, argc, argv, &parsed, &err) == 0) {
        if (df_option_given(&spec, &parsed, "count") && (count < 1 || count > 4096)) abort();
        if (df_option_given(&spec, &parsed, "ratio") && !(ratio > 0 && ratio <= 10)) abort();
        if (df_option_given(&spec, &parsed, "any") && !isfinite(any)) abort();
        if (!df_option_given(&spec, &parsed, "count") && count != 0) abort(); /* unset stays as it was */
        if (list.count > 64) abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    free(text);
    return 0;
}
