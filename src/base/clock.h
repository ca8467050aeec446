/* Monotonic wall-clock time in seconds. */
#ifndef DF_BASE_CLOCK_H
#define DF_BASE_CLOCK_H

#include <time.h>

static inline double df_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
