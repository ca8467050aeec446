/* Recorded decode steps (backend.h, record_begin): a target decoder's step
 * replayed as one graph instead of hundreds of op launches (on CUDA, the
 * launches and the gaps between the small kernels of a decode step cost
 * about as much as the kernels themselves at batch 1).
 *
 * A recording holds buffer addresses and launch shapes, so it serves only
 * the steps with the same key: the step's shape (sequences, new rows and
 * where they start, the KV ops' visible-key bound, the outputs asked for)
 * and the addresses of the step's buffers (or, for buffers reallocated
 * together, a generation count). A key's first step runs op by
 * op (its buffers and the backend's scratch reach their sizes then), its
 * second is recorded and replayed, later ones are replayed. A few keys are
 * kept, the least recently used one giving way. */
#ifndef DF_TARGET_DECODE_GRAPHS_H
#define DF_TARGET_DECODE_GRAPHS_H

#include <stdint.h>

#include "backend/backend.h"

#define DF_DECODE_GRAPH_BUFS 8
/* keys kept: a drafter's context appends take one per accepted length (a
 * block size of 16 gives 16) besides a few for the prefill */
#define DF_DECODE_GRAPH_SLOTS 24

typedef struct DfDecodeGraphKey {
    int n_seqs, n_rows, visible_bound;
    int logits_rows, argmax_on_backend, features;
    uint64_t row_starts_hash;
    unsigned long generation;               /* of buffers the caller reallocates together */
    /* a hybrid target's: its workspace's capacity and its records' rows (buffers reallocated
     * together when they grow), and whether the step is recorded for a rollback */
    int hybrid_capacity, record_rows, recording;
    const void *bufs[DF_DECODE_GRAPH_BUFS]; /* the step's other buffer addresses, unused ones NULL */
} DfDecodeGraphKey;

typedef struct DfDecodeGraphEntry {
    DfDecodeGraphKey key;
    DfGraph *graph;          /* NULL: seen once, not recorded yet */
    unsigned long last_used; /* 0: empty */
} DfDecodeGraphEntry;

typedef struct DfDecodeGraphs {
    DfBackend *be;
    int enabled; /* the backend records, and the caller wants it */
    unsigned long clock;
    DfDecodeGraphEntry entries[DF_DECODE_GRAPH_SLOTS];
    unsigned long replays, recordings; /* steps served by a replay; recordings made */
} DfDecodeGraphs;

/* Whether the backend records steps (all four of its recording ops). */
int df_decode_graphs_available(const DfBackend *be);

/* enabled is ignored (off) where the backend cannot record. */
void df_decode_graphs_init(DfDecodeGraphs *g, DfBackend *be, int enabled);
void df_decode_graphs_free(DfDecodeGraphs *g);

/* A key zeroed (padding included: keys are compared bytewise), then filled by the caller. */
void df_decode_graph_key_clear(DfDecodeGraphKey *key);

/* Queues one step: enqueue(ctx) op by op, or the replay of the step's
 * recording (made now when the key has been seen before). */
int df_decode_graphs_run(DfDecodeGraphs *g, const DfDecodeGraphKey *key, void (*enqueue)(void *ctx), void *ctx,
                         DfError *err);

#endif
