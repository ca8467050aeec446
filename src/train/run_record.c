#define _XOPEN_SOURCE 700 /* realpath */
/* The run record (args.json) from the options and the resolved drafter. */
#include "train/run_record.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/atomic_file.h"
#include "version.h"

/* An absolute path where it resolves (so that the record works from any
 * directory), else the path as given; null for none. */
static void add_path(cJSON *j, const char *key, const char *path) {
    if (!path) {
        cJSON_AddNullToObject(j, key);
        return;
    }
    char *abs = realpath(path, NULL);
    cJSON_AddStringToObject(j, key, abs ? abs : path);
    free(abs);
}

/* A number, or null where the option keeps its default (value 0). */
static void add_or_null(cJSON *j, const char *key, double v) {
    if (v > 0) cJSON_AddNumberToObject(j, key, v);
    else cJSON_AddNullToObject(j, key);
}

/* The sliding layers as indices ("0,1,3"; "none"), null without a window. */
static void add_sliding_layers(cJSON *j, const DfDrafterConfig *c) {
    if (c->sliding_window <= 0) {
        cJSON_AddNullToObject(j, "sliding-layers");
        return;
    }
    char list[4 * DF_MAX_DRAFT_LAYERS + 8] = "";
    size_t n = 0;
    for (int i = 0; i < c->num_layers; i++)
        if (c->sliding[i]) n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", n ? "," : "", i);
    cJSON_AddStringToObject(j, "sliding-layers", n ? list : "none");
}

static void add_data_options(cJSON *j, const DfTrainOptions *o) {
    add_path(j, "target", o->target_dir);
    add_path(j, "data", o->data_source ? o->data_source : o->data_store);
    add_path(j, "output", o->output_dir);
    add_path(j, "init-from", o->init_from);
    add_path(j, "chat-template", o->chat_template);
    if (o->chat_kwargs) cJSON_AddStringToObject(j, "chat-template-kwargs", o->chat_kwargs);
    else cJSON_AddNullToObject(j, "chat-template-kwargs");
    add_or_null(j, "steps", (double)o->steps);
    add_or_null(j, "epochs", o->steps ? 0.0 : (double)o->epochs);
    cJSON_AddNumberToObject(j, "max-length", (double)o->max_length);
}

static void add_drafter_options(cJSON *j, const DfDrafterConfig *c) {
    cJSON_AddNumberToObject(j, "draft-layers", c->num_layers);
    cJSON_AddNumberToObject(j, "intermediate-size", c->intermediate_size);
    cJSON_AddNumberToObject(j, "block-size", c->block_size);
    cJSON_AddNumberToObject(j, "draft-heads", c->num_heads);
    cJSON_AddNumberToObject(j, "draft-kv-heads", c->num_kv_heads);
    cJSON_AddNumberToObject(j, "draft-head-dim", c->head_dim);
    add_or_null(j, "sliding-window", c->sliding_window);
    add_sliding_layers(j, c);
    cJSON_AddNumberToObject(j, "num-taps", c->n_taps);
    cJSON_AddNumberToObject(j, "mask-token-id", c->mask_token_id);
}

static void add_training_options(cJSON *j, const DfTrainOptions *o, const DfDrafterConfig *c) {
    cJSON_AddNumberToObject(j, "num-anchors", (double)o->num_anchors);
    cJSON_AddNumberToObject(j, "gamma", c->gamma);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddNumberToObject(j, "weight-decay", o->weight_decay);
    cJSON_AddNumberToObject(j, "adam-beta1", o->adam_beta1);
    cJSON_AddNumberToObject(j, "adam-beta2", o->adam_beta2);
    cJSON_AddNumberToObject(j, "max-grad-norm", o->max_grad_norm);
    cJSON_AddNumberToObject(j, "token-budget", (double)o->token_budget);
    add_or_null(j, "max-drafter-tokens", (double)o->max_drafter_tokens);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    add_or_null(j, "save-every", (double)o->save_every);
    add_or_null(j, "stop-at", (double)o->stop_at);
    cJSON_AddNumberToObject(j, "keep-checkpoints", o->keep_checkpoints);
    cJSON_AddNumberToObject(j, "max-bad-steps", o->max_bad_steps);
}

static void add_eval_options(cJSON *j, const DfTrainOptions *o) {
    add_path(j, "eval-data", o->eval_data);
    add_or_null(j, "eval-every", o->eval_data ? (double)o->eval_every : 0);
    /* null without --eval-data, which they go with */
    add_or_null(j, "eval-prompts", o->eval_data ? o->eval_prompts : 0);
    add_or_null(j, "eval-max-new-tokens", o->eval_data ? o->eval_max_new_tokens : 0);
    cJSON_AddStringToObject(j, "report-to", o->report_tensorboard ? "tensorboard" : "jsonl");
    if (o->select_by == DF_SELECT_AUTO) cJSON_AddNullToObject(j, "select-by");
    else cJSON_AddStringToObject(j, "select-by", o->select_by == DF_SELECT_TAU ? "tau" : "last");
}

static void add_machine_options(cJSON *j, const DfTrainOptions *o) {
    cJSON_AddStringToObject(j, "device", o->device ? o->device : "cpu");
    cJSON_AddNumberToObject(j, "queue-depth", o->queue_depth);
    add_or_null(j, "log-every", (double)o->log_every);
    cJSON_AddBoolToObject(j, "random-target-weights", o->random_target_weights != 0);
    cJSON_AddStringToObject(j, "layout", o->layout == DF_LAYOUT_SPLIT ? "split" : "colocated");
    add_or_null(j, "target-ranks", o->layout == DF_LAYOUT_SPLIT ? o->target_ranks : 0);
    cJSON_AddStringToObject(j, "overlap-grad-reduce", o->overlap_grad_reduce ? "on" : "off");
    cJSON_AddNumberToObject(j, "grad-bucket-mib", o->bucket_mib);
    add_or_null(j, "peak-tflops", o->peak_tflops);
}

char *df_run_record_json(const DfTrainOptions *o, const DfDrafterConfig *dcfg) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "dflash_version", DF_VERSION);
    cJSON_AddStringToObject(j, "backends", df_backends_built_in());
    add_data_options(j, o);
    add_drafter_options(j, dcfg);
    add_training_options(j, o, dcfg);
    add_eval_options(j, o);
    add_machine_options(j, o);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

int df_run_record_write(const char *path, const DfTrainOptions *o, const DfDrafterConfig *dcfg, DfError *err) {
    char *text = df_run_record_json(o, dcfg);
    if (!text) return df_fail(err, "%s: cannot build the run record (out of memory)", path);
    int rc = df_atomic_write_text(path, text, 1, err);
    cJSON_free(text);
    return rc;
}
