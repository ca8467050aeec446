#include "infer/prompt_cuts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/buffer.h"
#include "formats/jsonl.h"
#include "json/json_parse.h"

int df_prompt_cut_offsets(const char *text, size_t len, int n_cuts, size_t *offsets) {
    size_t m = 0;
    for (size_t i = 0; i + 1 < len; i++) m += text[i] == '\n';
    int n = 0;
    size_t last = 0; /* the boundary taken last, 1-based (0: none) */
    for (int k = 1; k <= n_cuts && m > 0; k++) {
        size_t j = (size_t)llround((double)k * (double)m / (double)(n_cuts + 1));
        if (j < 1) j = 1;
        if (j > m) j = m;
        if (j == last) continue;
        last = j;
        /* the offset just past the j-th newline */
        size_t seen = 0, at = 0;
        while (seen < j) seen += text[at++] == '\n';
        offsets[n++] = at;
    }
    return n;
}

/* The record's id as text: its string, the JSON of another value, or its
 * index when it has none. */
static void id_text(const cJSON *rec, int index, char *out, size_t cap) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "id");
    if (cJSON_IsString(id)) {
        snprintf(out, cap, "%s", id->valuestring);
    } else if (id) {
        char *json = cJSON_PrintUnformatted(id);
        snprintf(out, cap, "%s", json ? json : "");
        cJSON_free(json);
    } else {
        snprintf(out, cap, "%d", index);
    }
}

static int write_line(FILE *fp, cJSON *rec, const char *path, DfError *err) {
    char *line = cJSON_PrintUnformatted(rec);
    int rc = !line || fprintf(fp, "%s\n", line) < 0 ? df_fail_errno(err, "writing %s", path) : 0;
    cJSON_free(line);
    return rc;
}

/* The cuts of one prompt record: prompt + response cut at line boundaries. */
static int write_cuts(FILE *fp, const cJSON *rec, const char *prompt, int index, int n_cuts, const char *path,
                      int *n_written, DfError *err) {
    const cJSON *response = cJSON_GetObjectItemCaseSensitive(rec, "response");
    DfByteBuf text = {0};
    df_bytebuf_append(&text, prompt, strlen(prompt));
    if (cJSON_IsString(response)) df_bytebuf_append(&text, response->valuestring, strlen(response->valuestring));
    size_t *offsets = df_xmalloc(((size_t)n_cuts + 1) * sizeof *offsets, "prompt cuts");
    int n = df_prompt_cut_offsets(text.data, text.len, n_cuts, offsets);
    char id[512], cut_id[600];
    id_text(rec, index, id, sizeof id);
    int rc = 0;
    for (int k = 0; rc == 0 && k < (n ? n : 1); k++) {
        cJSON *out = cJSON_CreateObject();
        if (n) {
            snprintf(cut_id, sizeof cut_id, "%s#%d", id, k + 1);
            cJSON_AddStringToObject(out, "id", cut_id);
            char *cut = df_xmalloc(offsets[k] + 1, "prompt cut");
            memcpy(cut, text.data, offsets[k]);
            cut[offsets[k]] = '\0';
            cJSON_AddStringToObject(out, "prompt", cut);
            free(cut);
        } else { /* no line boundary: the prompt as it was */
            cJSON_AddStringToObject(out, "id", id);
            cJSON_AddStringToObject(out, "prompt", prompt);
        }
        rc = write_line(fp, out, path, err);
        cJSON_Delete(out);
        *n_written += rc == 0;
    }
    free(offsets);
    df_bytebuf_free(&text);
    return rc;
}

static int cut_record(FILE *fp, const char *input, int64_t line_no, const char *line, int index, int n_cuts,
                      const char *output, int *n_written, DfError *err) {
    cJSON *rec = NULL;
    if (df_json_parse(line, strlen(line), input, (long)line_no, &rec, err) == DF_JSON_NUL) return -1;
    if (!cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return df_fail(err, "%s:%lld: not a JSON object", input, (long long)line_no);
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
    int rc;
    if (cJSON_IsString(prompt)) {
        rc = write_cuts(fp, rec, prompt->valuestring, index, n_cuts, output, n_written, err);
    } else if (cJSON_GetObjectItemCaseSensitive(rec, "messages") ||
               cJSON_GetObjectItemCaseSensitive(rec, "conversations")) {
        rc = write_line(fp, rec, output, err);
        *n_written += rc == 0;
    } else {
        rc = df_fail(err, "%s:%lld: neither a prompt record {\"prompt\"} nor a conversation {\"messages\"} / "
                          "{\"conversations\"}",
                     input, (long long)line_no);
    }
    cJSON_Delete(rec);
    return rc;
}

int df_prompt_cuts_write(const char *input, int n_cuts, const char *output, int *n_written, DfError *err) {
    *n_written = 0;
    if (n_cuts < 1) return df_fail(err, "prompt cuts: %d cuts (at least 1)", n_cuts);
    DfJsonlReader r;
    if (df_jsonl_open(&r, input, err)) return -1;
    DfAtomicFile out;
    if (df_atomic_open(&out, output, err)) {
        df_jsonl_close(&r);
        return -1;
    }
    int rc = 0;
    const char *line;
    size_t len;
    int64_t line_no;
    for (int index = 0; rc == 0; index++) {
        int got = df_jsonl_next(&r, &line, &len, &line_no, err);
        if (got <= 0) {
            rc = got;
            break;
        }
        rc = cut_record(out.fp, input, line_no, line, index, n_cuts, output, n_written, err);
    }
    df_jsonl_close(&r);
    if (rc == 0 && *n_written == 0) rc = df_fail(err, "%s: no records", input);
    if (rc == 0) return df_atomic_commit(&out, err);
    df_atomic_abort(&out);
    return -1;
}
