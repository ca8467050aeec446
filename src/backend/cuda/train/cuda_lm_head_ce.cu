/* Fused frozen lm head + weighted cross-entropy on the GPU.
 *
 * Rows are processed in chunks (chunk_rows: 1024 rows at hidden 4096, more
 * at small hidden sizes) whose logits fit one scratch buffer (at most 1 GiB,
 * allocated once through df_cuda_scratch and reused). Per chunk:
 *   1. logits [n, vocab] = x_chunk head^T (cuBLASLt, fp32 out: the softmax
 *      stays exact to the CPU op; bf16 logits measured a tie,
 *      dev/cuda/lm_head_ce_v2_bf16_logits.cu);
 *   2. k_lm_rows, one block per row: max, argmax (first maximum), and the
 *      sum of exp(logit - max) in one online pass; CE = max + log(sum) -
 *      logit[label] (0 where label < 0); when d_x is wanted, a second pass
 *      overwrites the row with dlogits = grad_scale w (softmax - onehot) in
 *      bf16;
 *   3. d_x_chunk = dlogits head (cuBLASLt).
 * fp32 logits are overwritten by bf16 dlogits in place: row r's bf16 values
 * sit at the start of the row's own fp32 storage (bf16 leading dimension
 * 2 vocab). bf16 element i lies in the bytes of fp32 element i / 2, never
 * ahead of what was read: the block reads a group of tiles of the row,
 * waits at a barrier, then writes that group's bf16 values. */
#include "backend/cuda/common/cuda_internal.h"

#define LM_SCRATCH_BYTES ((size_t)1 << 30)
#define LM_THREADS 512
#define LM_CHUNK_ALIGN 64 /* automatic chunk sizes are multiples of this (GEMM tiles) */
/* Automatic chunks hold at most LM_CHUNK_OUTPUTS / hidden rows, and never
 * fewer than LM_CHUNK_MIN_ROWS. The d_x product of a chunk has only rows x
 * hidden outputs for a long vocab-wide reduction, so a last wave of its
 * tiles that leaves most SMs idle costs a whole wave: on the H200 at hidden
 * 4096 (8192 rows, vocab 151936, fp32 logits), 1024 rows a chunk ran the op
 * in 33.4 ms, the 1664 that fill 1 GiB in 36.3, and 1280, 1536, 2048, 2560,
 * 4096 in 35.6, 33.8, 33.9, 33.5, 34.5 (docs/kernels.md). The bound is the
 * d_x product's outputs, not its rows: at hidden 256 (the bundled target's
 * drafter) 1024 rows are 16 output tiles, a chunk of tens of microseconds
 * launched a hundred times a step, so small hidden sizes take chunks of as
 * many outputs as 1024 rows at 4096 (16384 rows at 256). */
#define LM_CHUNK_OUTPUTS ((size_t)1024 * 4096)
#define LM_CHUNK_MIN_ROWS 1024

/* Running (max, sum of exp(v - max), first index of the max). */
struct SoftmaxStat {
    float m, s;
    int i;
};

__device__ __forceinline__ SoftmaxStat stat_combine(SoftmaxStat a, SoftmaxStat b) {
    if (b.m > a.m || (b.m == a.m && b.i < a.i)) {
        SoftmaxStat t = a;
        a = b, b = t;
    }
    if (b.s > 0.0f) a.s += b.s * __expf(b.m - a.m);
    return a;
}

/* VEC consecutive fp32 logits. */
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T *p, float *out) {
    static_assert(sizeof(T) == 4, "fp32 logits");
    if constexpr (VEC == 1) {
        out[0] = (float)p[0];
    } else {
        static_assert(VEC == 4, "fp32 logits are read 4 at a time");
        float4 f = *(const float4 *)p;
        out[0] = f.x, out[1] = f.y, out[2] = f.z, out[3] = f.w;
    }
}

template <int VEC>
__device__ __forceinline__ void store_bf16_vec(bf16 *p, const float *v) {
    if constexpr (VEC == 1) {
        p[0] = __float2bfloat16_rn(v[0]);
    } else {
        union {
            __nv_bfloat162 h2[VEC / 2];
            uint2 u2[VEC / 4];
        } pk;
        for (int j = 0; j < VEC / 2; j++) pk.h2[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        if constexpr (VEC == 4)
            *(uint2 *)p = pk.u2[0];
        else
            *(uint4 *)p = *(const uint4 *)pk.u2;
    }
}

/* Folds VEC values starting at index base into the running statistic. */
template <int VEC>
__device__ __forceinline__ void stat_add(SoftmaxStat &st, const float *v, int base) {
    float vmax = v[0];
    int at = 0;
    for (int j = 1; j < VEC; j++)
        if (v[j] > vmax) vmax = v[j], at = j;
    if (vmax > st.m) {
        st.s *= __expf(st.m - vmax);
        st.m = vmax;
        st.i = base + at;
    }
    for (int j = 0; j < VEC; j++) st.s += __expf(v[j] - st.m);
}

/* Block-wide combine; every thread gets the result. */
__device__ SoftmaxStat block_stat(SoftmaxStat st) {
    __shared__ SoftmaxStat warp_stat[LM_THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        SoftmaxStat other;
        other.m = __shfl_xor_sync(0xffffffffu, st.m, o);
        other.s = __shfl_xor_sync(0xffffffffu, st.s, o);
        other.i = __shfl_xor_sync(0xffffffffu, st.i, o);
        st = stat_combine(st, other);
    }
    if (threadIdx.x % 32 == 0) warp_stat[threadIdx.x / 32] = st;
    __syncthreads();
    st = warp_stat[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++) st = stat_combine(st, warp_stat[w]);
    return st;
}

/* One block per row of the chunk; logits rows are `ld` T's apart. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LM_THREADS) k_lm_rows(T *logits, size_t ld, int vocab, const int32_t *labels,
                                                        const float *weights, float *ce, int32_t *argmax,
                                                        int want_grad, float grad_scale, int row0,
                                                        DfCudaDeviceError *bad) {
    const int UNROLL = 4;
    int r = blockIdx.x;
    T *row = logits + (size_t)r * ld;
    int label = labels[r];
    if (label >= vocab) {
        if (threadIdx.x == 0 && atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_LABEL) == DF_CUDA_BAD_NONE) {
            bad->value = label;
            bad->row = row0 + r;
            bad->limit = vocab;
        }
        label = -1;
    }
    float label_logit = label >= 0 ? (float)row[label] : 0.0f; /* before the row is overwritten */

    int n_vec = vocab / VEC; /* VEC divides vocab */
    SoftmaxStat st = {-INFINITY, 0.0f, 0x7fffffff};
    for (int v0 = threadIdx.x; v0 < n_vec; v0 += UNROLL * LM_THREADS) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (v0 + u * LM_THREADS < n_vec) load_vec<T, VEC>(row + (size_t)(v0 + u * LM_THREADS) * VEC, v[u]);
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (v0 + u * LM_THREADS < n_vec) stat_add<VEC>(st, v[u], (v0 + u * LM_THREADS) * VEC);
    }
    st = block_stat(st); /* its barrier also ends every read of pass 1 */
    if (threadIdx.x == 0) {
        ce[r] = label >= 0 ? st.m + logf(st.s) - label_logit : 0.0f;
        argmax[r] = st.i;
    }
    if (!want_grad) return;

    float coef = grad_scale * weights[r], scale = coef / st.s;
    bf16 *out = (bf16 *)row; /* the row's own storage */
    /* UNROLL tiles of the row at a time, all their loads issued first. Over
     * fp32 logits, the bf16 values of a group of tiles land in the bytes of
     * logits at half their indices, all in this group or earlier ones: the
     * barrier after the group's loads has every thread done reading those
     * (a barrier a tile left one 16-byte load a thread in flight) */
    for (int base = 0; base < n_vec; base += UNROLL * LM_THREADS) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int vi = base + u * LM_THREADS + threadIdx.x;
            if (vi < n_vec) load_vec<T, VEC>(row + (size_t)vi * VEC, v[u]);
        }
        if constexpr (sizeof(T) > sizeof(bf16)) __syncthreads();
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int vi = base + u * LM_THREADS + threadIdx.x;
            if (vi >= n_vec) continue;
            for (int j = 0; j < VEC; j++) {
                v[u][j] = __expf(v[u][j] - st.m) * scale;
                if (vi * VEC + j == label) v[u][j] -= coef;
            }
            store_bf16_vec<VEC>(out + (size_t)vi * VEC, v[u]);
        }
    }
}

template <typename T>
static void launch_rows(DfBackend *be, void *logits, int n, const DfLmHeadCeArgs *a, int r0) {
    DfCudaState *st = df_cuda_state(be);
    const int32_t *labels = (const int32_t *)a->labels.ptr + r0;
    const float *weights = (const float *)a->weights.ptr + r0;
    float *ce = (float *)a->ce.ptr + r0;
    int32_t *argmax = (int32_t *)a->argmax.ptr + r0;
    int want_grad = a->d_x.ptr != NULL;
    const int VEC = 4;
    if (a->vocab % VEC == 0)
        k_lm_rows<T, VEC><<<(unsigned)n, LM_THREADS, 0, st->stream>>>(
            (T *)logits, (size_t)a->vocab, a->vocab, labels, weights, ce, argmax, want_grad, a->grad_scale, r0,
            st->dev_error);
    else
        k_lm_rows<T, 1><<<(unsigned)n, LM_THREADS, 0, st->stream>>>((T *)logits, (size_t)a->vocab, a->vocab, labels,
                                                                    weights, ce, argmax, want_grad, a->grad_scale,
                                                                    r0, st->dev_error);
    DF_CUDA_CHECK_LAUNCH(be, "lm_head_ce (rows)");
}

/* Rows per chunk: the knob when set, else the fewest chunks of at most
 * LM_CHUNK_OUTPUTS / hidden rows (at least LM_CHUNK_MIN_ROWS) whose logits
 * fit the scratch budget, evened out and rounded up to LM_CHUNK_ALIGN rows. */
static int chunk_rows(const DfCudaState *st, int rows, int hidden, int vocab, size_t elem) {
    if (st->variant.lm_head_chunk_rows > 0)
        return st->variant.lm_head_chunk_rows < rows ? st->variant.lm_head_chunk_rows : rows;
    size_t max_rows = LM_SCRATCH_BYTES / ((size_t)vocab * elem);
    size_t by_outputs = LM_CHUNK_OUTPUTS / (size_t)hidden;
    if (by_outputs < LM_CHUNK_MIN_ROWS) by_outputs = LM_CHUNK_MIN_ROWS;
    if (max_rows > by_outputs) max_rows = by_outputs;
    if (max_rows < 1) max_rows = 1;
    size_t n_chunks = ((size_t)rows + max_rows - 1) / max_rows;
    size_t chunk = ((size_t)rows + n_chunks - 1) / n_chunks;
    size_t rounded = (chunk + LM_CHUNK_ALIGN - 1) / LM_CHUNK_ALIGN * LM_CHUNK_ALIGN;
    if (rounded <= max_rows) chunk = rounded;
    return chunk < (size_t)rows ? (int)chunk : rows;
}

size_t df_cuda_lm_head_scratch_bytes(void) { return LM_SCRATCH_BYTES; }

void df_cuda_lm_head_ce(DfBackend *be, const DfLmHeadCeArgs *a) {
    DfCudaState *st = df_cuda_state(be);
    size_t elem = sizeof(float);
    int H = a->hidden, V = a->vocab, chunk = chunk_rows(st, a->rows, H, V, elem);
    void *logits = df_cuda_scratch(be, (size_t)chunk * V * elem);
    if (!logits) {
        return;
    }
    const bf16 *x = (const bf16 *)a->x.ptr;
    bf16 *d_x = (bf16 *)a->d_x.ptr;
    for (int r0 = 0; r0 < a->rows; r0 += chunk) {
        int n = a->rows - r0 < chunk ? a->rows - r0 : chunk;
        DfCudaGemm fwd = {logits, x + (size_t)r0 * H, a->head.ptr, n, V, H, 0, 1, H, H, V, 1, 0.0f, nullptr};
        df_cuda_gemm(be, &fwd);
        launch_rows<float>(be, logits, n, a, r0);
        if (!d_x) continue;
        /* dlogits: bf16 rows, in place, 2 V apart over fp32 logits */
        int ld_dlogits = 2 * V;
        DfCudaGemm bwd = {d_x + (size_t)r0 * H, logits, a->head.ptr, n, H, V, 0, 0, ld_dlogits, H, H, 0, 0.0f, nullptr};
        df_cuda_gemm(be, &bwd);
    }
}
