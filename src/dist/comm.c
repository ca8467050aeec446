#include "dist/comm.h"

#include <stdlib.h>
#include <string.h>

static int init_nccl(DfComm *c, DfError *err) {
    return df_group_nccl_open(&c->nccl, c->group, "data parallel on the device", err);
}

int df_comm_init(DfComm *c, DfDistGroup *group, DfBackend *be, const DfParamRanges *params, double bucket_mib,
                 DfError *err) {
    memset(c, 0, sizeof *c);
    c->group = group;
    c->be = be;
    if (!group || df_dist_world_size(group) == 1) return 0;
    if (df_backend_has(be, DF_CAP_STREAMS | DF_CAP_NCCL)) { /* the gradients stay on the device */
        c->transport = DF_COMM_NCCL;
        if (df_grad_buckets_plan_mib(&c->buckets, params, bucket_mib, err)) return -1;
        c->have_buckets = 1;
        return init_nccl(c, err);
    }
    c->transport = DF_COMM_HOST;
    c->host_count = params->total;
    c->host = df_xmalloc(params->total * sizeof *c->host, "gradient staging");
    return 0;
}

const char *df_comm_transport_name(const DfComm *c) {
    return c->transport == DF_COMM_NCCL ? "nccl" : c->transport == DF_COMM_HOST ? "host (TCP)" : "none";
}

static int all_reduce_nccl(DfComm *c, DfBuffer grads, DfError *err) {
    if (df_dist_poll_failure(c->group, err) || df_nccl_check_async(&c->nccl.comm, err)) return -1;
    void *stream = df_backend_native_stream(c->be);
    float *base = grads.ptr;
    for (int i = 0; i < c->buckets.n; i++) {
        const DfGradBucket *b = &c->buckets.buckets[i];
        if (b->offset + b->count > grads.count)
            return df_fail(err, "gradient bucket %d [%zu, +%zu) is outside the %zu gradients", i, b->offset,
                           b->count, grads.count);
        if (df_nccl_all_reduce_sum(&c->nccl.comm, base + b->offset, base + b->offset, b->count, DF_NCCL_F32, stream,
                                   err))
            return df_context(err, "gradient bucket %d of %d", i + 1, c->buckets.n);
    }
    return 0;
}

int df_comm_all_reduce_grads(DfComm *c, DfBuffer grads, DfError *err) {
    switch (c->transport) {
    case DF_COMM_NONE:
        return 0;
    case DF_COMM_NCCL:
        if (c->overlap.open) return df_comm_overlap_finish(c, grads, err);
        return all_reduce_nccl(c, grads, err);
    case DF_COMM_HOST:
        break;
    }
    if (grads.count != c->host_count)
        return df_fail(err, "internal: %zu gradients, the transport was set up for %zu", grads.count, c->host_count);
    if (c->be->ops->sync(c->be, err) || c->be->ops->download_f32(c->be, c->host, grads, err)) return -1;
    if (df_dist_all_reduce_sum(c->group, c->host, c->host_count, DF_DIST_F32, err))
        return df_context(err, "gradient all-reduce");
    return c->be->ops->upload_f32(c->be, grads, c->host, err);
}

int df_comm_all_reduce_host(DfComm *c, double *values, size_t n, DfError *err) {
    if (c->transport == DF_COMM_NONE) return 0;
    return df_dist_all_reduce_sum(c->group, values, n, DF_DIST_F64, err);
}

void df_comm_abort(DfComm *c) { df_group_nccl_abort(&c->nccl); }

void df_comm_free(DfComm *c) {
    df_group_nccl_close(&c->nccl);
    df_comm_overlap_free(c); /* after the communicator: nothing left running on its stream */
    if (c->have_buckets) df_grad_buckets_free(&c->buckets);
    free(c->host);
    memset(c, 0, sizeof *c);
}
