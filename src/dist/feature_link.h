/* The split layout's point-to-point channel (train/trainer.h): target
 * ranks send each step's tap features to the drafter ranks they serve.
 *
 * Ranks 0..T-1 of the group are target ranks, T..W-1 drafter ranks; drafter
 * rank d (0-based among the drafter ranks, global rank T + d) is served by
 * target rank d % T. Every such pair has a direct TCP connection (the target
 * rank listens on a port of its own choosing; the ports and addresses are
 * exchanged through the group, dist/rendezvous.h), which carries:
 *
 *   drafter -> target: CREDIT(step), "you may send step's features", and
 *     STOP, "no more credits: the run ends before the next granted step".
 *     The drafter grants `depth` steps ahead, so a target rank runs at most
 *     that many steps ahead of its drafter ranks (and computes the next
 *     forward while it waits for the credit).
 *   target -> drafter: FEATURES(step, count, signal): a header naming the
 *     step and the element count of the features (so that the drafter checks
 *     that both sides planned the same step), the stop signal the target
 *     rank received (0: none; the drafter ranks agree on stopping), then
 *     the features themselves: on the CPU (host transport) as fp32 bytes on
 *     the same connection; on CUDA by ncclSend/ncclRecv of the backend
 *     buffer (its dtype), on a communicator over the whole group, queued on
 *     the backend's stream (a step's work after it waits for it).
 *
 * A lost rank: a connection that closes, or the group's failure (polled by
 * every wait, and its failure hook aborts the NCCL communicator so that a
 * send or receive blocked on the GPU returns), fails the call with a message
 * naming the rank. */
#ifndef DF_DIST_FEATURE_LINK_H
#define DF_DIST_FEATURE_LINK_H

#include <stdint.h>

#include "backend/backend.h"
#include "base/error.h"
#include "dist/group_nccl.h"
#include "dist/rendezvous.h"

typedef struct DfFeatureLinks {
    DfDistGroup *group; /* not owned */
    DfBackend *be;      /* not owned */
    int target_ranks, rank, world;
    int *fd;            /* [world]: the connection to each peer of this rank, -1 elsewhere */
    float *host;        /* host transport: staging for one transfer */
    size_t host_cap;
    int use_nccl;
    DfGroupNccl nccl;   /* use_nccl: a communicator over the whole group */
    int64_t stopped_after; /* target rank: the last step its drafter ranks trained, from their STOP */
} DfFeatureLinks;

/* The target rank serving drafter rank global_rank (>= target_ranks). */
int df_feature_link_target_of(int global_rank, int target_ranks);

/* Connects every target rank with the drafter ranks it serves; every rank of
 * the group calls it (it holds two collectives: the address all-gather and,
 * on CUDA, the NCCL id broadcast). 1 <= target_ranks < world. */
int df_feature_links_open(DfFeatureLinks *l, DfDistGroup *group, DfBackend *be, int target_ranks, DfError *err);

/* Drafter side. */
int df_feature_link_grant(DfFeatureLinks *l, int64_t step, DfError *err);
/* No more credits: the run stops after last_step (the last step trained). */
int df_feature_link_stop(DfFeatureLinks *l, int64_t last_step, DfError *err);
/* Receives step's features into features (count elements of it; 0: none),
 * and the target rank's stop signal. */
int df_feature_link_recv(DfFeatureLinks *l, int64_t step, DfBuffer features, size_t count, int *signal,
                         DfError *err);

/* After STOP: receives (and drops) the features of a step granted before it,
 * whatever their size (at most features.count elements). */
int df_feature_link_drain(DfFeatureLinks *l, int64_t step, DfBuffer features, DfError *err);

/* Target side, for the drafter rank `peer` (global rank): waits for its next
 * message: the credit for step (*stopped = 0) or STOP (*stopped = 1, and
 * l->stopped_after the last step the drafter ranks trained). */
int df_feature_link_await_credit(DfFeatureLinks *l, int peer, int64_t step, int *stopped, DfError *err);
int df_feature_link_send(DfFeatureLinks *l, int peer, int64_t step, DfBuffer features, size_t count, int signal,
                         DfError *err);

/* After a failure: tears NCCL down without waiting for peers. */
void df_feature_links_abort(DfFeatureLinks *l);
void df_feature_links_close(DfFeatureLinks *l);

#endif
