#include "pipeline/stage_stats.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/sort.h"

int df_stage_table_init(DfStageTable *t, const char *const *names, int n, DfError *err) {
    memset(t, 0, sizeof *t);
    if (n < 1) return df_fail(err, "stage statistics: no stages");
    t->stages = df_xcalloc((size_t)n, sizeof *t->stages, "stage statistics");
    t->n = n;
    for (int i = 0; i < n; i++) {
        snprintf(t->stages[i].name, sizeof t->stages[i].name, "%s", names[i]);
        pthread_mutex_init(&t->stages[i].mu, NULL);
    }
    t->t_start = df_now_seconds();
    return 0;
}

void df_stage_table_free(DfStageTable *t) {
    for (int i = 0; i < t->n; i++) {
        pthread_mutex_destroy(&t->stages[i].mu);
        free(t->stages[i].samples);
    }
    free(t->stages);
    memset(t, 0, sizeof *t);
}

double df_stage_begin(void) { return df_now_seconds(); }

void df_stage_record(DfStageTable *t, int stage, double seconds) {
    if (stage < 0 || stage >= t->n) return;
    if (!(seconds > 0)) seconds = 0;
    DfStageStats *s = &t->stages[stage];
    pthread_mutex_lock(&s->mu);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->samples = df_xrealloc(s->samples, s->cap * sizeof *s->samples, "stage samples");
    }
    s->samples[s->n++] = seconds;
    s->total += seconds;
    if (seconds > s->max) s->max = seconds;
    pthread_mutex_unlock(&s->mu);
}

void df_stage_end(DfStageTable *t, int stage, double t0) { df_stage_record(t, stage, df_now_seconds() - t0); }

double df_stage_wall(const DfStageTable *t) { return df_now_seconds() - t->t_start; }

/* The median (mean of the two middle values for an even count), v untouched. */
static double median(const double *v, size_t n) {
    if (n == 0) return 0;
    double *s = df_xmalloc(n * sizeof *s, "stage median");
    memcpy(s, v, n * sizeof *s);
    double m = df_median_sorting(s, n);
    free(s);
    return m;
}

void df_stage_summary(DfStageTable *t, int stage, double wall_s, DfStageSummary *out) {
    memset(out, 0, sizeof *out);
    if (stage < 0 || stage >= t->n) return;
    if (wall_s <= 0) wall_s = df_stage_wall(t);
    DfStageStats *s = &t->stages[stage];
    pthread_mutex_lock(&s->mu);
    out->name = s->name;
    out->count = s->n;
    out->total_s = s->total;
    out->mean_s = s->n ? s->total / (double)s->n : 0;
    out->p50_s = median(s->samples, s->n);
    out->max_s = s->max;
    out->busy = wall_s > 0 ? s->total / wall_s : 0;
    pthread_mutex_unlock(&s->mu);
}

void df_stage_report_print(FILE *f, DfStageTable *t, double wall_s, const DfQueueStats *queues, int n_queues) {
    if (wall_s <= 0) wall_s = df_stage_wall(t);
    fprintf(f, "%-22s %8s %10s %9s %9s %9s %7s\n", "stage", "items", "total s", "mean ms", "p50 ms", "max ms", "busy");
    for (int i = 0; i < t->n; i++) {
        DfStageSummary s;
        df_stage_summary(t, i, wall_s, &s);
        fprintf(f, "%-22s %8llu %10.3f %9.3f %9.3f %9.3f %6.1f%%\n", s.name, (unsigned long long)s.count, s.total_s,
                1e3 * s.mean_s, 1e3 * s.p50_s, 1e3 * s.max_s, 100 * s.busy);
    }
    fprintf(f, "wall %.3f s\n", wall_s);
    if (n_queues <= 0) return;
    fprintf(f, "%-22s %8s %8s %10s %9s %14s %14s\n", "queue", "capacity", "items", "mean depth", "max depth",
            "producer wait", "consumer wait");
    for (int i = 0; i < n_queues; i++) {
        const DfQueueStats *q = &queues[i];
        fprintf(f, "%-22s %8d %8llu %10.2f %9d %12.3f s %12.3f s\n", q->name, q->capacity,
                (unsigned long long)q->popped, q->mean_depth, q->max_depth, q->producer_wait_s, q->consumer_wait_s);
    }
}

static cJSON *report_json(DfStageTable *t, double wall_s, const DfQueueStats *queues, int n_queues) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "wall_s", wall_s);
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int i = 0; i < t->n; i++) {
        DfStageSummary s;
        df_stage_summary(t, i, wall_s, &s);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s.name);
        cJSON_AddNumberToObject(o, "count", (double)s.count);
        cJSON_AddNumberToObject(o, "total_s", s.total_s);
        cJSON_AddNumberToObject(o, "mean_s", s.mean_s);
        cJSON_AddNumberToObject(o, "p50_s", s.p50_s);
        cJSON_AddNumberToObject(o, "max_s", s.max_s);
        cJSON_AddNumberToObject(o, "busy", s.busy);
        cJSON_AddItemToArray(stages, o);
    }
    cJSON *qs = cJSON_AddArrayToObject(root, "queues");
    for (int i = 0; i < n_queues; i++) {
        const DfQueueStats *q = &queues[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", q->name);
        cJSON_AddNumberToObject(o, "capacity", q->capacity);
        cJSON_AddNumberToObject(o, "pushed", (double)q->pushed);
        cJSON_AddNumberToObject(o, "popped", (double)q->popped);
        cJSON_AddNumberToObject(o, "mean_depth", q->mean_depth);
        cJSON_AddNumberToObject(o, "max_depth", q->max_depth);
        cJSON_AddNumberToObject(o, "producer_wait_s", q->producer_wait_s);
        cJSON_AddNumberToObject(o, "consumer_wait_s", q->consumer_wait_s);
        cJSON_AddItemToArray(qs, o);
    }
    return root;
}

int df_stage_report_write_json(const char *path, DfStageTable *t, double wall_s, const DfQueueStats *queues,
                               int n_queues, DfError *err) {
    if (wall_s <= 0) wall_s = df_stage_wall(t);
    cJSON *root = report_json(t, wall_s, queues, n_queues);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return df_fail(err, "%s: cannot format the stage report", path);
    int rc = df_atomic_write_text(path, text, 1, err);
    free(text);
    return rc;
}
