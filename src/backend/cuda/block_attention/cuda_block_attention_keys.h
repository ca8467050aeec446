/* The key-major side of the DFlash block attention's backward (step 3 at
 * the top of cuda_block_attention.cu): its work items (64 keys of one kv
 * head and the blocks that see them) and their loaders, for the mma.sync
 * kernel (cuda_block_attention_backward.cu) and the wgmma one
 * (cuda_block_attention_backward_wgmma.cu). */
#ifndef DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_KEYS_H
#define DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_KEYS_H

#include "backend/cuda/block_attention/cuda_block_attention_tiles.h"

namespace {

/* Blocks per key-major item of a context tile: smaller items balance the
 * SMs better (the items of a sequence's first tiles are seen by all its
 * blocks, those of its last by few) at the cost of more fp32 atomics; at
 * the bench shape (2 x 2048 context rows, 512 blocks each, H200) the whole
 * backward took 5.86 ms at 64, 5.99 at 128, 6.58 at 256; at the recipe's
 * drafter (H100) 0.99 ms at 64, 1.00 at 32. */
constexpr int CTX_CHUNK = 64;

/* A key-major work item: 64 keys of kv head g and the blocks that see them. */
struct KeyItem {
    bool ctx;     /* context keys t0.. of sequence seq; else the own keys of blocks jb .. je - 1 */
    int seq, t0, c0, len, jb, je;
};

/* Items: first, per sequence, (context tile, group of CTX_CHUNK blocks);
 * then the blocks' own keys, s.own_blocks blocks an item: a block's B keys
 * are seen by its own rows alone, so one block an item would leave all but
 * B of the tile's 64 keys (and all but one warp) idle. Packed chunks take
 * ROWS / B blocks an item (their B divides ROWS), visited PACK at a time;
 * the other launches one. The host counts the items the same way. */
__device__ KeyItem key_item(const Shape &s, int item, int n_ctx_items) {
    KeyItem k;
    k.ctx = item < n_ctx_items;
    if (!k.ctx) {
        k.jb = (item - n_ctx_items) * s.own_blocks, k.je = min(k.jb + s.own_blocks, s.n_blocks);
        k.seq = seq_of_block(s, k.jb), k.t0 = 0;
        k.c0 = s.ctx_starts[k.seq], k.len = s.ctx_starts[k.seq + 1] - k.c0;
        return k;
    }
    for (k.seq = 0; k.seq < s.n_seqs; k.seq++) {
        k.c0 = s.ctx_starts[k.seq], k.len = s.ctx_starts[k.seq + 1] - k.c0;
        int b0 = s.block_starts[k.seq], nb = s.block_starts[k.seq + 1] - b0;
        int groups = (nb + CTX_CHUNK - 1) / CTX_CHUNK, n = groups * ((k.len + ROWS - 1) / ROWS);
        if (item < n) {
            k.t0 = item / groups * ROWS;
            k.jb = b0 + item % groups * CTX_CHUNK;
            k.je = min(k.jb + CTX_CHUNK, b0 + nb);
            return k;
        }
        item -= n;
    }
    k.jb = k.je = 0; /* not reached: the host counted the items */
    return k;
}

/* The next block after j (before je) that sees any key of the item; je if none. */
__device__ int next_visitor(const Shape &s, const KeyItem &k, int j) {
    for (j++; j < k.je; j++)
        if (!k.ctx || (s.anchors[j] > k.t0 && window_start(s, s.anchors[j]) < k.t0 + ROWS)) return j;
    return k.je;
}

/* A visit of the key-major kernel: the chunk of query rows it loads. PACK 1:
 * chunk c of visitor block j[0]; PACK > 1 (packed chunks, chunk_row): the
 * PACK visitors from j[0] on, in order, -1 past the item's last (their rows
 * zero and masked: an item with fewer visitors left; a block's own keys have
 * one). */
template <int PACK>
struct Visit {
    int j[PACK], c;
};

/* The PACK visitors after block j, -1 past the last. */
template <int PACK>
__device__ void visitors_after(const Shape &s, const KeyItem &k, int j, Visit<PACK> &v) {
    v.c = 0;
#pragma unroll
    for (int b = 0; b < PACK; b++) {
        j = next_visitor(s, k, j); /* k.je once past the last, and stays there */
        v.j[b] = j < k.je ? j : -1;
    }
}

/* The visit after v into *next; false when v was the item's last. */
template <int PACK>
__device__ bool next_visit(const Shape &s, const KeyItem &k, const Visit<PACK> &v, Visit<PACK> *next) {
    if (v.c + 1 < s.chunks) { /* PACK 1 only: packed chunks are one a block */
        *next = v, next->c = v.c + 1;
        return true;
    }
    if (v.j[PACK - 1] < 0) return false;
    visitors_after(s, k, v.j[PACK - 1], *next);
    return next->j[0] >= 0;
}

/* The keys of the item's tile (as tile rows) visitor block j sees: [first, limit); none for j < 0. */
struct VisitKeys {
    int first, limit;
};

__device__ __forceinline__ VisitKeys visit_keys(const Shape &s, const KeyItem &k, int j) {
    if (j < 0) return {0, 0};
    if (!k.ctx) return {(j - k.jb) * s.B, (j - k.jb + 1) * s.B};
    int a = s.anchors[j];
    return {window_start(s, a) - k.t0, a - k.t0};
}

/* The item's keys (context rows or block rows) of kv head g into a shared tile. */
template <int D, TileLayout L = PADDED>
__device__ void load_key_tile(bf16 *dst, const bf16 *ctx, const bf16 *blk, const Shape &s, const KeyItem &k, int g) {
    constexpr int CH = D / 8;
    size_t ldk = (size_t)s.kv_heads * D;
    for (int t = threadIdx.x; t < ROWS * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8;
        const bf16 *p = nullptr;
        if (k.ctx && k.t0 + i < k.len) p = ctx + (size_t)(k.c0 + k.t0 + i) * ldk + (size_t)g * D;
        else if (!k.ctx && i < (k.je - k.jb) * s.B) p = blk + (size_t)(k.jb * s.B + i) * ldk + (size_t)g * D;
        cp_async16(tile_at<D, L>(dst, i, col), p ? p + col : ctx, p ? 16 : 0);
    }
}

/* Q, dO (cp.async), lse in base 2 and dsum (plain stores) of one visit into
 * its buffers; rows past the group or of a missing visitor: zeros, lse +inf
 * (P = 0) and dsum 0. */
template <int D, int PACK, TileLayout L = PADDED>
__device__ void load_visit(bf16 *sq, bf16 *sdo, float *slse, float *sds, const bf16 *q, const bf16 *d_out,
                           const float *lse, const float *dsum, const Shape &s, const Visit<PACK> &v, int g) {
    load_chunk_tile<D, PACK, L>(sq, q, s, v.j, g, v.c);
    load_chunk_tile<D, PACK, L>(sdo, d_out, s, v.j, g, v.c);
    cp_async_commit();
    for (int i = threadIdx.x; i < ROWS; i += WARPS * 32) {
        QRow qr = chunk_row<D, PACK>(s, v.j, g, v.c, i);
        slse[i] = qr.valid ? lse[qr.lse_idx] * LOG2E : INFINITY;
        sds[i] = qr.valid ? dsum[qr.lse_idx] : 0.0f;
    }
}

/* A warp's sums over its 16 keys (kw0.., the mma.sync accumulator layout:
 * rows gr and gr + 8 of each n-tile) out to the item's keys: context keys
 * added with fp32 atomics to ctx_dk/ctx_dv, a block's own keys added to
 * dk_blk/dv_blk (both loads, then both stores: the one-pass order). DO_K
 * and DO_V: which of the two the launch computed. */
template <int D, bool DO_K, bool DO_V, int NK, int NV>
__device__ __forceinline__ void add_key_sums(const Shape &s, const KeyItem &k, int g, int kw0, int lane,
                                             const float (&dk)[NK][4], const float (&dv)[NV][4], float *ctx_dk,
                                             float *ctx_dv, bf16 *dk_blk, bf16 *dv_blk) {
    constexpr int DTILES = D / 8;
    int gr = lane / 4, tq = lane % 4;
    size_t ldk = (size_t)s.kv_heads * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = kw0 + gr + 8 * r;
        if (k.ctx ? k.t0 + key >= k.len : key >= (k.je - k.jb) * s.B) continue;
        if (k.ctx) {
            size_t off = (size_t)(k.c0 + k.t0 + key) * ldk + (size_t)g * D + 2 * tq;
#pragma unroll
            for (int d = 0; d < DTILES; d++) {
                if constexpr (DO_K)
                    atomic_add_pair(ctx_dk + off + d * 8, make_float2(dk[d][2 * r], dk[d][2 * r + 1]));
                if constexpr (DO_V)
                    atomic_add_pair(ctx_dv + off + d * 8, make_float2(dv[d][2 * r], dv[d][2 * r + 1]));
            }
        } else {
            size_t off = (size_t)(k.jb * s.B + key) * ldk + (size_t)g * D + 2 * tq;
#pragma unroll
            for (int d = 0; d < DTILES; d++) {
                __nv_bfloat162 *pk = (__nv_bfloat162 *)(dk_blk + off + d * 8), *pv = (__nv_bfloat162 *)(dv_blk + off + d * 8);
                float2 ok, ov;
                if constexpr (DO_K) ok = __bfloat1622float2(*pk);
                if constexpr (DO_V) ov = __bfloat1622float2(*pv);
                if constexpr (DO_K) *pk = __floats2bfloat162_rn(ok.x + dk[d][2 * r], ok.y + dk[d][2 * r + 1]);
                if constexpr (DO_V) *pv = __floats2bfloat162_rn(ov.x + dv[d][2 * r], ov.y + dv[d][2 * r + 1]);
            }
        }
    }
}

/* --- host side ---------------------------------------------------------------- */

/* Context items of the key-major kernel, counted as key_item decodes them. */
inline int count_ctx_items(const DfBlockAttnLayout *l) {
    long n = 0;
    for (int s = 0; s < l->n_seqs; s++) {
        int len = l->host_ctx_starts[s + 1] - l->host_ctx_starts[s];
        int nb = l->host_block_starts[s + 1] - l->host_block_starts[s];
        n += (long)((nb + CTX_CHUNK - 1) / CTX_CHUNK) * ((len + ROWS - 1) / ROWS);
    }
    return n > INT32_MAX / 2 ? -1 : (int)n;
}

/* Items of the blocks' own keys, counted as key_item decodes them. */
inline int count_own_items(const Shape &s) { return (s.n_blocks + s.own_blocks - 1) / s.own_blocks; }

} // namespace

#endif
