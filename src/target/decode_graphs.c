#include "target/decode_graphs.h"

#include <string.h>

int df_decode_graphs_available(const DfBackend *be) {
    const DfBackendOps *o = be->ops;
    return o->record_begin && o->record_end && o->graph_replay && o->graph_free;
}

void df_decode_graphs_init(DfDecodeGraphs *g, DfBackend *be, int enabled) {
    memset(g, 0, sizeof *g);
    g->be = be;
    g->enabled = enabled && df_decode_graphs_available(be);
}

static void drop_graph(DfDecodeGraphs *g, DfDecodeGraphEntry *e) {
    if (e->graph) g->be->ops->graph_free(g->be, e->graph);
    e->graph = NULL;
}

void df_decode_graphs_free(DfDecodeGraphs *g) {
    if (!g->be) return;
    for (int i = 0; i < DF_DECODE_GRAPH_SLOTS; i++) drop_graph(g, &g->entries[i]);
    memset(g, 0, sizeof *g);
}

void df_decode_graph_key_clear(DfDecodeGraphKey *key) {
    memset(key, 0, sizeof *key);
}

static DfDecodeGraphEntry *find_entry(DfDecodeGraphs *g, const DfDecodeGraphKey *key) {
    for (int i = 0; i < DF_DECODE_GRAPH_SLOTS; i++)
        if (g->entries[i].last_used && memcmp(&g->entries[i].key, key, sizeof *key) == 0) return &g->entries[i];
    return NULL;
}

/* An empty entry, or the least recently used one, emptied. */
static DfDecodeGraphEntry *take_entry(DfDecodeGraphs *g, const DfDecodeGraphKey *key) {
    DfDecodeGraphEntry *e = &g->entries[0];
    for (int i = 1; i < DF_DECODE_GRAPH_SLOTS && e->last_used; i++)
        if (g->entries[i].last_used < e->last_used) e = &g->entries[i];
    drop_graph(g, e);
    e->key = *key;
    return e;
}

/* Records the step into e->graph and replays it; op by op when the backend
 * declines (profiling) or the recording is unusable. */
static int record_and_replay(DfDecodeGraphs *g, DfDecodeGraphEntry *e, void (*enqueue)(void *ctx), void *ctx,
                             DfError *err) {
    DfBackend *be = g->be;
    int rc = be->ops->record_begin(be, err);
    if (rc < 0) return -1;
    if (rc == 0) {
        enqueue(ctx);
        rc = be->ops->record_end(be, &e->graph, err);
        if (rc < 0) return -1;
        if (rc == 0) {
            g->recordings++;
            rc = be->ops->graph_replay(be, e->graph, err);
            if (rc < 0) return -1;
            if (rc == 0) g->replays++;
        }
    }
    if (rc == 1) enqueue(ctx);
    return 0;
}

int df_decode_graphs_run(DfDecodeGraphs *g, const DfDecodeGraphKey *key, void (*enqueue)(void *ctx), void *ctx,
                         DfError *err) {
    if (!g->enabled) {
        enqueue(ctx);
        return 0;
    }
    DfDecodeGraphEntry *e = find_entry(g, key);
    g->clock++;
    if (!e) { /* first sighting: op by op, so that buffers and scratch reach their sizes */
        e = take_entry(g, key);
        e->last_used = g->clock;
        enqueue(ctx);
        return 0;
    }
    e->last_used = g->clock;
    if (e->graph) {
        int rc = g->be->ops->graph_replay(g->be, e->graph, err);
        if (rc < 0) return -1;
        if (rc == 0) {
            g->replays++;
            return 0;
        }
        drop_graph(g, e); /* stale (the backend's scratch moved) or profiling: recorded anew */
    }
    return record_and_replay(g, e, enqueue, ctx, err);
}
