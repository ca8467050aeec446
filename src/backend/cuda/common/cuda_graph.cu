/* Recorded steps (backend.h, record_begin): the ops queued on the backend's
 * stream between record_begin and record_end are captured into a CUDA graph
 * and instantiated; a replay is one cudaGraphLaunch instead of one launch
 * per op, which removes the host's launch cost and most of the gaps between
 * the hundreds of small kernels of a decode step.
 *
 * A graph holds device addresses: the caller's buffers (the caller keys its
 * graphs by them) and the backend's own scratch (kv_attention's split-K
 * workspace, the skinny GEMM's counters, the training ops' scratch), which
 * may be reallocated by a later op. Every such reallocation bumps
 * mem_epoch; a graph recorded under another epoch is not replayed. */
#include <stdlib.h>

#include "backend/cuda/common/cuda_internal.h"

struct DfGraph {
    cudaGraphExec_t exec;
    unsigned long epoch; /* the state's mem_epoch when recorded */
};

int df_cuda_record_begin(DfBackend *be, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (st->profiling || st->failed) return 1; /* per-op timings need the ops one by one */
    if (st->recording) return df_fail(err, "cuda backend: record_begin while already recording");
    /* relaxed: a first use inside the recording may still allocate (the caller runs a step unrecorded first) */
    DF_CUDA_TRY(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeRelaxed));
    st->recording = 1;
    st->record_epoch = st->mem_epoch;
    return 0;
}

int df_cuda_record_end(DfBackend *be, DfGraph **graph, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    *graph = NULL;
    if (!st->recording) return df_fail(err, "cuda backend: record_end without record_begin");
    st->recording = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(st->stream, &g);
    if (e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return df_fail(err, "%s:%d: cudaStreamEndCapture: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    if (st->failed || st->mem_epoch != st->record_epoch) { /* an op failed, or scratch moved mid-recording */
        cudaGraphDestroy(g);
        return 1;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return df_fail(err, "%s:%d: cudaGraphInstantiate: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    DfGraph *out = (DfGraph *)df_xmalloc(sizeof *out, "recorded graph");
    out->exec = exec;
    out->epoch = st->record_epoch;
    *graph = out;
    return 0;
}

int df_cuda_graph_replay(DfBackend *be, DfGraph *graph, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (st->profiling || graph->epoch != st->mem_epoch) return 1;
    DF_CUDA_TRY(cudaGraphLaunch(graph->exec, st->stream));
    return 0;
}

void df_cuda_graph_free(DfBackend *be, DfGraph *graph) {
    (void)be;
    if (!graph) return;
    cudaGraphExecDestroy(graph->exec); /* waits for nothing: a launched graph finishes first */
    free(graph);
}
