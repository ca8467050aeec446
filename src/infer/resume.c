#include "infer/resume.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json/json_parse.h"

/* The field an output record of input p holds: "response" for a prompt
 * record, the conversation's own form for a conversation. */
static const char *output_field(const DfPrompt *p) {
    return p->text ? "response" : p->sharegpt ? "conversations" : "messages";
}

/* 0 when the line is a complete output record for input i, else -1 with a
 * message. */
static int check_line(const char *path, long line_no, const char *line, const DfPromptSet *inputs, int i,
                      DfError *err) {
    if (i >= inputs->n)
        return df_fail(err, "%s:%ld: the output has more records than the %d of the input", path, line_no, inputs->n);
    const DfPrompt *p = &inputs->items[i];
    const char *field = output_field(p);
    cJSON *rec = NULL;
    if (df_json_parse(line, strlen(line), path, line_no, &rec, err) == DF_JSON_NUL) return -1;
    const cJSON *id = rec ? cJSON_GetObjectItemCaseSensitive(rec, "id") : NULL;
    const cJSON *body = rec ? cJSON_GetObjectItemCaseSensitive(rec, field) : NULL;
    int rc = 0;
    if (!id || !(p->text ? cJSON_IsString(body) : cJSON_IsArray(body))) {
        rc = df_fail(err, "%s:%ld: not the output record of input record %d ({\"id\", \"%s\"})", path, line_no, i + 1,
                     field);
    } else {
        char *s = cJSON_PrintUnformatted(id);
        if (strcmp(s, p->id_json) != 0)
            rc = df_fail(err, "%s:%ld: id %s, but input record %d has id %s: this output belongs to other input", path,
                         line_no, s, i + 1, p->id_json);
        cJSON_free(s);
    }
    cJSON_Delete(rec);
    return rc;
}

int df_resume_scan(const char *path, const DfPromptSet *inputs, int *n_done, DfError *err) {
    *n_done = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return errno == ENOENT ? 0 : df_fail_errno(err, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long line_no = 0, good_end = 0, offset = 0;
    int rc = 0, torn = 0;
    while ((n = getline(&line, &cap, fp)) > 0) {
        line_no++;
        offset += n;
        int complete = line[n - 1] == '\n';
        if (!complete) { /* the interrupted write of the last record */
            torn = 1;
            break;
        }
        line[n - 1] = '\0';
        DfError line_err;
        if (check_line(path, line_no, line, inputs, *n_done, &line_err)) {
            cJSON *parsed = cJSON_Parse(line);
            int garbled = parsed == NULL;
            cJSON_Delete(parsed);
            if (garbled && fgetc(fp) == EOF) { /* a garbled last line: also torn */
                torn = 1;
                break;
            }
            rc = df_fail(err, "%s", line_err.msg);
            break;
        }
        (*n_done)++;
        good_end = offset;
    }
    if (rc == 0 && ferror(fp)) rc = df_fail_errno(err, "reading %s", path);
    free(line);
    fclose(fp);
    if (rc == 0 && torn && truncate(path, good_end) != 0)
        rc = df_fail_errno(err, "cannot truncate the torn last line of %s", path);
    return rc;
}
