/* Appends a step's new K or V rows to their sequences' cache slots. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim) {
    (void)be;
    float *c = cache.ptr;
    const float *r = rows.ptr;
    for (int i = 0; i < batch->n_seqs; i++) {
        int r0 = batch->host_row_starts[i], n = batch->host_row_starts[i + 1] - r0, len = batch->host_cache_lens[i];
        /* the new rows of one sequence are contiguous in rows, and in the cache up to a page's end */
        for (int j = 0, run; j < n; j += run) {
            run = batch->n_pages ? DF_KV_PAGE_ROWS - (len + j) % DF_KV_PAGE_ROWS : n;
            if (run > n - j) run = n - j;
            memcpy(c + df_kv_cache_row(batch, i, len + j) * dim, r + (size_t)(r0 + j) * dim,
                   (size_t)run * dim * sizeof *c);
        }
    }
}
