/* The DFlash block attention's forward at head_dim 128 on Hopper's wgmma
 * (block_attention/cuda_block_attention.cu's mma.sync kernels serve head_dim
 * 64 and 256, and 128 under the variant block_attention_mma_sync).
 *
 * A CTA is one warpgroup over one block's chunk of query rows and the
 * block's own list of visible keys (k_block_attn_forward_wgmma, the grid of
 * k_block_attn_forward). At the bench shape (2 x 2048 context rows, 512
 * blocks each, H200) it took 0.920 ms against 0.964 for two blocks a CTA on
 * one key list (dev/cuda/block_attention_forward_v2_pairs.cu), and 6.7-6.8 ms
 * against 7.1 in the 8B training step (docs/kernels.md): a CTA that waits on
 * no other block's tiles outweighs bringing each K/V tile in for one block
 * only. With Q held in registers, three such CTAs an SM instead of two:
 * 0.762 ms against 0.912, 5.6 ms against 6.65 in the step.
 *
 * Per tile of 64 keys:
 *   S = Q K^T   (Q as A fragments, K K-major),   O += P V   (P from registers, V MN-major).
 * The accumulators keep the mma.sync layout (warp w of a warpgroup: rows
 * 16w..16w+15), so the softmax and the epilogue are the mma.sync kernel's. */
#include "backend/cuda/block_attention/cuda_block_attention_tiles.h"
#include "backend/cuda/block_attention/cuda_block_attention_wgmma.h"

namespace {

constexpr int WD = 128;                   /* head_dim of this kernel */
constexpr int WTILE = ROWS * WD;          /* values in one 64 x 128 tile (16 KiB) */
/* K[2], V[2] (Q passes through V[1] into registers), alignment; three CTAs an SM */
constexpr size_t SINGLE_SMEM = 4 * WTILE * sizeof(bf16) + 1024;

/* S = Q K^T over head_dim 128, Q held as A fragments. */
__device__ __forceinline__ void q_times_keys(float (&sc)[8][4], const uint32_t (&qa)[8][4], const bf16 *sk) {
    frags_times_tile_t(sc, qa, sk);
}

/* One tile of 64 keys for a warpgroup's 64 query rows (Q as q_times_keys
 * takes it; K, V in sk, sv), both forwards' step: S = Q K^T, its online
 * softmax (where need_mask, the keys hidden(key, half) names set to -inf), O
 * rescaled, O += P V. sc and pa are the caller's registers for S and P (S's
 * first k-step overwrites sc). */
template <typename QOperand, typename Hidden>
__device__ __forceinline__ void attend_key_tile(float (&o)[WD / 8][4], float (&sc)[8][4], uint32_t (&pa)[4][4],
                                                float (&m_run)[2], float (&l_run)[2], const QOperand &q, const bf16 *sk,
                                                const bf16 *sv, float scale_log2, int t0, int tq, bool need_mask,
                                                Hidden hidden) {
    wgmma_fence();
    q_times_keys(sc, q, sk); /* S = Q K^T */
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_acc(sc);
    float alpha[2];
    online_softmax_tile(sc, m_run, l_run, alpha, scale_log2, t0, tq, need_mask, hidden);
    scale_acc_rows(o, alpha);
    pack_a_fragments(pa, sc);
    wgmma_fence(); /* o was rescaled above */
    frags_times_tile(o, pa, sv); /* O += P V */
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_acc(o);
}

/* The forward one block a CTA, grid as k_block_attn_forward: x = block
 * (reversed), y = kv head * chunks.
 * One warpgroup over chunk c of block j's query rows walks the block's own
 * list of visible keys, as the backward's k_block_attn_dq_wgmma does
 * (attend_key_tile: the products, the softmax). Against two blocks a CTA it
 * brings every K/V tile in for one block only, but its CTAs wait on no other
 * block's tiles. Q is read once, through V's second buffer, into
 * registers as the A fragments of S = Q K^T (32 a thread), so a CTA's shared
 * memory is K[2] and V[2] (65 KiB) and three CTAs of 4 warps fit an SM. The
 * first tile holds the list's first key, which every row sees. */
__global__ void __launch_bounds__(WARPS * 32, 3) /* three CTAs an SM: at most 168 registers */
    k_block_attn_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *kb,
                               const bf16 *vb, Shape s) {
    constexpr int DTILES = WD / 8;
    static_assert(BN == ROWS, "the key tiles are sw128 tiles of ROWS rows");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sk = aligned_tiles(smem_raw); /* [2][WTILE] */
    bf16 *sv = sk + 2 * WTILE;          /* [2][WTILE] */

    int j = s.n_blocks - 1 - (int)blockIdx.x, g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int seq = seq_of_block(s, j), lo = window_start(s, s.anchors[j]);
    int c0 = s.ctx_starts[seq] + lo, anchor = s.anchors[j] - lo, n_vis = anchor + s.B; /* the visible list */
    int n_kv = (n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane % 4;

    uint32_t qa[8][4];
    {
        bf16 *const dst[1] = {sv + WTILE};
        const bf16 *const src[1] = {q};
        load_query_rows_sw128<1>(dst, src, s, j, g, c, threadIdx.x);
        cp_async_commit();
    }
    load_visible_kv_sw128(sk, sv, kc, vc, kb, vb, s, c0, anchor, j, g, 0);
    cp_async_wait<1>(); /* the Q rows; the first keys stay in flight */
    __syncthreads();
    load_a_fragments_sw128(qa, sv + WTILE, warp, lane);
    __syncthreads(); /* V[1] is refilled by the first iteration */

    float o[DTILES][4], sc[8][4];
    uint32_t pa[4][4];
    zero_acc(o);
    zero_acc(sc); /* S starts from zero at each tile (its first k-step adds nothing) */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* rows gr and gr + 8 */

    walk_key_tiles(
        n_kv,
        [&](int buf, int kt) {
            load_visible_kv_sw128(sk + buf * WTILE, sv + buf * WTILE, kc, vc, kb, vb, s, c0, anchor, j, g, kt * BN);
        },
        [&](int buf, int kt) {
            int t0 = kt * BN;
            attend_key_tile(o, sc, pa, m_run, l_run, qa, sk + buf * WTILE, sv + buf * WTILE, s.scale_log2, t0, tq,
                            t0 + BN > n_vis, [&](int key, int) { return key >= n_vis; });
        });
    store_output_rows<WD>(out, lse, s, j, g, c, warp, lane, o, m_run, l_run);
}

} // namespace

void df_cuda_block_attention_forward_wgmma(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    DfCudaState *st = df_cuda_state(be);
    if (s.n_blocks == 0) return;
    if (!df_cuda_set_smem(be, k_block_attn_forward_wgmma, SINGLE_SMEM, "block_attention")) return;
    dim3 grid((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward_wgmma<<<grid, WARPS * 32, SINGLE_SMEM, st->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention (wgmma)");
}
