/* Device helpers over a DfKvBatch's layout (backend.h), shared by the
 * kernels that walk a step's packed new rows and address its cache rows. */
#ifndef DF_BACKEND_CUDA_KV_ROWS_H
#define DF_BACKEND_CUDA_KV_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

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

/* The cache-buffer row holding row r (0 <= r < its cached + new rows) of the
 * step's sequence i: df_kv_cache_row's device twin, the one place the
 * kernels compute it. pages: the batch's page tables (batch->pages, row i
 * sequence i's, pages_per_seq entries each), or nullptr for contiguous slots
 * (slots[i] * capacity + r). Rows r0 .. r0 + n - 1 with r0 a multiple of n
 * and n dividing DF_KV_PAGE_ROWS lie in one page: consecutive buffer rows
 * from df_kv_cache_row_dev(.., r0), either way. */
__device__ __forceinline__ size_t df_kv_cache_row_dev(const int32_t *pages, int pages_per_seq, const int32_t *slots,
                                                      int capacity, int i, int r) {
    if (pages)
        return (size_t)pages[(size_t)i * pages_per_seq + (unsigned)r / DF_KV_PAGE_ROWS] * DF_KV_PAGE_ROWS +
               (unsigned)r % DF_KV_PAGE_ROWS;
    return (size_t)slots[i] * capacity + (size_t)r;
}

#endif
