#include "dist/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

static void push(DfGradBuckets *p, int *cap, size_t start, size_t end, int lo, int hi) {
    if (p->n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        p->buckets = df_xrealloc(p->buckets, (size_t)*cap * sizeof *p->buckets, "gradient buckets");
    }
    p->buckets[p->n++] = (DfGradBucket){.offset = start, .count = end - start, .param_lo = lo, .param_hi = hi};
}

/* A parameter too large for one bucket: equal pieces, the last one first. */
static void push_pieces(DfGradBuckets *p, int *cap, size_t offset, size_t count, size_t max_elems, int param) {
    size_t pieces = (count + max_elems - 1) / max_elems;
    for (size_t i = pieces; i-- > 0;)
        push(p, cap, offset + i * count / pieces, offset + (i + 1) * count / pieces, param, param);
}

static int check_contiguous(const size_t *offsets, const size_t *counts, int n, size_t total, DfError *err) {
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (offsets[i] != at)
            return df_fail(err, "gradient buckets: parameter %d starts at element %zu, expected %zu (parameters must "
                                "lie back to back)",
                           i, offsets[i], at);
        if (counts[i] > total - at)
            return df_fail(err, "gradient buckets: parameter %d (%zu elements at %zu) runs past the end (%zu)", i,
                           counts[i], at, total);
        at += counts[i];
    }
    if (at != total) return df_fail(err, "gradient buckets: parameters cover %zu of %zu elements", at, total);
    return 0;
}

int df_grad_buckets_plan(DfGradBuckets *plan, const size_t *offsets, const size_t *counts, int n_params, size_t total,
                         size_t max_elems, DfError *err) {
    memset(plan, 0, sizeof *plan);
    if (n_params < 1 || max_elems < 1) return df_fail(err, "gradient buckets: no parameters or a zero bucket size");
    if (check_contiguous(offsets, counts, n_params, total, err)) return -1;
    plan->total = total;
    int cap = 0;
    size_t start = total, end = total; /* the open bucket: [start, end) */
    int lo = n_params, hi = -1;
    for (int i = n_params - 1; i >= 0; i--) {
        if (counts[i] > max_elems || end - start + counts[i] > max_elems) { /* close the open bucket */
            if (end > start || hi >= 0) push(plan, &cap, start, end, lo, hi);
            start = end = offsets[i] + counts[i];
            hi = -1;
        }
        if (counts[i] > max_elems) {
            push_pieces(plan, &cap, offsets[i], counts[i], max_elems, i);
            start = end = offsets[i];
            continue;
        }
        if (hi < 0) hi = i;
        lo = i;
        start = offsets[i];
    }
    if (end > start || hi >= 0) push(plan, &cap, start, end, lo, hi);
    return 0;
}

int df_grad_buckets_plan_mib(DfGradBuckets *plan, const DfParamRanges *params, double bucket_mib, DfError *err) {
    if (!(bucket_mib > 0) || bucket_mib > 1 << 20)
        return df_fail(err, "gradient buckets: bucket size %g MiB is not a positive size", bucket_mib);
    size_t max_elems = (size_t)(bucket_mib * 1024 * 1024 / sizeof(float));
    if (max_elems == 0) max_elems = 1;
    return df_grad_buckets_plan(plan, params->offsets, params->counts, params->n, params->total, max_elems, err);
}

int df_grad_buckets_ready(const DfGradBuckets *plan, int first_done) {
    int n = 0;
    while (n < plan->n && plan->buckets[n].param_lo >= first_done) n++;
    return n;
}

void df_grad_buckets_free(DfGradBuckets *plan) {
    free(plan->buckets);
    memset(plan, 0, sizeof *plan);
}

void df_grad_readiness_init(DfGradReadiness *r, const DfGradBuckets *plan) {
    r->plan = plan;
    r->done = df_xcalloc((size_t)(plan->n > 0 ? plan->n : 1), sizeof *r->done, "gradient bucket readiness");
    r->complete = 0;
}

void df_grad_readiness_reset(DfGradReadiness *r) {
    memset(r->done, 0, (size_t)(r->plan->n > 0 ? r->plan->n : 1) * sizeof *r->done);
    r->complete = 0;
}

int df_grad_readiness_mark(DfGradReadiness *r, size_t offset, size_t count, DfError *err) {
    const DfGradBuckets *p = r->plan;
    if (offset > p->total || count > p->total - offset)
        return df_fail(err, "gradient range [%zu, +%zu) is outside the %zu gradients", offset, count, p->total);
    size_t end = offset + count;
    for (int i = 0; i < p->n; i++) { /* buckets are few (total / bucket size): a scan is enough */
        const DfGradBucket *b = &p->buckets[i];
        size_t lo = b->offset > offset ? b->offset : offset;
        size_t hi = b->offset + b->count < end ? b->offset + b->count : end;
        if (lo >= hi) continue;
        if (hi - lo > b->count - r->done[i])
            return df_fail(err, "gradient range [%zu, +%zu) reported final again (bucket %d [%zu, +%zu) has %zu of "
                                "its elements already)",
                           offset, count, i, b->offset, b->count, r->done[i]);
        r->done[i] += hi - lo;
    }
    while (r->complete < p->n && r->done[r->complete] == p->buckets[r->complete].count) r->complete++;
    return r->complete;
}

void df_grad_readiness_free(DfGradReadiness *r) {
    free(r->done);
    memset(r, 0, sizeof *r);
}
