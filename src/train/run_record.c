#define _XOPEN_SOURCE 700 /* realpath */
/* The run record (args.json), generated from train/train_options.def. */
#include "train/run_record.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/atomic_file.h"
#include "base/choice_names.h"
#include "version.h"

/* The sliding layers as indices ("0,1,3"; "none"), NULL without a window. */
static const char *sliding_layers_text(const DfDrafterConfig *c, char *list, size_t cap) {
    if (c->sliding_window <= 0) return NULL;
    size_t n = 0;
    list[0] = '\0';
    for (int i = 0; i < c->num_layers && n < cap; i++)
        if (c->sliding[i]) n += (size_t)snprintf(list + n, cap - n, "%s%d", n ? "," : "", i);
    if (!n) snprintf(list, cap, "none");
    return list;
}

void df_run_record_resolve(const DfTrainOptions *o, const DfDrafterConfig *c, DfTrainOptions *r, char *sliding,
                           size_t cap) {
    *r = *o;
    r->data_source = o->data_source ? o->data_source : o->data_store;
    r->device = o->device ? o->device : "cpu";
    r->epochs = o->steps ? 0 : o->epochs;
    r->draft_layers = c->num_layers;
    r->intermediate_size = c->intermediate_size;
    r->block_size = c->block_size;
    r->draft_heads = c->num_heads;
    r->draft_kv_heads = c->num_kv_heads;
    r->draft_head_dim = c->head_dim;
    r->sliding_window = c->sliding_window;
    r->sliding_layers = sliding_layers_text(c, sliding, cap);
    r->num_taps = c->n_taps;
    r->mask_token_id = c->mask_token_id;
    r->gamma = c->gamma;
    if (!o->eval_data) r->eval_every = 0, r->eval_prompts = 0, r->eval_max_new_tokens = 0;
    if (o->layout != DF_LAYOUT_SPLIT) r->target_ranks = 0;
}

/* ---- one writer per kind: a value, or null (null_if_0: at 0, unset) ------ */

static void add_number(cJSON *j, const char *key, double v, int null_if_0) {
    if (null_if_0 && !(v > 0)) cJSON_AddNullToObject(j, key);
    else cJSON_AddNumberToObject(j, key, v);
}

static void add_FLAG(cJSON *j, const char *key, const int *v, int null_if_0, const char *names) {
    cJSON_AddBoolToObject(j, key, *v != 0);
}
static void add_INT(cJSON *j, const char *key, const int *v, int null_if_0, const char *names) {
    add_number(j, key, *v, null_if_0);
}
static void add_INT64(cJSON *j, const char *key, const int64_t *v, int null_if_0, const char *names) {
    add_number(j, key, (double)*v, null_if_0);
}
static void add_UINT64(cJSON *j, const char *key, const uint64_t *v, int null_if_0, const char *names) {
    add_number(j, key, (double)*v, null_if_0);
}
static void add_DOUBLE(cJSON *j, const char *key, const double *v, int null_if_0, const char *names) {
    add_number(j, key, *v, null_if_0);
}
static void add_STRING(cJSON *j, const char *key, const char *const *v, int null_if_0, const char *names) {
    if (*v) cJSON_AddStringToObject(j, key, *v);
    else cJSON_AddNullToObject(j, key);
}
static void add_JSON(cJSON *j, const char *key, const char *const *v, int null_if_0, const char *names) {
    add_STRING(j, key, v, null_if_0, names);
}
/* An absolute path where it resolves (so that the record works from any
 * directory), else the path as given; null for none. */
static void add_PATH(cJSON *j, const char *key, const char *const *v, int null_if_0, const char *names) {
    if (!*v) {
        cJSON_AddNullToObject(j, key);
        return;
    }
    char *abs = realpath(*v, NULL);
    cJSON_AddStringToObject(j, key, abs ? abs : *v);
    free(abs);
}
/* The value's name; null for a value without one (e.g. DF_SELECT_AUTO). */
static void add_CHOICE(cJSON *j, const char *key, const int *v, int null_if_0, const char *names) {
    char name[128];
    if (df_choice_name(names, *v, name, sizeof name) == 0) cJSON_AddStringToObject(j, key, name);
    else cJSON_AddNullToObject(j, key);
}

static void add_options(cJSON *j, const DfTrainOptions *r) {
#define ARGS_NO(name, kind, field, metavar)
#define ARGS_VALUE(name, kind, field, metavar) add_##kind(j, name, &r->field, 0, metavar);
#define ARGS_NULL_IF_0(name, kind, field, metavar) add_##kind(j, name, &r->field, 1, metavar);
#define DF_TRAIN_OPTION(name, kind, home, field, value, args, identity, metavar, ...) args(name, kind, field, metavar)
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
#undef ARGS_NO
#undef ARGS_VALUE
#undef ARGS_NULL_IF_0
}

char *df_run_record_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg, const char *device_description) {
    DfTrainOptions r;
    char sliding[4 * DF_MAX_DRAFT_LAYERS + 8];
    df_run_record_resolve(o, dcfg, &r, sliding, sizeof sliding);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "dflash_version", DF_VERSION);
    cJSON_AddStringToObject(j, "backends", df_backends_built_in());
    if (device_description) cJSON_AddStringToObject(j, "device_description", device_description);
    add_options(j, &r);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

int df_run_record_write(const char *path, const DfTrainOptions *o, const DfDrafterConfig *dcfg,
                        const char *device_description, DfError *err) {
    char *text = df_run_record_json(o, dcfg, device_description);
    if (!text) return df_fail(err, "%s: cannot build the run record (out of memory)", path);
    int rc = df_atomic_write_text(path, text, 1, err);
    cJSON_free(text);
    return rc;
}
