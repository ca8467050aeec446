/* Device helpers over a DfKvBatch's layout (backend.h), shared by the
 * kernels that walk a step's packed new rows. */
#ifndef DF_BACKEND_CUDA_KV_ROWS_H
#define DF_BACKEND_CUDA_KV_ROWS_H

#include <stdint.h>

/* Sequence owning packed row `row`: the last i with row_starts[i] <= row. */
__device__ __forceinline__ int df_kv_seq_of_row(const int32_t *row_starts, int n_seqs, int row) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (row_starts[mid] <= row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

#endif
