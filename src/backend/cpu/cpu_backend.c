/* CPU backend: memory is plain host memory, activations and weights fp32. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include "backend/cpu/cpu_memory.h"
#include "backend/cpu/cpu_ops.h"

static DfCpuState *state(DfBackend *be) {
    return (DfCpuState *)be->impl;
}

void df_cpu_record_failure(DfBackend *be, const char *fmt, ...) {
    DfCpuState *st = state(be);
#pragma omp critical(df_cpu_failure)
    {
        if (!st->failed) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(st->first_error.msg, sizeof st->first_error.msg, fmt, ap);
            va_end(ap);
            st->failed = 1;
        }
    }
}

static int cpu_alloc(DfBackend *be, DfBuffer *out, DfBufKind kind, size_t count, DfError *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->elem_size = kind == DF_BUF_I32 ? (int)sizeof(int32_t) : (int)sizeof(float);
    out->count = count;
    if (count == 0) return 0;
    if (count > SIZE_MAX / 64) return df_fail(err, "cpu backend: buffer of %zu elements is too large", count);
    /* 64-byte alignment keeps rows of SIMD loads and BLAS panels aligned */
    size_t bytes = (count * (size_t)out->elem_size + 63) & ~(size_t)63;
    out->ptr = aligned_alloc(64, bytes);
    if (!out->ptr) return df_fail(err, "cpu backend: out of memory allocating %zu bytes", bytes);
    DfCpuState *st = state(be);
    st->bytes_in_use += count * (size_t)out->elem_size;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return 0;
}

static void cpu_free(DfBackend *be, DfBuffer *buf) {
    if (!buf->ptr) return;
    free(buf->ptr);
    state(be)->bytes_in_use -= buf->count * (size_t)buf->elem_size;
    buf->ptr = NULL;
}

size_t df_cpu_bytes_in_use(DfBackend *be) {
    return state(be)->bytes_in_use;
}

size_t df_cpu_peak_bytes(DfBackend *be) {
    return state(be)->peak_bytes;
}

void df_cpu_reset_peak(DfBackend *be) {
    state(be)->peak_bytes = state(be)->bytes_in_use;
}

static int cpu_upload_f32(DfBackend *be, DfBuffer dst, const float *src, DfError *err) {
    (void)be;
    if (dst.kind == DF_BUF_I32) return df_fail(err, "cpu backend: upload_f32 into an int32 buffer");
    if (dst.count) memcpy(dst.ptr, src, dst.count * sizeof(float));
    return 0;
}

static int cpu_download_f32(DfBackend *be, float *dst, DfBuffer src, DfError *err) {
    (void)be;
    if (src.kind == DF_BUF_I32) return df_fail(err, "cpu backend: download_f32 from an int32 buffer");
    if (src.count) memcpy(dst, src.ptr, src.count * sizeof(float));
    return 0;
}

static int cpu_upload_i32(DfBackend *be, DfBuffer dst, const int32_t *src, DfError *err) {
    (void)be;
    if (dst.kind != DF_BUF_I32) return df_fail(err, "cpu backend: upload_i32 into a float buffer");
    if (dst.count) memcpy(dst.ptr, src, dst.count * sizeof(int32_t));
    return 0;
}

static int cpu_sync(DfBackend *be, DfError *err) {
    DfCpuState *st = state(be);
    if (!st->failed) return 0;
    st->failed = 0;
    return df_fail(err, "%s", st->first_error.msg);
}

static void cpu_destroy(DfBackend *be) {
    free(be->impl);
    free(be);
}

void df_cpu_describe(DfBackend *be, char *buf, size_t cap) {
    (void)be;
    snprintf(buf, cap, "CPU, %d OpenMP threads, %ld cores online", omp_get_max_threads(), sysconf(_SC_NPROCESSORS_ONLN));
}

static const DfBackendOps CPU_OPS = {
    .name = "cpu",
    .caps = 0, /* ops run as they are called, in host memory: no streams, timers, profile or graphs */
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload_f32 = cpu_upload_f32,
    .download_f32 = cpu_download_f32,
    .upload_i32 = cpu_upload_i32,
    .download_i32 = df_cpu_download_i32,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
#define DF_OP(ret, op, params, need)
#define DF_COMPUTE_OP(ret, op, params, need) .op = df_cpu_##op,
#include "backend/backend_ops.def"
    .describe = df_cpu_describe,
    .memory_info = df_cpu_memory_info,
    .reset_peak = df_cpu_reset_peak,
};

DfBackend *df_backend_cpu_create(DfError *err) {
    (void)err;
    /* all parallelism comes from OpenMP; see cpu_matmul.c for why */
    openblas_set_num_threads(1);
    DfBackend *be = df_xcalloc(1, sizeof *be, "cpu backend");
    be->ops = &CPU_OPS;
    be->impl = df_xcalloc(1, sizeof(DfCpuState), "cpu backend state");
    return be;
}
