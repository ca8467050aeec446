/* The run's panels laid out on one cairo image surface, written as PNG. */
#include "plot/plot_run.h"

#include <cairo/cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "plot/chart.h"
#include "plot/run_series.h"

#define HEADER_PX 56.0

static const double STAGE_COLORS[][3] = {
    {0.55, 0.55, 0.55}, {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.12, 0.47, 0.71}, {1.00, 0.50, 0.05},
    {0.17, 0.63, 0.17}, {0.09, 0.75, 0.81}, {0.74, 0.74, 0.13}, {0.89, 0.47, 0.76}, {0.55, 0.34, 0.29},
};

/* Smoothed copies live as long as the drawing. */
typedef struct Curves {
    const DfRunSeries *s;
    int window;
    double *smooth[4 + DF_PLOT_MAX_STAGES];
    int n_smooth;
} Curves;

static const double *smoothed(Curves *c, const double *y) {
    double *out = df_xmalloc((size_t)(c->s->n ? c->s->n : 1) * sizeof *out, "smoothed curve");
    df_chart_smooth(y, c->s->n, c->window, out);
    c->smooth[c->n_smooth++] = out;
    return out;
}

static DfChartSeries line(const char *name, const double *x, const double *y, int n, const double *rgb, double alpha,
                          double width) {
    return (DfChartSeries){.name = name, .x = x, .y = y, .n = n, .rgb = {rgb[0], rgb[1], rgb[2]}, .alpha = alpha,
                           .width = width};
}

/* A noisy curve: the raw values faint, their moving average bold. */
static void raw_and_smooth(DfChart *ch, Curves *c, const double *y, const double *rgb, const char *raw_name,
                           const char *smooth_name) {
    const DfRunSeries *s = c->s;
    df_chart_add(ch, line(raw_name, s->step, y, s->n, rgb, 0.3, 1.2));
    df_chart_add(ch, line(smooth_name, s->step, smoothed(c, y), s->n, rgb, 1, 2.4));
}

static void loss_chart(DfChart *ch, Curves *c, const char *smooth_name) {
    static const double blue[3] = {0.12, 0.35, 0.75};
    *ch = (DfChart){.title = "Training loss", .x_label = "step", .y_label = "loss", .empty_note = "no steps yet"};
    raw_and_smooth(ch, c, c->s->loss, blue, "per step", smooth_name);
}

static void tau_chart(DfChart *ch, Curves *c, const char *smooth_name) {
    static const double orange[3] = {0.90, 0.45, 0.05}, green[3] = {0.10, 0.60, 0.25};
    *ch = (DfChart){.title = "Acceptance length tau", .x_label = "step", .y_label = "tau (tokens per target pass)",
                    .empty_note = "no steps yet"};
    raw_and_smooth(ch, c, c->s->tau, orange, "train-tau per step", smooth_name);
    if (c->s->n_eval) {
        DfChartSeries e = line("held-out tau (eval)", c->s->eval_step, c->s->eval_tau, c->s->n_eval, green, 1, 2.4);
        e.markers = 1;
        df_chart_add(ch, e);
    }
}

static void lr_chart(DfChart *ch, Curves *c) {
    static const double purple[3] = {0.50, 0.25, 0.65};
    *ch = (DfChart){.title = "Learning rate", .x_label = "step", .y_label = "learning rate", .empty_note = "no steps yet"};
    df_chart_add(ch, line(NULL, c->s->step, c->s->lr, c->s->n, purple, 1, 2.2));
}

static void speed_chart(DfChart *ch, Curves *c, const char *smooth_name) {
    static const double teal[3] = {0.05, 0.55, 0.55};
    *ch = (DfChart){.title = "Throughput", .x_label = "step", .y_label = "context tokens / s", .empty_note = "no steps yet"};
    raw_and_smooth(ch, c, c->s->tokens_per_s, teal, "per step", smooth_name);
}

/* Each stage that took any time, smoothed, on a log scale (they differ by orders). */
static void stage_chart(DfChart *ch, Curves *c) {
    const DfRunSeries *s = c->s;
    *ch = (DfChart){.title = "Step time by stage (moving average)", .x_label = "step", .y_label = "milliseconds (log)",
                    .log_y = 1, .empty_note = "no stage times"};
    for (int k = 0; k < s->n_stages; k++) { /* a stage keeps its colour from run to run */
        int used = 0;
        for (int i = 0; i < s->n && !used; i++) used = s->stage_ms[k][i] > 0.005;
        if (!used) continue;
        const double *rgb = STAGE_COLORS[k % (int)(sizeof STAGE_COLORS / sizeof *STAGE_COLORS)];
        df_chart_add(ch, line(s->stage_names[k], s->step, smoothed(c, s->stage_ms[k]), s->n, rgb, 1, 2));
    }
}

/* The mean of the last `window` finite values. */
static double last_mean(const double *y, int n, int window) {
    double sum = 0;
    int count = 0;
    for (int i = n - 1; i >= 0 && count < window; i--)
        if (isfinite(y[i])) sum += y[i], count++;
    return count ? sum / count : NAN;
}

static void header(cairo_t *cr, const char *run_dir, const Curves *c) {
    const DfRunSeries *s = c->s;
    char text[1024];
    int n = snprintf(text, sizeof text, "dflash run %s: %d steps", run_dir, s->n);
    if (s->n)
        n += snprintf(text + n, sizeof text - n, "; last %d steps: loss %.3f, train-tau %.3f", c->window,
                      last_mean(s->loss, s->n, c->window), last_mean(s->tau, s->n, c->window));
    int best = -1;
    for (int i = 0; i < s->n_eval; i++)
        if (isfinite(s->eval_tau[i]) && (best < 0 || s->eval_tau[i] > s->eval_tau[best])) best = i;
    if (best >= 0 && n < (int)sizeof text)
        snprintf(text + n, sizeof text - n, "; best held-out tau %.3f at step %.0f", s->eval_tau[best],
                 s->eval_step[best]);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 20);
    cairo_move_to(cr, 24, 36);
    cairo_show_text(cr, text);
}

static void draw_run(cairo_t *cr, const char *run_dir, Curves *c) {
    cairo_set_source_rgb(cr, 0.96, 0.96, 0.97);
    cairo_paint(cr);
    header(cr, run_dir, c);
    char smooth_name[64];
    snprintf(smooth_name, sizeof smooth_name, "moving average of %d", c->window);
    double w = DF_PLOT_WIDTH / 3.0, h = (DF_PLOT_HEIGHT - HEADER_PX) / 2.0, top = HEADER_PX;
    DfChart ch;
    loss_chart(&ch, c, smooth_name);
    df_chart_draw(cr, 0, top, w, h, &ch);
    tau_chart(&ch, c, smooth_name);
    df_chart_draw(cr, w, top, w, h, &ch);
    lr_chart(&ch, c);
    df_chart_draw(cr, 2 * w, top, w, h, &ch);
    speed_chart(&ch, c, smooth_name);
    df_chart_draw(cr, 0, top + h, w, h, &ch);
    stage_chart(&ch, c);
    df_chart_draw(cr, w, top + h, 2 * w, h, &ch);
}

static cairo_status_t write_png_bytes(void *closure, const unsigned char *data, unsigned int length) {
    return fwrite(data, 1, length, closure) == length ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static int write_png(cairo_surface_t *surface, const char *path, DfError *err) {
    DfAtomicFile f;
    if (df_atomic_open(&f, path, err)) return -1;
    cairo_status_t st = cairo_surface_write_to_png_stream(surface, write_png_bytes, f.fp);
    if (st != CAIRO_STATUS_SUCCESS) {
        df_atomic_abort(&f);
        return df_fail(err, "%s: cannot write the PNG: %s", path, cairo_status_to_string(st));
    }
    return df_atomic_commit(&f, err);
}

int df_plot_run(const char *run_dir, const char *out_path, DfError *err) {
    DfRunSeries s;
    if (df_run_series_read(run_dir, &s, err)) return -1;
    Curves c = {.s = &s, .window = s.n / 20 < 1 ? 1 : s.n / 20 > 50 ? 50 : s.n / 20};
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, DF_PLOT_WIDTH, DF_PLOT_HEIGHT);
    cairo_t *cr = cairo_create(surface);
    draw_run(cr, run_dir, &c);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    int rc = st == CAIRO_STATUS_SUCCESS ? write_png(surface, out_path, err)
                                        : df_fail(err, "%s: drawing failed: %s", out_path, cairo_status_to_string(st));
    cairo_surface_destroy(surface);
    for (int i = 0; i < c.n_smooth; i++) free(c.smooth[i]);
    df_run_series_free(&s);
    return rc;
}
