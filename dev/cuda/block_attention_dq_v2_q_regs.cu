/* Block attention backward at head_dim 128, dQ version 2: the CTA's Q and dO
 * rows held in registers as the A fragments of S = Q K^T and dP = dO V^T
 * (k_block_attn_dq_q_regs_wgmma), so that those products read only K or V
 * from shared memory at each k-step. Tried against version 1, both operands
 * from shared memory (k_block_attn_dq_wgmma in
 * src/backend/cuda/block_attention/cuda_block_attention_backward_wgmma.cu),
 * and dropped.
 *
 * Figure: the backward at 2 x 2048 context rows, 512 anchors, block 16, 32/8
 * heads of 128, six paired runs on H100s: 2.399 ms (mean) against 2.424,
 * within the runs' spread; L1 traffic 50% -> 36%, time unchanged; 223
 * registers against 155. Commit 8c972d7.
 *
 * Built by `make dev` (compiled only, with nvcc: it keeps compiling against
 * the tiles it shares with src/); dev_block_attention_dq_v2_q_regs launches
 * it where the backend launches k_block_attn_dq_wgmma. */
#include "backend/cuda/block_attention/cuda_block_attention_keys.h"
#include "backend/cuda/block_attention/cuda_block_attention_wgmma.h"

namespace {

constexpr int WD = 128;          /* head_dim of this kernel */
constexpr int WTILE = ROWS * WD; /* values in one 64 x 128 tile (16 KiB) */
/* Q, dO, K[2], V[2], lse and dsum [ROWS] each, alignment */
constexpr size_t WGMMA_DQ_SMEM = 6 * WTILE * sizeof(bf16) + 2 * ROWS * sizeof(float) + 1024;

/* acc *= f: dS (dS^T) is kept unscaled in the products, so the scale of
 * S is applied once to the sums of dQ (dK) instead of to every element of
 * every tile (32 multiplies a thread a visit; the kernels are issue-bound). */
template <int N>
__device__ __forceinline__ void scale_acc(float (&acc)[N][4], float f) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][e] *= f;
}

/* Where a thread's rows of a visit of chunk c, kv head g, come from:
 * its Q/dO rows (query_rows_sw128), and for threads below ROWS the lse and
 * dsum index of row tid less the block's first row (-1 past the group);
 * the same for every block, so found once a chunk. */
struct VisitRows {
    QueryRowsSw128 q;
    long long lse;
};

__device__ __forceinline__ VisitRows visit_rows(const Shape &s, int g, int c) {
    VisitRows v = {query_rows_sw128(s, g, c, threadIdx.x), -1};
    if (threadIdx.x < ROWS) {
        QRow qr = q_row<WD>(s, 0, g, c, threadIdx.x);
        if (qr.valid) v.lse = (long long)qr.lse_idx;
    }
    return v;
}

/* Q and dO rows of one visit (block j, the chunk of `rows`) into sw128
 * tiles, lse and dsum into [ROWS] (all cp.async, one group). Rows past the
 * group are zeros, lse and dsum there too: with Q and dO zero such a row
 * adds nothing to dK or dV whatever its P. */
__device__ __forceinline__ void load_visit_sw128(bf16 *sq, bf16 *sdo, float *slse, float *sds, const bf16 *q,
                                                 const bf16 *d_out, const float *lse, const float *dsum,
                                                 const Shape &s, const VisitRows &rows, int j) {
    bf16 *const dst[2] = {sq, sdo};
    const bf16 *const src[2] = {q, d_out};
    load_query_rows_at_sw128<2>(dst, src, s, rows.q, j, threadIdx.x);
    if (threadIdx.x < ROWS) {
        bool valid = rows.lse >= 0;
        size_t i = valid ? (size_t)rows.lse + (size_t)j * s.B : 0;
        cp_async4(slse + threadIdx.x, lse + i, valid ? 4 : 0);
        cp_async4(sds + threadIdx.x, dsum + i, valid ? 4 : 0);
    }
    cp_async_commit();
}

/* dQ, grid as k_block_attn_dq: x = block (reversed), y = kv head * chunks.
 * The CTA's Q and dO rows,
 * which every key tile multiplies, are read from shared memory once into
 * registers as the A fragments of S = Q K^T and dP = dO V^T (64 registers a
 * thread, 223 in all, still two CTAs an SM), so those two products read
 * only their K or V tile from shared memory at each k-step; in version 1 both
 * operands come from shared memory (155 registers). bench_block_attention's
 * backward at 2 x 2048, six paired runs on H100s:
 * 2.439, 2.577, 2.444, 2.347, 2.387, 2.351 ms for version 1 against 2.402,
 * 2.434, 2.387, 2.385, 2.408, 2.378 with Q and dO in registers: a tie within the runs'
 * spread, so the kernel with fewer registers stayed. */
__global__ void __launch_bounds__(WARPS * 32)
    k_block_attn_dq_q_regs_wgmma(bf16 *dq, const float *lse, const float *dsum, const bf16 *q, const bf16 *d_out,
                          const bf16 *kc, const bf16 *vc, const bf16 *kb, const bf16 *vb, Shape s) {
    constexpr int DTILES = WD / 8;
    static_assert(BN == ROWS, "the key tiles are sw128 tiles of ROWS rows");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = aligned_tiles(smem_raw);
    bf16 *sdo = sq + WTILE;
    bf16 *sk = sdo + WTILE;    /* [2][WTILE] */
    bf16 *sv = sk + 2 * WTILE; /* [2][WTILE] */
    float *slse = (float *)(sv + 2 * WTILE), *sds = slse + ROWS;

    int j = s.n_blocks - 1 - (int)blockIdx.x, g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int seq = seq_of_block(s, j), lo = window_start(s, s.anchors[j]);
    int c0 = s.ctx_starts[seq] + lo, anchor = s.anchors[j] - lo, n_vis = anchor + s.B; /* the visible list */
    int n_kv = (n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;

    auto load_keys = [&](int buf, int kt) {
        load_visible_kv_sw128(sk + buf * WTILE, sv + buf * WTILE, kc, vc, kb, vb, s, c0, anchor, j, g, kt * BN);
    };
    load_visit_sw128(sq, sdo, slse, sds, q, d_out, lse, dsum, s, visit_rows(s, g, c), j);
    load_keys(0, 0);
    uint32_t qa[8][4], doa[8][4]; /* Q and dO as A fragments */
    cp_async_wait<1>(); /* the Q and dO rows; the first keys stay in flight */
    __syncthreads();
    load_a_fragments_sw128(qa, sq, warp, lane);
    load_a_fragments_sw128(doa, sdo, warp, lane);

    float acc[DTILES][4], p[8][4], dp[8][4], lse2[2], dsr[2];
    uint32_t dsa[4][4];
    zero_acc(acc);
    zero_acc(p);
    zero_acc(dp);
    walk_key_tiles(n_kv, load_keys, [&](int buf, int kt) {
        if (kt == 0)
#pragma unroll
            for (int r = 0; r < 2; r++) { /* rows past the group: zeros, as their Q and dO */
                lse2[r] = slse[warp * 16 + gr + 8 * r] * LOG2E;
                dsr[r] = sds[warp * 16 + gr + 8 * r];
            }
        const bf16 *skb = sk + buf * WTILE, *svb = sv + buf * WTILE;
        wgmma_fence();
        frags_times_tile_t(p, qa, skb); /* S = Q K^T */
        wgmma_commit();
        frags_times_tile_t(dp, doa, svb); /* dP = dO V^T */
        wgmma_commit();
        wgmma_wait<1>();
        wgmma_fence_acc(p);
        bool need_mask = (kt + 1) * BN > n_vis;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pr = fast_exp2(p[n][e] * s.scale_log2 - lse2[e >> 1]);
                if (need_mask && kt * BN + n * 8 + 2 * tq + (e & 1) >= n_vis) pr = 0.0f;
                p[n][e] = pr;
            }
        wgmma_wait<0>();
        wgmma_fence_acc(dp);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[n][e] = p[n][e] * (dp[n][e] - dsr[e >> 1]); /* dS / scale */
        pack_a_fragments(dsa, dp);
        wgmma_fence();
        frags_times_tile(acc, dsa, skb); /* dQ += dS K */
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_acc(acc);
    });
    scale_acc(acc, s.scale); /* dS's scale, taken once here rather than per product */
    store_dq_rows<WD>(dq, s, j, g, c, warp, lane, acc);
}

} // namespace

/* dQ of the backward of a (dsum: rowsum(dO * O), fp32) on the registers kernel, on be's stream. */
void dev_block_attention_dq_v2_q_regs(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr,
                                      const float *dsum) {
    DfCudaState *st = df_cuda_state(be);
    if (!df_cuda_set_smem(be, k_block_attn_dq_q_regs_wgmma, WGMMA_DQ_SMEM, "block_attention_backward")) return;
    Shape s = shape_of(a);
    dim3 grid((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_dq_q_regs_wgmma<<<grid, WARPS * 32, WGMMA_DQ_SMEM, st->stream>>>(
        (bf16 *)gr->dq.ptr, (const float *)a->lse.ptr, dsum, (const bf16 *)a->q.ptr, (const bf16 *)gr->d_out.ptr,
        (const bf16 *)a->k_ctx.ptr, (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr,
        s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dq; wgmma, Q and dO in registers)");
}
