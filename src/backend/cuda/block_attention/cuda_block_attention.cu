/* DFlash block attention on CUDA: the design of the forward (this file) and
 * the backward (cuda_block_attention_backward.cu), whose shared layout, tile
 * loaders and warp products are in cuda_block_attention_tiles.h (the
 * semantics are those of cpu/train/cpu_block_attention.c; the layout is
 * DfBlockAttnLayout).
 *
 * Block j of B query rows sees the first anchors[j] context rows of its
 * sequence, then its own B rows, all of them (no causal mask inside). For one
 * kv head the G = heads/kv_heads query heads of a GQA group see the same
 * keys, so a CTA takes the G*B rows (h, r) of one block and one kv head,
 * 64 at a time ("a chunk": one chunk when G*B <= 64, as at B 16, G 4), and
 * every K/V tile it brings into shared memory feeds all of them. Within the
 * CTA the visible keys are one list of anchor + B rows, the context rows then
 * the block rows, walked in tiles of 64; only the last tile needs a mask.
 * Where G*B is 16 or 32 (whole m-tiles, at most half a chunk) the mma.sync
 * kernels at head_dim 64 pack a chunk with the rows of 64 / (G*B)
 * neighbouring blocks instead, each warp's rows one block's ("packed
 * chunks", chunk_row in cuda_block_attention_tiles.h): one block a chunk
 * would leave half of it (or three quarters) zero rows, idle warps and
 * wasted products (H100, the recipe's shape: forward 0.414 against 0.680
 * ms, backward 1.369 against 1.715).
 * A sliding window W (DfBlockAttnArgs.window > 0) starts the context part at
 * max(0, anchor - W) instead of 0 (window_start): the query-major kernels
 * just see a shorter list; the key-major one masks keys below the start.
 *
 * Forward: the FlashAttention-2 scheme of cuda_attention.cu (online softmax
 * in fp32 with base-2 exponentials, mma.sync m16n8k16, K/V double-buffered
 * with cp.async, P handed from accumulators to A fragments in registers).
 * At head_dim 64 and 128 a CTA takes two neighbouring blocks of a sequence
 * (k_block_attn_forward_pair, cuda_block_attention_pairs.h): each warp holds
 * one m-tile of each, and every K/V fragment it reads feeds both (1.74 ->
 * 1.43 ms at 2 x 2048 context rows, 512 blocks each, on the H200); with
 * packed chunks each m-tile is a chunk of blocks, 2 x 64 / (G*B) a CTA. At head_dim
 * 128 the forward runs on wgmma instead (cuda_block_attention_forward_wgmma.cu:
 * a warpgroup a block, one block a CTA). Which kernel runs is the table of
 * cuda_block_attention_dispatch.cu.
 *
 * Backward, FlashAttention-2 style, probabilities recomputed from the lse:
 *  1. dsum = rowsum(dO * O) per (head, query row), fp32 scratch;
 *  2. dQ, query-major: one CTA per (block, kv head, chunk) walks the visible
 *     key tiles as the forward does, dQ += dS K in registers, written once
 *     (packed chunks: one CTA per group of blocks, the union of their lists);
 *  3. dK/dV, key-major: a CTA owns 64 keys of one kv head (warp w keys
 *     16w..16w+15, the key rows are the mma M dimension) and loops over the
 *     query chunks that see them, dK += dS^T Q and dV += P^T dO in registers
 *     (packed chunks: a visit is a chunk of several visitor blocks).
 *     Block keys are seen by their own block only: one CTA per (block, kv
 *     head) adds its result straight into dk_blk/dv_blk; packed chunks take
 *     64 / B blocks a CTA, whose 64 keys fill the tile (visited PACK blocks
 *     at a time). A context tile is
 *     seen by every block of its sequence anchored past it (up to 512): for
 *     balance its blocks are split into items of CTX_CHUNK, which add their
 *     sums with fp32 atomics into a zeroed fp32 scratch (the order of those
 *     additions varies from run to run: the last bits of dK/dV do too);
 *  4. dk_ctx/dv_ctx += the scratch, rounded to bf16 once.
 * At head_dim 128, steps 2 and 3 run on wgmma instead
 * (cuda_block_attention_backward_wgmma.cu), with the same grids and items.
 * Scratch (dsum and the two fp32 context sums) is stream-ordered memory
 * (cudaMallocAsync) counted in the backend's bytes in use while it lives.
 *
 * head_dim 64, 128 and 256, with the same tiles (64 rows, 64 keys). At 256
 * the accumulators of a 16 x 256 tile take 128 registers a thread, so the
 * query-major kernels re-read Q from shared memory at each k-step
 * (q_in_regs) and step 3 runs as a dV pass then a dK pass (DkvPart); shared
 * memory is 165 KiB (forward), 198 KiB (dQ) and 199 KiB (dK/dV) a CTA, one
 * CTA per SM. */
#include "backend/cuda/block_attention/cuda_block_attention_pairs.h"
#include "backend/cuda/block_attention/cuda_block_attention_launch.h"

namespace {

/* --- forward ----------------------------------------------------------------- */

/* Grid: x = block (reversed: the later, longer blocks of a sequence first), y = kv head * chunks. */
template <int D>
__global__ void __launch_bounds__(WARPS * 32) k_block_attn_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *kc,
                                                                    const bf16 *vc, const bf16 *kb, const bf16 *vb,
                                                                    Shape s) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8;
    constexpr bool Q_IN_REGS = q_in_regs<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw;
    bf16 *sk = sq + ROWS * SD;   /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD; /* [2][BN][SD] */

    int j = s.n_blocks - 1 - (int)blockIdx.x, g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int seq = seq_of_block(s, j), lo = window_start(s, s.anchors[j]);
    int c0 = s.ctx_starts[seq] + lo, anchor = s.anchors[j] - lo, n_vis = anchor + s.B; /* the visible list */
    int n_kv = (n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane % 4;
    bool active = c * ROWS + warp * 16 < s.G * s.B; /* the warp has query rows */

    load_query_tile<D>(sq, q, s, j, g, c);
    load_visible_tile<D>(sk, kc, kb, s, c0, anchor, j, g, 0);
    load_visible_tile<D>(sv, vc, vb, s, c0, anchor, j, g, 0);
    cp_async_commit();

    uint32_t qf[Q_IN_REGS ? KSTEPS : 1][4];
    float o[DTILES][4];
    zero_acc(o);
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* rows gr and gr + 8 */

    for (int kt = 0; kt < n_kv; kt++) {
        int buf = kt & 1;
        prefetch_next_visible_kv<D>(sk, sv, kc, vc, kb, vb, s, c0, anchor, j, g, kt, n_kv);
        __syncthreads();
        if (active) {
            if constexpr (Q_IN_REGS)
                if (kt == 0)
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; kk++)
                        ldmatrix_x4(qf[kk], sq + (warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
            float sc[8][4];
            zero_acc(sc);
            if constexpr (Q_IN_REGS) rows_times_tile_t<D>(sc, qf, sk + buf * BN * SD, lane);
            else smem_rows_times_tile_t<D>(sc, sq + warp * 16 * SD, sk + buf * BN * SD, lane);

            /* only the last tile has keys past the list; the first holds key 0, visible to every row */
            float alpha[2];
            online_softmax_tile(sc, m_run, l_run, alpha, s.scale_log2, kt * BN, tq, (kt + 1) * BN > n_vis,
                                [=](int key, int) { return key >= n_vis; });
            scale_acc_rows(o, alpha);
            probs_times_tile<D>(o, sc, sv + buf * BN * SD, lane);
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
    if (!active) return;
    store_output_rows<D>(out, lse, s, j, g, c, warp, lane, o, m_run, l_run);
}

/* --- forward, two blocks per CTA (head_dim 64 and 128) --------------------------- */

/* Grid: x = group of 2 PACK blocks (reversed: the later, longer groups first),
 * y = kv head * chunks. Each warp holds MT = 2 m-tiles: PACK 1, rows 16w.. of
 * chunk c of block mt; PACK > 1 (packed chunks), m-tile mt is a chunk of
 * blocks mt*PACK.. and the warp's rows are block mt*PACK + w / (WARPS /
 * PACK)'s. */
template <int D, int PACK>
__global__ void __launch_bounds__(WARPS * 32, forward_ctas<D>)
    k_block_attn_forward_pair(bf16 *out, float *lse, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *kb,
                              const bf16 *vb, Shape s, int n_pairs) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8, MT = 2, N = MT * PACK;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw; /* [MT][ROWS][SD]: the chunk of each m-tile */
    bf16 *sk = sq + MT * ROWS * SD; /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD;    /* [2][BN][SD] */

    NeighbourBlocks<N> pb = neighbour_blocks<N>(s, n_pairs - 1 - (int)blockIdx.x);
    int g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int n_kv = (pb.n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane % 4;
    int wb = warp / (WARPS / PACK); /* the warp's block within an m-tile's chunk */
    /* the warp has query rows: of chunk c (in every block alike), or its m-tile 0 block is present */
    bool active = PACK == 1 ? c * ROWS + warp * 16 < s.G * s.B : wb < pb.n;
    int js[MT][PACK];
    SeenKeys seen[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int b = 0; b < PACK; b++) js[mt][b] = mt * PACK + b < pb.n ? pb.j[mt * PACK + b] : -1;
        seen[mt] = seen_keys(pb, s.B, mt * PACK + wb);
    }
    if constexpr (PACK == 1) js[1][0] = pb.j[1]; /* a missing block 1: block 0 again, never written */

#pragma unroll
    for (int mt = 0; mt < MT; mt++) load_chunk_tile<D, PACK>(sq + mt * ROWS * SD, q, s, js[mt], g, c);
    load_list_tile<D, N>(sk, kc, kb, s, pb, g, 0);
    load_list_tile<D, N>(sv, vc, vb, s, pb, g, 0);
    cp_async_commit();

    float o[MT][DTILES][4];
    float m_run[MT][2], l_run[MT][2]; /* per m-tile, rows gr and gr + 8 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        zero_acc(o[mt]);
        m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    for (int kt = 0; kt < n_kv; kt++) {
        int buf = kt & 1, t0 = kt * BN;
        prefetch_next_list_kv<D, N>(sk, sv, kc, vc, kb, vb, s, pb, g, kt, n_kv);
        __syncthreads();
        if (active) {
            const bf16 *skb = sk + buf * BN * SD, *svb = sv + buf * BN * SD;
            float sc[MT][8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) zero_acc(sc[mt]);
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldmatrix_x4(qa[mt], sq + (mt * ROWS + warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t b[4];
                    ldmatrix_x4(b, skb + (np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * SD + kk * 16 +
                                       ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(sc[mt][2 * np], qa[mt], b[0], b[1]);
                        mma_bf16(sc[mt][2 * np + 1], qa[mt], b[2], b[3]);
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                /* a tile wholly inside the block's context range needs no mask; a block may see
                 * none of a tile (the other blocks' keys; an anchor at 0), hence the guard */
                float alpha[2];
                online_softmax_tile<true>(sc[mt], m_run[mt], l_run[mt], alpha, s.scale_log2, t0, tq,
                                          !seen[mt].sees_all_ctx(t0, BN),
                                          [&](int key, int) { return !seen[mt].sees(key); });
                scale_acc_rows(o[mt], alpha);
            }
            probs_times_tile_mt<D, MT>(o, sc, svb, lane); /* O += P V, each V fragment for both m-tiles */
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
    if (!active) return;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (mt * PACK + wb >= pb.n) break;
        store_normalized_rows<D>(out, lse, true, o[mt], m_run[mt], l_run[mt], lane, [&](int i) {
            return chunk_row<D, PACK>(s, js[mt], g, c, warp * 16 + i);
        });
    }
}

/* --- host side ------------------------------------------------------------------ */

/* Head dims 64 and 128: two blocks per CTA (k_block_attn_forward_pair), two
 * chunks of PACK blocks at head_dim 64 where the chunks are packed. */
template <int D, int PACK>
void launch_forward_pairs(DfBackend *be, const DfBlockAttnArgs *a, const Shape &s) {
    int n_pairs = count_groups(a->layout, 2 * PACK);
    if (n_pairs == 0) return;
    size_t smem = (size_t)(2 * ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
    if (!df_cuda_set_smem(be, k_block_attn_forward_pair<D, PACK>, smem, "block_attention")) return;
    dim3 grid((unsigned)n_pairs, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward_pair<D, PACK><<<grid, WARPS * 32, smem, df_cuda_state(be)->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s, n_pairs);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention");
}

/* Head dim 256: one block per CTA (two m-tiles of 16 x 256 accumulators would not fit the registers). */
template <int D>
void launch_forward(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    size_t smem = (size_t)(ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
    if (!df_cuda_set_smem(be, k_block_attn_forward<D>, smem, "block_attention")) return;
    dim3 grid((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward<D><<<grid, WARPS * 32, smem, df_cuda_state(be)->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention");
}

} // namespace

/* The tiers' forwards for the dispatch table (cuda_block_attention_dispatch.cu). */
void df_cuda_block_attn_forward_mma_sync_64(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    switch (packing(s)) {
    case 2: launch_forward_pairs<64, 2>(be, a, s); break;
    case 4: launch_forward_pairs<64, 4>(be, a, s); break;
    default: launch_forward_pairs<64, 1>(be, a, s); break;
    }
}

void df_cuda_block_attn_forward_mma_sync_128(DfBackend *be, const DfBlockAttnArgs *a) {
    launch_forward_pairs<128, 1>(be, a, shape_of(a));
}

void df_cuda_block_attn_forward_mma_sync_256(DfBackend *be, const DfBlockAttnArgs *a) {
    launch_forward<256>(be, a);
}
