/* Monotonic wall-clock time in seconds, and sleeping for a while. */
#ifndef DF_BASE_CLOCK_H
#define DF_BASE_CLOCK_H

#include <errno.h>
#include <time.h>

static inline double df_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps s seconds (s >= 0), the rest of them again after a signal. */
static inline void df_sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#endif
