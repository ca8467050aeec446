#include "infer/prompts.h"
#include "json/json_fields.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/jsonl.h"
#include "data/records.h"
#include "text/utf8.h"
#include "json/json_parse.h"

/* The conversation in `array` into out->turns; err says what is wrong with
 * it (the caller adds the file and line). */
static int parse_conversation(const cJSON *array, int sharegpt, DfPrompt *out, DfError *err) {
    DfChatMessages msgs = {0};
    int rc = df_records_json_messages(array, sharegpt, &msgs, err);
    const char *field = sharegpt ? "conversations" : "messages";
    int has_user = 0;
    for (int i = 0; rc == 0 && i < msgs.n; i++) {
        size_t bad = df_utf8_first_invalid((const unsigned char *)msgs.items[i].content, msgs.items[i].content_len);
        if (bad < msgs.items[i].content_len) rc = df_fail(err, "%s[%d]: the content is not valid UTF-8 (byte %zu)", field, i, bad);
        has_user |= msgs.items[i].role == DF_ROLE_USER;
    }
    if (rc == 0 && !has_user) rc = df_fail(err, "%s: no user turn, so no assistant turn to generate", field);
    if (rc == 0) {
        out->turns = df_xcalloc((size_t)msgs.n, sizeof *out->turns, "conversation");
        out->n_turns = msgs.n;
        out->sharegpt = sharegpt;
        const cJSON *m = array->child;
        for (int i = 0; i < msgs.n; i++, m = m->next) {
            out->turns[i].role = df_xstrdup(cJSON_GetObjectItemCaseSensitive(m, sharegpt ? "from" : "role")->valuestring);
            out->turns[i].content = df_xstrdup(msgs.items[i].content);
            out->turns[i].parsed = msgs.items[i].role;
        }
    }
    df_chat_messages_free(&msgs);
    return rc;
}

/* The record's body (prompt or conversation); err without file and line. */
static int parse_body(const cJSON *rec, int allow_chat, DfPrompt *out, DfError *err) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(rec, "messages");
    const cJSON *convs = cJSON_GetObjectItemCaseSensitive(rec, "conversations");
    if (allow_chat && (messages || convs)) {
        if (messages && convs) return df_fail(err, "both \"messages\" and \"conversations\": expected one");
        return parse_conversation(messages ? messages : convs, convs != NULL, out, err);
    }
    if (!cJSON_IsString(prompt))
        return df_fail(err, allow_chat ? "expected a string field \"prompt\", or \"messages\" or \"conversations\""
                                       : "expected a string field \"prompt\"");
    out->text = df_xstrdup(prompt->valuestring);
    return 0;
}

static int parse_record(const char *path, int64_t line_no, const char *line, int index, int allow_chat, DfPrompt *out,
                        DfError *err) {
    cJSON *rec = NULL;
    if (df_json_parse(line, strlen(line), path, (long)line_no, &rec, err) == DF_JSON_NUL) return -1;
    if (!rec || !cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return df_fail(err, "%s:%lld: not a JSON object", path, (long long)line_no);
    }
    int rc = 0;
    DfError why;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "id");
    out->line_no = line_no;
    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        rc = df_fail(err, "%s:%lld: field \"id\" must be a string or a number", path, (long long)line_no);
    } else if (parse_body(rec, allow_chat, out, &why)) {
        rc = df_fail(err, "%s:%lld: %s", path, (long long)line_no, why.msg);
    } else if (id) {
        char *s = cJSON_PrintUnformatted(id);
        out->id_json = df_xstrdup(s);
        cJSON_free(s);
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", index);
        out->id_json = df_xstrdup(buf);
    }
    cJSON_Delete(rec);
    return rc;
}

static void prompt_free(DfPrompt *p) {
    free(p->id_json);
    free(p->text);
    for (int t = 0; t < p->n_turns; t++) free(p->turns[t].role), free(p->turns[t].content);
    free(p->turns);
    memset(p, 0, sizeof *p);
}

static int read_records(const char *path, int allow_chat, DfPromptSet *set, DfError *err) {
    memset(set, 0, sizeof *set);
    DfJsonlReader r;
    if (df_jsonl_open(&r, path, err)) return -1;
    int cap = 0, rc = 0;
    const char *line;
    size_t len;
    int64_t line_no;
    for (;;) {
        int got = df_jsonl_next(&r, &line, &len, &line_no, err);
        if (got < 0) rc = -1;
        if (got <= 0) break;
        if (set->n == cap) {
            cap = cap ? cap * 2 : 64;
            set->items = df_xrealloc(set->items, (size_t)cap * sizeof *set->items, "prompts");
        }
        DfPrompt *p = &set->items[set->n];
        memset(p, 0, sizeof *p);
        if ((rc = parse_record(path, line_no, line, set->n, allow_chat, p, err)) != 0) {
            prompt_free(p);
            break;
        }
        set->n_chat += p->text == NULL;
        set->n++;
    }
    df_jsonl_close(&r);
    if (rc == 0 && set->n == 0) rc = df_fail(err, "%s: no records", path);
    if (rc) df_prompts_free(set);
    return rc;
}

int df_prompts_read(const char *path, DfPromptSet *set, DfError *err) { return read_records(path, 0, set, err); }

int df_prompts_read_any(const char *path, DfPromptSet *set, DfError *err) { return read_records(path, 1, set, err); }

void df_prompts_free(DfPromptSet *set) {
    for (int i = 0; i < set->n; i++) prompt_free(&set->items[i]);
    free(set->items);
    memset(set, 0, sizeof *set);
}
