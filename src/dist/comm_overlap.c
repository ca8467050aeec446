/* Gradient reduction that overlaps the drafter's backward (dist/comm.h): the
 * NCCL all-reduce of each bucket is queued on comm's own stream as soon as
 * the backward has queued every op that writes into it.
 *
 * Ordering, on each rank's GPU:
 * - a bucket's all-reduce runs after an event recorded on the compute stream
 *   once its last writer was queued, so it reads final gradients;
 * - no compute op writes a bucket after that point in the step: the
 *   backward's writers of a range all come before the hook reports it
 *   (model/drafter.h), and everything after the backward (clipping, the
 *   optimizer, the next step's zeroing) is queued after the compute stream
 *   waits on an event recorded on the comm stream behind the last bucket
 *   (df_comm_overlap_finish), so it sees the sums;
 * - NCCL needs the same collectives in the same order on every rank: the
 *   buckets are queued strictly in plan order (df_grad_readiness hands them
 *   out in that order only), and the plan is a pure function of the
 *   parameter ranges and the bucket size. A rank whose backward reports nothing (an empty
 *   share of the batch) queues them all at the end, in the same order. */
#include <string.h>

#include "dist/comm.h"

/* The NCCL transport runs only on a backend with DF_CAP_STREAMS (df_comm_init),
 * whose table has the stream and event ops. */
static int create_stream_and_events(DfComm *c, DfError *err) {
    DfCommOverlap *o = &c->overlap;
    const DfBackendOps *ops = c->be->ops;
    if (!df_backend_has(c->be, DF_CAP_STREAMS)) return df_fail(err, "internal: overlapped reduction without streams");
    if (!(o->stream = ops->side_stream_create(c->be, err)) || !(o->compute_mark = ops->event_create(c->be, err)) ||
        !(o->comm_mark = ops->event_create(c->be, err)))
        return df_context(err, "overlapped gradient reduction");
    return 0;
}

/* Queues buckets [o->queued, upto) on the comm stream, after the compute
 * stream's work so far. */
static int queue_buckets(DfComm *c, int upto, DfError *err) {
    DfCommOverlap *o = &c->overlap;
    if (o->queued >= upto) return 0;
    if (c->be->ops->stream_wait_stream(c->be, o->stream, NULL, o->compute_mark, err))
        return df_context(err, "ordering gradient bucket %d after the backward", o->queued + 1);
    float *base = o->grads.ptr;
    for (; o->queued < upto; o->queued++) {
        const DfGradBucket *b = &c->buckets.buckets[o->queued];
        if (b->count == 0) continue;
        if (df_nccl_all_reduce_sum(&c->nccl.comm, base + b->offset, base + b->offset, b->count, DF_NCCL_F32,
                                   o->stream, err))
            return df_context(err, "gradient bucket %d of %d (overlapped)", o->queued + 1, c->buckets.n);
    }
    return 0;
}

int df_comm_enable_overlap(DfComm *c, DfError *err) {
    if (c->transport != DF_COMM_NCCL || c->overlap.enabled) return c->overlap.enabled;
    if (create_stream_and_events(c, err)) {
        df_comm_overlap_free(c);
        return -1;
    }
    df_grad_readiness_init(&c->overlap.readiness, &c->buckets);
    c->overlap.enabled = 1;
    return 1;
}

int df_comm_grads_begin(DfComm *c, DfBuffer grads, DfError *err) {
    DfCommOverlap *o = &c->overlap;
    if (!o->enabled) return 0;
    if (grads.kind != DF_BUF_F32 || grads.count != c->buckets.total)
        return df_fail(err, "internal: %zu gradients, the buckets were planned for %zu", grads.count,
                       c->buckets.total);
    if (df_dist_poll_failure(c->group, err) || df_nccl_check_async(&c->nccl.comm, err)) return -1;
    df_grad_readiness_reset(&o->readiness);
    o->grads = grads;
    o->queued = 0;
    o->failed = 0;
    o->open = 1;
    return 0;
}

void df_comm_grad_ready(void *ctx, size_t offset, size_t count) {
    DfComm *c = ctx;
    DfCommOverlap *o = &c->overlap;
    if (!o->open || o->failed) return;
    int complete = df_grad_readiness_mark(&o->readiness, offset, count, &o->error);
    if (complete < 0) {
        o->failed = 1;
        return;
    }
    if (queue_buckets(c, complete, &o->error)) o->failed = 1;
}

int df_comm_overlap_finish(DfComm *c, DfBuffer grads, DfError *err) {
    DfCommOverlap *o = &c->overlap;
    o->open = 0;
    if (o->failed) return df_fail(err, "%s", o->error.msg);
    if (grads.ptr != o->grads.ptr || grads.count != o->grads.count)
        return df_fail(err, "internal: the gradient reduced is not the one the step began with");
    /* the backward is fully queued: whatever was not reported (nothing, or
     * all of it on a rank without a backward) is final now */
    if (queue_buckets(c, c->buckets.n, err)) return -1;
    if (c->be->ops->stream_wait_stream(c->be, NULL, o->stream, o->comm_mark, err))
        return df_context(err, "ordering the optimizer after the gradient all-reduce");
    return df_dist_poll_failure(c->group, err) || df_nccl_check_async(&c->nccl.comm, err) ? -1 : 0;
}

void df_comm_overlap_free(DfComm *c) {
    DfCommOverlap *o = &c->overlap;
    if (c->be && df_backend_has(c->be, DF_CAP_STREAMS)) {
        c->be->ops->side_stream_destroy(c->be, o->stream);
        if (o->compute_mark) c->be->ops->event_destroy(c->be, o->compute_mark);
        if (o->comm_mark) c->be->ops->event_destroy(c->be, o->comm_mark);
    }
    if (o->readiness.done) df_grad_readiness_free(&o->readiness);
    memset(o, 0, sizeof *o);
}
