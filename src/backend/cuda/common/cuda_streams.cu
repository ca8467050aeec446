/* Side streams and events of the CUDA backend: work queued beside the
 * backend's stream (NCCL collectives) and ordered against it on the device. */
#include "backend/cuda/common/cuda_internal.h"

extern "C" void *df_cuda_side_stream_create(DfBackend *be, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    int least = 0, greatest = 0;
    cudaStream_t s = NULL;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess) e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest);
    if (e != cudaSuccess) {
        df_fail(err, "cuda backend: cannot create a side stream on GPU %d: %s", st->device, cudaGetErrorString(e));
        return NULL;
    }
    return (void *)s;
}

extern "C" void df_cuda_side_stream_destroy(DfBackend *be, void *stream) {
    (void)be;
    if (!stream) return;
    cudaStreamSynchronize((cudaStream_t)stream);
    cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" void *df_cuda_event_create(DfBackend *be, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        df_fail(err, "cuda backend: cannot create an event on GPU %d: %s", st->device, cudaGetErrorString(e));
        return NULL;
    }
    return (void *)ev;
}

extern "C" void df_cuda_event_destroy(DfBackend *be, void *event) {
    (void)be;
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int df_cuda_stream_wait_stream(DfBackend *be, void *waiter, void *signaler, void *event, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    cudaStream_t w = waiter ? (cudaStream_t)waiter : st->stream, s = signaler ? (cudaStream_t)signaler : st->stream;
    DF_CUDA_TRY(cudaEventRecord((cudaEvent_t)event, s));
    DF_CUDA_TRY(cudaStreamWaitEvent(w, (cudaEvent_t)event, 0));
    return 0;
}
