/* An NCCL communicator over every rank of a TCP group (dist/rendezvous.h):
 * rank 0's unique id is broadcast through the group, and the group's failure
 * hook aborts the communicator, because a collective or a send blocked on a
 * lost peer never returns by itself: the abort ends the blocked NCCL kernels
 * so that the step fails with the group's message instead of hanging (NCCL
 * allows ncclCommAbort from another thread). Used by the gradient reduction
 * (dist/comm.h) and the split layout's feature links (dist/feature_link.h). */
#ifndef DF_DIST_GROUP_NCCL_H
#define DF_DIST_GROUP_NCCL_H

#include <stdatomic.h>

#include "base/error.h"
#include "dist/nccl.h"
#include "dist/rendezvous.h"

typedef struct DfGroupNccl {
    DfDistGroup *group; /* not owned */
    DfNcclLib lib;
    DfNcclComm comm;
    int open;
    atomic_int aborted; /* by df_group_nccl_abort or the failure hook, whichever comes first */
} DfGroupNccl;

/* Loads NCCL and joins the communicator (every rank of group calls it, in
 * the order of its other collectives); purpose names the user in errors
 * ("data parallel on CUDA"). n must stay at its address until closed (the
 * hook holds it). */
int df_group_nccl_open(DfGroupNccl *n, DfDistGroup *group, const char *purpose, DfError *err);
/* After a lost rank: unhooks and tears the communicator down without
 * waiting for peers. */
void df_group_nccl_abort(DfGroupNccl *n);
/* Unhooks and destroys the communicator (unless aborted); then n is empty. */
void df_group_nccl_close(DfGroupNccl *n);

#endif
