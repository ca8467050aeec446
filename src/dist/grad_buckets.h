/* Buckets for gradient reduction: the drafter's gradients are one flat fp32
 * buffer, its parameters back to back in forward order (the caller gives
 * their ranges: DfParamRanges), and backward finishes
 * them roughly in reverse (the last norm first, fc last). Cutting the buffer
 * into buckets of about N MiB from its end toward its start lets a bucket's
 * reduction start as soon as backward has finished every parameter in it,
 * overlapping the rest of backward.
 *
 * Bucket edges fall on parameter edges; a parameter larger than the bucket
 * size is cut into equal pieces of at most the bucket size (it is finished
 * all at once, but moderate messages keep NCCL's pipelining going). Each
 * bucket is a contiguous range of the flat buffer. */
#ifndef DF_DIST_GRAD_BUCKETS_H
#define DF_DIST_GRAD_BUCKETS_H

#include <stddef.h>

#include "base/error.h"

/* Parameters lying back to back in a flat buffer of `total` elements:
 * parameter i is elements [offsets[i], offsets[i] + counts[i]). The trainer
 * makes them from the drafter's layout (train/param_ranges.h). */
typedef struct DfParamRanges {
    size_t *offsets, *counts; /* [n] */
    int n;
    size_t total;
} DfParamRanges;

typedef struct DfGradBucket {
    size_t offset, count;   /* elements [offset, offset + count) of the flat buffer */
    int param_lo, param_hi; /* the parameters it holds (whole or a piece), indices lo..hi of the ranges */
} DfGradBucket;

typedef struct DfGradBuckets {
    DfGradBucket *buckets; /* in reduction order: descending offsets */
    int n;
    size_t total; /* elements of the flat buffer */
} DfGradBuckets;

/* Plans buckets of at most max_elems elements over n_params parameters that
 * lie back to back in [0, total) (offsets[i+1] = offsets[i] + counts[i]). */
int df_grad_buckets_plan(DfGradBuckets *plan, const size_t *offsets, const size_t *counts, int n_params, size_t total,
                         size_t max_elems, DfError *err);

/* The parameters' buckets of bucket_mib MiB of fp32. */
int df_grad_buckets_plan_mib(DfGradBuckets *plan, const DfParamRanges *params, double bucket_mib, DfError *err);

/* How many leading buckets are complete once backward has finished every
 * parameter with index >= first_done (n_params when none is done yet). */
int df_grad_buckets_ready(const DfGradBuckets *plan, int first_done);

void df_grad_buckets_free(DfGradBuckets *plan);

/* Which buckets a backward has finished, from the gradient ranges it reports
 * final (the drafter's grad_ready hook), in any order. Buckets are
 * handed out strictly in plan order (a bucket only once every bucket before
 * it is complete), so every rank queues its collectives in the same order,
 * a pure function of the plan, whatever ranges it saw when. */
typedef struct DfGradReadiness {
    const DfGradBuckets *plan; /* not owned */
    size_t *done;              /* [plan->n]: elements of each bucket reported final */
    int complete;              /* buckets 0 .. complete-1 are complete (handed out) */
} DfGradReadiness;

void df_grad_readiness_init(DfGradReadiness *r, const DfGradBuckets *plan);
/* Nothing final: the start of a backward. */
void df_grad_readiness_reset(DfGradReadiness *r);
/* Marks [offset, offset + count) final; returns how many leading buckets are
 * now complete (never fewer than before: those from the previous count on
 * are newly ready), or -1 when the range leaves [0, total) or covers
 * elements of a bucket more than once. */
int df_grad_readiness_mark(DfGradReadiness *r, size_t offset, size_t count, DfError *err);
void df_grad_readiness_free(DfGradReadiness *r);

#endif
