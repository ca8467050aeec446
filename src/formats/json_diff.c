#include "formats/json_diff.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* Recorded fields that no option sets by that name. */
static const char *const DERIVED[][2] = {
    {"target_config_hash", "the target's config.json"},
    {"tokenizer_fingerprint", "the tokenizer"},
    {"eos_token_ids", "the target's EOS token ids"},
    {"source", "--data"},
    {"data", "--data"},
    {"size", "the size of --data"},
    {"mtime", "the modification time of --data"},
    {"content_hash", "the content of --data"},
    {"chat_template_hash", "the content of --chat-template"},
    {"data_samples", "the samples of --data"},
    {"data_tokens", "the tokens of --data"},
    {"target_layer_ids", "the tapped target layers (--num-taps)"},
    {"target_weights", "the target's weights"},
};

void df_setting_name(const char *field, char *out, size_t cap) {
    for (size_t i = 0; i < sizeof DERIVED / sizeof DERIVED[0]; i++)
        if (strcmp(field, DERIVED[i][0]) == 0) {
            snprintf(out, cap, "%s", DERIVED[i][1]);
            return;
        }
    snprintf(out, cap, "--%s", field);
    for (char *p = out + 2; *p; p++)
        if (*p == '_') *p = '-';
}

/* 1 with `what` set when a field of `a` differs from b's (or b lacks it). */
static int field_differs(const cJSON *a, const cJSON *b, int a_is_now, char *what, size_t cap) {
    const cJSON *item;
    cJSON_ArrayForEach(item, a) {
        const cJSON *other = cJSON_GetObjectItemCaseSensitive(b, item->string);
        char *mine = cJSON_PrintUnformatted(item);
        char *theirs = other ? cJSON_PrintUnformatted(other) : NULL;
        int differs = !theirs || strcmp(mine, theirs) != 0;
        char name[128];
        if (differs) df_setting_name(item->string, name, sizeof name);
        if (differs && a_is_now)
            snprintf(what, cap, "%s is %s, was %s", name, mine, theirs ? theirs : "not recorded");
        else if (differs)
            snprintf(what, cap, "%s was %s, is %s", name, mine, theirs ? theirs : "not given now");
        cJSON_free(mine);
        cJSON_free(theirs);
        if (differs) return 1;
    }
    return 0;
}

int df_json_diff(const char *was_text, const char *now_text, char *what, size_t cap) {
    if (strcmp(was_text, now_text) == 0) return 0;
    cJSON *was = cJSON_Parse(was_text), *now = cJSON_Parse(now_text);
    int rc = 1;
    if (!cJSON_IsObject(was) || !cJSON_IsObject(now))
        snprintf(what, cap, "the record is not a JSON object");
    else
        rc = field_differs(now, was, 1, what, cap) || field_differs(was, now, 0, what, cap);
    cJSON_Delete(was);
    cJSON_Delete(now);
    return rc;
}
