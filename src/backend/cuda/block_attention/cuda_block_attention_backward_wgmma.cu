/* The DFlash block attention's backward at head_dim 128 on Hopper's wgmma:
 * steps 2 (dQ, query-major) and 3 (dK and dV, key-major) of the scheme at
 * the top of cuda_block_attention.cu, with the same grids, items, visits
 * and outputs as k_block_attn_dq and k_block_attn_dkv
 * (cuda_block_attention_backward.cu), which serve head_dim 64 and 256, and
 * 128 under the variant block_attention_mma_sync.
 *
 * Why: at mma.sync each warp reads every B fragment of its 16 rows from
 * shared memory itself, two products per ldmatrix, and at 255 registers two
 * CTAs an SM left the tensor pipe about 22% busy (ncu).
 * Here the CTA's 4 warps are one warpgroup over a whole 64-row tile, and
 * every product is a wgmma reading its tiles from shared memory once for the
 * warpgroup (sw128 tiles, cuda_wgmma.h). A visit of dK/dV (64 keys, one
 * chunk of 64 query rows):
 *   S^T  = K Q^T    (A and B K-major)       dP^T = V dO^T   (A and B K-major)
 *   dV  += P^T dO   (P^T from registers, dO MN-major)
 *   dK  += dS^T Q   (dS^T from registers, Q MN-major)
 * and a key tile of dQ (64 query rows, 64 visible keys):
 *   S = Q K^T, dP = dO V^T (K-major), dQ += dS K (dS from registers, K MN-major).
 * The accumulators keep the mma.sync layout (warp w: rows 16w..16w+15), so
 * masks, exponentials and epilogues are those of the mma.sync kernels.
 * Loads stay cp.async, double-buffered; a fence hands them from the generic
 * proxy to wgmma's async one before the barrier. S and dP are in flight
 * together, the exponentials run while dP is computed (and, in dK/dV, dS^T
 * while dV is). Per-row source offsets are stepped rather than divided out
 * row by row: instruction issue, not the tensor pipe, was what the first
 * version of dK/dV waited on (ncu: 2,150 instructions a warp a visit). It
 * still was at about 1,050 (ncu: the tensor pipe 35%
 * busy, the warps stalled mostly on fixed-latency dependencies), so dK/dV
 * now finds a chunk's row offsets once rather than each visit (VisitRows),
 * the products step one descriptor per tile (cuda_wgmma.h), and both
 * kernels keep dS unscaled and scale the sums once (scale_acc). */
#include "backend/cuda/block_attention/cuda_block_attention_keys.h"
#include "backend/cuda/block_attention/cuda_block_attention_wgmma.h"

namespace {

constexpr int WD = 128;             /* head_dim of this kernel */
constexpr int WTILE = ROWS * WD;    /* values in one 64 x 128 tile (16 KiB) */
/* dK/dV: K, V, Q[2], dO[2], lse and dsum [2][ROWS] each, the item's anchors, and room to align the tiles to 1024 bytes */
constexpr size_t WGMMA_DKV_SMEM = 6 * WTILE * sizeof(bf16) + 4 * ROWS * sizeof(float) + CTX_CHUNK * sizeof(int) + 1024;
/* dQ: Q, dO, K[2], V[2], lse and dsum [ROWS] each, alignment */
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

/* The next block after j (before je) that sees any key of the item, as
 * next_visitor, with the item's anchors in shared memory (anchor[i]: block jb + i). */
__device__ __forceinline__ int next_visitor_of(const Shape &s, const KeyItem &k, const int *anchor, int j) {
    for (j++; j < k.je; j++) {
        int a = anchor[j - k.jb];
        if (!k.ctx || (a > k.t0 && window_start(s, a) < k.t0 + ROWS)) return j;
    }
    return k.je;
}

/* dQ, grid as k_block_attn_dq: x = block (reversed), y = kv head * chunks.
 * Both operands of S = Q K^T and dP = dO V^T come from shared memory (155
 * registers); Q and dO held in registers instead measured a tie
 * (dev/cuda/block_attention_dq_v2_q_regs.cu), so the kernel with fewer
 * registers stays. */
__global__ void __launch_bounds__(WARPS * 32)
    k_block_attn_dq_wgmma(bf16 *dq, const float *lse, const float *dsum, const bf16 *q, const bf16 *d_out,
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
        tile_times_tile_t(p, sq, skb); /* S = Q K^T */
        wgmma_commit();
        tile_times_tile_t(dp, sdo, svb); /* dP = dO V^T */
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

/* Grid and outputs as k_block_attn_dkv<128, DKV_BOTH>. */
__global__ void __launch_bounds__(WARPS * 32)
    k_block_attn_dkv_wgmma(float *ctx_dk, float *ctx_dv, bf16 *dk_blk, bf16 *dv_blk, const float *lse,
                           const float *dsum, const bf16 *q, const bf16 *d_out, const bf16 *kc, const bf16 *vc,
                           const bf16 *kb, const bf16 *vb, Shape s, int n_ctx_items) {
    constexpr int D = WD, DTILES = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sk = aligned_tiles(smem_raw);
    bf16 *sv = sk + WTILE;
    bf16 *sq = sv + WTILE;     /* [2][WTILE] */
    bf16 *sdo = sq + 2 * WTILE; /* [2][WTILE] */
    float *slse = (float *)(sdo + 2 * WTILE); /* [2][ROWS] */
    float *sds = slse + 2 * ROWS;             /* [2][ROWS] */
    int *sanchor = (int *)(sds + 2 * ROWS);   /* [CTX_CHUNK]: the anchors of blocks k.jb .. k.je - 1 */

    int g = blockIdx.y;
    KeyItem k = key_item(s, (int)blockIdx.x, n_ctx_items);
    for (int i = threadIdx.x; i < k.je - k.jb; i += WARPS * 32) sanchor[i] = s.anchors[k.jb + i];
    __syncthreads();
    int vj = next_visitor_of(s, k, sanchor, k.jb - 1), vchunk = 0;
    if (vj >= k.je) return; /* no block sees these keys */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int kw0 = warp * 16; /* this warp's keys in the tile */

    load_key_tile<D, SW128>(sk, kc, kb, s, k, g);
    load_key_tile<D, SW128>(sv, vc, vb, s, k, g);
    VisitRows rows = visit_rows(s, g, 0); /* the chunk's rows: chunk 0's, then each next visit's */
    load_visit_sw128(sq, sdo, slse, sds, q, d_out, lse, dsum, s, rows, vj);

    float dk[DTILES][4], dv[DTILES][4], p[8][4], dp[8][4];
    uint32_t pa[4][4], dsa[4][4]; /* P^T and dS^T as A fragments: each is read by a product still in flight */
    zero_acc(dk);
    zero_acc(dv);
    zero_acc(p); /* S^T and dP^T start from zero at each visit (their first k-step adds nothing) */
    zero_acc(dp);
    for (int buf = 0;; buf ^= 1) {
        int nj = vj, nc = vchunk + 1;
        if (nc == s.chunks) nc = 0, nj = next_visitor_of(s, k, sanchor, vj);
        bool more = nj < k.je;
        if (more) {
            int nb = buf ^ 1;
            if (s.chunks > 1) rows = visit_rows(s, g, nc); /* one chunk (G*B <= ROWS): found once */
            load_visit_sw128(sq + nb * WTILE, sdo + nb * WTILE, slse + nb * ROWS, sds + nb * ROWS, q, d_out, lse,
                             dsum, s, rows, nj);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        /* keys of the tile visible to this visit: from the window's start to
         * below the anchor, or the block's B */
        int anchor = sanchor[vj - k.jb];
        int limit = k.ctx ? anchor - k.t0 : s.B, first = k.ctx ? window_start(s, anchor) - k.t0 : 0;
        const bf16 *sqb = sq + buf * WTILE, *sdob = sdo + buf * WTILE;
        const float *lb = slse + buf * ROWS, *db = sds + buf * ROWS;

        /* S^T and dP^T (which needs no P) in flight together; the exponentials
         * run while dP^T is computed, dS^T while dV is */
        wgmma_fence();
        tile_times_tile_t(p, sk, sqb); /* S^T = K Q^T */
        wgmma_commit();
        tile_times_tile_t(dp, sv, sdob); /* dP^T = V dO^T */
        wgmma_commit();
        wgmma_wait<1>();
        wgmma_fence_acc(p);
        bool vis[2];
#pragma unroll
        for (int r = 0; r < 2; r++) vis[r] = kw0 + gr + 8 * r < limit && kw0 + gr + 8 * r >= first;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            float2 l = *(const float2 *)(lb + n * 8 + 2 * tq); /* lse of the two query rows */
#pragma unroll
            for (int e = 0; e < 4; e++)
                p[n][e] = vis[e >> 1] ? fast_exp2(p[n][e] * s.scale_log2 - (e & 1 ? l.y : l.x) * LOG2E) : 0.0f;
        }
        pack_a_fragments(pa, p);
        wgmma_fence();
        frags_times_tile(dv, pa, sdob); /* dV += P^T dO */
        wgmma_commit();
        wgmma_wait<1>(); /* dP^T is in */
        wgmma_fence_acc(dp);
#pragma unroll
        for (int n = 0; n < 8; n++) {
            float2 d = *(const float2 *)(db + n * 8 + 2 * tq);
#pragma unroll
            for (int e = 0; e < 4; e++) dp[n][e] = p[n][e] * (dp[n][e] - (e & 1 ? d.y : d.x)); /* dS^T / scale */
        }
        pack_a_fragments(dsa, dp);
        wgmma_fence();
        frags_times_tile(dk, dsa, sqb); /* dK += dS^T Q */
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_acc(dv);
        wgmma_fence_acc(dk);
        __syncthreads(); /* buffers of this visit are refilled next */
        if (!more) break;
        vj = nj, vchunk = nc;
    }

    scale_acc(dk, s.scale); /* dS^T's scale, taken once here rather than per visit */
    add_key_sums<D, true, true>(s, k, g, kw0, lane, dk, dv, ctx_dk, ctx_dv, dk_blk, dv_blk);
}

} // namespace

void df_cuda_block_attn_dq_wgmma(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr, const float *dsum) {
    DfCudaState *st = df_cuda_state(be);
    auto kernel = k_block_attn_dq_wgmma;
    if (!df_cuda_set_smem(be, kernel, WGMMA_DQ_SMEM, "block_attention_backward")) return;
    Shape s = shape_of(a);
    dim3 grid((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    kernel<<<grid, WARPS * 32, WGMMA_DQ_SMEM, st->stream>>>(
        (bf16 *)gr->dq.ptr, (const float *)a->lse.ptr, dsum, (const bf16 *)a->q.ptr, (const bf16 *)gr->d_out.ptr,
        (const bf16 *)a->k_ctx.ptr, (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr,
        s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dq; wgmma)");
}

void df_cuda_block_attn_dkv_wgmma(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr,
                                  const float *dsum, float *ctx_dk, float *ctx_dv, int n_ctx_items) {
    DfCudaState *st = df_cuda_state(be);
    if (!df_cuda_set_smem(be, k_block_attn_dkv_wgmma, WGMMA_DKV_SMEM, "block_attention_backward")) return;
    Shape s = shape_of(a);
    dim3 grid((unsigned)(n_ctx_items + s.n_blocks), (unsigned)s.kv_heads);
    k_block_attn_dkv_wgmma<<<grid, WARPS * 32, WGMMA_DKV_SMEM, st->stream>>>(
        ctx_dk, ctx_dv, (bf16 *)gr->dk_blk.ptr, (bf16 *)gr->dv_blk.ptr, (const float *)a->lse.ptr, dsum,
        (const bf16 *)a->q.ptr, (const bf16 *)gr->d_out.ptr, (const bf16 *)a->k_ctx.ptr, (const bf16 *)a->v_ctx.ptr,
        (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s, n_ctx_items);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dk, dv; wgmma)");
}
