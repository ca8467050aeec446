/* A process group over TCP, formed from the torchrun environment
 * (dist/dist_env.h): enough to bootstrap NCCL (broadcast its 128-byte unique
 * id), agree on small facts (all-gather), line up (barrier), and learn
 * within seconds that a peer is gone.
 *
 * Shape: a star around rank 0. Rank 0 listens on MASTER_PORT (every
 * interface, IPv4 and IPv6); every other rank connects to
 * MASTER_ADDR:MASTER_PORT twice, retrying until rank 0 listens: a control
 * connection for the collectives (used by the calling thread) and a
 * heartbeat connection owned by a monitor thread. The monitors exchange a
 * heartbeat every heartbeat_interval_s; a connection that closes without a
 * goodbye (the process ended, was killed) or stays silent for
 * heartbeat_timeout_s (stopped, network down) marks the group failed with a
 * message naming the rank, and rank 0 relays the message to every other rank.
 * After a failure every collective fails at once with that message, and
 * df_dist_poll_failure reports it, so a trainer polling it between (or
 * during) steps can abort NCCL and stop instead of hanging.
 *
 * Collectives are called by every rank in the same order (each carries a
 * sequence number; a rank calling a different collective fails with a
 * message saying which). One thread at a time calls the collectives;
 * df_dist_poll_failure and df_dist_abort may be called from any thread. */
#ifndef DF_DIST_RENDEZVOUS_H
#define DF_DIST_RENDEZVOUS_H

#include <stddef.h>

#include "base/error.h"
#include "dist/dist_env.h"

typedef struct DfDistOptions {
    double connect_timeout_s;    /* forming the group, all ranks present (default 300) */
    double op_timeout_s;         /* one collective waiting for a slow rank (default 1800) */
    double heartbeat_interval_s; /* default 1 */
    double heartbeat_timeout_s;  /* silence that counts as a lost rank (default 30) */
} DfDistOptions;

typedef struct DfDistGroup DfDistGroup;

void df_dist_options_default(DfDistOptions *opt);

/* Forms the group (blocks until every rank has joined, or fails: timeout
 * naming the ranks that never came, two processes with the same RANK, a
 * WORLD_SIZE that differs between ranks). opt may be NULL (defaults).
 * WORLD_SIZE 1 opens no socket. */
DfDistGroup *df_dist_group_create(const DfDistEnv *env, const DfDistOptions *opt, DfError *err);

/* Says goodbye to the peers (so that this is not reported as a lost rank),
 * stops the monitor and closes the sockets. Call a barrier first when the
 * others may still need this rank. NULL is allowed. */
void df_dist_group_close(DfDistGroup *g);

int df_dist_rank(const DfDistGroup *g);
/* This rank's address as its peers reach it (numeric, the local end of its
 * control connection), for connections of its own (dist/feature_link.h).
 * Fails with one rank (no connection to look at). */
int df_dist_local_address(const DfDistGroup *g, char *buf, size_t cap, DfError *err);
int df_dist_world_size(const DfDistGroup *g);

/* Rank 0's len bytes of buf replace every other rank's (all pass the same len). */
int df_dist_broadcast(DfDistGroup *g, void *buf, size_t len, DfError *err);

/* Returns when every rank has entered it. */
int df_dist_barrier(DfDistGroup *g, DfError *err);

/* Every rank gives len bytes (the same len on all); out gets world_size * len
 * bytes, rank r's at out + r * len. */
int df_dist_all_gather(DfDistGroup *g, const void *in, size_t len, void *out, DfError *err);

/* Sums count elements of buf over the ranks, in place: every rank ends
 * with the same bits. Rank 0 adds the values in rank order (its own, then
 * rank 1's, 2's, ...), so the result is deterministic; the work goes in
 * collectives of at most DF_DIST_REDUCE_CHUNK_BYTES. A host transport (the
 * CPU backend's gradients; small vectors such as loss sums): everything
 * passes through rank 0. */
typedef enum DfDistElem { DF_DIST_F32, DF_DIST_F64 } DfDistElem;
#define DF_DIST_REDUCE_CHUNK_BYTES ((size_t)16 << 20)
int df_dist_all_reduce_sum(DfDistGroup *g, void *buf, size_t count, DfDistElem elem, DfError *err);

/* 0 while the group is whole; -1 with the message (naming the rank) once a
 * peer is lost or some rank aborted. Cheap (an atomic load); any thread. */
int df_dist_poll_failure(const DfDistGroup *g, DfError *err);

/* fn(ctx) is called once, on the thread that records the group's first
 * failure (often the monitor thread), or at once when the group has already
 * failed; fn NULL removes it. For work that would otherwise wait forever on
 * the lost peer: the NCCL transport aborts its communicator, which ends a
 * collective blocked on the GPU (dist/comm.c). fn must be safe to call from
 * any thread. */
void df_dist_set_failure_hook(DfDistGroup *g, void (*fn)(void *ctx), void *ctx);

/* Marks the group failed with "rank R aborted: reason" and tells the other
 * ranks (through rank 0), so they stop within a heartbeat. Any thread. */
void df_dist_abort(DfDistGroup *g, const char *reason);

#endif
