#include "infer/prompts.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "formats/jsonl.h"

static int parse_record(const char *path, int64_t line_no, const char *line, int index, DfPrompt *out, DfError *err) {
    cJSON *rec = cJSON_Parse(line);
    if (!rec || !cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return df_fail(err, "%s:%lld: not a JSON object", path, (long long)line_no);
    }
    int rc = 0;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "id");
    if (!cJSON_IsString(prompt)) {
        rc = df_fail(err, "%s:%lld: expected a string field \"prompt\"", path, (long long)line_no);
    } else if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        rc = df_fail(err, "%s:%lld: field \"id\" must be a string or a number", path, (long long)line_no);
    } else {
        out->text = df_xstrdup(prompt->valuestring);
        if (id) {
            char *s = cJSON_PrintUnformatted(id);
            out->id_json = df_xstrdup(s);
            cJSON_free(s);
        } else {
            char buf[32];
            snprintf(buf, sizeof buf, "%d", index);
            out->id_json = df_xstrdup(buf);
        }
    }
    cJSON_Delete(rec);
    return rc;
}

int df_prompts_read(const char *path, DfPromptSet *set, DfError *err) {
    set->items = NULL;
    set->n = 0;
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
        p->id_json = p->text = NULL;
        if ((rc = parse_record(path, line_no, line, set->n, p, err)) != 0) break;
        set->n++;
    }
    df_jsonl_close(&r);
    if (rc == 0 && set->n == 0) rc = df_fail(err, "%s: no records", path);
    if (rc) df_prompts_free(set);
    return rc;
}

void df_prompts_free(DfPromptSet *set) {
    for (int i = 0; i < set->n; i++) free(set->items[i].id_json), free(set->items[i].text);
    free(set->items);
    set->items = NULL;
    set->n = 0;
}
