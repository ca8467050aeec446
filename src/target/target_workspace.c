/* The forward's activations (target/target_workspace.h), sized by
 * target_memory.c's specs. */
#include "target/target_workspace.h"

#include "target/target_family.h"
#include "target/target_memory.h"

/* The workspace's buffers in the order of its fields: the order of
 * df_target_workspace_specs (target/target_memory.h). */
static void target_buffers(DfTargetWorkspace *ws, DfBuffer *out[DF_TARGET_WS_BUFFERS]) {
    DfBuffer *bufs[DF_TARGET_WS_BUFFERS] = {&ws->ids, &ws->x,    &ws->h,    &ws->q, &ws->k,
                                           &ws->v,   &ws->attn, &ws->gate, &ws->up};
    for (int i = 0; i < DF_TARGET_WS_BUFFERS; i++) out[i] = bufs[i];
}

void df_target_workspace_free(DfBackend *be, DfTargetWorkspace *ws) {
    DfBuffer *bufs[DF_TARGET_WS_BUFFERS];
    target_buffers(ws, bufs);
    for (int i = 0; i < DF_TARGET_WS_BUFFERS; i++) df_buffer_free(be, bufs[i]);
    ws->capacity = 0;
}

/* The workspace's buffers in the order of its fields: the order of
 * df_hybrid_workspace_specs (target/target_memory.h). */
static void hybrid_buffers(DfHybridWorkspace *ws, DfBuffer *out[DF_HYBRID_WS_BUFFERS]) {
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS] = {&ws->qg, &ws->attn_gate, &ws->mixed, &ws->conv,
                                           &ws->z,  &ws->beta,      &ws->decay, &ws->core};
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) out[i] = bufs[i];
}

void df_hybrid_workspace_free(DfBackend *be, DfHybridWorkspace *ws) {
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS];
    hybrid_buffers(ws, bufs);
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) df_buffer_free(be, bufs[i]);
    ws->capacity = 0;
}

int df_hybrid_workspace_ensure(DfTargetModel *m, int n_tokens, DfError *err) {
    DfHybridWorkspace *ws = &m->hws;
    if (ws->capacity >= n_tokens) return 0;
    df_hybrid_workspace_free(m->be, ws);
    DfBuffer *bufs[DF_HYBRID_WS_BUFFERS];
    DfBufSpec want[DF_HYBRID_WS_BUFFERS];
    hybrid_buffers(ws, bufs);
    df_hybrid_workspace_specs(&m->cfg, n_tokens, want);
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++)
        if (df_buffer_alloc(m->be, bufs[i], want[i].kind, want[i].count, err)) {
            df_hybrid_workspace_free(m->be, ws);
            return df_context(err, "hybrid target workspace for %d tokens", n_tokens);
        }
    ws->capacity = n_tokens;
    return 0;
}

int df_target_workspace_ensure(DfTargetModel *m, int n_tokens, DfError *err) {
    DfTargetWorkspace *ws = &m->ws;
    if (ws->capacity >= n_tokens) return m->family->hybrid_layers ? df_hybrid_workspace_ensure(m, n_tokens, err) : 0;
    df_target_workspace_free(m->be, ws);
    DfBuffer *bufs[DF_TARGET_WS_BUFFERS];
    DfBufSpec want[DF_TARGET_WS_BUFFERS];
    target_buffers(ws, bufs);
    df_target_workspace_specs(&m->cfg, n_tokens, want);
    for (int i = 0; i < DF_TARGET_WS_BUFFERS; i++)
        if (df_buffer_alloc(m->be, bufs[i], want[i].kind, want[i].count, err)) {
            df_target_workspace_free(m->be, ws);
            return df_context(err, "target workspace for %d tokens", n_tokens);
        }
    ws->capacity = n_tokens;
    return m->family->hybrid_layers ? df_hybrid_workspace_ensure(m, n_tokens, err) : 0;
}
