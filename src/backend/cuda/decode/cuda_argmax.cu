/* Row-wise first argmax of bf16 logits: greedy decoding's choice made on the
 * GPU, so that a step downloads one int32 per row instead of the row.
 *
 * One block per row. Each thread scans its own columns in increasing order
 * (16-byte loads of 8 bf16 where the row allows) and keeps its first
 * maximum; the block then reduces (value, column) pairs with "larger value,
 * else smaller column", which is associative, so the result is the row's
 * first maximum whatever the split.
 *
 * NaN counts as +inf, so that the first NaN or +inf of a row is chosen
 * (the first of equal keys wins): the CPU op's choice wherever the row's top
 * is finite, and a non-finite choice (flagged as -1 - column, as the CPU op
 * does) wherever the row holds a NaN or an infinity at its top. */
#include "backend/cuda/common/cuda_internal.h"

#define ARGMAX_THREADS 512

struct ArgBest {
    float v;
    int i;
};

__device__ __forceinline__ float argmax_key(float v) {
    return v != v ? INFINITY : v;
}

__device__ __forceinline__ ArgBest arg_better(ArgBest a, ArgBest b) {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

template <bool VEC>
__global__ void __launch_bounds__(ARGMAX_THREADS) k_argmax_rows(int32_t *index, float *value, const bf16 *x, int cols) {
    const bf16 *row = x + (size_t)blockIdx.x * cols;
    /* -inf at column cols: never better than a real column */
    ArgBest best = {-INFINITY, cols};
    if (VEC) {
        for (int c = threadIdx.x * 8; c < cols; c += ARGMAX_THREADS * 8) {
            union {
                uint4 u;
                __nv_bfloat162 h2[4];
            } p;
            p.u = *(const uint4 *)(row + c);
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(p.h2[j]);
                float k0 = argmax_key(f.x), k1 = argmax_key(f.y);
                if (k0 > best.v) best.v = k0, best.i = c + 2 * j;
                if (k1 > best.v) best.v = k1, best.i = c + 2 * j + 1;
            }
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += ARGMAX_THREADS) {
            float k = argmax_key(__bfloat162float(row[c]));
            if (k > best.v) best.v = k, best.i = c;
        }
    }
    for (int o = 16; o > 0; o /= 2) {
        ArgBest other = {__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
        best = arg_better(best, other);
    }
    __shared__ ArgBest warp_best[ARGMAX_THREADS / 32];
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x != 0) return;
    best = warp_best[0];
    for (int w = 1; w < ARGMAX_THREADS / 32; w++) best = arg_better(best, warp_best[w]);
    /* every key is >= -inf, so some column < cols was taken; guard anyway */
    int at = best.i < cols ? best.i : 0;
    float chosen = __bfloat162float(row[at]);
    index[blockIdx.x] = isfinite(chosen) ? at : -1 - at;
    if (value) value[blockIdx.x] = chosen;
}

void df_cuda_argmax_rows(DfBackend *be, DfBuffer index, DfBuffer value, DfBuffer x, int rows, int cols) {
    DfCudaState *st = df_cuda_state(be);
    int vec = cols % 8 == 0 && ((uintptr_t)x.ptr & 15u) == 0;
    int32_t *idx = (int32_t *)index.ptr;
    float *val = (float *)value.ptr;
    const bf16 *xs = (const bf16 *)x.ptr;
    if (vec)
        k_argmax_rows<true><<<rows, ARGMAX_THREADS, 0, st->stream>>>(idx, val, xs, cols);
    else
        k_argmax_rows<false><<<rows, ARGMAX_THREADS, 0, st->stream>>>(idx, val, xs, cols);
    DF_CUDA_CHECK_LAUNCH(be, "argmax_rows");
}
