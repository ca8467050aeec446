#define _XOPEN_SOURCE 700 /* realpath */
#include "train/run_options.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json_diff.h"

/* Absolute path when it resolves, else the path as given. */
static void canonical(const char *path, char *out, size_t cap) {
    char *r = realpath(path, NULL);
    snprintf(out, cap, "%s", r ? r : path);
    free(r);
}

/* How conversations were rendered, recorded only when asked for (a run
 * without them, or from before these options, renders with the target's
 * template and no variables): the template's path and the variables as
 * normalized JSON, so that spacing alone is no difference. */
static void add_chat_options(cJSON *j, const DfTrainOptions *o) {
    if (o->chat_template) {
        char path[4096];
        canonical(o->chat_template, path, sizeof path);
        cJSON_AddStringToObject(j, "chat_template", path);
    }
    if (!o->chat_kwargs) return;
    cJSON *kwargs = cJSON_Parse(o->chat_kwargs);
    if (kwargs) cJSON_AddItemToObject(j, "chat_template_kwargs", kwargs);
    else cJSON_AddStringToObject(j, "chat_template_kwargs", o->chat_kwargs);
}

char *df_run_options_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg, const DfTokenStore *store,
                          int64_t total_steps) {
    char target[4096], data[4096];
    canonical(o->target_dir, target, sizeof target);
    canonical(o->data_source ? o->data_source : o->data_store, data, sizeof data);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", target);
    if (o->random_target_weights) cJSON_AddStringToObject(j, "target_weights", "random");
    cJSON_AddStringToObject(j, "data", data);
    add_chat_options(j, o);
    cJSON_AddNumberToObject(j, "data_samples", (double)df_token_store_num_samples(store));
    cJSON_AddNumberToObject(j, "data_tokens", (double)df_token_store_num_tokens(store));
    char fp[32];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)df_token_store_fingerprint(store));
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", fp);
    cJSON_AddNumberToObject(j, "steps", (double)total_steps);
    cJSON_AddNumberToObject(j, "epochs", o->steps ? 0.0 : (double)o->epochs);
    cJSON_AddNumberToObject(j, "draft_layers", dcfg->num_layers);
    cJSON_AddNumberToObject(j, "intermediate_size", dcfg->intermediate_size);
    /* the resolved shape, so that a changed default cannot mix runs either */
    cJSON_AddNumberToObject(j, "draft_heads", dcfg->num_heads);
    cJSON_AddNumberToObject(j, "draft_kv_heads", dcfg->num_kv_heads);
    cJSON_AddNumberToObject(j, "draft_head_dim", dcfg->head_dim);
    cJSON_AddNumberToObject(j, "block_size", dcfg->block_size);
    cJSON *taps = cJSON_AddArrayToObject(j, "target_layer_ids");
    for (int i = 0; i < dcfg->n_taps; i++) cJSON_AddItemToArray(taps, cJSON_CreateNumber(dcfg->target_layer_ids[i]));
    cJSON_AddNumberToObject(j, "num_anchors", (double)o->num_anchors);
    cJSON_AddNumberToObject(j, "gamma", dcfg->gamma);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    /* Recorded only when they differ from their defaults, which runs from
     * before these options had: a checkpoint without them resumes with the
     * defaults, and one with them only with the same values. */
    if (o->weight_decay != 0) cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    if (o->adam_beta1 != 0.9) cJSON_AddNumberToObject(j, "adam_beta1", o->adam_beta1);
    if (o->adam_beta2 != 0.999) cJSON_AddNumberToObject(j, "adam_beta2", o->adam_beta2);
    if (o->max_grad_norm != 1.0) cJSON_AddNumberToObject(j, "max_grad_norm", o->max_grad_norm);
    cJSON_AddNumberToObject(j, "token_budget", (double)o->token_budget);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddNumberToObject(j, "max_length", (double)o->max_length);
    cJSON_AddNumberToObject(j, "mask_token_id", dcfg->mask_token_id);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

/* Options that older versions did not record: a checkpoint without them is
 * of the shape they name (the drafter's attention shape; the checkpoint's
 * drafter_config, checked when it loads, holds it), so their absence is no
 * difference. */
static int recorded_later(const char *key) {
    return strcmp(key, "draft_heads") == 0 || strcmp(key, "draft_kv_heads") == 0 || strcmp(key, "draft_head_dim") == 0;
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
    cJSON *a = cJSON_Parse(stored), *b = cJSON_Parse(current);
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
