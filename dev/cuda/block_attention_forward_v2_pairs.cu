/* Block attention forward at head_dim 128, version 2: two neighbouring blocks
 * a CTA on one key list, on wgmma (k_block_attn_forward_pair_wgmma). Tried
 * against version 1, one block a CTA on the block's own key list
 * (src/backend/cuda/block_attention/cuda_block_attention_forward_wgmma.cu),
 * and dropped.
 *
 * Figure: at 2 x 2048 context rows, 512 sorted random anchors, block 16,
 * 32/8 heads of 128 (H200): 0.964 ms against 0.920 for one block a CTA
 * (before version 1 held Q in registers, which took it to 0.762), 7.1 ms
 * against 6.7-6.8 in the 8B training step; commit cc4bd7b. On mma.sync the
 * pairs had won (1.74 -> 1.43 ms) and stay there
 * (block_attention/cuda_block_attention.cu).
 *
 * Design: a CTA is two warpgroups, one per block of the pair: warpgroup b
 * holds chunk c of block b's query rows (64) and walks the pair's key list
 * with the other, both reading each K/V tile brought into shared memory
 * (sw128 tiles, cuda_wgmma.h). Per tile of 64 keys:
 *   S = Q K^T   (Q and K K-major),   O += P V   (P from registers, V MN-major).
 * A tile with no key its block sees is skipped by that block's warpgroup (the
 * other block's own rows, context outside its window); every tile it does
 * take holds a key that all its rows see, so their running max is finite
 * from the first. Grid, key list, masks and outputs as k_block_attn_forward_pair.
 *
 * Built by `make dev` (compiled only, with nvcc: it keeps compiling against
 * the tiles it shares with src/); dev_block_attention_forward_v2_pairs runs
 * it in place of the backend's forward. */
#include "backend/cuda/block_attention/cuda_block_attention_pairs.h"

namespace {

constexpr int WD = 128;                      /* head_dim of this kernel */
constexpr int WTILE = ROWS * WD;             /* values in one 64 x 128 tile (16 KiB) */
constexpr int PAIR_THREADS = 2 * WARPS * 32; /* a warpgroup per block of the pair */
/* Q (a tile per block), K[2], V[2], and room to align the tiles to 1024 bytes */
constexpr size_t PAIR_SMEM = 6 * WTILE * sizeof(bf16) + 1024;

/* S = Q K^T over head_dim 128, Q an sw128 tile in shared memory. */
__device__ __forceinline__ void q_times_keys(float (&sc)[8][4], const bf16 *sq, const bf16 *sk) {
    tile_times_tile_t(sc, sq, sk);
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

/* Keys t0 .. t0+63 of the pair's list (context rows, then block 0's rows,
 * then block 1's; zeros past them), by all the CTA's threads. */
__device__ __forceinline__ void load_pair_kv_sw128(bf16 *sk, bf16 *sv, const bf16 *kc, const bf16 *vc,
                                                   const bf16 *kb, const bf16 *vb, const Shape &s,
                                                   const PairBlocks &pb, int g, int t0) {
    auto block_row = [&](int r) {
        int j = r < s.B ? pb.j[0] : pb.j[1]; /* a select: no indexing into pb */
        return j * s.B + r % s.B;
    };
    load_list_kv_sw128<PAIR_THREADS>(sk, sv, kc, vc, kb, vb, s, pb.c0, pb.n_ctx, pb.n_vis, block_row, g, t0);
}

/* Grid as k_block_attn_forward_pair: x = pair (reversed: the later, longer pairs first), y = kv head * chunks. */
__global__ void __launch_bounds__(PAIR_THREADS, 2) /* two CTAs an SM: at most 128 registers */
    k_block_attn_forward_pair_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                    const bf16 *kb, const bf16 *vb, Shape s, int n_pairs) {
    constexpr int DTILES = WD / 8;
    static_assert(BN == ROWS, "the key tiles are sw128 tiles of ROWS rows");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = aligned_tiles(smem_raw); /* [2][WTILE]: chunk c of each block */
    bf16 *sk = sq + 2 * WTILE;          /* [2][WTILE] */
    bf16 *sv = sk + 2 * WTILE;          /* [2][WTILE] */

    PairBlocks pb = pair_blocks(s, n_pairs - 1 - (int)blockIdx.x);
    int g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int n_kv = (pb.n_vis + BN - 1) / BN;
    int b = threadIdx.x / 128, tid = threadIdx.x % 128; /* the warpgroup's block of the pair, its thread */
    int warp = tid / 32, lane = tid % 32, tq = lane % 4;
    int jb = b ? pb.j[1] : pb.j[0];
    SeenKeys seen = seen_keys(pb, s.B, b);

    {
        bf16 *const dst[1] = {sq + b * WTILE};
        const bf16 *const src[1] = {q};
        load_query_rows_sw128<1>(dst, src, s, jb, g, c, (unsigned)tid); /* a missing block 1: block 0 again, never written */
    }
    load_pair_kv_sw128(sk, sv, kc, vc, kb, vb, s, pb, g, 0); /* commits the Q rows too */

    float o[DTILES][4], sc[8][4];
    uint32_t pa[4][4];
    zero_acc(o);
    zero_acc(sc); /* S starts from zero at each tile (its first k-step adds nothing) */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* rows gr and gr + 8 */

    walk_key_tiles(
        n_kv,
        [&](int buf, int kt) {
            load_pair_kv_sw128(sk + buf * WTILE, sv + buf * WTILE, kc, vc, kb, vb, s, pb, g, kt * BN);
        },
        [&](int buf, int kt) {
            int t0 = kt * BN;
            if (!seen.sees_any(t0, BN)) return; /* the same for the whole warpgroup */
            /* a tile wholly inside the block's context range needs no mask; no guard: the tile
             * holds a key every row sees */
            bool need_mask = !(t0 >= seen.lo && t0 + BN <= seen.hi);
            attend_key_tile(o, sc, pa, m_run, l_run, sq + b * WTILE, sk + buf * WTILE, sv + buf * WTILE, s.scale_log2,
                            t0, tq, need_mask, [&](int key, int) { return !seen.sees(key); });
        });
    if (b >= pb.n) return;
    store_output_rows<WD>(out, lse, s, jb, g, c, warp, lane, o, m_run, l_run);
}

} // namespace

/* The forward of a on the pairs kernel, on be's stream. */
void dev_block_attention_forward_v2_pairs(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    int n_pairs = count_pairs(a->layout);
    if (n_pairs == 0) return;
    if (!df_cuda_set_smem(be, k_block_attn_forward_pair_wgmma, PAIR_SMEM, "block_attention")) return;
    dim3 grid((unsigned)n_pairs, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward_pair_wgmma<<<grid, PAIR_THREADS, PAIR_SMEM, df_cuda_state(be)->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s, n_pairs);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention (wgmma pairs)");
}
