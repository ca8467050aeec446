/* metrics.jsonl and eval.jsonl into arrays of doubles. */
#include "plot/run_series.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/input_file.h"

static double field(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void grow(double **a, int cap) { *a = df_xrealloc(*a, (size_t)cap * sizeof **a, "plot series"); }

typedef struct Reader {
    DfRunSeries *s;
    int cap;
} Reader;

static void reserve(Reader *r) {
    DfRunSeries *s = r->s;
    if (s->n < r->cap) return;
    r->cap = r->cap ? 2 * r->cap : 256;
    double **cols[] = {&s->step, &s->loss, &s->tau, &s->lr, &s->tokens_per_s};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) grow(cols[i], r->cap);
    for (int k = 0; k < DF_PLOT_MAX_STAGES; k++) grow(&s->stage_ms[k], r->cap);
}

/* The stage columns follow the first line's stage_ms keys. */
static void add_stages(DfRunSeries *s, const cJSON *stages) {
    if (s->n == 0)
        for (const cJSON *v = stages ? stages->child : NULL; v && s->n_stages < DF_PLOT_MAX_STAGES; v = v->next)
            snprintf(s->stage_names[s->n_stages++], sizeof s->stage_names[0], "%s", v->string);
    for (int k = 0; k < s->n_stages; k++) s->stage_ms[k][s->n] = field(stages, s->stage_names[k]);
}

static void add_metrics(Reader *r, const cJSON *j) {
    reserve(r);
    DfRunSeries *s = r->s;
    s->step[s->n] = field(j, "step");
    s->loss[s->n] = field(j, "loss");
    s->tau[s->n] = field(j, "train_tau");
    s->lr[s->n] = field(j, "lr");
    s->tokens_per_s[s->n] = field(j, "tokens_per_s");
    add_stages(s, cJSON_GetObjectItemCaseSensitive(j, "stage_ms"));
    s->n++;
}

static void add_eval(DfRunSeries *s, int *cap, const cJSON *j) {
    if (s->n_eval == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        s->eval_step = df_xrealloc(s->eval_step, (size_t)*cap * sizeof *s->eval_step, "plot eval");
        s->eval_tau = df_xrealloc(s->eval_tau, (size_t)*cap * sizeof *s->eval_tau, "plot eval");
    }
    s->eval_step[s->n_eval] = field(j, "step");
    s->eval_tau[s->n_eval++] = field(j, "tau");
}

/* Calls add(ctx, object) for each JSON line of path. */
static int read_lines(const char *path, int required, void (*add)(void *, const cJSON *), void *ctx, DfError *err) {
    struct stat st;
    if (!required && stat(path, &st) != 0 && errno == ENOENT) return 0;
    /* a directory or a FIFO where the file belongs is refused, not drawn as a run of no steps */
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (long no = 1; rc == 0 && (len = getline(&line, &cap, fp)) > 0; no++) {
        cJSON *j = cJSON_Parse(line);
        if (cJSON_IsObject(j)) add(ctx, j);
        else if (line[len - 1] == '\n') rc = df_fail(err, "%s:%ld: not a JSON object", path, no);
        cJSON_Delete(j); /* a torn last line (no newline yet) is left out */
    }
    if (rc == 0 && ferror(fp)) rc = df_fail_errno(err, "%s: read error", path);
    free(line);
    fclose(fp);
    return rc;
}

static void add_metrics_cb(void *ctx, const cJSON *j) { add_metrics(ctx, j); }

typedef struct EvalReader {
    DfRunSeries *s;
    int cap;
} EvalReader;

static void add_eval_cb(void *ctx, const cJSON *j) {
    EvalReader *r = ctx;
    add_eval(r->s, &r->cap, j);
}

int df_run_series_read(const char *run_dir, DfRunSeries *s, DfError *err) {
    memset(s, 0, sizeof *s);
    char path[4200];
    Reader r = {s, 0};
    reserve(&r);
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    EvalReader er = {s, 0};
    int rc = read_lines(path, 1, add_metrics_cb, &r, err);
    snprintf(path, sizeof path, "%s/eval.jsonl", run_dir);
    if (rc == 0) rc = read_lines(path, 0, add_eval_cb, &er, err);
    if (rc) df_run_series_free(s);
    return rc;
}

void df_run_series_free(DfRunSeries *s) {
    double *cols[] = {s->step, s->loss, s->tau, s->lr, s->tokens_per_s, s->eval_step, s->eval_tau};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) free(cols[i]);
    for (int k = 0; k < DF_PLOT_MAX_STAGES; k++) free(s->stage_ms[k]);
    memset(s, 0, sizeof *s);
}
