#include "cli/args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const DfOption *find_option(const DfCommandSpec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_options; i++) {
        const char *n = spec->options[i].name;
        if (strlen(n) == len && strncmp(n, name, len) == 0) return &spec->options[i];
    }
    return NULL;
}

static int store_value(const DfOption *o, const char *value, DfError *err) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case DF_OPT_INT: {
        long v = strtol(value, &end, 10);
        if (errno || !*value || *end || v < INT_MIN || v > INT_MAX)
            return df_fail(err, "--%s: expected an integer, got '%s'", o->name, value);
        *(int *)o->dest = (int)v;
        return 0;
    }
    case DF_OPT_DOUBLE: {
        double v = strtod(value, &end);
        if (errno || !*value || *end) return df_fail(err, "--%s: expected a number, got '%s'", o->name, value);
        *(double *)o->dest = v;
        return 0;
    }
    case DF_OPT_STRING:
        *(const char **)o->dest = value;
        return 0;
    case DF_OPT_STRING_LIST: {
        DfStringList *l = o->dest;
        if (l->count >= DF_COUNT(l->items)) return df_fail(err, "--%s: given too many times", o->name);
        l->items[l->count++] = value;
        return 0;
    }
    case DF_OPT_FLAG:
        break;
    }
    return df_fail(err, "--%s: takes no value", o->name);
}

static int was_given(const DfOption *o, const unsigned char *seen, const DfCommandSpec *spec) {
    return seen[o - spec->options];
}

int df_parse_args(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, DfError *err) {
    memset(out, 0, sizeof *out);
    unsigned char seen[128] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            df_print_command_help(spec);
            out->help_shown = 1;
            return 0;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (!spec->positional) return df_fail(err, "%s: unexpected argument '%s' (see 'dflash %s --help')", spec->name, a, spec->name);
            if (out->n_positional >= DF_COUNT(out->positional)) return df_fail(err, "%s: too many arguments", spec->name);
            out->positional[out->n_positional++] = a;
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const DfOption *o = find_option(spec, name, len);
        if (!o) return df_fail(err, "%s: unknown option '%.*s' (see 'dflash %s --help')", spec->name, (int)len + 2, a, spec->name);
        seen[o - spec->options] = 1;
        if (o->kind == DF_OPT_FLAG) {
            if (eq) return df_fail(err, "--%s takes no value", o->name);
            *(int *)o->dest = 1;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) return df_fail(err, "--%s needs a value (%s)", o->name, o->metavar ? o->metavar : "VALUE");
            value = argv[++i];
        }
        if (store_value(o, value, err) != 0) return -1;
    }
    for (int i = 0; i < spec->n_options; i++) {
        const DfOption *o = &spec->options[i];
        if (o->required && !was_given(o, seen, spec))
            return df_fail(err, "%s: --%s is required (see 'dflash %s --help')", spec->name, o->name, spec->name);
    }
    return 0;
}

void df_print_command_help(const DfCommandSpec *spec) {
    printf("usage: dflash %s [options]%s%s\n\n%s\n", spec->name, spec->positional ? " " : "",
           spec->positional ? spec->positional : "", spec->summary);
    if (spec->details) printf("\n%s\n", spec->details);
    printf("\noptions:\n");
    for (int i = 0; i < spec->n_options; i++) {
        const DfOption *o = &spec->options[i];
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->kind == DF_OPT_FLAG ? "" : " ",
                 o->kind == DF_OPT_FLAG ? "" : (o->metavar ? o->metavar : "VALUE"));
        printf("  %-28s %s%s\n", left, o->help, o->required ? " (required)" : "");
    }
    printf("  %-28s %s\n", "--help", "show this help");
}

int df_parse_command_line(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, int *exit_code) {
    DfError err = {{0}};
    if (df_parse_args(spec, argc, argv, out, &err) != 0) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        *exit_code = 2;
        return 1;
    }
    *exit_code = 0;
    return out->help_shown;
}
