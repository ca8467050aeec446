#include "train/param_ranges.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void df_param_ranges_from_layout(DfParamRanges *out, const DfDrafterLayout *layout) {
    out->n = layout->n_params;
    out->total = layout->total;
    out->offsets = df_xmalloc((size_t)layout->n_params * sizeof *out->offsets, "gradient buckets");
    out->counts = df_xmalloc((size_t)layout->n_params * sizeof *out->counts, "gradient buckets");
    for (int i = 0; i < layout->n_params; i++) {
        out->offsets[i] = layout->params[i].offset;
        out->counts[i] = layout->params[i].count;
    }
}

void df_param_ranges_free(DfParamRanges *r) {
    free(r->offsets);
    free(r->counts);
    memset(r, 0, sizeof *r);
}
