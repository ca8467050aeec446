/* A dense decoder layer's q/k/v step in one launch (backend.h,
 * DfQkvRopeCacheArgs): one warp per (new row, head) over the heads + 2 *
 * kv_heads heads of the fused q/k/v product. The head sits in registers,
 * 8 bf16 per lane (head_dim / 8 lanes); the norm's sum of squares is a warp
 * shuffle reduction and rope's pair partner is the lane half a head away.
 * The arithmetic is cuda_head_math.h's, laid out as k_rmsnorm's vector path
 * and k_rope_vec lay it out (the same lanes add the same values in the same
 * order), so the result is bit for bit that of rmsnorm, rope and
 * kv_cache_write on separate q, k, v. */
#include "backend/cuda/elementwise/cuda_head_math.h"
#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/decode/cuda_kv_rows.h"

#define QKV_WARPS_PER_BLOCK 4

typedef struct QkvParams {
    const bf16 *qkv, *q_norm, *k_norm; /* norms NULL: no q/k norm */
    const float *cos_t, *sin_t;
    const int32_t *positions, *slots, *cache_lens, *row_starts, *pages; /* pages NULL: contiguous slots */
    bf16 *q_out, *k_cache, *v_cache;
    int heads, kv_heads, head_dim, capacity, pages_per_seq, table_rows;
    float eps, sin_sign; /* sin_sign 1: passed, not folded, as k_rope_vec takes it */
    DfCudaDeviceError *bad;
} QkvParams;

__device__ void report_bad_position(DfCudaDeviceError *bad, int pos, int row, int limit) {
    if (atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_POSITION) == DF_CUDA_BAD_NONE) {
        bad->value = pos;
        bad->row = row;
        bad->limit = limit;
    }
}

/* The 16 bytes lane `from` holds. */
__device__ __forceinline__ uint4 shfl_uint4(uint4 x, int from) {
    return make_uint4(__shfl_sync(0xffffffffu, x.x, from), __shfl_sync(0xffffffffu, x.y, from),
                      __shfl_sync(0xffffffffu, x.z, from), __shfl_sync(0xffffffffu, x.w, from));
}

/* rmsnorm of the head held by the warp (lanes beyond it hold zeros). */
__device__ __forceinline__ uint4 norm_head(const Pack8 &x, const bf16 *w, bool active, int lane, const QkvParams &p) {
    float ss = df_warp_sum(active ? df_pack8_add_squares(0.0f, x) : 0.0f);
    float inv = df_rms_inverse(ss, p.head_dim, p.eps);
    if (!active) return x.u;
    Pack8 wp;
    wp.u = *(const uint4 *)(w + lane * 8);
    return df_pack8_rmsnorm(x, wp, inv);
}

/* Grid: x over (new row j, head) warps of a sequence, y the sequence. */
template <int HD>
__global__ void k_qkv_rope_cache(QkvParams p) {
    constexpr int LANES = HD / 8, HALF_LANES = LANES / 2;
    int lane = threadIdx.x % 32, seq = blockIdx.y;
    int warp = blockIdx.x * QKV_WARPS_PER_BLOCK + threadIdx.x / 32;
    int n_heads = p.heads + 2 * p.kv_heads, j = warp / n_heads, h = warp % n_heads;
    int r0 = p.row_starts[seq];
    if (j >= p.row_starts[seq + 1] - r0) return; /* whole warps leave together */
    int row = r0 + j, kv_dim = p.kv_heads * HD;
    bool active = lane < LANES;
    Pack8 x;
    x.u = active ? *(const uint4 *)(p.qkv + ((size_t)row * n_heads + h) * HD + lane * 8) : make_uint4(0, 0, 0, 0);
    size_t cache_row = df_kv_cache_row_dev(p.pages, p.pages_per_seq, p.slots, p.capacity, seq, p.cache_lens[seq] + j);
    if (h >= p.heads + p.kv_heads) {
        if (active) *(uint4 *)(p.v_cache + cache_row * kv_dim + (h - p.heads - p.kv_heads) * HD + lane * 8) = x.u;
        return;
    }
    bool is_q = h < p.heads;
    const bf16 *w = is_q ? p.q_norm : p.k_norm;
    if (w) x.u = norm_head(x, w, active, lane, p);
    Pack8 partner;
    partner.u = shfl_uint4(x.u, lane ^ HALF_LANES);
    int pos = p.positions[row];
    if (pos < 0 || pos >= p.table_rows) {
        if (lane == 0) report_bad_position(p.bad, pos, row, p.table_rows);
        return;
    }
    if (!active) return;
    bool first = lane < HALF_LANES;
    int j0 = (first ? lane : lane - HALF_LANES) * 8;
    const float4 *c4 = (const float4 *)(p.cos_t + (size_t)pos * (HD / 2) + j0);
    const float4 *s4 = (const float4 *)(p.sin_t + (size_t)pos * (HD / 2) + j0);
    float4 cv[2] = {c4[0], c4[1]}, sv[2] = {s4[0], s4[1]};
    Pack8 oa, ob;
    df_pack8_rope(first ? x : partner, first ? partner : x, (const float *)cv, (const float *)sv, p.sin_sign, oa, ob);
    bf16 *dst = is_q ? p.q_out + ((size_t)row * p.heads + h) * HD : p.k_cache + cache_row * kv_dim + (h - p.heads) * HD;
    *(uint4 *)(dst + lane * 8) = (first ? oa : ob).u;
}

static bool all_aligned16(const DfQkvRopeCacheArgs *a) {
    const void *ptrs[] = {a->qkv.ptr, a->q_out.ptr, a->k_cache.ptr, a->v_cache.ptr, a->cos_table.ptr, a->sin_table.ptr};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (!df_cuda_aligned16(ptrs[i])) return false;
    return (!a->q_norm.ptr || df_cuda_aligned16(a->q_norm.ptr)) && (!a->k_norm.ptr || df_cuda_aligned16(a->k_norm.ptr));
}

static QkvParams qkv_params(DfCudaState *st, const DfQkvRopeCacheArgs *a) {
    const DfKvBatch *kb = a->batch;
    QkvParams p;
    p.qkv = (const bf16 *)a->qkv.ptr;
    p.q_norm = (const bf16 *)a->q_norm.ptr;
    p.k_norm = (const bf16 *)a->k_norm.ptr;
    p.cos_t = (const float *)a->cos_table.ptr;
    p.sin_t = (const float *)a->sin_table.ptr;
    p.positions = (const int32_t *)kb->positions.ptr;
    p.slots = (const int32_t *)kb->slots.ptr;
    p.cache_lens = (const int32_t *)kb->cache_lens.ptr;
    p.row_starts = (const int32_t *)kb->row_starts.ptr;
    p.pages = (const int32_t *)kb->pages.ptr;
    p.q_out = (bf16 *)a->q_out.ptr;
    p.k_cache = (bf16 *)a->k_cache.ptr;
    p.v_cache = (bf16 *)a->v_cache.ptr;
    p.heads = a->heads;
    p.kv_heads = a->kv_heads;
    p.head_dim = a->head_dim;
    p.capacity = kb->slot_capacity;
    p.pages_per_seq = kb->pages_per_seq;
    p.table_rows = (int)(a->cos_table.count / (size_t)(a->head_dim / 2));
    p.eps = a->eps;
    p.sin_sign = 1.0f;
    p.bad = st->dev_error;
    return p;
}

void df_cuda_qkv_rope_cache(DfBackend *be, const DfQkvRopeCacheArgs *a) {
    DfCudaState *st = df_cuda_state(be);
    int hd = a->head_dim;
    if (hd != 64 && hd != 128 && hd != 256) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "qkv_rope_cache: head_dim %d (this kernel has 64, 128, 256)",
                               hd);
        return;
    }
    if (!all_aligned16(a)) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "qkv_rope_cache: a buffer is not 16-byte aligned");
        return;
    }
    const DfKvBatch *kb = a->batch;
    if (kb->n_seqs > 65535) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "qkv_rope_cache: %d sequences (at most 65535)", kb->n_seqs);
        return;
    }
    QkvParams p = qkv_params(st, a);
    size_t warps = (size_t)kb->max_new * (size_t)(a->heads + 2 * a->kv_heads);
    dim3 grid((unsigned)((warps + QKV_WARPS_PER_BLOCK - 1) / QKV_WARPS_PER_BLOCK), (unsigned)kb->n_seqs);
    if (hd == 64) k_qkv_rope_cache<64><<<grid, 32 * QKV_WARPS_PER_BLOCK, 0, st->stream>>>(p);
    else if (hd == 128) k_qkv_rope_cache<128><<<grid, 32 * QKV_WARPS_PER_BLOCK, 0, st->stream>>>(p);
    else k_qkv_rope_cache<256><<<grid, 32 * QKV_WARPS_PER_BLOCK, 0, st->stream>>>(p);
    DF_CUDA_CHECK_LAUNCH(be, "qkv_rope_cache");
}
