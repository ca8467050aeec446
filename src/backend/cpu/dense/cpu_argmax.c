/* Row-wise first argmax of a logits matrix (greedy decoding's choice). */
#include "backend/cpu/cpu_ops.h"

#include <math.h>

void df_cpu_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols) {
    (void)be;
    const float *xs = x.ptr;
    int32_t *idx = index.ptr;
    float *val = value.ptr;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *row = xs + (size_t)r * cols;
        int best = 0;
        /* `>` on the keys: the first of equal maxima stays */
        for (int c = 1; c < cols; c++)
            if (df_argmax_key(row[c]) > df_argmax_key(row[best])) best = c;
        idx[r] = isfinite(row[best]) ? best : -1 - best;
        if (val) val[r] = row[best];
    }
}
