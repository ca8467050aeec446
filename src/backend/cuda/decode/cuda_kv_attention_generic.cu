/* kv_attention (backend.h) for head dims the tensor-core kernel
 * (cuda_kv.cu: 64, 128, 256) does not take, up to 256: a hybrid test
 * model's heads of 16, say. (Qwen3.5 / Qwen3.6's heads of 256 ran here
 * until 2026-12-02: 0.94 ms per layer at batch 1 against 640 keys, 40% of
 * a 27B-shaped decode step; docs/kernels.md.)
 * The scheme of cuda_attention_generic.cu against the cache: one warp per
 * (new row, head), keys 32 at a time from the row's cache rows (lane j scores key
 * j against the query, held by the lanes 32 dims apart and broadcast by
 * shuffles), online softmax in fp32, then each lane accumulates its dims of
 * the output. Correct for any cache length; one layer in four of such a
 * target, and at decode each warp reads its slot's keys once. */
#include <math.h>

#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/decode/cuda_kv_rows.h"

#define KVG_WARPS_PER_BLOCK 8

struct KvGenericParams {
    bf16 *out;
    const bf16 *q, *k, *v;
    const int32_t *slots, *cache_lens, *row_starts, *pages; /* pages NULL: contiguous slots */
    int n_seqs, n_rows, heads, kv_heads, hd, capacity, pages_per_seq, causal;
    float scale;
};

/* R: output dims per lane (hd <= 32 R). */
template <int R>
__global__ void k_kv_attention_generic(KvGenericParams p) {
    long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= (long)p.n_rows * p.heads) return;
    int t = (int)(warp / p.heads), h = (int)(warp % p.heads), kvh = h / (p.heads / p.kv_heads);
    int i = df_kv_seq_of_row(p.row_starts, p.n_seqs, t);
    int n_new = p.row_starts[i + 1] - p.row_starts[i], j_new = t - p.row_starts[i];
    /* keys 0 .. last of the slot: through the row itself (causal) or the whole step (a block) */
    int last = p.cache_lens[i] + (p.causal ? j_new : n_new - 1);
    size_t kv_stride = (size_t)p.kv_heads * p.hd;
    const bf16 *khead = p.k + (size_t)kvh * p.hd, *vhead = p.v + (size_t)kvh * p.hd; /* the kv head's column */
    const bf16 *qr = p.q + ((size_t)t * p.heads + h) * p.hd;
    float qv[R], acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int d = lane + 32 * r;
        qv[r] = d < p.hd ? __bfloat162float(qr[d]) * p.scale : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += 32) {
        int j = j0 + lane, jl = j <= last ? j : last; /* lanes past the end read a valid row, then drop it */
        /* lane s's key row, which the V pass below takes from it for key j0 + s */
        size_t row = df_kv_cache_row_dev(p.pages, p.pages_per_seq, p.slots, p.capacity, i, jl);
        const bf16 *kr = khead + row * kv_stride;
        float sc = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            for (int s = 0; s < 32; s++) {
                float qd = __shfl_sync(0xffffffffu, qv[r], s);
                int d = s + 32 * r;
                if (d < p.hd) sc += qd * __bfloat162float(kr[d]);
            }
        if (j > last) sc = -INFINITY;
        float tile_max = sc;
        for (int o = 16; o > 0; o /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
        float new_m = fmaxf(m, tile_max); /* finite: key j0 <= last is in every tile */
        float pr = j <= last ? expf(sc - new_m) : 0.0f, psum = pr;
        for (int o = 16; o > 0; o /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, o);
        float corr = expf(m - new_m); /* 0 on the first tile (m = -inf) */
        l = l * corr + psum;
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] *= corr;
        int n_keys = last - j0 + 1 < 32 ? last - j0 + 1 : 32;
        for (int s = 0; s < n_keys; s++) {
            float ps = __shfl_sync(0xffffffffu, pr, s);
            const bf16 *vr = vhead + __shfl_sync(0xffffffffu, row, s) * kv_stride; /* s < n_keys: jl = j0 + s */
#pragma unroll
            for (int r = 0; r < R; r++) {
                int d = lane + 32 * r;
                if (d < p.hd) acc[r] += ps * __bfloat162float(vr[d]);
            }
        }
        m = new_m;
    }
    bf16 *orow = p.out + ((size_t)t * p.heads + h) * p.hd;
#pragma unroll
    for (int r = 0; r < R; r++) {
        int d = lane + 32 * r;
        if (d < p.hd) orow[d] = __float2bfloat16_rn(acc[r] / l);
    }
}

template <int R>
static void launch(DfBackend *be, const KvGenericParams &p) {
    DfCudaState *st = df_cuda_state(be);
    size_t warps = (size_t)p.n_rows * p.heads;
    unsigned blocks = (unsigned)((warps + KVG_WARPS_PER_BLOCK - 1) / KVG_WARPS_PER_BLOCK);
    k_kv_attention_generic<R><<<blocks, 32 * KVG_WARPS_PER_BLOCK, 0, st->stream>>>(p);
    DF_CUDA_CHECK_LAUNCH(be, "kv_attention (generic head dim)");
}

void df_cuda_kv_attention_generic(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                                  const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale,
                                  int causal) {
    KvGenericParams p;
    p.out = (bf16 *)out.ptr;
    p.q = (const bf16 *)q.ptr;
    p.k = (const bf16 *)k_cache.ptr;
    p.v = (const bf16 *)v_cache.ptr;
    p.slots = (const int32_t *)batch->slots.ptr;
    p.cache_lens = (const int32_t *)batch->cache_lens.ptr;
    p.row_starts = (const int32_t *)batch->row_starts.ptr;
    p.n_seqs = batch->n_seqs, p.n_rows = batch->n_rows, p.heads = heads, p.kv_heads = kv_heads, p.hd = head_dim;
    p.pages = (const int32_t *)batch->pages.ptr;
    p.capacity = batch->slot_capacity, p.pages_per_seq = batch->pages_per_seq, p.causal = causal, p.scale = scale;
    int r = (head_dim + 31) / 32;
    if (r <= 1) launch<1>(be, p);
    else if (r <= 2) launch<2>(be, p);
    else if (r <= 4) launch<4>(be, p);
    else if (r <= 8) launch<8>(be, p);
    else
        df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention: head_dim %d is not supported (at most 256)",
                               head_dim);
}
