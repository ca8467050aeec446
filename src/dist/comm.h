/* Gradient and metric reduction of a data-parallel training run, over one
 * of two transports picked by the training backend:
 *
 *   nccl (CUDA): the drafter's flat fp32 gradient is all-reduced (summed)
 *     in place on the GPU by NCCL (dist/group_nccl.h: bootstrapped by broadcasting
 *     its unique id over the TCP group), in buckets of bucket_mib MiB from
 *     the buffer's end toward its start (dist/grad_buckets.h). Two ways:
 *     - overlapped (df_comm_enable_overlap; the trainer's default): the
 *       drafter's backward reports gradient ranges as they become final
 *       (its grad_ready hook: df_comm_grad_ready); each
 *       bucket wholly final is queued, in plan order, on a communication
 *       stream of comm's own, after an event recorded on the backend's
 *       stream at that point, so that it runs while the backward goes on;
 *       df_comm_all_reduce_grads queues what is left and makes the backend's
 *       stream wait for the communication stream, so that the optimizer (and
 *       the next step's zeroing) come after every bucket.
 *     - after the backward (the fallback): every bucket queued by
 *       df_comm_all_reduce_grads on the backend's stream.
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

#include <stddef.h>

#include "backend/backend.h"
#include "base/error.h"
#include "dist/grad_buckets.h"
#include "dist/group_nccl.h"
#include "dist/nccl.h"
#include "dist/rendezvous.h"

typedef enum DfCommTransport { DF_COMM_NONE, DF_COMM_HOST, DF_COMM_NCCL } DfCommTransport;

/* The overlapped reduction's state (see above; NCCL transport only). */
typedef struct DfCommOverlap {
    int enabled;
    int open;                    /* between df_comm_grads_begin and df_comm_all_reduce_grads */
    DfBuffer grads;              /* this step's gradient */
    DfGradReadiness readiness;   /* which buckets the backward has finished */
    int queued;                  /* buckets 0 .. queued-1 are queued this step */
    void *stream;                /* cudaStream_t of the collectives */
    void *compute_mark, *comm_mark; /* cudaEvent_t: compute -> comm, comm -> compute */
    int failed;                  /* a hook call failed: error is kept for the reduction */
    DfError error;
} DfCommOverlap;

typedef struct DfComm {
    DfDistGroup *group; /* not owned */
    DfBackend *be;      /* not owned */
    DfCommTransport transport;
    float *host;        /* host transport: staging for the gradient */
    size_t host_count;
    DfGradBuckets buckets;
    int have_buckets;
    DfGroupNccl nccl;   /* the NCCL transport's communicator */
    DfCommOverlap overlap;
} DfComm;

/* Sets up the transport for the backend (every rank calls it, in the same
 * order as its other collectives) and the gradient of the given parameters
 * (the NCCL transport's buckets are cut on their edges). group may have one
 * rank (no transport). */
int df_comm_init(DfComm *c, DfDistGroup *group, DfBackend *be, const DfParamRanges *params, double bucket_mib,
                 DfError *err);

/* "nccl", "host (TCP)" or "none". */
const char *df_comm_transport_name(const DfComm *c);

/* grads (F32 on the backend, params->total elements) summed over the ranks,
 * in place (queued: the backend's later ops see the sums). With a step
 * opened by df_comm_grads_begin, the overlapped reduction's end. */
int df_comm_all_reduce_grads(DfComm *c, DfBuffer grads, DfError *err);

/* Overlapped gradient reduction (see above). Returns 1 when on (the NCCL
 * transport), 0 when the transport has no such mode (host, none: reduction
 * stays after the backward), -1 on failure. Call once after df_comm_init. */
int df_comm_enable_overlap(DfComm *c, DfError *err);
/* Before each step's backward (after zeroing grads): nothing is final yet.
 * A no-op unless overlap is on; then df_comm_all_reduce_grads ends it. */
int df_comm_grads_begin(DfComm *c, DfBuffer grads, DfError *err);
/* The drafter's grad_ready hook (ctx: the DfComm): marks the range final and
 * queues every bucket now complete. A failure is kept and returned by
 * df_comm_all_reduce_grads; ignored outside begin .. all_reduce_grads. */
void df_comm_grad_ready(void *ctx, size_t offset, size_t count);
/* The overlapped end of df_comm_all_reduce_grads (comm_overlap.c). */
int df_comm_overlap_finish(DfComm *c, DfBuffer grads, DfError *err);
void df_comm_overlap_free(DfComm *c);

/* values[n] summed over the ranks, in place (identical bits on every rank). */
int df_comm_all_reduce_host(DfComm *c, double *values, size_t n, DfError *err);

/* After a lost rank: tears NCCL down without waiting for peers. */
void df_comm_abort(DfComm *c);

void df_comm_free(DfComm *c);

#endif
