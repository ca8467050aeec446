/* Row softmax over a visible prefix of each row, shared by the causal and
 * the KV-cache attention kernels. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_softmax_prefix_rows(float *s, int rows, int cols, int visible0, int grow, float *lse_out) {
    for (int r = 0; r < rows; r++) {
        float *row = s + (size_t)r * cols;
        int valid = visible0 + grow * r;
        if (valid > cols) valid = cols;
        float mx = -INFINITY;
        for (int j = 0; j < valid; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < valid; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < valid; j++) row[j] *= inv;
        for (int j = valid; j < cols; j++) row[j] = 0.0f;
        if (lse_out) lse_out[r] = mx + logf(sum);
    }
}
