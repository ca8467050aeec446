/* A one-line progress display on stderr with rate and ETA, redrawn at most a
 * few times a second. Quiet when stderr is not a terminal except for a line
 * every `log_every_s` seconds (30), so that logs stay readable. */
#ifndef DF_BASE_PROGRESS_H
#define DF_BASE_PROGRESS_H

#include <stdint.h>

typedef struct DfProgress {
    const char *label;
    const char *unit;   /* "records", "tokens", ... */
    int64_t total;      /* 0 when unknown */
    double start_s;
    double last_draw_s;
    double log_every_s;
    int tty;
    int quiet;          /* set after df_progress_start (a command's --quiet): nothing is drawn */
} DfProgress;

void df_progress_start(DfProgress *p, const char *label, const char *unit, int64_t total);
/* done: work units finished so far; extra: optional text appended to the line. */
void df_progress_update(DfProgress *p, int64_t done, const char *extra);
void df_progress_finish(DfProgress *p, int64_t done, const char *extra);

/* Formats seconds as "1h02m", "3m05s" or "12s". */
void df_format_duration(double seconds, char *buf, int size);

#endif
