/* CUDA backend: device memory, transfers, error collection and sync, and the
 * op table. One stream per backend; every op is queued on it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/common/cuda_internal.h"

/* Rows of fp32 staging used to convert ACT uploads/downloads on the GPU. */
#define STAGING_COUNT ((size_t)16 << 20)
/* cuBLASLt workspace: 32 MiB is what NVIDIA recommends for Hopper. */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* Pinned staging of small int32 uploads; larger ones wait for their copy. */
#define PINNED_BYTES ((size_t)1 << 20)

void df_cuda_record_failure(DfBackend *be, const char *file, int line, const char *fmt, ...) {
    DfCudaState *st = df_cuda_state(be);
    if (st->failed) return;
    char msg[DF_ERROR_MAX - 128]; /* room for the prefix */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(st->first_error.msg, sizeof st->first_error.msg, "cuda backend (%s:%d): %s", file, line, msg);
    st->failed = 1;
}

int df_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error of a missing driver */
        return 0;
    }
    return n;
}

static int elem_size(DfBufKind kind) {
    return kind == DF_BUF_ACT ? 2 : 4;
}

static int cuda_alloc(DfBackend *be, DfBuffer *out, DfBufKind kind, size_t count, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->elem_size = elem_size(kind);
    out->count = count;
    if (count == 0) return 0;
    if (count > SIZE_MAX / 8) return df_fail(err, "cuda backend: buffer of %zu elements is too large", count);
    size_t bytes = count * (size_t)out->elem_size;
    cudaError_t e = cudaMalloc(&out->ptr, bytes);
    if (e != cudaSuccess) {
        out->ptr = NULL;
        return df_fail(err, "cuda backend: cannot allocate %zu bytes on GPU %d (%zu in use): %s", bytes, st->device,
                       st->bytes_in_use, cudaGetErrorString(e));
    }
    st->bytes_in_use += bytes;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return 0;
}

static void cuda_free(DfBackend *be, DfBuffer *buf) {
    DfCudaState *st = df_cuda_state(be);
    if (!buf->ptr) return;
    /* cudaFree waits for queued work that may still use the buffer */
    cudaError_t e = cudaFree(buf->ptr);
    if (e != cudaSuccess) df_cuda_record_failure(be, __FILE__, __LINE__, "cudaFree: %s", cudaGetErrorString(e));
    st->bytes_in_use -= buf->count * (size_t)buf->elem_size;
    buf->ptr = NULL;
}

static int check_not_i32(DfBuffer b, const char *what, DfError *err) {
    if (b.kind == DF_BUF_I32) return df_fail(err, "cuda backend: %s on an int32 buffer", what);
    return 0;
}

static int cuda_upload_f32(DfBackend *be, DfBuffer dst, const float *src, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (check_not_i32(dst, "upload_f32", err)) return -1;
    if (dst.count == 0) return 0;
    if (dst.kind == DF_BUF_F32) {
        DF_CUDA_TRY(cudaMemcpyAsync(dst.ptr, src, dst.count * sizeof(float), cudaMemcpyHostToDevice, st->stream));
        DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
        return 0;
    }
    /* ACT: fp32 through the staging buffer, rounded to bf16 on the GPU */
    for (size_t off = 0; off < dst.count; off += st->staging_count) {
        size_t n = dst.count - off < st->staging_count ? dst.count - off : st->staging_count;
        DF_CUDA_TRY(cudaMemcpyAsync(st->staging, src + off, n * sizeof(float), cudaMemcpyHostToDevice, st->stream));
        df_cuda_f32_to_bf16(st->stream, (__nv_bfloat16 *)dst.ptr + off, st->staging, n);
        DF_CUDA_TRY(cudaGetLastError());
        DF_CUDA_TRY(cudaStreamSynchronize(st->stream)); /* the staging buffer is reused next round */
    }
    return 0;
}

static int cuda_download_f32(DfBackend *be, float *dst, DfBuffer src, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (check_not_i32(src, "download_f32", err)) return -1;
    if (src.count == 0) return 0;
    if (src.kind == DF_BUF_F32) {
        DF_CUDA_TRY(cudaMemcpyAsync(dst, src.ptr, src.count * sizeof(float), cudaMemcpyDeviceToHost, st->stream));
        DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
        return 0;
    }
    for (size_t off = 0; off < src.count; off += st->staging_count) {
        size_t n = src.count - off < st->staging_count ? src.count - off : st->staging_count;
        df_cuda_bf16_to_f32(st->stream, st->staging, (const __nv_bfloat16 *)src.ptr + off, n);
        DF_CUDA_TRY(cudaGetLastError());
        DF_CUDA_TRY(cudaMemcpyAsync(dst + off, st->staging, n * sizeof(float), cudaMemcpyDeviceToHost, st->stream));
        DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
    }
    return 0;
}

/* A small upload through the pinned staging: queued, not waited for (the
 * host copy is in pinned memory that no later upload overwrites before this
 * copy is done). */
static int upload_i32_pinned(DfCudaState *st, void *dst, const int32_t *src, size_t bytes, DfError *err) {
    if (st->pinned_used + bytes > st->pinned_bytes) {
        DF_CUDA_TRY(cudaEventSynchronize(st->pinned_done)); /* the stream is in order: every earlier copy is done */
        st->pinned_used = 0;
    }
    char *p = st->pinned + st->pinned_used;
    memcpy(p, src, bytes);
    DF_CUDA_TRY(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, st->stream));
    DF_CUDA_TRY(cudaEventRecord(st->pinned_done, st->stream));
    st->pinned_used += (bytes + 255) & ~(size_t)255;
    return 0;
}

static int cuda_upload_i32(DfBackend *be, DfBuffer dst, const int32_t *src, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (dst.kind != DF_BUF_I32) return df_fail(err, "cuda backend: upload_i32 into a float buffer");
    if (dst.count == 0) return 0;
    size_t bytes = dst.count * sizeof(int32_t);
    if (bytes <= st->pinned_bytes) return upload_i32_pinned(st, dst.ptr, src, bytes, err);
    DF_CUDA_TRY(cudaMemcpyAsync(dst.ptr, src, bytes, cudaMemcpyHostToDevice, st->stream));
    DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
    return 0;
}

static int cuda_download_i32(DfBackend *be, int32_t *dst, DfBuffer src, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    if (src.kind != DF_BUF_I32) return df_fail(err, "cuda backend: download_i32 from a float buffer");
    if (src.count == 0) return 0;
    DF_CUDA_TRY(cudaMemcpyAsync(dst, src.ptr, src.count * sizeof(int32_t), cudaMemcpyDeviceToHost, st->stream));
    DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
    return 0;
}

/* All-zero bytes are 0 in every kind (bf16, fp32, int32). */
void df_cuda_fill_zero(DfBackend *be, DfBuffer buf) {
    DfCudaState *st = df_cuda_state(be);
    if (!buf.ptr) return;
    DF_CUDA_RECORD(be, cudaMemsetAsync(buf.ptr, 0, buf.count * (size_t)buf.elem_size, st->stream));
}

void *df_cuda_scratch(DfBackend *be, size_t bytes) {
    DfCudaState *st = df_cuda_state(be);
    if (bytes <= st->scratch_bytes) return st->scratch;
    /* cudaFree waits for queued work that may still use the old scratch */
    cudaError_t e = cudaFree(st->scratch);
    st->bytes_in_use -= st->scratch_bytes;
    st->scratch = NULL;
    st->scratch_bytes = 0;
    if (e == cudaSuccess) e = cudaMalloc(&st->scratch, bytes);
    if (e != cudaSuccess) {
        st->scratch = NULL;
        df_cuda_record_failure(be, __FILE__, __LINE__, "cannot allocate %zu bytes of scratch (%zu in use): %s", bytes,
                               st->bytes_in_use, cudaGetErrorString(e));
        return NULL;
    }
    st->scratch_bytes = bytes;
    st->mem_epoch++;
    st->bytes_in_use += bytes;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return st->scratch;
}

/* Turns a kernel's bad-data report into a message. */
static int report_device_error(const DfCudaDeviceError *d, DfError *err) {
    switch (d->code) {
    case DF_CUDA_BAD_TOKEN_ID:
        return df_fail(err, "cuda backend: embedding: token %d at row %d is outside the vocabulary [0, %d)", d->value,
                       d->row, d->limit);
    case DF_CUDA_BAD_POSITION:
        return df_fail(err, "cuda backend: rope: position %d of row %d is outside the table (%d rows)", d->value,
                       d->row, d->limit);
    case DF_CUDA_BAD_LABEL:
        return df_fail(err, "cuda backend: lm_head_ce: label %d of row %d is outside the vocabulary [0, %d)",
                       d->value, d->row, d->limit);
    default:
        return df_fail(err, "cuda backend: a kernel reported error code %d", d->code);
    }
}

static int cuda_sync(DfBackend *be, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
    st->pinned_used = 0; /* every queued copy out of it is done */
    if (st->failed) {
        st->failed = 0;
        return df_fail(err, "%s", st->first_error.msg);
    }
    DfCudaDeviceError d;
    DF_CUDA_TRY(cudaMemcpy(&d, st->dev_error, sizeof d, cudaMemcpyDeviceToHost));
    if (d.code == DF_CUDA_BAD_NONE) return 0;
    DF_CUDA_TRY(cudaMemset(st->dev_error, 0, sizeof d));
    return report_device_error(&d, err);
}

static void cuda_destroy(DfBackend *be) {
    DfCudaState *st = df_cuda_state(be);
    if (st) {
        cudaSetDevice(st->device);
        if (st->stream) cudaStreamSynchronize(st->stream);
        df_cuda_matmul_plans_free(st);
        cudaFree(st->scratch);
        if (st->lt) cublasLtDestroy(st->lt);
        cudaFree(st->lt_workspace);
        cudaFree(st->staging);
        cudaFree(st->dev_error);
        cudaFree(st->kv_ws);
        cudaFree(st->skinny_arrivals);
        if (st->pinned) cudaFreeHost(st->pinned);
        if (st->pinned_done) cudaEventDestroy(st->pinned_done);
        for (int i = 0; i < st->prof_cap * 2; i++) cudaEventDestroy(st->prof_events[i]);
        free(st->prof_events);
        free(st->prof_kinds);
        if (st->stream) cudaStreamDestroy(st->stream);
        free(st);
    }
    free(be);
}

extern "C" void df_cuda_memory_info(DfBackend *be, DfMemoryInfo *info) {
    DfCudaState *st = df_cuda_state(be);
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(st->device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess)
        free_bytes = total = 0;
    *info = (DfMemoryInfo){.available = free_bytes, .total = total, .in_use = st->bytes_in_use,
                           .peak = st->peak_bytes, .op_scratch = df_cuda_lm_head_scratch_bytes(), .host = 0};
}

/* The memory ops, the compute ops df_cuda_<op> (generated from the list)
 * and the device queries; df_backend_create checks that nothing the list
 * needs is missing. */
static const DfBackendOps CUDA_OPS = {
    .name = "cuda",
    .caps = DF_CAP_GRAPHS | DF_CAP_STREAMS | DF_CAP_NCCL | DF_CAP_TIMING | DF_CAP_PROFILE,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload_f32 = cuda_upload_f32,
    .download_f32 = cuda_download_f32,
    .upload_i32 = cuda_upload_i32,
    .download_i32 = cuda_download_i32,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
#define DF_OP(ret, op, params, need)
#define DF_COMPUTE_OP(ret, op, params, need) .op = df_cuda_##op,
#include "backend/backend_ops.def"
#define DF_OP(ret, op, params, need)
#define DF_DEVICE_OP(ret, op, params, need) .op = df_cuda_##op,
#include "backend/backend_ops.def"
};

static int init_state(DfCudaState *st, DfError *err) {
    DF_CUDA_TRY(cudaSetDevice(st->device));
    DF_CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    cublasStatus_t s = cublasLtCreate(&st->lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        return df_fail(err, "%s:%d: cublasLtCreate: %s", __FILE__, __LINE__, cublasLtGetStatusString(s));
    st->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    DF_CUDA_TRY(cudaMalloc(&st->lt_workspace, st->lt_workspace_bytes));
    st->staging_count = STAGING_COUNT;
    DF_CUDA_TRY(cudaMalloc(&st->staging, st->staging_count * sizeof(float)));
    st->pinned_bytes = PINNED_BYTES;
    DF_CUDA_TRY(cudaMallocHost((void **)&st->pinned, st->pinned_bytes));
    DF_CUDA_TRY(cudaEventCreateWithFlags(&st->pinned_done, cudaEventDisableTiming));
    DF_CUDA_TRY(cudaMalloc(&st->dev_error, sizeof(DfCudaDeviceError)));
    DF_CUDA_TRY(cudaMemset(st->dev_error, 0, sizeof(DfCudaDeviceError)));
    st->bytes_in_use = st->peak_bytes =
        st->lt_workspace_bytes + st->staging_count * sizeof(float) + sizeof(DfCudaDeviceError);
    return 0;
}

extern "C" DfBackend *df_backend_cuda_create(int device, DfError *err) {
    int n = df_cuda_device_count();
    if (n == 0) {
        df_fail(err, "cuda backend: no CUDA GPU found (no device or no driver)");
        return NULL;
    }
    if (device < 0 || device >= n) {
        df_fail(err, "cuda backend: GPU %d asked for, this machine has %d (0..%d)", device, n, n - 1);
        return NULL;
    }
    DfBackend *be = (DfBackend *)df_xcalloc(1, sizeof *be, "cuda backend");
    DfCudaState *st = (DfCudaState *)df_xcalloc(1, sizeof *st, "cuda backend state");
    be->ops = &CUDA_OPS;
    be->impl = st;
    st->device = device;
    df_cuda_variants_reset(&st->variant);
    if (init_state(st, err) || df_cuda_choose_tier(st, err)) {
        df_context(err, "cuda backend on GPU %d", device);
        cuda_destroy(be);
        return NULL;
    }
    return be;
}

extern "C" void df_cuda_describe(DfBackend *be, char *buf, size_t cap) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, df_cuda_state(be)->device) != cudaSuccess) {
        snprintf(buf, cap, "GPU %d (properties unavailable)", df_cuda_state(be)->device);
        return;
    }
    const DfCudaState *st = df_cuda_state(be);
    snprintf(buf, cap, "%s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, %s kernels (%s)", p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / (1024.0 * 1024 * 1024), p.l2CacheSize >> 20,
             df_gpu_tier_name(st->tier), st->code);
}

extern "C" void *df_cuda_native_stream(DfBackend *be) {
    return (void *)df_cuda_state(be)->stream;
}

extern "C" void df_cuda_reset_peak(DfBackend *be) {
    DfCudaState *st = df_cuda_state(be);
    st->peak_bytes = st->bytes_in_use;
}

/* --- timing ---------------------------------------------------------------- */

struct DfTimer {
    cudaStream_t stream;
    cudaEvent_t start, stop;
};

extern "C" DfTimer *df_cuda_timer_create(DfBackend *be, DfError *err) {
    DfTimer *t = (DfTimer *)df_xcalloc(1, sizeof *t, "cuda timer");
    t->stream = df_cuda_state(be)->stream;
    cudaError_t e = cudaEventCreate(&t->start);
    if (e == cudaSuccess) e = cudaEventCreate(&t->stop);
    if (e != cudaSuccess) {
        df_fail(err, "cuda backend: cannot create timing events: %s", cudaGetErrorString(e));
        free(t);
        return NULL;
    }
    return t;
}

extern "C" void df_cuda_timer_start(DfBackend *be, DfTimer *t) {
    (void)be;
    cudaEventRecord(t->start, t->stream);
}

extern "C" double df_cuda_timer_stop(DfBackend *be, DfTimer *t) {
    (void)be;
    float ms = -1;
    if (cudaEventRecord(t->stop, t->stream) != cudaSuccess || cudaEventSynchronize(t->stop) != cudaSuccess ||
        cudaEventElapsedTime(&ms, t->start, t->stop) != cudaSuccess)
        return -1;
    return ms;
}

extern "C" void df_cuda_timer_destroy(DfBackend *be, DfTimer *t) {
    (void)be;
    if (!t) return;
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->stop);
    free(t);
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

extern "C" int df_cuda_copy_bandwidth(DfBackend *be, size_t bytes, int repeat, double *gbs, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    void *src = NULL, *dst = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *ms = (float *)df_xcalloc((size_t)repeat + 1, sizeof *ms, "bandwidth times");
    int rc = -1;
    cudaError_t e = cudaMalloc(&src, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&dst, bytes);
    if (e == cudaSuccess) e = cudaMemsetAsync(src, 0x5a, bytes, st->stream); /* not zeros */
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    for (int r = 0; r <= repeat && e == cudaSuccess; r++) {
        e = cudaEventRecord(e0, st->stream);
        if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream);
        if (e == cudaSuccess) e = cudaEventRecord(e1, st->stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms[r], e0, e1);
    }
    if (e != cudaSuccess) {
        df_fail(err, "cuda backend: bandwidth copy of %zu bytes: %s", bytes, cudaGetErrorString(e));
    } else {
        qsort(ms + 1, (size_t)repeat, sizeof *ms, compare_floats); /* ms[0] is the warm-up */
        *gbs = 2.0 * (double)bytes / (ms[1 + repeat / 2] * 1e-3) / 1e9;
        rc = 0;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    free(ms);
    return rc;
}

/* --- per-op profile ---------------------------------------------------------- */

extern "C" void df_cuda_profile_enable(DfBackend *be, int on) {
    df_cuda_state(be)->profiling = on;
}

/* The df_op_* wrappers call these around every compute op (op: its DfOpId). */
extern "C" void df_cuda_profile_begin(DfBackend *be, int kind) {
    DfCudaState *st = df_cuda_state(be);
    if (!st->profiling) return;
    if (st->prof_count == st->prof_cap) {
        int cap = st->prof_cap ? st->prof_cap * 2 : 1024;
        st->prof_events = (cudaEvent_t *)df_xrealloc(st->prof_events, (size_t)cap * 2 * sizeof(cudaEvent_t), "events");
        st->prof_kinds = (int *)df_xrealloc(st->prof_kinds, (size_t)cap * sizeof(int), "event kinds");
        for (int i = st->prof_cap * 2; i < cap * 2; i++)
            if (cudaEventCreate(&st->prof_events[i]) != cudaSuccess) {
                df_cuda_record_failure(be, __FILE__, __LINE__, "cudaEventCreate failed while profiling");
                st->profiling = 0; /* events created so far are destroyed with the backend */
                return;
            }
        st->prof_cap = cap;
    }
    st->prof_kinds[st->prof_count] = kind;
    cudaEventRecord(st->prof_events[2 * st->prof_count], st->stream);
}

extern "C" void df_cuda_profile_end(DfBackend *be) {
    DfCudaState *st = df_cuda_state(be);
    if (!st->profiling || st->prof_count >= st->prof_cap) return;
    cudaEventRecord(st->prof_events[2 * st->prof_count + 1], st->stream);
    st->prof_count++;
}

/* ms and before_ms (may be NULL): DF_OP_COUNT entries, indexed by DfOpId. */
extern "C" int df_cuda_profile_read(DfBackend *be, double *ms, double *before_ms, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    DF_CUDA_TRY(cudaStreamSynchronize(st->stream));
    for (int i = 0; i < st->prof_count; i++) {
        float t = 0;
        DF_CUDA_TRY(cudaEventElapsedTime(&t, st->prof_events[2 * i], st->prof_events[2 * i + 1]));
        ms[st->prof_kinds[i]] += t;
        if (before_ms && i > 0) { /* the previous op's end event to this one's start event */
            DF_CUDA_TRY(cudaEventElapsedTime(&t, st->prof_events[2 * i - 1], st->prof_events[2 * i]));
            before_ms[st->prof_kinds[i]] += t;
        }
    }
    st->prof_count = 0;
    return 0;
}
