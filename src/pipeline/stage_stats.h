/* Per-stage timing of the training pipeline: every stage (batch assembly,
 * host-to-device copy, target forward, drafter forward/backward, gradient
 * reduction, optimizer) records how long each item took, host work with the
 * monotonic clock (df_stage_begin / df_stage_end) and GPU work from CUDA
 * event timestamps (df_stage_record). At the end, a table of where the time
 * went: items, total, mean, median, maximum, and the busy fraction (the
 * stage's total time over the wall time; above 1 when several threads run
 * the stage at once), with the queues' occupancy next to it; printed
 * compactly and written as JSON.
 *
 * Each stage has its own lock: its thread records while another thread
 * reads a summary. Every sample is kept (8 bytes each) for exact medians. */
#ifndef DF_PIPELINE_STAGE_STATS_H
#define DF_PIPELINE_STAGE_STATS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "pipeline/queue.h"

typedef struct DfStageStats {
    char name[32];
    pthread_mutex_t mu;
    double *samples; /* seconds per item */
    size_t n, cap;
    double total, max;
} DfStageStats;

typedef struct DfStageTable {
    DfStageStats *stages;
    int n;
    double t_start; /* the wall clock starts at init */
} DfStageTable;

typedef struct DfStageSummary {
    const char *name;
    uint64_t count;
    double total_s, mean_s, p50_s, max_s;
    double busy; /* total_s / wall_s */
} DfStageSummary;

int df_stage_table_init(DfStageTable *t, const char *const *names, int n, DfError *err);
void df_stage_table_free(DfStageTable *t);

/* Host timing: t0 = df_stage_begin(); ... df_stage_end(t, stage, t0). */
double df_stage_begin(void);
void df_stage_end(DfStageTable *t, int stage, double t0);
/* A duration measured some other way (CUDA events); negative ones count as 0. */
void df_stage_record(DfStageTable *t, int stage, double seconds);

/* Seconds since init: the wall time summaries use when given wall_s <= 0. */
double df_stage_wall(const DfStageTable *t);
void df_stage_summary(DfStageTable *t, int stage, double wall_s, DfStageSummary *out);

/* The table (and the queues' line each, n_queues may be 0) on f. */
void df_stage_report_print(FILE *f, DfStageTable *t, double wall_s, const DfQueueStats *queues, int n_queues);
/* The same as JSON, written atomically:
 * {"wall_s", "stages": [{"name", "count", "total_s", "mean_s", "p50_s", "max_s", "busy"}],
 *  "queues": [{"name", "capacity", "pushed", "popped", "mean_depth", "max_depth",
 *              "producer_wait_s", "consumer_wait_s"}]} */
int df_stage_report_write_json(const char *path, DfStageTable *t, double wall_s, const DfQueueStats *queues,
                               int n_queues, DfError *err);

#endif
