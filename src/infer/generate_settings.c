#define _XOPEN_SOURCE 700 /* realpath */
#include "infer/generate_settings.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/hash64.h"
#include "base/mapped_file.h"
#include "formats/json_diff.h"

static void settings_path(const char *output, char *out, size_t cap) { snprintf(out, cap, "%s.generate.json", output); }

static void add_hex(cJSON *j, const char *name, uint64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%016llx", (unsigned long long)v);
    cJSON_AddStringToObject(j, name, text);
}

char *df_generate_settings_text(const DfGenerateSettings *s, DfError *err) {
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", s->target);
    size_t size = 0;
    char *config_text = df_read_text_file(config, &size, err);
    if (!config_text) return NULL;
    char *abs = realpath(s->target, NULL);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", abs ? abs : s->target);
    add_hex(j, "target_config_hash", df_hash64(config_text, size));
    if (s->random_weights) cJSON_AddStringToObject(j, "target_weights", "random"); /* no training data */
    add_hex(j, "tokenizer_fingerprint", s->tokenizer_fingerprint);
    cJSON_AddNumberToObject(j, "max_new_tokens", s->max_new_tokens);
    cJSON_AddNumberToObject(j, "temperature", s->temperature);
    cJSON_AddNumberToObject(j, "top_p", s->top_p);
    cJSON_AddNumberToObject(j, "seed", s->seed);
    if (s->chat_date) cJSON_AddStringToObject(j, "chat_date", s->chat_date);
    else cJSON_AddNullToObject(j, "chat_date");
    if (s->chat_template) cJSON_AddStringToObject(j, "chat_template", s->chat_template);
    if (s->chat_kwargs) { /* recorded as parsed JSON, so that spacing does not matter */
        cJSON *kw = cJSON_Parse(s->chat_kwargs);
        if (kw) cJSON_AddItemToObject(j, "chat_template_kwargs", kw);
        else cJSON_AddStringToObject(j, "chat_template_kwargs", s->chat_kwargs);
    }
    cJSON *eos = cJSON_AddArrayToObject(j, "eos_token_ids");
    for (int i = 0; i < s->n_eos; i++) cJSON_AddItemToArray(eos, cJSON_CreateNumber(s->eos_ids[i]));
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(abs);
    free(config_text);
    return text;
}

int df_generate_settings_check(const char *output, const char *text, DfError *err) {
    struct stat st;
    if (stat(output, &st) != 0 || st.st_size == 0) return 0; /* nothing to resume */
    char path[4200];
    settings_path(output, path, sizeof path);
    if (stat(path, &st) != 0)
        return df_fail(err,
                       "--output %s already holds records, but no %s says which target and settings made them "
                       "(not written by dflash generate); refusing to add to it: move it away or choose another "
                       "--output",
                       output, path);
    char *was = df_read_text_file(path, NULL, err);
    if (!was) return -1;
    char what[512];
    int differs = df_json_diff(was, text, what, sizeof what);
    free(was);
    if (differs)
        return df_fail(err,
                       "--output %s was made with other settings (%s: %s); refusing to resume with these: rerun "
                       "with the same ones, or choose another --output",
                       output, path, what);
    return 0;
}

int df_generate_settings_write(const char *output, const char *text, DfError *err) {
    char path[4200];
    settings_path(output, path, sizeof path);
    return df_atomic_write_text(path, text, 1, err);
}
