/* Gradient and metric reduction of a data-parallel training run, over one
 * of two transports picked by the training backend:
 *
 *   nccl (CUDA): the drafter's flat fp32 gradient is all-reduced (summed)
 *     in place on the GPU by NCCL (dist/nccl.h, bootstrapped by broadcasting
 *     its unique id over the TCP group), in buckets of bucket_mib MiB from
 *     the buffer's end toward its start (dist/grad_buckets.h), queued on the
 *     backend's stream so that the optimizer's ops run after them. The
 *     buckets are queued once the backward is done: the drafter's backward
 *     has no per-parameter completion hook yet, so they cannot start during
 *     it (the plan's df_grad_buckets_ready is there for when it has one).
 *   host (every other backend, the CPU): the gradient goes to the host and
 *     through df_dist_all_reduce_sum over the TCP group (rank 0 sums in
 *     rank order: every rank gets the same bits), and back. It makes data
 *     parallel runnable and testable without GPUs; it is not fast.
 *
 * Small host vectors (the loss-weight sum, the step's metrics) always go
 * through the TCP group. With one rank every call returns at once and
 * changes nothing. */
#ifndef DF_DIST_COMM_H
#define DF_DIST_COMM_H

#include <stdatomic.h>
#include <stddef.h>

#include "backend/backend.h"
#include "base/error.h"
#include "dist/grad_buckets.h"
#include "dist/nccl.h"
#include "dist/rendezvous.h"
#include "model/drafter_layout.h"

typedef enum DfCommTransport { DF_COMM_NONE, DF_COMM_HOST, DF_COMM_NCCL } DfCommTransport;

typedef struct DfComm {
    DfDistGroup *group; /* not owned */
    DfBackend *be;      /* not owned */
    DfCommTransport transport;
    float *host;        /* host transport: staging for the gradient */
    size_t host_count;
    DfGradBuckets buckets;
    int have_buckets;
    DfNcclLib nccl;
    DfNcclComm nccl_comm;
    int have_nccl;
    atomic_int nccl_aborted; /* by df_comm_abort or the group's failure hook, whichever comes first */
} DfComm;

/* Sets up the transport for the backend (every rank calls it, in the same
 * order as its other collectives). group may have one rank (no transport). */
int df_comm_init(DfComm *c, DfDistGroup *group, DfBackend *be, const DfDrafterLayout *layout, double bucket_mib,
                 DfError *err);

/* "nccl", "host (TCP)" or "none". */
const char *df_comm_transport_name(const DfComm *c);

/* grads (F32 on the backend, layout.total elements) summed over the ranks,
 * in place. */
int df_comm_all_reduce_grads(DfComm *c, DfBuffer grads, DfError *err);

/* values[n] summed over the ranks, in place (identical bits on every rank). */
int df_comm_all_reduce_host(DfComm *c, double *values, size_t n, DfError *err);

/* After a lost rank: tears NCCL down without waiting for peers. */
void df_comm_abort(DfComm *c);

void df_comm_free(DfComm *c);

#endif
