/* DFlash block attention on CUDA, forward and backward (the semantics are
 * those of cpu/cpu_block_attention.c; the layout is DfBlockAttnLayout).
 *
 * Block j of B query rows sees the first anchors[j] context rows of its
 * sequence, then its own B rows, all of them (no causal mask inside). For one
 * kv head the G = heads/kv_heads query heads of a GQA group see the same
 * keys, so a CTA takes the G*B rows (h, r) of one block and one kv head,
 * 64 at a time ("a chunk": one chunk when G*B <= 64, as at B 16, G 4), and
 * every K/V tile it brings into shared memory feeds all of them. Within the
 * CTA the visible keys are one list of anchor + B rows, the context rows then
 * the block rows, walked in tiles of 64; only the last tile needs a mask.
 * A sliding window W (DfBlockAttnArgs.window > 0) starts the context part at
 * max(0, anchor - W) instead of 0 (window_start): the query-major kernels
 * just see a shorter list; the key-major one masks keys below the start.
 *
 * Forward: the FlashAttention-2 scheme of cuda_attention.cu (online softmax
 * in fp32 with base-2 exponentials, mma.sync m16n8k16, K/V double-buffered
 * with cp.async, P handed from accumulators to A fragments in registers).
 * At head_dim 64 and 128 a CTA takes two neighbouring blocks of a sequence
 * (k_block_attn_forward_pair): each warp holds one m-tile of each, and every
 * K/V fragment it reads feeds both (1.74 -> 1.43 ms at 2 x 2048 context rows,
 * 512 blocks each, on the H200).
 *
 * Backward, FlashAttention-2 style, probabilities recomputed from the lse:
 *  1. dsum = rowsum(dO * O) per (head, query row), fp32 scratch;
 *  2. dQ, query-major: one CTA per (block, kv head, chunk) walks the visible
 *     key tiles as the forward does, dQ += dS K in registers, written once;
 *  3. dK/dV, key-major: a CTA owns 64 keys of one kv head (warp w keys
 *     16w..16w+15, the key rows are the mma M dimension) and loops over the
 *     query chunks that see them, dK += dS^T Q and dV += P^T dO in registers.
 *     Block keys are seen by their own block only: one CTA per (block, kv
 *     head) adds its result straight into dk_blk/dv_blk. A context tile is
 *     seen by every block of its sequence anchored past it (up to 512): for
 *     balance its blocks are split into items of CTX_CHUNK, which add their
 *     sums with fp32 atomics into a zeroed fp32 scratch (the order of those
 *     additions varies from run to run: the last bits of dK/dV do too);
 *  4. dk_ctx/dv_ctx += the scratch, rounded to bf16 once.
 * Scratch (dsum and the two fp32 context sums) is stream-ordered memory
 * (cudaMallocAsync) counted in the backend's bytes in use while it lives.
 *
 * head_dim 64, 128 and 256, with the same tiles (64 rows, 64 keys). At 256
 * the accumulators of a 16 x 256 tile take 128 registers a thread, so the
 * query-major kernels re-read Q from shared memory at each k-step
 * (q_in_regs) and step 3 runs as a dV pass then a dK pass (DkvPart); shared
 * memory is 165 KiB (forward), 198 KiB (dQ) and 199 KiB (dK/dV) a CTA, one
 * CTA per SM. */
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_mma.h"

namespace {

constexpr int WARPS = 4;
constexpr int ROWS = 16 * WARPS; /* query rows per chunk; also keys per dK/dV tile */
constexpr int BN = 64;           /* keys per tile of the query-major kernels */
/* Blocks per key-major item of a context tile: smaller items balance the
 * SMs better (the items of a sequence's first tiles are seen by all its
 * blocks, those of its last by few) at the cost of more fp32 atomics; at
 * the bench shape (2 x 2048 context rows, 512 blocks each, H200) the whole
 * backward took 5.86 ms at 64, 5.99 at 128, 6.58 at 256. */
constexpr int CTX_CHUNK = 64;
constexpr float LOG2E = 1.4426950408889634f;

/* The query-major kernels hold a warp's Q fragments in registers across the
 * key tiles up to head_dim 128. At 256 the O (or dQ) accumulators alone take
 * 128 registers a thread, so Q is re-read from shared memory at each k-step
 * instead (as in cuda_attention.cu), which keeps them clear of spills. */
template <int D>
constexpr bool q_in_regs = D <= 128;

/* What one key-major (dK/dV) launch accumulates. Up to head_dim 128 both in
 * one pass. At 256 the two [16 x 256] accumulators of a warp would take 256
 * registers a thread, so a dV pass (P only) and a dK pass (P and dP) run one
 * after the other, both recomputing P: 5 products per tile instead of 4. */
enum DkvPart { DKV_BOTH, DKV_V, DKV_K };
template <int D>
constexpr bool split_dkv = D > 128;

/* The layout and sizes every kernel needs, passed by value. */
struct Shape {
    const int32_t *ctx_starts, *block_starts, *anchors;
    int n_seqs, n_blocks, B, G, heads, kv_heads, n_q;
    int chunks; /* ceil(G*B / ROWS) */
    float scale, scale_log2;
    int window; /* 0: every context row below the anchor */
};

/* The first context row (relative to the sequence's) visible to a block anchored at `anchor`. */
__device__ __forceinline__ int window_start(const Shape &s, int anchor) {
    return s.window > 0 && anchor > s.window ? anchor - s.window : 0;
}

/* The sequence of block j: the last s with block_starts[s] <= j (sequences
 * without blocks share their start with the next one). */
__device__ int seq_of_block(const Shape &s, int j) {
    int lo = 0, hi = s.n_seqs;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (s.block_starts[mid] <= j) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Row i of chunk c of block j, kv head g: query head g*G + flat/B, block
 * row flat%B (flat = c*ROWS + i); invalid past the group's G*B rows. */
struct QRow {
    bool valid;
    size_t off;     /* element offset in q, out, d_out, dq */
    size_t lse_idx; /* index in lse and dsum ([heads, n_q]) */
};

template <int D>
__device__ QRow q_row(const Shape &s, int j, int g, int c, int i) {
    int flat = c * ROWS + i;
    QRow q;
    q.valid = flat < s.G * s.B;
    int h = g * s.G + flat / s.B, r = flat % s.B;
    q.off = (size_t)(j * s.B + r) * s.heads * D + (size_t)h * D;
    q.lse_idx = (size_t)h * s.n_q + (size_t)j * s.B + r;
    return q;
}

/* The chunk's ROWS query-like rows (q or d_out) into shared [ROWS][D+8]; zero past the group. */
template <int D>
__device__ void load_query_tile(bf16 *dst, const bf16 *src, const Shape &s, int j, int g, int c) {
    constexpr int SD = D + 8, CH = D / 8;
    for (int t = threadIdx.x; t < ROWS * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8;
        QRow q = q_row<D>(s, j, g, c, i);
        cp_async16(dst + i * SD + col, q.valid ? src + q.off + col : src, q.valid ? 16 : 0);
    }
}

/* Visible keys t0 .. t0+BN-1 of block j (context rows c0.. below the anchor,
 * then the block's own rows) of kv head g into shared [BN][D+8]; zero past them. */
template <int D>
__device__ void load_visible_tile(bf16 *dst, const bf16 *ctx, const bf16 *blk, const Shape &s, int c0, int anchor,
                                  int j, int g, int t0) {
    constexpr int SD = D + 8, CH = D / 8;
    size_t ldk = (size_t)s.kv_heads * D;
    for (int t = threadIdx.x; t < BN * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8, key = t0 + i;
        const bf16 *p = nullptr;
        if (key < anchor) p = ctx + (size_t)(c0 + key) * ldk + (size_t)g * D;
        else if (key < anchor + s.B) p = blk + (size_t)(j * s.B + key - anchor) * ldk + (size_t)g * D;
        cp_async16(dst + i * SD + col, p ? p + col : ctx, p ? 16 : 0);
    }
}

/* acc[n] (16 rows x 8n..8n+7) += A (16 x D, fragments a[kk]) times the
 * tile's rows as columns: S = Q K^T with 64 rows of K in shared memory. */
template <int D>
__device__ __forceinline__ void rows_times_tile_t(float acc[8][4], const uint32_t (*a)[4], const bf16 *tile, int lane) {
    constexpr int SD = D + 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, tile + (np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * SD + kk * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16(acc[2 * np], a[kk], b[0], b[1]);
            mma_bf16(acc[2 * np + 1], a[kk], b[2], b[3]);
        }
}

/* Same, with the A fragments read from 16 rows of shared memory at each k-step. */
template <int D>
__device__ __forceinline__ void smem_rows_times_tile_t(float acc[8][4], const bf16 *rows16, const bf16 *tile,
                                                       int lane) {
    constexpr int SD = D + 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4(a, rows16 + (lane & 15) * SD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, tile + (np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * SD + kk * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16(acc[2 * np], a, b[0], b[1]);
            mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* acc (16 x D) += P (16 x 64, fp32 accumulators, rounded to bf16) times the
 * 64-row tile [64][D+8]: O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q. */
template <int D>
__device__ __forceinline__ void probs_times_tile(float acc[D / 8][4], const float p[8][4], const bf16 *tile,
                                                 int lane) {
    constexpr int SD = D + 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t pa[4];
        pa[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
        pa[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
        pa[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        pa[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, tile + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + dp * 16 +
                                     ((lane >> 4) & 1) * 8);
            mma_bf16(acc[2 * dp], pa, b[0], b[1]);
            mma_bf16(acc[2 * dp + 1], pa, b[2], b[3]);
        }
    }
}

template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

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
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
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
        if (kt + 1 < n_kv) {
            load_visible_tile<D>(sk + (buf ^ 1) * BN * SD, kc, kb, s, c0, anchor, j, g, (kt + 1) * BN);
            load_visible_tile<D>(sv + (buf ^ 1) * BN * SD, vc, vb, s, c0, anchor, j, g, (kt + 1) * BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
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

            bool need_mask = (kt + 1) * BN > n_vis;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = sc[n][e] * s.scale_log2;
                    if (need_mask && kt * BN + n * 8 + 2 * tq + (e & 1) >= n_vis) x = -INFINITY;
                    sc[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                /* finite: the first tile holds key 0, visible to every row */
                float m_new = fmaxf(m_run[r], mx[r]);
                alpha[r] = fast_exp2(m_run[r] - m_new);
                m_run[r] = m_new;
                l_run[r] *= alpha[r];
            }
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = fast_exp2(sc[n][e] - m_run[e >> 1]);
                    sc[n][e] = p;
                    l_run[e >> 1] += p;
                }
#pragma unroll
            for (int d = 0; d < DTILES; d++) {
                o[d][0] *= alpha[0];
                o[d][1] *= alpha[0];
                o[d][2] *= alpha[1];
                o[d][3] *= alpha[1];
            }
            probs_times_tile<D>(o, sc, sv + buf * BN * SD, lane);
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
    if (!active) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        QRow qr = q_row<D>(s, j, g, c, warp * 16 + gr + 8 * r);
        if (!qr.valid) continue;
        float inv = 1.0f / l;
        bf16 *orow = out + qr.off;
#pragma unroll
        for (int d = 0; d < DTILES; d++)
            *(__nv_bfloat162 *)(orow + d * 8 + 2 * tq) = __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
        if (tq == 0) lse[qr.lse_idx] = (m_run[r] + log2f(l)) * 0.69314718056f;
    }
}

/* --- forward, two blocks per CTA (head_dim 64 and 128) --------------------------- */

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

/* Keys t0 .. t0+BN-1 of the pair's list of kv head g into shared [BN][D+8]; zero past it. */
template <int D>
__device__ void load_pair_tile(bf16 *dst, const bf16 *ctx, const bf16 *blk, const Shape &s, const PairBlocks &pb,
                               int g, int t0) {
    constexpr int SD = D + 8, CH = D / 8;
    size_t ldk = (size_t)s.kv_heads * D;
    for (int t = threadIdx.x; t < BN * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8, key = t0 + i;
        const bf16 *p = nullptr;
        if (key < pb.n_ctx) {
            p = ctx + (size_t)(pb.c0 + key) * ldk + (size_t)g * D;
        } else if (key < pb.n_vis) {
            int r = key - pb.n_ctx, j = r < s.B ? pb.j[0] : pb.j[1]; /* a select: no indexing into pb */
            p = blk + (size_t)(j * s.B + r % s.B) * ldk + (size_t)g * D;
        }
        cp_async16(dst + i * SD + col, p ? p + col : ctx, p ? 16 : 0);
    }
}

/* Whether list position key is visible to block b of the pair. */
__device__ __forceinline__ bool pair_sees(const PairBlocks &pb, int B, int b, int key) {
    if (key < pb.n_ctx) return key >= pb.lo[b] && key < pb.hi[b];
    return b < pb.n && key >= pb.n_ctx + b * B && key < pb.n_ctx + (b + 1) * B;
}

/* Grid: x = pair (reversed: the later, longer pairs first), y = kv head * chunks. */
template <int D>
__global__ void __launch_bounds__(WARPS * 32)
    k_block_attn_forward_pair(bf16 *out, float *lse, const bf16 *q, const bf16 *kc, const bf16 *vc, const bf16 *kb,
                              const bf16 *vb, Shape s, int n_pairs) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8, MT = 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw; /* [MT][ROWS][SD]: chunk c of each block */
    bf16 *sk = sq + MT * ROWS * SD; /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD;    /* [2][BN][SD] */

    PairBlocks pb = pair_blocks(s, n_pairs - 1 - (int)blockIdx.x);
    int g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int n_kv = (pb.n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    bool active = c * ROWS + warp * 16 < s.G * s.B; /* the warp has query rows (in both blocks alike) */

    load_query_tile<D>(sq, q, s, pb.j[0], g, c);
    load_query_tile<D>(sq + ROWS * SD, q, s, pb.j[1], g, c); /* a missing block 1: block 0 again, never written */
    load_pair_tile<D>(sk, kc, kb, s, pb, g, 0);
    load_pair_tile<D>(sv, vc, vb, s, pb, g, 0);
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
        if (kt + 1 < n_kv) {
            load_pair_tile<D>(sk + (buf ^ 1) * BN * SD, kc, kb, s, pb, g, t0 + BN);
            load_pair_tile<D>(sv + (buf ^ 1) * BN * SD, vc, vb, s, pb, g, t0 + BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
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
                /* a tile wholly inside the block's context range needs no mask */
                bool need_mask = !(t0 >= pb.lo[mt] && t0 + BN <= pb.hi[mt]);
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = sc[mt][n][e] * s.scale_log2;
                        if (need_mask && !pair_sees(pb, s.B, mt, t0 + n * 8 + 2 * tq + (e & 1))) x = -INFINITY;
                        sc[mt][n][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                float m_use[2], alpha[2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                    /* a block may see none of a tile (the other block's keys; an anchor at 0):
                     * until its rows have seen a key their max stays -inf, and 0 stands in
                     * for it so that no -inf - -inf appears */
                    float m_new = fmaxf(m_run[mt][r], mx[r]);
                    m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
                    alpha[r] = fast_exp2(m_run[mt][r] - m_use[r]);
                    m_run[mt][r] = m_new;
                    l_run[mt][r] *= alpha[r];
                }
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = fast_exp2(sc[mt][n][e] - m_use[e >> 1]);
                        sc[mt][n][e] = p;
                        l_run[mt][e >> 1] += p;
                    }
#pragma unroll
                for (int d = 0; d < DTILES; d++) {
                    o[mt][d][0] *= alpha[0];
                    o[mt][d][1] *= alpha[0];
                    o[mt][d][2] *= alpha[1];
                    o[mt][d][3] *= alpha[1];
                }
            }
            /* O += P V, each V fragment for both m-tiles */
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    pa[mt][0] = pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                    pa[mt][1] = pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                    pa[mt][2] = pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                    pa[mt][3] = pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, svb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + dp * 16 +
                                             ((lane >> 4) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(o[mt][2 * dp], pa[mt], b[0], b[1]);
                        mma_bf16(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
                    }
                }
            }
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
    if (!active) return;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (mt >= pb.n) break;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = l_run[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            QRow qr = q_row<D>(s, pb.j[mt], g, c, warp * 16 + gr + 8 * r);
            if (!qr.valid) continue;
            float inv = 1.0f / l; /* l > 0: every row sees its own block */
            bf16 *orow = out + qr.off;
#pragma unroll
            for (int d = 0; d < DTILES; d++)
                *(__nv_bfloat162 *)(orow + d * 8 + 2 * tq) =
                    __floats2bfloat162_rn(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
            if (tq == 0) lse[qr.lse_idx] = (m_run[mt][r] + log2f(l)) * 0.69314718056f;
        }
    }
}

/* --- backward ------------------------------------------------------------------ */

/* dsum[h, row] = sum_d dO * O: one warp per (row, head). */
template <int D>
__global__ void k_block_attn_dsum(float *dsum, const bf16 *d_out, const bf16 *out, int n_q, int heads) {
    size_t idx = (size_t)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (idx >= (size_t)n_q * heads) return;
    size_t row = idx / heads, h = idx % heads, off = idx * D; /* (row*heads + h) * D */
    float acc = 0.0f;
    for (int d = 2 * lane; d < D; d += 64) {
        float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)(d_out + off + d));
        float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)(out + off + d));
        acc += a.x * b.x + a.y * b.y;
    }
    for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) dsum[h * n_q + row] = acc;
}

/* dQ, query-major; grid as the forward's. dq = sum over visible keys of dS K. */
template <int D>
__global__ void __launch_bounds__(WARPS * 32) k_block_attn_dq(bf16 *dq, const float *lse, const float *dsum,
                                                               const bf16 *q, const bf16 *d_out, const bf16 *kc,
                                                               const bf16 *vc, const bf16 *kb, const bf16 *vb,
                                                               Shape s) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8;
    constexpr bool Q_IN_REGS = q_in_regs<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw;
    bf16 *sdo = sq + ROWS * SD;
    bf16 *sk = sdo + ROWS * SD;  /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD; /* [2][BN][SD] */

    int j = s.n_blocks - 1 - (int)blockIdx.x, g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int seq = seq_of_block(s, j), lo = window_start(s, s.anchors[j]);
    int c0 = s.ctx_starts[seq] + lo, anchor = s.anchors[j] - lo, n_vis = anchor + s.B; /* the visible list */
    int n_kv = (n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    bool active = c * ROWS + warp * 16 < s.G * s.B;

    load_query_tile<D>(sq, q, s, j, g, c);
    load_query_tile<D>(sdo, d_out, s, j, g, c);
    load_visible_tile<D>(sk, kc, kb, s, c0, anchor, j, g, 0);
    load_visible_tile<D>(sv, vc, vb, s, c0, anchor, j, g, 0);
    cp_async_commit();

    /* per row (gr, gr + 8): lse in base 2 and dsum; rows past the group get
     * P = exp2(0 - inf) = 0 */
    float lse2[2], dsr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        QRow qr = q_row<D>(s, j, g, c, warp * 16 + gr + 8 * r);
        lse2[r] = qr.valid ? lse[qr.lse_idx] * LOG2E : INFINITY;
        dsr[r] = qr.valid ? dsum[qr.lse_idx] : 0.0f;
    }
    uint32_t qf[Q_IN_REGS ? KSTEPS : 1][4];
    float acc[DTILES][4];
    zero_acc(acc);

    for (int kt = 0; kt < n_kv; kt++) {
        int buf = kt & 1;
        if (kt + 1 < n_kv) {
            load_visible_tile<D>(sk + (buf ^ 1) * BN * SD, kc, kb, s, c0, anchor, j, g, (kt + 1) * BN);
            load_visible_tile<D>(sv + (buf ^ 1) * BN * SD, vc, vb, s, c0, anchor, j, g, (kt + 1) * BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (active) {
            if constexpr (Q_IN_REGS)
                if (kt == 0)
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; kk++)
                        ldmatrix_x4(qf[kk], sq + (warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
            const bf16 *skb = sk + buf * BN * SD, *svb = sv + buf * BN * SD;
            float p[8][4], dp[8][4];
            zero_acc(p);
            zero_acc(dp);
            if constexpr (Q_IN_REGS) rows_times_tile_t<D>(p, qf, skb, lane);
            else smem_rows_times_tile_t<D>(p, sq + warp * 16 * SD, skb, lane);
            smem_rows_times_tile_t<D>(dp, sdo + warp * 16 * SD, svb, lane);
            bool need_mask = (kt + 1) * BN > n_vis;
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float pr = fast_exp2(p[n][e] * s.scale_log2 - lse2[e >> 1]);
                    if (need_mask && kt * BN + n * 8 + 2 * tq + (e & 1) >= n_vis) pr = 0.0f;
                    dp[n][e] = pr * (dp[n][e] - dsr[e >> 1]) * s.scale; /* dS, the score scale folded in */
                }
            probs_times_tile<D>(acc, dp, skb, lane);
        }
        __syncthreads();
    }
    if (!active) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        QRow qr = q_row<D>(s, j, g, c, warp * 16 + gr + 8 * r);
        if (!qr.valid) continue;
        bf16 *row = dq + qr.off;
#pragma unroll
        for (int d = 0; d < DTILES; d++)
            *(__nv_bfloat162 *)(row + d * 8 + 2 * tq) = __floats2bfloat162_rn(acc[d][2 * r], acc[d][2 * r + 1]);
    }
}

/* A key-major work item: 64 keys of kv head g and the blocks that see them. */
struct KeyItem {
    bool ctx;     /* context keys t0.. of sequence seq; else block jb's own keys */
    int seq, t0, c0, len, jb, je;
};

/* Items: first, per sequence, (context tile, group of CTX_CHUNK blocks);
 * then one per block. The host counts the context items the same way. */
__device__ KeyItem key_item(const Shape &s, int item, int n_ctx_items) {
    KeyItem k;
    k.ctx = item < n_ctx_items;
    if (!k.ctx) {
        k.jb = item - n_ctx_items, k.je = k.jb + 1;
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

/* The item's keys (context rows or block rows) of kv head g into shared [ROWS][D+8]. */
template <int D>
__device__ void load_key_tile(bf16 *dst, const bf16 *ctx, const bf16 *blk, const Shape &s, const KeyItem &k, int g) {
    constexpr int SD = D + 8, CH = D / 8;
    size_t ldk = (size_t)s.kv_heads * D;
    for (int t = threadIdx.x; t < ROWS * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8;
        const bf16 *p = nullptr;
        if (k.ctx && k.t0 + i < k.len) p = ctx + (size_t)(k.c0 + k.t0 + i) * ldk + (size_t)g * D;
        else if (!k.ctx && i < s.B) p = blk + (size_t)(k.jb * s.B + i) * ldk + (size_t)g * D;
        cp_async16(dst + i * SD + col, p ? p + col : ctx, p ? 16 : 0);
    }
}

/* Q, dO (cp.async), lse in base 2 and dsum (plain stores) of one visit into its buffers. */
template <int D>
__device__ void load_visit(bf16 *sq, bf16 *sdo, float *slse, float *sds, const bf16 *q, const bf16 *d_out,
                           const float *lse, const float *dsum, const Shape &s, int j, int g, int c) {
    load_query_tile<D>(sq, q, s, j, g, c);
    load_query_tile<D>(sdo, d_out, s, j, g, c);
    cp_async_commit();
    for (int i = threadIdx.x; i < ROWS; i += WARPS * 32) {
        QRow qr = q_row<D>(s, j, g, c, i);
        slse[i] = qr.valid ? lse[qr.lse_idx] * LOG2E : INFINITY;
        sds[i] = qr.valid ? dsum[qr.lse_idx] : 0.0f;
    }
}

/* dK, dV, key-major. Grid: x = item (context items, then blocks), y = kv head.
 * Context sums go with atomics to ctx_dk/ctx_dv (fp32 [n_ctx_rows, kv_heads*D]);
 * block sums are added to dk_blk/dv_blk. */
template <int D, int PART>
__global__ void __launch_bounds__(WARPS * 32)
    k_block_attn_dkv(float *ctx_dk, float *ctx_dv, bf16 *dk_blk, bf16 *dv_blk, const float *lse, const float *dsum,
                     const bf16 *q, const bf16 *d_out, const bf16 *kc, const bf16 *vc, const bf16 *kb, const bf16 *vb,
                     Shape s, int n_ctx_items) {
    constexpr int SD = D + 8, DTILES = D / 8;
    constexpr bool DO_K = PART != DKV_V, DO_V = PART != DKV_K;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sk = (bf16 *)smem_raw; /* the dV pass leaves sv and sds unused */
    bf16 *sv = sk + ROWS * SD;
    bf16 *sq = sv + ROWS * SD;    /* [2][ROWS][SD] */
    bf16 *sdo = sq + 2 * ROWS * SD; /* [2][ROWS][SD] */
    float *slse = (float *)(sdo + 2 * ROWS * SD); /* [2][ROWS] */
    float *sds = slse + 2 * ROWS;                 /* [2][ROWS] */

    int g = blockIdx.y;
    KeyItem k = key_item(s, (int)blockIdx.x, n_ctx_items);
    int vj = next_visitor(s, k, k.jb - 1), vchunk = 0;
    if (vj >= k.je) return; /* no block sees these keys */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int kw0 = warp * 16; /* this warp's keys in the tile */

    load_key_tile<D>(sk, kc, kb, s, k, g);
    if constexpr (DO_K) load_key_tile<D>(sv, vc, vb, s, k, g); /* V only feeds dP */
    load_visit<D>(sq, sdo, slse, sds, q, d_out, lse, dsum, s, vj, g, vchunk);

    float dk[DO_K ? DTILES : 1][4], dv[DO_V ? DTILES : 1][4];
    zero_acc(dk);
    zero_acc(dv);
    for (int buf = 0;; buf ^= 1) {
        int nj = vj, nc = vchunk + 1;
        if (nc == s.chunks) nc = 0, nj = next_visitor(s, k, vj);
        bool more = nj < k.je;
        if (more) {
            int nb = buf ^ 1;
            load_visit<D>(sq + nb * ROWS * SD, sdo + nb * ROWS * SD, slse + nb * ROWS, sds + nb * ROWS, q, d_out, lse,
                          dsum, s, nj, g, nc);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        /* keys of the tile visible to this visit: from the window's start to
         * below the anchor, or the block's B */
        int limit = k.ctx ? s.anchors[vj] - k.t0 : s.B, first = k.ctx ? window_start(s, s.anchors[vj]) - k.t0 : 0;
        if (kw0 < limit && kw0 + 16 > first) {
            const bf16 *sqb = sq + buf * ROWS * SD, *sdob = sdo + buf * ROWS * SD;
            const float *lb = slse + buf * ROWS, *db = sds + buf * ROWS;
            /* S^T (16 keys x 64 query rows) -> P^T */
            float p[8][4], dp[8][4];
            zero_acc(p);
            smem_rows_times_tile_t<D>(p, sk + kw0 * SD, sqb, lane);
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = kw0 + gr + 8 * (e >> 1), col = n * 8 + 2 * tq + (e & 1);
                    p[n][e] = key < limit && key >= first ? fast_exp2(p[n][e] * s.scale_log2 - lb[col]) : 0.0f;
                }
            if constexpr (DO_V) probs_times_tile<D>(dv, p, sdob, lane);
            if constexpr (DO_K) {
                /* dP^T = V dO^T -> dS^T */
                zero_acc(dp);
                smem_rows_times_tile_t<D>(dp, sv + kw0 * SD, sdob, lane);
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        dp[n][e] = p[n][e] * (dp[n][e] - db[n * 8 + 2 * tq + (e & 1)]) * s.scale;
                probs_times_tile<D>(dk, dp, sqb, lane);
            }
        }
        __syncthreads(); /* buffers of this visit are refilled next */
        if (!more) break;
        vj = nj, vchunk = nc;
    }

    size_t ldk = (size_t)s.kv_heads * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = kw0 + gr + 8 * r;
        if (k.ctx ? k.t0 + key >= k.len : key >= s.B) continue;
        if (k.ctx) {
            size_t off = (size_t)(k.c0 + k.t0 + key) * ldk + (size_t)g * D + 2 * tq;
#pragma unroll
            for (int d = 0; d < DTILES; d++) {
                if constexpr (DO_K)
                    atomicAdd((float2 *)(ctx_dk + off + d * 8), make_float2(dk[d][2 * r], dk[d][2 * r + 1]));
                if constexpr (DO_V)
                    atomicAdd((float2 *)(ctx_dv + off + d * 8), make_float2(dv[d][2 * r], dv[d][2 * r + 1]));
            }
        } else {
            size_t off = (size_t)(k.jb * s.B + key) * ldk + (size_t)g * D + 2 * tq;
#pragma unroll
            for (int d = 0; d < DTILES; d++) {
                __nv_bfloat162 *pk = (__nv_bfloat162 *)(dk_blk + off + d * 8), *pv = (__nv_bfloat162 *)(dv_blk + off + d * 8);
                float2 ok, ov; /* both loads, then both stores: the one-pass order */
                if constexpr (DO_K) ok = __bfloat1622float2(*pk);
                if constexpr (DO_V) ov = __bfloat1622float2(*pv);
                if constexpr (DO_K) *pk = __floats2bfloat162_rn(ok.x + dk[d][2 * r], ok.y + dk[d][2 * r + 1]);
                if constexpr (DO_V) *pv = __floats2bfloat162_rn(ov.x + dv[d][2 * r], ov.y + dv[d][2 * r + 1]);
            }
        }
    }
}

/* dst[i] += src[i] for n (even) bf16 values, fp32 sums rounded once. */
__global__ void k_add_f32_to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = 2 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < n; i += 2 * (size_t)gridDim.x * blockDim.x) {
        float2 a = __bfloat1622float2(*(__nv_bfloat162 *)(dst + i));
        float2 b = *(const float2 *)(src + i);
        *(__nv_bfloat162 *)(dst + i) = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
    }
}

/* --- host side ------------------------------------------------------------------ */

Shape shape_of(const DfBlockAttnArgs *a) {
    const DfBlockAttnLayout *l = a->layout;
    Shape s;
    s.ctx_starts = (const int32_t *)l->ctx_starts.ptr;
    s.block_starts = (const int32_t *)l->block_starts.ptr;
    s.anchors = (const int32_t *)l->anchors.ptr;
    s.n_seqs = l->n_seqs, s.n_blocks = l->n_blocks, s.B = l->block_size;
    s.G = a->heads / a->kv_heads, s.heads = a->heads, s.kv_heads = a->kv_heads;
    s.n_q = l->n_blocks * l->block_size;
    s.chunks = (s.G * s.B + ROWS - 1) / ROWS;
    s.scale = a->scale, s.scale_log2 = a->scale * LOG2E;
    s.window = a->window;
    return s;
}

bool misaligned(const DfBuffer *bufs, int n) {
    uintptr_t bits = 0;
    for (int i = 0; i < n; i++) bits |= (uintptr_t)bufs[i].ptr;
    return (bits & 15u) != 0;
}

/* What the kernels cannot take, as a recorded failure; true when it can run. */
bool supported(DfBackend *be, const DfBlockAttnArgs *a, const char *op) {
    const DfBlockAttnLayout *l = a->layout;
    int chunks = (a->heads / a->kv_heads * l->block_size + ROWS - 1) / ROWS;
    if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        df_cuda_record_failure(be, __FILE__, __LINE__, "%s: head_dim %d is not supported (64, 128 or 256)", op,
                               a->head_dim);
    else if (l->block_size > ROWS)
        df_cuda_record_failure(be, __FILE__, __LINE__, "%s: block size %d is over %d", op, l->block_size, ROWS);
    else if ((long)a->kv_heads * chunks > 65535)
        df_cuda_record_failure(be, __FILE__, __LINE__, "%s: %d kv heads x %d row chunks exceed the grid", op,
                               a->kv_heads, chunks);
    else
        return true;
    return false;
}

template <typename K>
bool set_smem(DfBackend *be, K kernel, size_t bytes, const char *op) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) return true;
    df_cuda_record_failure(be, __FILE__, __LINE__, "%s: %zu bytes of shared memory: %s", op, bytes, cudaGetErrorString(e));
    return false;
}

/* Pairs of the two-block forward: ceil(blocks / 2) per sequence. */
int count_pairs(const DfBlockAttnLayout *l) {
    long n = 0;
    for (int s = 0; s < l->n_seqs; s++) n += (l->host_block_starts[s + 1] - l->host_block_starts[s] + 1) / 2;
    return (int)n;
}

/* Head dims 64 and 128: two blocks per CTA (k_block_attn_forward_pair). */
template <int D>
void launch_forward_pairs(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    int n_pairs = count_pairs(a->layout);
    if (n_pairs == 0) return;
    size_t smem = (size_t)(2 * ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
    if (!set_smem(be, k_block_attn_forward_pair<D>, smem, "block_attention")) return;
    dim3 grid((unsigned)n_pairs, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward_pair<D><<<grid, WARPS * 32, smem, df_cuda_state(be)->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s, n_pairs);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention");
}

/* Head dim 256: one block per CTA (two m-tiles of 16 x 256 accumulators would not fit the registers). */
template <int D>
void launch_forward(DfBackend *be, const DfBlockAttnArgs *a) {
    Shape s = shape_of(a);
    size_t smem = (size_t)(ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
    if (!set_smem(be, k_block_attn_forward<D>, smem, "block_attention")) return;
    dim3 grid((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_forward<D><<<grid, WARPS * 32, smem, df_cuda_state(be)->stream>>>(
        (bf16 *)a->out.ptr, (float *)a->lse.ptr, (const bf16 *)a->q.ptr, (const bf16 *)a->k_ctx.ptr,
        (const bf16 *)a->v_ctx.ptr, (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr, s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention");
}

/* Context items of the key-major kernel, counted as key_item decodes them. */
int count_ctx_items(const DfBlockAttnLayout *l) {
    long n = 0;
    for (int s = 0; s < l->n_seqs; s++) {
        int len = l->host_ctx_starts[s + 1] - l->host_ctx_starts[s];
        int nb = l->host_block_starts[s + 1] - l->host_block_starts[s];
        n += (long)((nb + CTX_CHUNK - 1) / CTX_CHUNK) * ((len + ROWS - 1) / ROWS);
    }
    return n > INT32_MAX / 2 ? -1 : (int)n;
}

template <int D>
void launch_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr) {
    DfCudaState *st = df_cuda_state(be);
    const DfBlockAttnLayout *l = a->layout;
    Shape s = shape_of(a);
    int n_ctx_items = count_ctx_items(l);
    if (n_ctx_items < 0) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention_backward: too many context tiles");
        return;
    }
    size_t smem_dq = (size_t)(2 * ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
    size_t smem_dkv = (size_t)(6 * ROWS) * (D + 8) * sizeof(bf16) + 4 * ROWS * sizeof(float);
    constexpr bool SPLIT = split_dkv<D>;
    constexpr int PART0 = SPLIT ? DKV_V : DKV_BOTH; /* the first (or only) key-major pass */
    bool ok = set_smem(be, k_block_attn_dq<D>, smem_dq, "block_attention_backward") &&
              set_smem(be, k_block_attn_dkv<D, PART0>, smem_dkv, "block_attention_backward");
    if constexpr (SPLIT) ok = ok && set_smem(be, k_block_attn_dkv<D, DKV_K>, smem_dkv, "block_attention_backward");
    if (!ok) return;

    size_t n_dsum = (size_t)a->heads * s.n_q, n_ctx = (size_t)l->n_ctx_rows * a->kv_heads * D;
    size_t bytes = (n_dsum + 2 * n_ctx) * sizeof(float);
    float *scratch = nullptr;
    DF_CUDA_RECORD(be, cudaMallocAsync((void **)&scratch, bytes, st->stream));
    st->bytes_in_use += bytes;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    float *dsum = scratch, *ctx_dk = scratch + n_dsum, *ctx_dv = ctx_dk + n_ctx;
    cudaError_t e = cudaMemsetAsync(ctx_dk, 0, 2 * n_ctx * sizeof(float), st->stream);
    if (e != cudaSuccess)
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention_backward: memset: %s", cudaGetErrorString(e));

    const bf16 *q = (const bf16 *)a->q.ptr, *kc = (const bf16 *)a->k_ctx.ptr, *vc = (const bf16 *)a->v_ctx.ptr;
    const bf16 *kb = (const bf16 *)a->k_blk.ptr, *vb = (const bf16 *)a->v_blk.ptr, *dout = (const bf16 *)gr->d_out.ptr;
    const float *lse = (const float *)a->lse.ptr;
    k_block_attn_dsum<D><<<(unsigned)((n_dsum + WARPS - 1) / WARPS), WARPS * 32, 0, st->stream>>>(
        dsum, dout, (const bf16 *)a->out.ptr, s.n_q, a->heads);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dO.O)");
    dim3 grid_q((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_dq<D><<<grid_q, WARPS * 32, smem_dq, st->stream>>>((bf16 *)gr->dq.ptr, lse, dsum, q, dout, kc, vc,
                                                                    kb, vb, s);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dq)");
    dim3 grid_kv((unsigned)(n_ctx_items + s.n_blocks), (unsigned)s.kv_heads);
    k_block_attn_dkv<D, PART0><<<grid_kv, WARPS * 32, smem_dkv, st->stream>>>(
        ctx_dk, ctx_dv, (bf16 *)gr->dk_blk.ptr, (bf16 *)gr->dv_blk.ptr, lse, dsum, q, dout, kc, vc, kb, vb, s,
        n_ctx_items);
    DF_CUDA_CHECK_LAUNCH(be, SPLIT ? "block_attention_backward (dv)" : "block_attention_backward (dk, dv)");
    if constexpr (SPLIT) { /* the dK pass: it writes neither output of the dV pass */
        k_block_attn_dkv<D, DKV_K><<<grid_kv, WARPS * 32, smem_dkv, st->stream>>>(
            ctx_dk, ctx_dv, (bf16 *)gr->dk_blk.ptr, (bf16 *)gr->dv_blk.ptr, lse, dsum, q, dout, kc, vc, kb, vb, s,
            n_ctx_items);
        DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dk)");
    }
    unsigned blocks = df_cuda_blocks(n_ctx / 2, 256);
    k_add_f32_to_bf16<<<blocks, 256, 0, st->stream>>>((bf16 *)gr->dk_ctx.ptr, ctx_dk, n_ctx);
    k_add_f32_to_bf16<<<blocks, 256, 0, st->stream>>>((bf16 *)gr->dv_ctx.ptr, ctx_dv, n_ctx);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (context sums)");
    e = cudaFreeAsync(scratch, st->stream);
    if (e != cudaSuccess)
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention_backward: free: %s", cudaGetErrorString(e));
    st->bytes_in_use -= bytes;
}

} // namespace

void df_cuda_block_attention(DfBackend *be, const DfBlockAttnArgs *a) {
    DfBuffer bufs[] = {a->q, a->k_ctx, a->v_ctx, a->k_blk, a->v_blk, a->out};
    if (!supported(be, a, "block_attention")) {
    } else if (misaligned(bufs, 6)) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention: q, k, v and out must be 16-byte aligned");
    } else if (a->head_dim == 64) {
        launch_forward_pairs<64>(be, a);
    } else if (a->head_dim == 128) {
        launch_forward_pairs<128>(be, a);
    } else {
        launch_forward<256>(be, a);
    }
}

void df_cuda_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    DfBuffer bufs[] = {a->q, a->k_ctx, a->v_ctx, a->k_blk, a->v_blk, a->out,
                       g->d_out, g->dq, g->dk_ctx, g->dv_ctx, g->dk_blk, g->dv_blk};
    if (!supported(be, a, "block_attention_backward")) {
    } else if (misaligned(bufs, 12)) {
        df_cuda_record_failure(be, __FILE__, __LINE__,
                               "block_attention_backward: q, k, v, out and the gradients must be 16-byte aligned");
    } else if (a->head_dim == 64) {
        launch_backward<64>(be, a, g);
    } else if (a->head_dim == 128) {
        launch_backward<128>(be, a, g);
    } else {
        launch_backward<256>(be, a, g);
    }
}
