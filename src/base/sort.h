/* Sorting and medians of double arrays (timings, for the benchmarks and the
 * trainer's stage statistics). */
#ifndef DF_BASE_SORT_H
#define DF_BASE_SORT_H

#include <stddef.h>

/* Ascending, in place. */
void df_sort_doubles(double *v, size_t n);

/* The median of v[0..n-1], the mean of the two middle values for an even n;
 * sorts v in place. 0 for n = 0. */
double df_median_sorting(double *v, size_t n);

#endif
