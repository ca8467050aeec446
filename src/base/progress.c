#include "base/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "base/clock.h"

void df_format_duration(double s, char *buf, int size) {
    if (s < 0 || s != s) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, (size_t)size, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else if (t >= 60) snprintf(buf, (size_t)size, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, (size_t)size, "%lds", t);
}

void df_progress_start(DfProgress *p, const char *label, const char *unit, int64_t total) {
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->start_s = df_now_seconds();
    p->last_draw_s = 0;
    p->log_every_s = 30.0;
    p->tty = isatty(STDERR_FILENO);
    p->quiet = 0;
}

static void draw(DfProgress *p, int64_t done, const char *extra, int final) {
    if (p->quiet) return;
    double now = df_now_seconds();
    double elapsed = now - p->start_s;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char el[32], eta[32] = "";
    df_format_duration(elapsed, el, sizeof el);
    if (p->total > 0 && rate > 0 && !final) {
        char e[24];
        df_format_duration((double)(p->total - done) / rate, e, sizeof e);
        snprintf(eta, sizeof eta, " ETA %s", e);
    }
    char frac[48] = "";
    if (p->total > 0) snprintf(frac, sizeof frac, "/%lld (%.1f%%)", (long long)p->total, 100.0 * (double)done / (double)p->total);
    fprintf(stderr, "%s%s: %lld%s %s, %.1f %s/s, %s%s%s%s%s", p->tty ? "\r\033[K" : "", p->label, (long long)done, frac,
            p->unit, rate, p->unit, el, eta, extra ? "  " : "", extra ? extra : "", (final || !p->tty) ? "\n" : "");
    fflush(stderr);
    p->last_draw_s = now;
}

void df_progress_update(DfProgress *p, int64_t done, const char *extra) {
    double now = df_now_seconds();
    double every = p->tty ? 0.25 : p->log_every_s;
    if (now - p->last_draw_s < every) return;
    if (!p->tty && now - p->start_s < every) return;
    draw(p, done, extra, 0);
}

void df_progress_finish(DfProgress *p, int64_t done, const char *extra) {
    draw(p, done, extra, 1);
}
