#ifndef DF_TRAIN_UPDATE_STREAM_H
#define DF_TRAIN_UPDATE_STREAM_H

/* The optimizer's update beside the next step's target forward.
 *
 * AdamW reads the gradients and writes the master weights, the moments and
 * the drafter's weights; the next step's upload and target forward read
 * none of them. On a backend with side streams (DF_CAP_STREAMS) the update
 * is queued on a side stream, after the work queued so far, and the next
 * use of the drafter's weights or gradients waits for it on the device
 * (df_update_stream_await). Its memory-bound passes then fill the target's
 * GEMMs' gaps instead of taking a phase of their own. On a backend without
 * side streams the update runs in order like every op, and the waits are
 * nothing. */

#include "backend/backend.h"
#include "base/error.h"

typedef struct DfUpdateStream {
    DfBackend *be;
    void *stream;       /* NULL: no side stream (the update runs in order) */
    void *queued, *done; /* events: the work before the update; the update */
    int pending;        /* an update was queued and nothing has waited for it since */
} DfUpdateStream;

int df_update_stream_init(DfUpdateStream *u, DfBackend *be, DfError *err);
/* Waits for a pending update, then releases the stream and events. */
void df_update_stream_free(DfUpdateStream *u);
/* The stream to queue the next update on (DfAdamWArgs.stream), at once:
 * it first waits, on the device, for everything queued on the backend's
 * stream so far; the update is pending from here. *stream = NULL without a
 * side stream. */
int df_update_stream_begin(DfUpdateStream *u, void **stream, DfError *err);
/* The backend's stream waits (on the device; the host does not block) for
 * the pending update, if any; what is queued after reads its results. */
int df_update_stream_await(DfUpdateStream *u, DfError *err);

#endif
