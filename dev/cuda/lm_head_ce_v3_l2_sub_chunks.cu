/* lm_head_ce, version 3: at small hidden sizes and vocabularies the logits
 * product and row kernel in sub-chunks whose fp32 logits stay in L2 (32 MiB),
 * their dlogits into a chunk-wide buffer for one d_x product. Tried against
 * version 1 (src/backend/cuda/train/cuda_lm_head_ce.cu: whole chunks, the
 * row kernel reading the logits from DRAM) and dropped.
 *
 * Figure: the recipe's training step (`dflash bench --device cuda
 * --train-only`, 113K block rows, hidden 256, vocabulary 8192), H100, one
 * call: lm_head_ce 4.96 ms against 4.15, the step 30.3 ms against 27.8: the
 * about 110 logits products of 1024 rows a step and their row launches cost more
 * than the DRAM reads they save; commit bf3f46e.
 *
 * Built by `make dev` (compiled only, with nvcc); dev_lm_head_ce_v3_l2_sub_chunks
 * runs the op as the backend's df_cuda_lm_head_ce did with sub-chunks (the
 * knob lm_head_l2_rows of that commit left out). The rest is version 1's.
 *
 * Fused frozen lm head + weighted cross-entropy on the GPU.
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
 * waits at a barrier, then writes that group's bf16 values.
 *
 * Where a chunk's fp32 logits are far larger than L2 while a few hundred
 * rows of them fit (small hidden sizes, small vocabularies: the bundled
 * target's drafter, 16384-row chunks of 8192 logits, 512 MiB), steps 1 and
 * 2 run in sub-chunks of l2_rows rows (LM_L2_BYTES of logits), so that the
 * row kernel's two reads find the logits the product just wrote in L2
 * rather than in DRAM; their bf16 dlogits go to a buffer of the whole chunk
 * (leading dimension vocab), and step 3 stays one product over the chunk.
 * There the op is bound by memory traffic, not by its products: per chunk
 * the logits were written once and read twice from DRAM. */
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
/* Sub-chunks hold at most LM_L2_BYTES of fp32 logits (the L2 of an H100 or
 * H200 is 50 MiB, an A100's 40), and are used only from LM_L2_MIN_ROWS rows:
 * fewer would leave the logits product's tiles short of a wave and multiply
 * the launches (at Qwen3's vocabulary 32 MiB are 55 rows: one-level chunks). */
#define LM_L2_BYTES ((size_t)32 << 20)
#define LM_L2_MIN_ROWS 512

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
/* Row r's bf16 dlogits go to dlogits + r * ld_dlogits: over the row's own
 * logits (in place) or into a separate buffer. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LM_THREADS) k_lm_rows(T *logits, size_t ld, int vocab, const int32_t *labels,
                                                        const float *weights, float *ce, int32_t *argmax,
                                                        int want_grad, float grad_scale, int row0,
                                                        bf16 *dlogits, size_t ld_dlogits, DfCudaDeviceError *bad) {
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
    bf16 *out = dlogits + (size_t)r * ld_dlogits;
    /* UNROLL tiles of the row at a time, all their loads issued first. Over
     * fp32 logits, the bf16 values of a group of tiles land in the bytes of
     * logits at half their indices, all in this group or earlier ones: the
     * barrier after the group's loads has every thread done reading those
     * (a barrier a tile left one 16-byte load a thread in flight); into a
     * separate buffer the barrier is not needed, and costs little */
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

/* The row kernel over n rows of logits (first row r0 of the op), their
 * dlogits into dlogits (rows ld_dlogits apart). */
static void launch_rows(DfBackend *be, float *logits, int n, const DfLmHeadCeArgs *a, int r0, bf16 *dlogits,
                        size_t ld_dlogits) {
    DfCudaState *st = df_cuda_state(be);
    const int32_t *labels = (const int32_t *)a->labels.ptr + r0;
    const float *weights = (const float *)a->weights.ptr + r0;
    float *ce = (float *)a->ce.ptr + r0;
    int32_t *argmax = (int32_t *)a->argmax.ptr + r0;
    int want_grad = a->d_x.ptr != NULL;
    const int VEC = 4;
    if (a->vocab % VEC == 0)
        k_lm_rows<float, VEC><<<(unsigned)n, LM_THREADS, 0, st->stream>>>(
            logits, (size_t)a->vocab, a->vocab, labels, weights, ce, argmax, want_grad, a->grad_scale, r0, dlogits,
            ld_dlogits, st->dev_error);
    else
        k_lm_rows<float, 1><<<(unsigned)n, LM_THREADS, 0, st->stream>>>(
            logits, (size_t)a->vocab, a->vocab, labels, weights, ce, argmax, want_grad, a->grad_scale, r0, dlogits,
            ld_dlogits, st->dev_error);
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

/* Rows per sub-chunk of a chunk of `chunk` rows (steps 1 and 2 of the top
 * comment): as many as LM_L2_BYTES of logits hold,
 * in multiples of LM_CHUNK_ALIGN; the whole chunk where that is fewer than
 * LM_L2_MIN_ROWS or more than half the chunk (the dlogits buffer and the
 * sub-chunk's logits then fit the chunk's own scratch). */
static int l2_rows(int chunk, int vocab) {
    size_t rows = LM_L2_BYTES / ((size_t)vocab * sizeof(float)) / LM_CHUNK_ALIGN * LM_CHUNK_ALIGN;
    return rows >= LM_L2_MIN_ROWS && 2 * rows <= (size_t)chunk ? (int)rows : chunk;
}

void dev_lm_head_ce_v3_l2_sub_chunks(DfBackend *be, const DfLmHeadCeArgs *a) {
    DfCudaState *st = df_cuda_state(be);
    int H = a->hidden, V = a->vocab, chunk = chunk_rows(st, a->rows, H, V, sizeof(float)), sub = l2_rows(chunk, V);
    bool separate = a->d_x.ptr && sub < chunk; /* dlogits of the whole chunk beside a sub-chunk's logits */
    size_t logits_bytes = (size_t)sub * V * sizeof(float), dl_at = (logits_bytes + 255) / 256 * 256;
    size_t bytes = separate ? dl_at + (size_t)chunk * V * sizeof(bf16) : logits_bytes;
    if (bytes > LM_SCRATCH_BYTES && bytes > (size_t)chunk * V * sizeof(float)) { /* never at the automatic sizes */
        sub = chunk, separate = false, bytes = (size_t)chunk * V * sizeof(float);
    }
    unsigned char *scratch = (unsigned char *)df_cuda_scratch(be, bytes);
    if (!scratch) return;
    float *logits = (float *)scratch;
    /* in place: bf16 rows 2 V apart over the fp32 logits of the (sub-)chunk */
    bf16 *dlogits = separate ? (bf16 *)(scratch + dl_at) : (bf16 *)logits;
    int ld_dl = separate ? V : 2 * V;
    const bf16 *x = (const bf16 *)a->x.ptr;
    bf16 *d_x = (bf16 *)a->d_x.ptr;
    for (int r0 = 0; r0 < a->rows; r0 += chunk) {
        int n = a->rows - r0 < chunk ? a->rows - r0 : chunk;
        for (int s0 = 0; s0 < n; s0 += sub) {
            int m = n - s0 < sub ? n - s0 : sub;
            DfCudaGemm fwd = {logits, x + (size_t)(r0 + s0) * H, a->head.ptr, m, V, H, 0, 1, H, H, V, 1, 0.0f, nullptr};
            df_cuda_gemm(be, &fwd);
            launch_rows(be, logits, m, a, r0 + s0, separate ? dlogits + (size_t)s0 * ld_dl : dlogits, (size_t)ld_dl);
        }
        if (!d_x) continue;
        DfCudaGemm bwd = {d_x + (size_t)r0 * H, dlogits, a->head.ptr, n, H, V, 0, 0, ld_dl, H, H, 0, 0.0f, nullptr};
        df_cuda_gemm(be, &bwd);
    }
}
