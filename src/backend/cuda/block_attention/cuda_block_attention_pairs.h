/* CTAs of N neighbouring blocks of a sequence: the two-block forward (the
 * mma.sync kernel of cuda_block_attention.cu, and the wgmma one kept in
 * dev/cuda/) and the packed chunks of the dQ kernel
 * (cuda_block_attention_backward.cu): which blocks a CTA takes, the one list
 * of keys it walks and which of them each block sees. */
#ifndef DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_PAIRS_H
#define DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_PAIRS_H

#include <limits.h>

#include "backend/cuda/block_attention/cuda_block_attention_tiles.h"

namespace {

/* N neighbouring blocks of one sequence (their anchors sorted, so nearly
 * the same context prefix). The CTA walks one list of keys: the union of
 * their context ranges, then block 0's own B rows, then block 1's, ...;
 * every K/V fragment a warp reads from shared memory feeds all the blocks'
 * rows the warp holds, which cuts the shared-memory reads (and the L2 reads)
 * per product against one block per CTA (the FlashAttention-2 reason for
 * 128-row tiles). Each block's rows mask the keys it does not see. N 1: one
 * block, its list the one the one-block kernels walk. */
template <int N>
struct NeighbourBlocks {
    int n;             /* blocks in the group: N, fewer for a sequence's last group */
    int j[N];          /* the blocks; a missing one repeats the last present (never written) */
    int lo[N], hi[N];  /* each block's visible context, as positions of the list */
    int c0;            /* the list's first context row (absolute) */
    int n_ctx, n_vis;  /* context keys of the list; all its keys */
};
using PairBlocks = NeighbourBlocks<2>;

/* Group p of N blocks: sequences in order, ceil(blocks / N) groups each
 * (N 1: block p, its sequence found by bisection). */
template <int N>
__device__ NeighbourBlocks<N> neighbour_blocks(const Shape &s, int p) {
    NeighbourBlocks<N> pb;
    int seq = 0, b0 = 0, nb = 0;
    if constexpr (N == 1) {
        seq = seq_of_block(s, p), b0 = p, nb = 1, p = 0;
    } else {
        for (; seq < s.n_seqs; seq++) {
            b0 = s.block_starts[seq], nb = s.block_starts[seq + 1] - b0;
            int groups = (nb + N - 1) / N;
            if (p < groups) break;
            p -= groups;
        }
    }
    pb.n = min(N, nb - N * p);
    int ctx_lo = INT_MAX, ctx_hi = 0;
#pragma unroll
    for (int b = 0; b < N; b++) {
        int j = b0 + N * p + min(b, pb.n - 1); /* a missing block repeats the last and is masked out below */
        pb.j[b] = j;
        pb.lo[b] = window_start(s, s.anchors[j]), pb.hi[b] = s.anchors[j];
        ctx_lo = min(ctx_lo, pb.lo[b]), ctx_hi = max(ctx_hi, pb.hi[b]);
    }
    ctx_hi = max(ctx_hi, ctx_lo);
#pragma unroll
    for (int b = 0; b < N; b++) {
        pb.lo[b] = max(pb.lo[b] - ctx_lo, 0), pb.hi[b] = max(pb.hi[b] - ctx_lo, 0);
        if (b >= pb.n) pb.lo[b] = pb.hi[b] = 0;
    }
    pb.c0 = s.ctx_starts[seq] + ctx_lo;
    pb.n_ctx = ctx_hi - ctx_lo;
    pb.n_vis = pb.n_ctx + pb.n * s.B;
    return pb;
}

__device__ __forceinline__ PairBlocks pair_blocks(const Shape &s, int p) { return neighbour_blocks<2>(s, p); }

/* The blocks of the group as chunk_row takes them: -1 for the missing ones. */
template <int N>
__device__ __forceinline__ void present_blocks(const NeighbourBlocks<N> &pb, int (&j)[N]) {
#pragma unroll
    for (int b = 0; b < N; b++) j[b] = b < pb.n ? pb.j[b] : -1;
}

/* The keys of the group's list one block sees: its context range [lo, hi)
 * and its own rows [own, own_end) (empty for a missing block). Chosen once
 * per warp (or warpgroup), so that no loop indexes into the NeighbourBlocks. */
struct SeenKeys {
    int lo, hi, own, own_end;
    __device__ bool sees(int key) const { return (key >= lo && key < hi) || (key >= own && key < own_end); }
    __device__ bool sees_any(int t0, int n) const {
        return (lo < hi && t0 < hi && t0 + n > lo) || (own < own_end && t0 < own_end && t0 + n > own);
    }
    /* every key of t0 .. t0 + n - 1 is in the context range: no mask needed */
    __device__ bool sees_all_ctx(int t0, int n) const { return t0 >= lo && t0 + n <= hi; }
};

template <int N>
__device__ SeenKeys seen_keys(const NeighbourBlocks<N> &pb, int B, int b) {
    SeenKeys k;
    k.lo = pick(pb.lo, b), k.hi = pick(pb.hi, b);
    k.own = pb.n_ctx + b * B, k.own_end = b < pb.n ? k.own + B : k.own;
    return k;
}

/* Keys t0 .. t0+BN-1 of the group's list of kv head g into shared [BN][D+8]; zero past it. */
template <int D, int N>
__device__ void load_list_tile(bf16 *dst, const bf16 *ctx, const bf16 *blk, const Shape &s,
                               const NeighbourBlocks<N> &pb, int g, int t0) {
    constexpr int SD = D + 8, CH = D / 8;
    size_t ldk = (size_t)s.kv_heads * D;
    for (int t = threadIdx.x; t < BN * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8, key = t0 + i;
        const bf16 *p = nullptr;
        if (key < pb.n_ctx) {
            p = ctx + (size_t)(pb.c0 + key) * ldk + (size_t)g * D;
        } else if (key < pb.n_vis) {
            int r = key - pb.n_ctx, j = N == 1 ? pb.j[0] : pick(pb.j, r / s.B);
            p = blk + (size_t)(j * s.B + (N == 1 ? r : r % s.B)) * ldk + (size_t)g * D;
        }
        cp_async16(dst + i * SD + col, p ? p + col : ctx, p ? 16 : 0);
    }
}

/* The double buffering of a key loop over the group's list: K/V tile kt + 1
 * (if there is one) into the buffers [2][BN][D+8] not read at kt, then the
 * copy of tile kt waited for (this thread's; the caller's barrier makes it
 * everyone's). */
template <int D, int N>
__device__ __forceinline__ void prefetch_next_list_kv(bf16 *sk, bf16 *sv, const bf16 *kc, const bf16 *vc,
                                                      const bf16 *kb, const bf16 *vb, const Shape &s,
                                                      const NeighbourBlocks<N> &pb, int g, int kt, int n_kv) {
    constexpr int SD = D + 8;
    if (kt + 1 < n_kv) {
        int next = ((kt & 1) ^ 1) * BN * SD;
        load_list_tile<D, N>(sk + next, kc, kb, s, pb, g, (kt + 1) * BN);
        load_list_tile<D, N>(sv + next, vc, vb, s, pb, g, (kt + 1) * BN);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* --- host side ------------------------------------------------------------------ */

/* Groups of n neighbouring blocks: ceil(blocks / n) per sequence. */
inline int count_groups(const DfBlockAttnLayout *l, int n) {
    long c = 0;
    for (int s = 0; s < l->n_seqs; s++) c += (l->host_block_starts[s + 1] - l->host_block_starts[s] + n - 1) / n;
    return (int)c;
}

/* Pairs of the two-block forward. */
inline int count_pairs(const DfBlockAttnLayout *l) { return count_groups(l, 2); }

} // namespace

#endif
