#include "cli/args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/choice_names.h"
#include "base/edit_distance.h"

int df_option_kind_is_text(DfOptionKind kind) {
    return kind == DF_OPT_STRING || kind == DF_OPT_PATH || kind == DF_OPT_JSON;
}

int df_option_kind_is_integer(DfOptionKind kind) {
    return kind == DF_OPT_INT || kind == DF_OPT_INT64 || kind == DF_OPT_UINT64;
}

static const DfOption *find_option(const DfCommandSpec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_options; i++) {
        const char *n = spec->options[i].name, *alias = spec->options[i].alias;
        if (strlen(n) == len && strncmp(n, name, len) == 0) return &spec->options[i];
        if (alias && strlen(alias) == len && strncmp(alias, name, len) == 0) return &spec->options[i];
    }
    return NULL;
}

void df_range_text(const DfRange *r, int integer, char *out, size_t cap) {
    if (integer && !r->min_open && !r->max_open) {
        snprintf(out, cap, "%.0f..%.0f", r->min, r->max);
        return;
    }
    snprintf(out, cap, "%c%.10g, %.10g%c", r->min_open ? '(' : '[', r->min, r->max, r->max_open ? ')' : ']');
}

static int in_range(const DfRange *r, double v) {
    if (!r->set) return 1;
    if (r->min_open ? !(v > r->min) : !(v >= r->min)) return 0;
    if (r->max_open ? !(v < r->max) : !(v <= r->max)) return 0;
    return 1;
}

static int out_of_range(const DfOption *o, const char *value, DfError *err) {
    char range[96];
    df_range_text(&o->range, df_option_kind_is_integer(o->kind), range, sizeof range);
    return df_fail(err, "--%s must be in %s, got %s", o->name, range, value);
}

/* INT, INT64 and UINT64 (an unranged UINT64 takes 0..INT64_MAX). */
static int store_int(const DfOption *o, const char *value, DfError *err) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    long long lo = o->kind == DF_OPT_INT ? INT_MIN : o->kind == DF_OPT_UINT64 ? 0 : LLONG_MIN;
    long long hi = o->kind == DF_OPT_INT ? INT_MAX : LLONG_MAX;
    if (errno || !*value || *end || v < lo || v > hi) {
        if (o->range.set && *value && !*end) return out_of_range(o, value, err);
        return df_fail(err, "--%s: expected an integer, got '%s'", o->name, value);
    }
    if (!in_range(&o->range, (double)v)) return out_of_range(o, value, err);
    if (o->kind == DF_OPT_INT) *(int *)o->dest = (int)v;
    else if (o->kind == DF_OPT_INT64) *(int64_t *)o->dest = v;
    else *(uint64_t *)o->dest = (uint64_t)v;
    return 0;
}

static int store_choice(const DfOption *o, const char *value, DfError *err) {
    int v = df_choice_value(o->metavar, value, strlen(value));
    if (v < 0) {
        char names[256];
        df_choice_list_text(o->metavar, names, sizeof names);
        return df_fail(err, "--%s takes %s, not '%s'", o->name, names, value);
    }
    *(int *)o->dest = v;
    return 0;
}

static int store_double(const DfOption *o, const char *value, DfError *err) {
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (!*value || *end) return df_fail(err, "--%s: expected a number, got '%s'", o->name, value);
    if (!isfinite(v)) return df_fail(err, "--%s: expected a finite number, got '%s'", o->name, value);
    if (errno == ERANGE && fabs(v) > 1) return df_fail(err, "--%s: '%s' is out of range of a double", o->name, value);
    if (!in_range(&o->range, v)) return out_of_range(o, value, err);
    *(double *)o->dest = v;
    return 0;
}

static int store_value(const DfOption *o, const char *value, DfError *err) {
    switch (o->kind) {
    case DF_OPT_INT:
    case DF_OPT_INT64:
    case DF_OPT_UINT64:
        return store_int(o, value, err);
    case DF_OPT_DOUBLE:
        return store_double(o, value, err);
    case DF_OPT_CHOICE:
        return store_choice(o, value, err);
    case DF_OPT_STRING:
    case DF_OPT_PATH:
    case DF_OPT_JSON:
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

/* The option `name` of spec; aborts on a name the spec does not have (a bug of the command). */
static const DfOption *option_named(const DfCommandSpec *spec, const char *name) {
    const DfOption *o = find_option(spec, name, strlen(name));
    if (!o) {
        fprintf(stderr, "dflash %s: internal error: no option --%s\n", spec->name, name);
        abort();
    }
    return o;
}

int df_option_given(const DfCommandSpec *spec, const DfParsedArgs *parsed, const char *name) {
    return parsed->given[option_named(spec, name) - spec->options];
}

int df_option_set(const DfCommandSpec *spec, const char *name, const char *value, DfError *err) {
    const DfOption *o = option_named(spec, name);
    if (o->kind == DF_OPT_FLAG) {
        *(int *)o->dest = 1;
        return 0;
    }
    return store_value(o, value, err);
}

/* "unknown option '--lenght'; did you mean '--length'?" when one is a typo away. */
static int unknown_option(const DfCommandSpec *spec, const char *name, size_t len, DfError *err) {
    const char *names[DF_MAX_OPTIONS + 1];
    for (int i = 0; i < spec->n_options; i++) names[i] = spec->options[i].name;
    names[spec->n_options] = "quiet";
    for (const char *const *h = spec->other_tools_options; h && h[0]; h += 2)
        if (strlen(h[0]) == len && strncmp(h[0], name, len) == 0)
            return df_fail(err, "%s: unknown option '--%.*s': %s (see 'dflash %s --help')", spec->name, (int)len, name,
                           h[1], spec->name);
    const char *near = df_closest_name(name, len, names, spec->n_options + 1);
    if (near)
        return df_fail(err, "%s: unknown option '--%.*s'; did you mean '--%s'? (see 'dflash %s --help')", spec->name,
                       (int)len, name, near, spec->name);
    return df_fail(err, "%s: unknown option '--%.*s' (see 'dflash %s --help')", spec->name, (int)len, name, spec->name);
}

int df_parse_args(const DfCommandSpec *spec, int argc, char **argv, DfParsedArgs *out, DfError *err) {
    memset(out, 0, sizeof *out);
    if (spec->n_options > DF_MAX_OPTIONS) return df_fail(err, "%s: too many options in the table", spec->name);
    unsigned char *seen = out->given;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            df_print_command_help(spec);
            out->help_shown = 1;
            return 0;
        }
        if (strcmp(a, "--quiet") == 0) {
            out->quiet = 1;
            continue;
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
        if (!o) return unknown_option(spec, name, len, err);
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
        if (o->required && !seen[i])
            return df_fail(err, "%s: --%s is required (see 'dflash %s --help')", spec->name, o->name, spec->name);
    }
    return 0;
}

/* " (default 8192)", " (default: the target's)", or "" (none to say). */
static void default_text(const DfOption *o, char *out, size_t cap) {
    out[0] = '\0';
    if (o->default_text) {
        if (o->default_text[0]) snprintf(out, cap, " (default: %s)", o->default_text);
        return;
    }
    const void *v = o->default_value;
    char name[128];
    if (!v) return;
    switch (o->kind) {
    case DF_OPT_INT:
        snprintf(out, cap, " (default %d)", *(const int *)v);
        break;
    case DF_OPT_INT64:
        snprintf(out, cap, " (default %lld)", (long long)*(const int64_t *)v);
        break;
    case DF_OPT_UINT64:
        snprintf(out, cap, " (default %llu)", (unsigned long long)*(const uint64_t *)v);
        break;
    case DF_OPT_DOUBLE:
        snprintf(out, cap, " (default %g)", *(const double *)v);
        break;
    case DF_OPT_CHOICE:
        if (df_choice_name(o->metavar, *(const int *)v, name, sizeof name) == 0)
            snprintf(out, cap, " (default %s)", name);
        break;
    case DF_OPT_STRING:
    case DF_OPT_PATH:
    case DF_OPT_JSON:
        if (*(const char *const *)v) snprintf(out, cap, " (default %s)", *(const char *const *)v);
        break;
    case DF_OPT_FLAG:
    case DF_OPT_STRING_LIST:
        break;
    }
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
        char range[112] = "";
        if (o->range.set) {
            char text[96];
            df_range_text(&o->range, df_option_kind_is_integer(o->kind), text, sizeof text);
            snprintf(range, sizeof range, " (in %s)", text);
        }
        char alias[80] = "", dflt[512];
        if (o->alias) snprintf(alias, sizeof alias, " (also --%s)", o->alias);
        default_text(o, dflt, sizeof dflt);
        printf("  %-28s %s%s%s%s%s\n", left, o->help, dflt, range, alias, o->required ? " (required)" : "");
    }
    printf("  %-28s %s\n", "--quiet", "no progress lines or notes: only errors and the result");
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
