#include "base/sort.h"

#include <stdlib.h>

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void df_sort_doubles(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, compare_doubles);
}

double df_median_sorting(double *v, size_t n) {
    if (n == 0) return 0;
    df_sort_doubles(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
