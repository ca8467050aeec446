#define _XOPEN_SOURCE 700 /* realpath */
/* The resume identity, generated from train/train_options.def. */
#include "train/run_options.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json_diff.h"
#include "train/run_record.h"

/* ---- one writer per kind; a string option without a value is left out ----
 * (only the kinds of the identity's options have one: an option of another
 * kind marked for it fails to compile until its kind's writer is added) */

static void add_INT(cJSON *j, const char *key, const int *v) { cJSON_AddNumberToObject(j, key, *v); }
static void add_INT64(cJSON *j, const char *key, const int64_t *v) { cJSON_AddNumberToObject(j, key, (double)*v); }
static void add_DOUBLE(cJSON *j, const char *key, const double *v) { cJSON_AddNumberToObject(j, key, *v); }
/* as decimal text: all 64 bits, beyond a JSON number's 53 */
static void add_UINT64(cJSON *j, const char *key, const uint64_t *v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)*v);
    cJSON_AddStringToObject(j, key, text);
}
/* Absolute when it resolves, else as given. */
static void add_PATH(cJSON *j, const char *key, const char *const *v) {
    if (!*v) return;
    char *r = realpath(*v, NULL);
    cJSON_AddStringToObject(j, key, r ? r : *v);
    free(r);
}
/* Normalized JSON (spacing alone is no difference); as text when it does not parse. */
static void add_JSON(cJSON *j, const char *key, const char *const *v) {
    if (!*v) return;
    cJSON *parsed = cJSON_Parse(*v);
    if (parsed) cJSON_AddItemToObject(j, key, parsed);
    else cJSON_AddStringToObject(j, key, *v);
}

/* The options marked for the identity. ID_UNLESS_DEFAULT: only when not the
 * default, which runs from before the option had (a checkpoint without it
 * resumes with the default, one with it only with the same value). */
static void add_options(cJSON *j, const DfTrainOptions *r) {
#define ID_NO(kind, name, field, value)
#define ID_YES(kind, name, field, value) add_##kind(j, name, &r->field);
#define ID_UNLESS_DEFAULT(kind, name, field, value) \
    if (r->field != (value)) add_##kind(j, name, &r->field);
#define DF_TRAIN_OPTION(name, kind, home, field, value, args, identity, ...) identity(kind, name, field, value)
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
#undef ID_NO
#undef ID_YES
#undef ID_UNLESS_DEFAULT
}

/* What the options name rather than say: the data's size and tokenizer, the
 * tapped layers, random target weights. */
static void add_derived(cJSON *j, const DfTrainOptions *o, const DfDrafterConfig *dcfg, const DfTokenStore *store) {
    if (o->random_target_weights) cJSON_AddStringToObject(j, "target_weights", "random");
    cJSON_AddNumberToObject(j, "data_samples", (double)df_token_store_num_samples(store));
    cJSON_AddNumberToObject(j, "data_tokens", (double)df_token_store_num_tokens(store));
    char fp[32];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)df_token_store_fingerprint(store));
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", fp);
    cJSON *taps = cJSON_AddArrayToObject(j, "target_layer_ids");
    for (int i = 0; i < dcfg->n_taps; i++) cJSON_AddItemToArray(taps, cJSON_CreateNumber(dcfg->target_layer_ids[i]));
}

char *df_run_options_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg, const DfTokenStore *store,
                          int64_t total_steps) {
    DfTrainOptions r;
    char sliding[4 * DF_MAX_DRAFT_LAYERS + 8];
    df_run_record_resolve(o, dcfg, &r, sliding, sizeof sliding);
    r.steps = total_steps; /* the schedule's length, however it was given */
    cJSON *j = cJSON_CreateObject();
    add_options(j, &r);
    add_derived(j, o, dcfg, store);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

/* ---- comparing a checkpoint's identity with this run's -------------------- */

/* The key an identity option's name has when spelled with underscores
 * ("token_budget", as checkpoints written before the option names were the
 * keys have it): its name, or NULL for any other key. */
static const char *option_key_of(const char *key) {
    static const char *const names[] = {
#define ID_NO(name)
#define ID_YES(name) name,
#define ID_UNLESS_DEFAULT(name) name,
#define DF_TRAIN_OPTION(name, kind, home, field, value, args, identity, ...) identity(name)
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
#undef ID_NO
#undef ID_YES
#undef ID_UNLESS_DEFAULT
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        int same = strlen(key) == n;
        for (size_t k = 0; same && k < n; k++) same = key[k] == (names[i][k] == '-' ? '_' : names[i][k]);
        if (same) return names[i];
    }
    return NULL;
}

/* The stored identity with the option keys spelled as the options are
 * (consumes stored; NULL stays NULL). */
static cJSON *with_option_keys(cJSON *stored) {
    if (!cJSON_IsObject(stored)) return stored;
    cJSON *out = cJSON_CreateObject();
    for (const cJSON *item = stored->child; item; item = item->next) {
        const char *name = option_key_of(item->string);
        cJSON_AddItemToObject(out, name ? name : item->string, cJSON_Duplicate(item, 1));
    }
    cJSON_Delete(stored);
    return out;
}

/* Options that older versions did not record: a checkpoint without them is
 * of the shape they name (the drafter's attention shape; the checkpoint's
 * drafter_config, checked when it loads, holds it), so their absence is no
 * difference. */
static int recorded_later(const char *key) {
    return strcmp(key, "draft-heads") == 0 || strcmp(key, "draft-kv-heads") == 0 || strcmp(key, "draft-head-dim") == 0;
}

/* The first option of `now` whose value differs from `old`'s: fails naming it. */
static int first_difference(const cJSON *old_opts, const cJSON *now_opts, const char *path, DfError *err) {
    const cJSON *item;
    cJSON_ArrayForEach(item, now_opts) {
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(old_opts, item->string);
        if (!old && recorded_later(item->string)) continue;
        char *now_text = cJSON_PrintUnformatted(item);
        char *old_text = old ? cJSON_PrintUnformatted(old) : NULL;
        int same = old_text && strcmp(now_text, old_text) == 0;
        char name[128];
        df_setting_name(item->string, name, sizeof name);
        if (!same)
            df_fail(err, "--resume: %s differs: the checkpoint %s has %s, this run %s (refusing to mix runs)", name,
                    path, old_text ? old_text : "nothing", now_text);
        cJSON_free(now_text);
        cJSON_free(old_text);
        if (!same) return -1;
    }
    return 0;
}

int df_run_options_compare(const char *stored, const char *current, const char *path, DfError *err) {
    if (strcmp(stored, current) == 0) return 0;
    cJSON *a = with_option_keys(cJSON_Parse(stored)), *b = cJSON_Parse(current);
    int rc = 0;
    if (!a || !b || first_difference(a, b, path, err)) rc = -1;
    /* every option of this run matches: the checkpoint may still have more */
    for (const cJSON *item = a ? a->child : NULL; rc == 0 && item; item = item->next) {
        char name[128];
        df_setting_name(item->string, name, sizeof name);
        if (!cJSON_GetObjectItemCaseSensitive(b, item->string))
            rc = df_fail(err, "--resume: the checkpoint %s records %s, which this run does not (refusing to mix runs)",
                         path, name);
    }
    if (rc && !(a && b)) df_fail(err, "--resume: the options of %s differ from this run's", path);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return rc;
}
