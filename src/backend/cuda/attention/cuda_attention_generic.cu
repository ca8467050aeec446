/* Causal packed attention for head dims the tensor-core kernels
 * (cuda_attention.cu: 64, 128) do not take, up to 256: a hybrid Qwen3.5 /
 * Qwen3.6 target's gated attention has heads of 256, its small test models
 * of 16. CUDA cores, fp32 math: one warp per (query row, head), keys 32 at a
 * time (lane j scores key j against the query, which the lanes hold 32
 * dims apart and broadcast by shuffles), online softmax, then each lane
 * accumulates its dims of the output over the 32 keys. Correct for any
 * length; a tensor-core kernel for 256 would be several times faster (the
 * gated attention is 1 layer in 4 of such a target). */
#include <math.h>

#include "backend/cuda/common/cuda_internal.h"

#define ATTN_WARPS_PER_BLOCK 8

/* R: output dims per lane (head_dim <= 32 R). */
template <int R>
__global__ void k_attention_generic(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                    const int32_t *pos, int n_tokens, int heads, int kv_heads, int hd, float scale) {
    long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= (long)n_tokens * heads) return;
    int t = (int)(warp / heads), h = (int)(warp % heads), kvh = h / (heads / kv_heads);
    int start = t - pos[t];
    if (start < 0) start = 0;
    size_t kv_stride = (size_t)kv_heads * hd;
    const bf16 *qr = q + ((size_t)t * heads + h) * hd;
    float qv[R], acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int d = lane + 32 * r;
        qv[r] = d < hd ? __bfloat162float(qr[d]) * scale : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j0 = start; j0 <= t; j0 += 32) {
        int j = j0 + lane, jl = j <= t ? j : t; /* lanes past the diagonal read a valid row, then drop it */
        const bf16 *kr = k + (size_t)jl * kv_stride + (size_t)kvh * hd;
        float sc = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            for (int s = 0; s < 32; s++) {
                float qd = __shfl_sync(0xffffffffu, qv[r], s);
                int d = s + 32 * r;
                if (d < hd) sc += qd * __bfloat162float(kr[d]);
            }
        if (j > t) sc = -INFINITY;
        float tile_max = sc;
        for (int o = 16; o > 0; o /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
        float new_m = fmaxf(m, tile_max); /* finite: key j0 <= t is in every tile */
        float p = j <= t ? expf(sc - new_m) : 0.0f, psum = p;
        for (int o = 16; o > 0; o /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, o);
        float corr = expf(m - new_m); /* 0 on the first tile (m = -inf) */
        l = l * corr + psum;
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] *= corr;
        int n_keys = t - j0 + 1 < 32 ? t - j0 + 1 : 32;
        for (int s = 0; s < n_keys; s++) {
            float ps = __shfl_sync(0xffffffffu, p, s);
            const bf16 *vr = v + (size_t)(j0 + s) * kv_stride + (size_t)kvh * hd;
#pragma unroll
            for (int r = 0; r < R; r++) {
                int d = lane + 32 * r;
                if (d < hd) acc[r] += ps * __bfloat162float(vr[d]);
            }
        }
        m = new_m;
    }
    bf16 *orow = out + ((size_t)t * heads + h) * hd;
#pragma unroll
    for (int r = 0; r < R; r++) {
        int d = lane + 32 * r;
        if (d < hd) orow[d] = __float2bfloat16_rn(acc[r] / l);
    }
    if (lse && lane == 0) lse[(size_t)h * n_tokens + t] = m + logf(l);
}

template <int R>
static void launch_generic(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                           const DfPackedBatch *batch, int heads, int kv_heads, int hd, float scale) {
    DfCudaState *st = df_cuda_state(be);
    size_t warps = (size_t)batch->n_tokens * heads;
    unsigned blocks = (unsigned)((warps + ATTN_WARPS_PER_BLOCK - 1) / ATTN_WARPS_PER_BLOCK);
    k_attention_generic<R><<<blocks, 32 * ATTN_WARPS_PER_BLOCK, 0, st->stream>>>(
        (bf16 *)out.ptr, (float *)lse.ptr, (const bf16 *)q.ptr, (const bf16 *)k.ptr, (const bf16 *)v.ptr,
        (const int32_t *)batch->positions.ptr, batch->n_tokens, heads, kv_heads, hd, scale);
    DF_CUDA_CHECK_LAUNCH(be, "attention (generic head dim)");
}

void df_cuda_attention_generic(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                               const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    int r = (head_dim + 31) / 32;
    if (r <= 1)
        launch_generic<1>(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
    else if (r <= 2)
        launch_generic<2>(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
    else if (r <= 4)
        launch_generic<4>(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
    else if (r <= 8)
        launch_generic<8>(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
    else
        df_cuda_record_failure(be, __FILE__, __LINE__, "attention: head_dim %d is not supported (at most 256)",
                               head_dim);
}
