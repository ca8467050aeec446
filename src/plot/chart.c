/* Chart panels: ranges, round-number ticks, axes, series, legend. */
#include "plot/chart.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define FONT "DejaVu Sans"
#define DF_PI 3.14159265358979323846
#define TITLE_PX 17.0
#define LABEL_PX 13.0
#define TICK_PX 12.0

typedef struct Range {
    double lo, hi;
} Range;

typedef struct Frame { /* the plot area, and the data ranges mapped onto it */
    double x, y, w, h;
    Range rx, ry;
    int log_y;
} Frame;

void df_chart_add(DfChart *c, DfChartSeries s) {
    if (c->n_series < DF_CHART_MAX_SERIES) c->series[c->n_series++] = s;
}

void df_chart_smooth(const double *y, int n, int window, double *out) {
    if (window < 1) window = 1;
    double sum = 0;
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (isfinite(y[i])) sum += y[i], count++;
        if (i >= window && isfinite(y[i - window])) sum -= y[i - window], count--;
        out[i] = count ? sum / count : NAN;
    }
}

static int usable(double v, int log_scale) { return isfinite(v) && (!log_scale || v > 0); }

/* The data's extent over every series; a flat or empty one gets some room. */
static int data_ranges(const DfChart *c, Range *rx, Range *ry) {
    *rx = (Range){DBL_MAX, -DBL_MAX};
    *ry = (Range){DBL_MAX, -DBL_MAX};
    int any = 0;
    for (int s = 0; s < c->n_series; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            double x = c->series[s].x[i], y = c->series[s].y[i];
            if (!isfinite(x) || !usable(y, c->log_y)) continue;
            any = 1;
            rx->lo = fmin(rx->lo, x), rx->hi = fmax(rx->hi, x);
            double v = c->log_y ? log10(y) : y;
            ry->lo = fmin(ry->lo, v), ry->hi = fmax(ry->hi, v);
        }
    if (!any) *rx = (Range){0, 1}, *ry = (Range){0, 1};
    if (rx->hi <= rx->lo) rx->lo -= 0.5, rx->hi += 0.5;
    if (ry->hi <= ry->lo) {
        double pad = fabs(ry->lo) > 0 ? 0.05 * fabs(ry->lo) : 0.5;
        ry->lo -= pad, ry->hi += pad;
    } else {
        double pad = 0.04 * (ry->hi - ry->lo);
        ry->lo -= pad, ry->hi += pad;
    }
    if (!c->log_y && ry->lo < 0 && ry->lo > -1e-12) ry->lo = 0;
    return any;
}

/* 1, 2 or 5 times a power of ten, near span / target. */
static double nice_step(double span, int target) {
    double raw = span / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* One format per axis, from the step: fixed decimals, or exponents for tiny or huge steps. */
static void format_tick(char *buf, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (v == 0) snprintf(buf, cap, "0");
    else if (step < 1e-3 || step >= 1e5) snprintf(buf, cap, "%.1e", v);
    else if (step >= 1) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%.*f", (int)ceil(-log10(step) - 1e-9), v);
}

static double map_x(const Frame *f, double x) { return f->x + (x - f->rx.lo) / (f->rx.hi - f->rx.lo) * f->w; }
static double map_y(const Frame *f, double y) {
    double v = f->log_y ? log10(y) : y;
    return f->y + f->h - (v - f->ry.lo) / (f->ry.hi - f->ry.lo) * f->h;
}

/* Text whose top is at y, its left at x minus ax of its width (0: left, 0.5: centred, 1: right-aligned). */
static void text_at(cairo_t *cr, const char *s, double px, double x, double y, double ax, int bold) {
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, px);
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - ax * e.x_advance, y + px * 0.75);
    cairo_show_text(cr, s);
}

static void grid_line(cairo_t *cr, double x0, double y0, double x1, double y1) {
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1, y1);
    cairo_stroke(cr);
}

static void x_ticks(cairo_t *cr, const Frame *f) {
    double step = nice_step(f->rx.hi - f->rx.lo, 6);
    for (double v = ceil(f->rx.lo / step) * step; v <= f->rx.hi + step * 1e-9; v += step) {
        double px = map_x(f, v);
        grid_line(cr, px, f->y, px, f->y + f->h);
        char buf[32];
        format_tick(buf, sizeof buf, v, step);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        text_at(cr, buf, TICK_PX, px, f->y + f->h + 6, 0.5, 0);
    }
}

static void y_ticks(cairo_t *cr, const Frame *f) {
    int log_steps = f->log_y && f->ry.hi - f->ry.lo >= 1;
    double step = log_steps ? fmax(1, round(nice_step(f->ry.hi - f->ry.lo, 5))) : nice_step(f->ry.hi - f->ry.lo, 5);
    for (double v = ceil(f->ry.lo / step) * step; v <= f->ry.hi + step * 1e-9; v += step) {
        double value = f->log_y ? pow(10, v) : v;
        double py = map_y(f, value);
        grid_line(cr, f->x, py, f->x + f->w, py);
        char buf[32];
        if (f->log_y) snprintf(buf, sizeof buf, "%g", value);
        else format_tick(buf, sizeof buf, v, step);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        text_at(cr, buf, TICK_PX, f->x - 6, py - TICK_PX * 0.36, 1, 0);
    }
}

static void draw_series(cairo_t *cr, const Frame *f, const DfChartSeries *s) {
    cairo_save(cr);
    cairo_rectangle(cr, f->x, f->y, f->w, f->h);
    cairo_clip(cr);
    cairo_set_source_rgba(cr, s->rgb[0], s->rgb[1], s->rgb[2], s->alpha > 0 ? s->alpha : 1);
    cairo_set_line_width(cr, s->width > 0 ? s->width : 1.5);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    int pen = 0;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !usable(s->y[i], f->log_y)) {
            pen = 0;
            continue;
        }
        double px = map_x(f, s->x[i]), py = map_y(f, s->y[i]);
        if (pen) cairo_line_to(cr, px, py);
        else cairo_move_to(cr, px, py);
        pen = 1;
    }
    cairo_stroke(cr);
    for (int i = 0; s->markers && i < s->n; i++) {
        if (!isfinite(s->x[i]) || !usable(s->y[i], f->log_y)) continue;
        cairo_arc(cr, map_x(f, s->x[i]), map_y(f, s->y[i]), 3.5, 0, 2 * DF_PI);
        cairo_fill(cr);
    }
    cairo_restore(cr);
}

/* Points of the chart's series inside the box [x0, x1] x [y0, y1] (pixels). */
static int points_in(const Frame *f, const DfChart *c, double x0, double y0, double x1, double y1) {
    int n = 0;
    for (int s = 0; s < c->n_series; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            double x = c->series[s].x[i], y = c->series[s].y[i];
            if (!isfinite(x) || !usable(y, f->log_y)) continue;
            double px = map_x(f, x), py = map_y(f, y);
            n += px >= x0 && px <= x1 && py >= y0 && py <= y1;
        }
    return n;
}

/* In the right-hand corner (top or bottom) that hides fewer points. */
static void legend(cairo_t *cr, const Frame *f, const DfChart *c) {
    int rows = 0;
    for (int s = 0; s < c->n_series; s++) rows += c->series[s].name != NULL;
    double box_h = rows * (LABEL_PX + 5) + 8, box_w = 200, x = f->x + f->w - 10;
    double top = f->y + 8, bottom = f->y + f->h - box_h;
    double y = points_in(f, c, x - box_w, top, x, top + box_h) <= points_in(f, c, x - box_w, bottom, x, bottom + box_h)
                   ? top
                   : bottom;
    for (int s = 0; s < c->n_series; s++) {
        const DfChartSeries *se = &c->series[s];
        if (!se->name) continue;
        cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, LABEL_PX - 1);
        cairo_text_extents_t e;
        cairo_text_extents(cr, se->name, &e);
        cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
        cairo_rectangle(cr, x - e.x_advance - 34, y - 2, e.x_advance + 38, LABEL_PX + 4);
        cairo_fill(cr);
        cairo_set_source_rgba(cr, se->rgb[0], se->rgb[1], se->rgb[2], se->alpha > 0 ? se->alpha : 1);
        cairo_set_line_width(cr, 3);
        cairo_move_to(cr, x - e.x_advance - 30, y + LABEL_PX * 0.45);
        cairo_line_to(cr, x - e.x_advance - 8, y + LABEL_PX * 0.45);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        text_at(cr, se->name, LABEL_PX - 1, x, y, 1, 0);
        y += LABEL_PX + 5;
    }
}

static void axis_titles(cairo_t *cr, const Frame *f, const DfChart *c, double x, double w, double y) {
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    if (c->title) text_at(cr, c->title, TITLE_PX, x + w / 2, y + 6, 0.5, 1);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    if (c->x_label) text_at(cr, c->x_label, LABEL_PX, f->x + f->w / 2, f->y + f->h + 26, 0.5, 0);
    if (c->y_label) {
        cairo_save(cr);
        cairo_translate(cr, x + 8, f->y + f->h / 2);
        cairo_rotate(cr, -DF_PI / 2);
        text_at(cr, c->y_label, LABEL_PX, 0, 0, 0.5, 0);
        cairo_restore(cr);
    }
}

void df_chart_draw(cairo_t *cr, double x, double y, double w, double h, const DfChart *c) {
    Frame f = {.x = x + 78, .y = y + 34, .w = w - 96, .h = h - 34 - 52, .log_y = c->log_y};
    int any = data_ranges(c, &f.rx, &f.ry);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, f.x, f.y, f.w, f.h);
    cairo_fill(cr);
    x_ticks(cr, &f);
    y_ticks(cr, &f);
    for (int s = 0; s < c->n_series; s++) draw_series(cr, &f, &c->series[s]);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, f.x + 0.5, f.y + 0.5, f.w - 1, f.h - 1);
    cairo_stroke(cr);
    if (any) legend(cr, &f, c);
    else if (c->empty_note) {
        cairo_set_source_rgb(cr, 0.45, 0.45, 0.45);
        text_at(cr, c->empty_note, LABEL_PX, f.x + f.w / 2, f.y + f.h / 2, 0.5, 0);
    }
    axis_titles(cr, &f, c, x, w, y);
}
