#include "train/update_stream.h"

#include <string.h>

int df_update_stream_init(DfUpdateStream *u, DfBackend *be, DfError *err) {
    memset(u, 0, sizeof *u);
    u->be = be;
    if (!df_backend_has(be, DF_CAP_STREAMS)) return 0;
    if (!(u->stream = be->ops->side_stream_create(be, err)) || !(u->queued = be->ops->event_create(be, err)) ||
        !(u->done = be->ops->event_create(be, err))) {
        df_update_stream_free(u);
        return df_context(err, "the optimizer's side stream");
    }
    return 0;
}

void df_update_stream_free(DfUpdateStream *u) {
    if (!u->be) return;
    DfBackend *be = u->be;
    if (u->stream) be->ops->side_stream_destroy(be, u->stream); /* waits for its work */
    if (u->queued) be->ops->event_destroy(be, u->queued);
    if (u->done) be->ops->event_destroy(be, u->done);
    memset(u, 0, sizeof *u);
}

int df_update_stream_begin(DfUpdateStream *u, void **stream, DfError *err) {
    *stream = u->stream;
    if (!u->stream) return 0;
    if (u->be->ops->stream_wait_stream(u->be, u->stream, NULL, u->queued, err)) return -1;
    u->pending = 1;
    return 0;
}

int df_update_stream_await(DfUpdateStream *u, DfError *err) {
    if (!u->pending) return 0;
    u->pending = 0;
    return u->be->ops->stream_wait_stream(u->be, NULL, u->stream, u->done, err);
}
