/* The drafter's parameters as the plain ranges of its flat gradient that
 * the gradient reduction (dist/comm.h, dist/grad_buckets.h) takes: dist/
 * knows buffers and ranges, not the drafter's layout. */
#ifndef DF_TRAIN_PARAM_RANGES_H
#define DF_TRAIN_PARAM_RANGES_H

#include "dist/grad_buckets.h"
#include "model/drafter_layout.h"

/* out: every parameter of the layout, in its order (arrays of its own). */
void df_param_ranges_from_layout(DfParamRanges *out, const DfDrafterLayout *layout);
void df_param_ranges_free(DfParamRanges *r);

#endif
