/* One chart panel drawn with cairo: a title, axes with ticks at round
 * numbers and their labels, axis titles, a frame, grid lines, line series
 * (optionally with point markers) and a legend. NaN points are gaps. */
#ifndef DF_PLOT_CHART_H
#define DF_PLOT_CHART_H

#include <cairo/cairo.h>

#define DF_CHART_MAX_SERIES 12

typedef struct DfChartSeries {
    const char *name;     /* in the legend (NULL: not listed) */
    const double *x, *y;
    int n;
    double rgb[3];
    double alpha;         /* 1: opaque */
    double width;         /* line width in pixels */
    int markers;          /* 1: a dot at each point */
} DfChartSeries;

typedef struct DfChart {
    const char *title, *x_label, *y_label;
    DfChartSeries series[DF_CHART_MAX_SERIES];
    int n_series;
    int log_y;            /* 1: logarithmic y axis (positive values only) */
    const char *empty_note; /* shown when no series has a finite point */
} DfChart;

/* Appends a series (ignored beyond DF_CHART_MAX_SERIES). */
void df_chart_add(DfChart *c, DfChartSeries s);

/* Draws the chart into the rectangle (x, y, w, h) of cr. */
void df_chart_draw(cairo_t *cr, double x, double y, double w, double h, const DfChart *c);

/* A trailing moving average of y over `window` points (NaNs skipped) into
 * out[n]: the smoothed curve of a noisy one. */
void df_chart_smooth(const double *y, int n, int window, double *out);

#endif
