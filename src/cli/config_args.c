/* --config FILE.json as command-line tokens before the given ones. */
#include "cli/config_args.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "json/json_parse.h"

static const char *find_config_path(int argc, char **argv, DfError *err, int *bad) {
    *bad = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--config=", 9) == 0) path = argv[i] + 9;
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
        else if (strcmp(argv[i], "--config") == 0) *bad = df_fail(err, "--config needs a value (FILE.json)");
    }
    return path;
}

static const DfOption *option_named(const DfCommandSpec *spec, const char *name) {
    for (int i = 0; i < spec->n_options; i++)
        if (strcmp(spec->options[i].name, name) == 0) return &spec->options[i];
    return NULL;
}

static int is_ignored(const char *key, const char *const *ignored) {
    for (int i = 0; ignored && ignored[i]; i++)
        if (strcmp(key, ignored[i]) == 0) return 1;
    return 0;
}

static void push(DfConfigArgs *a, const char *text) {
    a->owned = df_xrealloc(a->owned, (size_t)(a->n_owned + 1) * sizeof *a->owned, "config tokens");
    a->owned[a->n_owned++] = df_xstrdup(text);
}

/* The value's text for an option of its kind, or a message on a wrong type. */
static int value_text(const char *path, const DfOption *o, const cJSON *v, char *buf, size_t cap, DfError *err) {
    if (df_option_kind_is_text(o->kind) && cJSON_IsString(v)) {
        if (strlen(v->valuestring) >= cap) return df_fail(err, "%s: \"%s\": value too long", path, o->name);
        snprintf(buf, cap, "%s", v->valuestring);
        return 0;
    }
    if (o->kind == DF_OPT_CHOICE && cJSON_IsString(v)) { /* the name; the command line checks it */
        snprintf(buf, cap, "%.*s", (int)cap - 1, v->valuestring);
        return 0;
    }
    if (df_option_kind_is_integer(o->kind) && cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
        fabs(v->valuedouble) < 1e18) {
        snprintf(buf, cap, "%.0f", v->valuedouble);
        return 0;
    }
    if (o->kind == DF_OPT_DOUBLE && cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%.17g", v->valuedouble);
        return 0;
    }
    const char *want = df_option_kind_is_text(o->kind) || o->kind == DF_OPT_CHOICE ? "a string"
                       : df_option_kind_is_integer(o->kind)                     ? "an integer"
                                                                                 : "a number";
    return df_fail(err, "%s: \"%s\" must be %s or null", path, o->name, want);
}

static int add_entry(const DfCommandSpec *spec, const char *path, const cJSON *item, DfConfigArgs *a, DfError *err) {
    const DfOption *o = option_named(spec, item->string);
    if (!o || strcmp(item->string, "config") == 0 || o->kind == DF_OPT_STRING_LIST)
        return df_fail(err, "%s: \"%s\" is not an option of dflash %s (see 'dflash %s --help')", path, item->string,
                       spec->name, spec->name);
    if (cJSON_IsNull(item)) return 0;
    char flag[160];
    snprintf(flag, sizeof flag, "--%s", o->name);
    if (o->kind == DF_OPT_FLAG) {
        if (!cJSON_IsBool(item)) return df_fail(err, "%s: \"%s\" must be true or false", path, o->name);
        if (cJSON_IsTrue(item)) push(a, flag);
        return 0;
    }
    char value[4096];
    if (value_text(path, o, item, value, sizeof value, err)) return -1;
    push(a, flag);
    push(a, value);
    return 0;
}

static int read_config(const DfCommandSpec *spec, const char *path, const char *const *ignored, DfConfigArgs *a,
                       DfError *err) {
    char *text = df_read_text_file(path, NULL, err);
    if (!text) return df_context(err, "--config");
    cJSON *root = NULL;
    int parsed = df_json_parse(text, strlen(text), path, 0, &root, err);
    int rc = 0;
    if (parsed != DF_JSON_OK) rc = df_context(err, "--config");
    else if (!cJSON_IsObject(root)) rc = df_fail(err, "--config %s: not a JSON object of options", path);
    for (const cJSON *item = root ? root->child : NULL; rc == 0 && item; item = item->next)
        if (!is_ignored(item->string, ignored)) rc = add_entry(spec, path, item, a, err);
    cJSON_Delete(root);
    free(text);
    return rc;
}

int df_config_args_expand(const DfCommandSpec *spec, int argc, char **argv, const char *const *ignored,
                          DfConfigArgs *out, DfError *err) {
    memset(out, 0, sizeof *out);
    int bad;
    const char *path = find_config_path(argc, argv, err, &bad);
    if (bad) return -1;
    if (path && read_config(spec, path, ignored, out, err)) {
        df_config_args_free(out);
        return -1;
    }
    out->argc = argc + out->n_owned;
    out->argv = df_xcalloc((size_t)out->argc + 1, sizeof *out->argv, "argv");
    out->argv[0] = argv[0];
    for (int i = 0; i < out->n_owned; i++) out->argv[1 + i] = out->owned[i];
    for (int i = 1; i < argc; i++) out->argv[out->n_owned + i] = argv[i];
    return 0;
}

void df_config_args_free(DfConfigArgs *a) {
    for (int i = 0; i < a->n_owned; i++) free(a->owned[i]);
    free(a->owned);
    free(a->argv);
    memset(a, 0, sizeof *a);
}
