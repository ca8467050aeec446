/* Row-wise first argmax of a logits matrix (greedy decoding's choice). */
#include "backend/cpu/cpu_ops.h"

void df_cpu_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols) {
    (void)be;
    const float *xs = x.ptr;
    int32_t *idx = index.ptr;
    float *val = value.ptr;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *row = xs + (size_t)r * cols;
        int best = 0;
        /* `>`: the first of equal maxima stays, and a NaN never replaces a value */
        for (int c = 1; c < cols; c++)
            if (row[c] > row[best]) best = c;
        idx[r] = best;
        if (val) val[r] = row[best];
    }
}
