/* Private state and helpers shared by the CUDA backend's .cu files. */
#ifndef DF_BACKEND_CUDA_CUDA_INTERNAL_H
#define DF_BACKEND_CUDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernel_variants.h"
#include "backend/gpu_tier.h"
}

typedef __nv_bfloat16 bf16;

/* 8 bf16 in one 16-byte word (the element-wise kernels' vector accesses). */
union Pack8 {
    uint4 u;
    __nv_bfloat162 h2[4];
};

/* A pointer a 16-byte (uint4) access can use. */
static inline int df_cuda_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Bad data found by a kernel, copied back at sync. code 0: none. */
enum { DF_CUDA_BAD_NONE = 0, DF_CUDA_BAD_TOKEN_ID = 1, DF_CUDA_BAD_POSITION = 2, DF_CUDA_BAD_LABEL = 3 };
typedef struct DfCudaDeviceError {
    int code;
    int value; /* the offending id or position */
    int row;   /* the token row */
    int limit; /* vocabulary size or rope table rows */
} DfCudaDeviceError;

typedef struct DfMatmulPlan DfMatmulPlan; /* cuda_matmul.cu */

#define DF_CUDA_CODE_TEXT 48 /* bytes of DfCudaState.code */

typedef struct DfCudaState {
    int device;
    DfGpuFacts gpu;     /* what the device is (common/cuda_tier.cu) */
    DfGpuTier tier;     /* the kernel tier it runs, chosen once at creation */
    char code[DF_CUDA_CODE_TEXT]; /* the code the driver runs on it, e.g. "sm_90a" or "sm_90 from compute_80 PTX" */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    DfMatmulPlan *plans; /* cached per shape */
    int n_plans, cap_plans;

    float *staging; /* fp32 staging for ACT uploads/downloads */
    size_t staging_count;

    /* Pinned host staging for small int32 uploads (a step's layout and token
     * ids): the copy is queued and upload_i32 returns without waiting. Used
     * front to back; when full, wait for the last copy out of it (pinned_done)
     * and start again; sync empties it too. */
    char *pinned;
    size_t pinned_bytes, pinned_used;
    cudaEvent_t pinned_done;

    DfCudaDeviceError *dev_error; /* device memory */

    int failed; /* a host-side failure (launch, cuBLASLt) since the last sync */
    DfError first_error;

    size_t bytes_in_use, peak_bytes;

    DfCudaVariants variant; /* the kernel variants (kernel_variants.def), read by the kernels' launches */
    int *skinny_arrivals;   /* the skinny GEMM's split-K counters (device memory, zero between calls) */
    int skinny_arrivals_count;
    size_t skinny_calls; /* products it has run (df_cuda_skinny_gemm_count) */

    /* Reusable device scratch of the training ops (see df_cuda_scratch). */
    void *scratch;
    size_t scratch_bytes;
    void *kv_ws; /* kv_attention's split-K partial results (cuda_kv.cu) */
    size_t kv_ws_bytes;
    int sm_count; /* 0 until first asked for */

    /* Incremented whenever the state's own device memory (scratch, kv_ws,
     * skinny_arrivals) is reallocated: a recorded graph holds the old
     * addresses and is not replayed after that (cuda_graph.cu). */
    unsigned long mem_epoch;
    int recording;                /* between record_begin and record_end */
    unsigned long record_epoch;   /* mem_epoch when the recording began */

    int profiling;
    cudaEvent_t *prof_events; /* pairs: start, end */
    int *prof_kinds;
    int prof_count, prof_cap;
} DfCudaState;

/* The kernel tiers of a family's dispatch table (attention/cuda_attention.cu,
 * block_attention/cuda_block_attention_dispatch.cu): wgmma needs Hopper
 * (sm_90a); mma.sync (sm_80 and later) is the portable tier other GPUs take,
 * kept checked at every head dim through the variants that ask for it; CUDA
 * cores serve head dims no tensor-core kernel has. */
typedef enum DfCudaTier { DF_TIER_WGMMA, DF_TIER_MMA_SYNC, DF_TIER_CUDA_CORES } DfCudaTier;

/* Learns what GPU st->device is and chooses its tier (common/cuda_tier.cu):
 * -1 with err for a GPU dflash cannot run on or a bad DFLASH_CUDA_TIER. */
int df_cuda_choose_tier(DfCudaState *st, DfError *err);

/* Sets kernel's dynamic shared memory to `bytes`, recording a failure of op
 * that names the need and the GPU's limit when the GPU has less (smaller
 * GPUs than Hopper: 163 KiB on an A100, 99 KiB on Ada). */
bool df_cuda_set_smem_bytes(DfBackend *be, const void *kernel, size_t bytes, const char *op);
template <typename K>
static inline bool df_cuda_set_smem(DfBackend *be, K *kernel, size_t bytes, const char *op) {
    return df_cuda_set_smem_bytes(be, (const void *)kernel, bytes, op);
}

static inline DfCudaState *df_cuda_state(DfBackend *be) {
    return (DfCudaState *)be->impl;
}

/* Whether a route row of tier t may run on this backend's GPU: wgmma rows
 * only on the hopper tier, and not while `wgmma_off` (a fallback variant)
 * asks for the portable kernel. */
static inline bool df_cuda_tier_allows(const DfCudaState *st, DfCudaTier t, int wgmma_off) {
    return t != DF_TIER_WGMMA || (st->tier == DF_GPU_TIER_HOPPER && !wgmma_off);
}

/* Whether a kernel asking `bytes` of dynamic shared memory a block can launch on this GPU. */
static inline bool df_cuda_smem_fits(const DfCudaState *st, size_t bytes) {
    return bytes <= st->gpu.smem_optin;
}

/* The device's SM count (asked once; an H200's 132 if the query fails: only launch shapes depend on it). */
static inline int df_cuda_sm_count(DfCudaState *st) {
    if (!st->sm_count && cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device) != cudaSuccess)
        st->sm_count = 132;
    return st->sm_count;
}

/* Records the first host-side failure of a compute op; reported by sync. */
void df_cuda_record_failure(DfBackend *be, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* After a launch: a launch error becomes the backend's recorded failure. */
#define DF_CUDA_CHECK_LAUNCH(be, what)                                                                        \
    do {                                                                                                      \
        cudaError_t e_ = cudaGetLastError();                                                                  \
        if (e_ != cudaSuccess)                                                                                \
            df_cuda_record_failure((be), __FILE__, __LINE__, "%s: %s", (what), cudaGetErrorString(e_));      \
    } while (0)

/* In a compute op: a failed CUDA runtime call is recorded, the op returns. */
#define DF_CUDA_RECORD(be, call)                                                                              \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            df_cuda_record_failure((be), __FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_));       \
            return;                                                                                           \
        }                                                                                                     \
    } while (0)

/* In a fallible function with DfError *err: a failed call returns -1. */
#define DF_CUDA_TRY(call)                                                                                     \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            return df_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));          \
    } while (0)


/* Blocks for a grid-stride loop over n items, capped. */
static inline unsigned df_cuda_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b > 65536u * 8) b = 65536u * 8;
    return b ? (unsigned)b : 1u;
}

/* Device scratch of at least `bytes`, kept in the state and reused by every
 * later op (one stream: ops never overlap); grown when too small (the old
 * one freed after the queued work). NULL, with the failure recorded, when
 * the GPU is out of memory. */
void *df_cuda_scratch(DfBackend *be, size_t bytes);

/* One matrix product through cuBLASLt (see cuda_matmul.cu): row-major
 * C[M,N] = op(A) op(B) + beta C with leading dimensions (elements between
 * rows as stored: A is [M,K] or, trans_a, [K,M]; B [K,N] or, trans_b,
 * [N,K]). A and B bf16; C bf16 or, c_f32, fp32; fp32 accumulation. */
typedef struct DfCudaGemm {
    void *c;
    const void *a, *b;
    int m, n, k, trans_a, trans_b;
    int lda, ldb, ldc;
    int c_f32;
    float beta;
    const void *c_in; /* the C that beta scales where it is not c (c is then written only: D = c); NULL: c */
} DfCudaGemm;
void df_cuda_gemm(DfBackend *be, const DfCudaGemm *g);

/* The decode-sized product (gemm/cuda_skinny_gemm.cu): bf16 C = A B^T + beta C
 * with A [M,K] and B [N,K] (trans_a 0, trans_b 1), M <= DF_SKINNY_GEMM_MAX_M,
 * streaming the weights B once at close to the memory bandwidth. fits: the
 * shape, layout and alignment are ones it takes (K, lda, ldb multiples of 8,
 * A and B 16-byte aligned, bf16 C). Upper bound on M: up to 64 tokens the
 * product stays bound by the weight stream (64 x 2 FLOPs per weight byte,
 * ~5 times below the tensor cores' ratio at this bandwidth) and 8 n-tiles of
 * accumulators fit the registers beside two stages of weights; beyond that
 * cuBLASLt's tiled GEMMs are the better tool. */
#define DF_SKINNY_GEMM_MAX_M 64
int df_cuda_skinny_gemm_fits(const DfCudaGemm *g);
/* Of those, the shapes where it is faster than cuBLASLt (the default mode). */
int df_cuda_skinny_gemm_pays(const DfCudaGemm *g);
void df_cuda_skinny_gemm(DfBackend *be, const DfCudaGemm *g);

/* The compute ops of backend_ops.def, one df_cuda_<op> each (one file per
 * op family, in folders by family: gemm/cuda_matmul.cu,
 * elementwise/cuda_elementwise.cu, attention/cuda_attention.cu, ...). */
#define DF_OP(ret, op, params, need)
#define DF_COMPUTE_OP(ret, op, params, need) ret df_cuda_##op params;
#include "backend/backend_ops.def"

/* Its device queries (common/: cuda_backend.cu, cuda_streams.cu,
 * cuda_variants.cu, cuda_graph.cu), in the table as backend_ops.def names them. */
extern "C" {
void df_cuda_describe(DfBackend *be, char *buf, size_t cap);
void df_cuda_memory_info(DfBackend *be, DfMemoryInfo *info);
void df_cuda_reset_peak(DfBackend *be);
int df_cuda_set_variant(DfBackend *be, const char *name, int value, DfError *err);
void df_cuda_variants(DfBackend *be, char *buf, size_t cap);
void *df_cuda_native_stream(DfBackend *be);
void *df_cuda_side_stream_create(DfBackend *be, DfError *err);
void df_cuda_side_stream_destroy(DfBackend *be, void *stream);
void *df_cuda_event_create(DfBackend *be, DfError *err);
void df_cuda_event_destroy(DfBackend *be, void *event);
int df_cuda_stream_wait_stream(DfBackend *be, void *waiter, void *signaler, void *event, DfError *err);
DfTimer *df_cuda_timer_create(DfBackend *be, DfError *err);
void df_cuda_timer_start(DfBackend *be, DfTimer *t);
double df_cuda_timer_stop(DfBackend *be, DfTimer *t);
void df_cuda_timer_destroy(DfBackend *be, DfTimer *t);
int df_cuda_copy_bandwidth(DfBackend *be, size_t bytes, int repeat, double *gbs, DfError *err);
void df_cuda_profile_enable(DfBackend *be, int on);
void df_cuda_profile_begin(DfBackend *be, int op);
void df_cuda_profile_end(DfBackend *be);
int df_cuda_profile_read(DfBackend *be, double *ms, double *before_ms, DfError *err);
int df_cuda_record_begin(DfBackend *be, DfError *err);
int df_cuda_record_end(DfBackend *be, DfGraph **graph, DfError *err);
int df_cuda_graph_replay(DfBackend *be, DfGraph *graph, DfError *err);
void df_cuda_graph_free(DfBackend *be, DfGraph *graph);
}

void df_cuda_matmul_plans_free(DfCudaState *st);
/* The rotation behind rope, rope_backward (sin_sign -1) and rope_partial
 * (rotary_dim < head_dim); op names the caller in errors (cuda_elementwise.cu). */
void df_cuda_rope_rotate(DfBackend *be, const char *op, DfBuffer x, DfBuffer positions, DfBuffer cos_table,
                         DfBuffer sin_table, int n_tokens, int heads, int head_dim, int rotary_dim, float sin_sign);
/* The most scratch lm_head_ce takes (its chunk's logits), for memory_info. */
size_t df_cuda_lm_head_scratch_bytes(void);
/* attention at head_dim 128 on wgmma (cuda_attention_wgmma.cu); the caller checked the grid and alignment */
void df_cuda_attention_wgmma(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                             const DfPackedBatch *batch, int heads, int kv_heads, float scale);
/* gated_delta_rule by chunks on tensor cores (cuda_delta_rule_chunked.cu): whether it takes this shape and
 * qkv (key and value head dims 128, 16-byte rows), and the launch over n_seqs sequences at seq_starts (device) */
int df_cuda_delta_rule_chunked_fits(const DfDeltaRuleShape *s, DfBuffer qkv);
void df_cuda_delta_rule_chunked(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                                DfBuffer dt_bias, const int32_t *seq_starts, int n_seqs, const DfDeltaRuleShape *s);
/* attention for head dims other than 64 and 128, up to 256 (cuda_attention_generic.cu) */
void df_cuda_attention_generic(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                               const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale);
/* kv_attention for head dims other than 64 and 128, up to 256 (cuda_kv_attention_generic.cu) */
void df_cuda_kv_attention_generic(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                                  const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale,
                                  int causal);

/* fp32 <-> bf16 conversion on the stream (uploads and downloads of ACT). */
void df_cuda_f32_to_bf16(cudaStream_t s, __nv_bfloat16 *dst, const float *src, size_t n);
void df_cuda_bf16_to_f32(cudaStream_t s, float *dst, const __nv_bfloat16 *src, size_t n);

#endif
