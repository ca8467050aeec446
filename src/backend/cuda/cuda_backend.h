/* The CUDA backend (NVIDIA GPUs, built for Hopper sm_90a): DF_BUF_ACT is
 * bf16 in device memory, every op accumulates in fp32. Compute ops are queued
 * on one stream; launch failures and bad data met by a kernel (a token id
 * outside the vocabulary, a position outside the rope table) are kept and
 * reported by sync(). Only built when nvcc is found (DF_HAVE_CUDA). */
#ifndef DF_BACKEND_CUDA_CUDA_BACKEND_H
#define DF_BACKEND_CUDA_CUDA_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when the driver or a GPU is missing. */
int df_cuda_device_count(void);

/* Backend on GPU `device`; NULL with a message when there is none. */
DfBackend *df_backend_cuda_create(int device, DfError *err);

/* "NVIDIA H200, 132 SMs, 139.8 GiB" into buf. */
void df_cuda_describe(DfBackend *be, char *buf, size_t cap);

/* The stream every op of the backend is queued on (a cudaStream_t), for
 * work queued from outside, e.g. NCCL collectives (dist/comm.h), so that it
 * runs in order with the backend's ops. */
void *df_cuda_stream(DfBackend *be);

/* --- side streams and events --------------------------------------------- */
/* For work that runs beside the backend's stream and is ordered against it
 * with events, e.g. gradient all-reduces that overlap the backward
 * (dist/comm.h). Streams and events are opaque cudaStream_t / cudaEvent_t. */

/* A non-blocking stream on the backend's device, of the highest priority
 * (its kernels are scheduled before queued compute kernels), or NULL with a
 * message. */
void *df_cuda_side_stream_create(DfBackend *be, DfError *err);
/* Waits for the stream's work, then destroys it (NULL: nothing). */
void df_cuda_side_stream_destroy(DfBackend *be, void *stream);
/* An event without timing (the cheapest kind), or NULL with a message. */
void *df_cuda_event_create(DfBackend *be, DfError *err);
void df_cuda_event_destroy(DfBackend *be, void *event);
/* Makes `waiter` wait (on the device; the host does not block) for the work
 * queued on `signaler` so far, through `event` (recorded on signaler; it may
 * be reused once this returns). NULL for either stream means the backend's
 * own. */
int df_cuda_stream_wait_stream(DfBackend *be, void *waiter, void *signaler, void *event, DfError *err);

/* Device memory taken through this backend: now and the high-water mark
 * since creation (or the last reset), workspaces included. */
size_t df_cuda_bytes_in_use(DfBackend *be);
size_t df_cuda_peak_bytes(DfBackend *be);
void df_cuda_reset_peak(DfBackend *be);

/* Query rows per warp of the attention kernel: 16 (64 rows per block, Q in
 * registers) or 32 (128 rows per block, every K/V fragment used twice);
 * 0, the default, picks 32 when the batch's longest sequence has 512 tokens
 * or more. A tuning knob for benchmarks and tests; results agree. */
void df_cuda_set_attention_rows_per_warp(DfBackend *be, int rows);

/* Rows of hidden states per chunk of lm_head_ce (the logits of one chunk are
 * the op's scratch); 0, the default, picks chunks whose logits fit in 1 GiB.
 * A knob for tests (chunking at small sizes) and benchmarks; results agree. */
void df_cuda_set_lm_head_chunk_rows(DfBackend *be, int rows);

/* lm_head_ce's logits in bf16 (half the scratch traffic, logits rounded to
 * 8 bits of mantissa before the softmax) instead of fp32, the default. A
 * knob for benchmarks. */
void df_cuda_set_lm_head_logits_bf16(DfBackend *be, int on);

/* Which matrix products with at most 64 rows of activations against [N,K]
 * weights (decoding's shapes) take the skinny-GEMM kernel
 * (cuda_skinny_gemm.cu) instead of cuBLASLt: none; only the shapes where it
 * measured faster on the H200 (the default: at most 16 rows against at most
 * 2048 weight rows, a Qwen3-8B-sized k/v projection, 1.27x at one row;
 * elsewhere cuBLASLt was as fast or faster, see bench/README.md); or every
 * shape it fits (tests, timings). Results agree. */
typedef enum DfCudaSkinnyGemm { DF_SKINNY_GEMM_OFF, DF_SKINNY_GEMM_AUTO, DF_SKINNY_GEMM_ALWAYS } DfCudaSkinnyGemm;
void df_cuda_set_skinny_gemm(DfBackend *be, DfCudaSkinnyGemm mode);
/* Products the skinny-GEMM kernel has run on this backend (tests check that
 * the shapes meant for it take it). */
size_t df_cuda_skinny_gemm_count(DfBackend *be);

/* The blocks per SM that kv_attention's split-K aims for: the key range of
 * each (sequence, kv head) is split until sequences x kv heads x splits
 * reach this many blocks per SM (chunks of at least 64 keys); 0 restores
 * the default. A tuning knob for benchmarks; results agree within rounding. */
void df_cuda_set_kv_attention_blocks_per_sm(DfBackend *be, int blocks);

/* --- timing -------------------------------------------------------------- */

/* Milliseconds of the stream's work between two marks (CUDA events). */
typedef struct DfCudaTimer DfCudaTimer;
DfCudaTimer *df_cuda_timer_create(DfBackend *be);
void df_cuda_timer_start(DfCudaTimer *t);
/* Records the stop mark, waits for it, returns the elapsed ms (-1 on failure). */
double df_cuda_timer_stop(DfCudaTimer *t);
void df_cuda_timer_destroy(DfCudaTimer *t);

/* Device memory bandwidth: a device-to-device copy of `bytes` bytes, timed
 * with events, median of `repeat` after a warm-up; *gbs = (bytes read +
 * bytes written) / s / 1e9. */
int df_cuda_copy_bandwidth(DfBackend *be, size_t bytes, int repeat, double *gbs, DfError *err);

/* Per-op-kind profile: while enabled every compute op is bracketed by
 * events; df_cuda_profile_read syncs and adds each op's time to ms[kind]
 * (kinds as in df_cuda_op_kind_name), then clears the record. */
enum {
    DF_CUDA_OP_MATMUL,
    DF_CUDA_OP_ATTENTION,
    DF_CUDA_OP_RMSNORM,
    DF_CUDA_OP_ROPE,
    DF_CUDA_OP_SWIGLU,
    DF_CUDA_OP_EMBEDDING,
    DF_CUDA_OP_ADD,
    DF_CUDA_OP_COPY,
    DF_CUDA_OP_DELTA_RULE, /* a hybrid target's gated delta rule recurrence */
    DF_CUDA_OP_HYBRID_ELEMENTWISE, /* its causal conv, gated norm, sigmoid gate */
    DF_CUDA_OP_KINDS
};
const char *df_cuda_op_kind_name(int kind);
void df_cuda_profile_enable(DfBackend *be, int on);
int df_cuda_profile_read(DfBackend *be, double ms[DF_CUDA_OP_KINDS], DfError *err);

#ifdef __cplusplus
}
#endif

#endif
