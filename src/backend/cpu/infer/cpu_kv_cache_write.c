/* Appends a step's new K or V rows to their sequences' cache slots. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim) {
    (void)be;
    float *c = cache.ptr;
    const float *r = rows.ptr;
    for (int i = 0; i < batch->n_seqs; i++) {
        int r0 = batch->host_row_starts[i], n = batch->host_row_starts[i + 1] - r0;
        size_t dst_row = (size_t)batch->host_slots[i] * batch->slot_capacity + (size_t)batch->host_cache_lens[i];
        /* the new rows of one sequence are contiguous on both sides */
        memcpy(c + dst_row * dim, r + (size_t)r0 * dim, (size_t)n * dim * sizeof *c);
    }
}
