/* The host's fixed-order sum of squares (see optim_math.h). */
#include "backend/optim_math.h"

#define MAX_CHUNKS 256
#define MIN_CHUNK 16384

double df_sum_squares_host(const float *x, size_t n) {
    if (n == 0) return 0.0;
    size_t n_chunks = (n + MIN_CHUNK - 1) / MIN_CHUNK;
    if (n_chunks > MAX_CHUNKS) n_chunks = MAX_CHUNKS;
    size_t chunk = (n + n_chunks - 1) / n_chunks;
    double partial[MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        partial[c] = s;
    }
    double total = 0.0;
    for (size_t c = 0; c < n_chunks; c++) total += partial[c];
    return total;
}
