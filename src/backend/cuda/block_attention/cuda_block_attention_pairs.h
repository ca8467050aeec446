/* The two-block CTAs of the DFlash block attention's forward (the mma.sync
 * kernel of cuda_block_attention.cu and the wgmma one of
 * cuda_block_attention_forward_wgmma.cu): which blocks a CTA takes and which
 * keys of its list each of them sees. */
#ifndef DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_PAIRS_H
#define DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_PAIRS_H

#include <limits.h>

#include "backend/cuda/block_attention/cuda_block_attention_tiles.h"

namespace {

/* Two neighbouring blocks of one sequence (their anchors sorted, so nearly
 * the same context prefix). The CTA walks one list of keys: the union of
 * their context ranges, then block 0's own B rows, then block 1's; every
 * K/V fragment a warp reads from shared memory feeds two m-tiles, one per
 * block (rows 16w.. of chunk c of each), which halves the shared-memory
 * reads per product against one block per CTA (the FlashAttention-2 reason
 * for 128-row tiles). Each m-tile masks the keys its block does not see. */
struct PairBlocks {
    int n;             /* blocks in the pair: 2, or 1 for a sequence's odd last block */
    int j[2];          /* the blocks */
    int lo[2], hi[2];  /* each block's visible context, as positions of the list */
    int c0;            /* the list's first context row (absolute) */
    int n_ctx, n_vis;  /* context keys of the list; all its keys */
};

/* Pair p: sequences in order, ceil(blocks / 2) pairs each. */
__device__ PairBlocks pair_blocks(const Shape &s, int p) {
    PairBlocks pb;
    int seq = 0, b0 = 0, nb = 0;
    for (; seq < s.n_seqs; seq++) {
        b0 = s.block_starts[seq], nb = s.block_starts[seq + 1] - b0;
        int pairs = (nb + 1) / 2;
        if (p < pairs) break;
        p -= pairs;
    }
    pb.n = min(2, nb - 2 * p);
    int ctx_lo = INT_MAX, ctx_hi = 0;
    for (int b = 0; b < 2; b++) {
        int j = b0 + 2 * p + min(b, pb.n - 1); /* a missing block 1 repeats block 0 and is masked out below */
        pb.j[b] = j;
        pb.lo[b] = window_start(s, s.anchors[j]), pb.hi[b] = s.anchors[j];
        ctx_lo = min(ctx_lo, pb.lo[b]), ctx_hi = max(ctx_hi, pb.hi[b]);
    }
    ctx_hi = max(ctx_hi, ctx_lo);
    for (int b = 0; b < 2; b++) pb.lo[b] = max(pb.lo[b] - ctx_lo, 0), pb.hi[b] = max(pb.hi[b] - ctx_lo, 0);
    if (pb.n == 1) pb.lo[1] = pb.hi[1] = 0;
    pb.c0 = s.ctx_starts[seq] + ctx_lo;
    pb.n_ctx = ctx_hi - ctx_lo;
    pb.n_vis = pb.n_ctx + pb.n * s.B;
    return pb;
}

/* Whether list position key is visible to block b of the pair. */
__device__ __forceinline__ bool pair_sees(const PairBlocks &pb, int B, int b, int key) {
    if (key < pb.n_ctx) return key >= pb.lo[b] && key < pb.hi[b];
    return b < pb.n && key >= pb.n_ctx + b * B && key < pb.n_ctx + (b + 1) * B;
}

/* --- host side ------------------------------------------------------------------ */

/* Pairs of the two-block forward: ceil(blocks / 2) per sequence. */
int count_pairs(const DfBlockAttnLayout *l) {
    long n = 0;
    for (int s = 0; s < l->n_seqs; s++) n += (l->host_block_starts[s + 1] - l->host_block_starts[s] + 1) / 2;
    return (int)n;
}

} // namespace

#endif
