/* The parts of the DFlash block attention kernels (cuda_block_attention.cu,
 * the forward; cuda_block_attention_backward.cu, the backward) that both
 * use: the layout every kernel gets by value, the query rows of a chunk, the
 * tile loaders, the warp-level products over 64-row tiles, and the host-side
 * checks. The design is described at the top of cuda_block_attention.cu.
 * Everything is in an anonymous namespace: each kernel file has its own. */
#ifndef DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_TILES_H
#define DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_TILES_H

#include <math.h>

#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/common/cuda_mma.h"
#include "backend/cuda/common/cuda_online_softmax.h"
#include "backend/cuda/common/cuda_wgmma.h"

namespace {

constexpr int WARPS = 4;
constexpr int ROWS = 16 * WARPS; /* query rows per chunk; also keys per dK/dV tile */
constexpr int BN = 64;           /* keys per tile of the query-major kernels */
constexpr float LOG2E = 1.4426950408889634f;

/* CTAs an SM that the mma.sync kernels' registers are capped for
 * (__launch_bounds__'s second argument: at most 65536 / (CTAs x 128)
 * registers a thread). Uncapped at head_dim 64 they take 220 (forward), 168
 * (dQ) and 174 (dK/dV) registers: two, three and two CTAs an SM, too few
 * warps to hide the latencies of their short key loops. Hopper's 227 KiB of
 * shared memory holds three forward or dK/dV CTAs (54 and 55 KiB) and four
 * dQ ones (54 KiB): capped for those, the forward and dK/dV spill 64 and
 * 16 bytes, dQ 100. Recipe shape (H100): forward 0.412 -> 0.349 ms; backward
 * 1.125 -> 0.958-1.027 ms with the own-key items of packed chunks
 * (cuda_block_attention_keys.h) in both; dQ uncapped instead 1.119-1.162.
 * Ampere's 164 KiB holds two: no cap there, nor at the other head dims, nor
 * on GPUs not measured (a native sm_100 or sm_120 build: the latter's
 * 100 KiB holds one). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
constexpr bool SMEM_227K = true; /* Hopper */
#else
constexpr bool SMEM_227K = false;
#endif
template <int D>
constexpr int forward_ctas = D == 64 && SMEM_227K ? 3 : 1;
template <int D>
constexpr int dq_ctas = D == 64 && SMEM_227K ? 4 : 1;
template <int D>
constexpr int dkv_ctas = D == 64 && SMEM_227K ? 3 : 1;

/* The query-major kernels hold a warp's Q fragments in registers across the
 * key tiles up to head_dim 128. At 256 the O (or dQ) accumulators alone take
 * 128 registers a thread, so Q is re-read from shared memory at each k-step
 * instead (as in cuda_attention.cu), which keeps them clear of spills. */
template <int D>
constexpr bool q_in_regs = D <= 128;

/* The layout and sizes every kernel needs, passed by value. */
struct Shape {
    const int32_t *ctx_starts, *block_starts, *anchors;
    int n_seqs, n_blocks, B, G, heads, kv_heads, n_q;
    int chunks; /* ceil(G*B / ROWS) */
    float scale, scale_log2;
    int window; /* 0: every context row below the anchor */
    int own_blocks; /* blocks whose own keys one key-major item takes (cuda_block_attention_keys.h) */
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

/* Packed chunks. Where a block's G*B rows of a kv head fill at most half a
 * chunk and are whole m-tiles (G*B % 16 == 0: 16 or 32 rows), a chunk holds
 * the rows of PACK = ROWS / (G*B) blocks of one sequence, block b's in rows
 * b*G*B.., so every warp's 16 rows are one block's. One block a chunk would
 * leave half of the chunk's rows (or three quarters) zero: idle warps in the
 * query-major kernels, wasted products and twice the visits in the key-major
 * one. PACK 1: chunk c of one block, as for every other shape. */
template <int PACK>
constexpr int pack_rows = ROWS / PACK; /* a block's rows in a packed chunk (PACK > 1) */

/* a[i] for i < N by selects, so that no loop indexes a register array (which would put it in local memory) */
template <int N>
__device__ __forceinline__ int pick(const int (&a)[N], int i) {
    int r = a[0];
#pragma unroll
    for (int t = 1; t < N; t++) r = i == t ? a[t] : r;
    return r;
}

/* Row i of a chunk of the PACK blocks j (j[b] < 0: no block, its rows
 * invalid); PACK 1: row i of chunk c of block j[0]. */
template <int D, int PACK>
__device__ __forceinline__ QRow chunk_row(const Shape &s, const int (&j)[PACK], int g, int c, int i) {
    if constexpr (PACK == 1) {
        return q_row<D>(s, j[0], g, c, i);
    } else {
        constexpr int GB = pack_rows<PACK>;
        int jb = pick(j, i / GB);
        QRow q = q_row<D>(s, jb < 0 ? 0 : jb, g, 0, i % GB);
        q.valid = jb >= 0;
        return q;
    }
}

/* How a ROWS-row tile sits in shared memory: rows of D+8 values (the
 * padding keeps ldmatrix free of bank conflicts), or the 128-byte swizzled
 * layout that wgmma reads (cuda_wgmma.h). */
enum TileLayout { PADDED, SW128 };

/* Where the 8 values from column col of row i of a tile go. */
template <int D, TileLayout L>
__device__ __forceinline__ bf16 *tile_at(bf16 *tile, int i, int col) {
    if constexpr (L == SW128) return (bf16 *)((unsigned char *)tile + sw128_offset(ROWS, i, col / 8));
    else return tile + i * (D + 8) + col;
}

/* The ROWS query-like rows (q or d_out) of a chunk of the PACK blocks j
 * (chunk_row) into a shared tile; zero past the group and for missing blocks. */
template <int D, int PACK, TileLayout L = PADDED>
__device__ void load_chunk_tile(bf16 *dst, const bf16 *src, const Shape &s, const int (&j)[PACK], int g, int c) {
    constexpr int CH = D / 8;
    for (int t = threadIdx.x; t < ROWS * CH; t += WARPS * 32) {
        int i = t / CH, col = (t % CH) * 8;
        QRow q = chunk_row<D, PACK>(s, j, g, c, i);
        cp_async16(tile_at<D, L>(dst, i, col), q.valid ? src + q.off + col : src, q.valid ? 16 : 0);
    }
}

/* Chunk c of block j's rows into a shared tile; zero past the group. */
template <int D, TileLayout L = PADDED>
__device__ void load_query_tile(bf16 *dst, const bf16 *src, const Shape &s, int j, int g, int c) {
    const int js[1] = {j};
    load_chunk_tile<D, 1, L>(dst, src, s, js, g, c);
}

/* Where the rows a thread copies of chunk c's ROWS query-like rows at
 * head_dim 128 (kv head g) come from, as byte offsets from the first row
 * of their block (0 past the group) and a mask of the rows in the group:
 * thread tid copies 16-byte chunk tid % 16 of rows tid / 16 + 8 i (i < 8),
 * of query head g*G + flat/B and block row flat%B. They are the same for
 * every block, so a kernel that loads many blocks' rows of one chunk (the
 * wgmma dK/dV, a visit each) finds them once: found again per visit, with
 * their divisions and stepping, they were a third of that kernel's
 * instructions (ncu). */
struct QueryRowsSw128 {
    uint32_t bytes[ROWS / 8];
    uint32_t in_group; /* bit i: row tid / 16 + 8 i is one of the group's */
};

__device__ __forceinline__ QueryRowsSw128 query_rows_sw128(const Shape &s, int g, int c, unsigned tid) {
    constexpr int D = 128, CH = D / 8, STEP = WARPS * 32 / CH; /* 16 chunks a row, 8 rows a pass */
    int i0 = (int)(tid / CH), flat = c * ROWS + i0, h = g * s.G + flat / s.B, r = flat % s.B, n_rows = s.G * s.B;
    QueryRowsSw128 q;
    q.in_group = 0;
#pragma unroll
    for (int it = 0; it < ROWS / STEP; it++, flat += STEP) {
        bool in = flat < n_rows;
        q.bytes[it] = in ? (uint32_t)((r * s.heads + h) * D + (int)(tid % CH) * 8) * (uint32_t)sizeof(bf16) : 0u;
        q.in_group |= (uint32_t)in << it;
        for (r += STEP; r >= s.B; r -= s.B) h++;
    }
    return q;
}

/* Those rows of block j of N sources (q, or q and d_out) into N sw128
 * tiles, as cp.async (the caller commits), by the 128 threads of a
 * warpgroup, tid its thread; a row 8 further sits 1024 bytes further in the
 * tile. Zeros past the group: a row there copies no bytes from the block's
 * first row (a valid address), so every source is the block's row pointer
 * plus a 32-bit offset. Choosing between two 64-bit pointers per row instead
 * made the compiler reload the sources from the parameter bank under each
 * row's predicate: about 260 instructions a visit in the dK/dV kernel for
 * its 18 copies a thread (SASS). */
template <int N>
__device__ __forceinline__ void load_query_rows_at_sw128(bf16 *const (&dst)[N], const bf16 *const (&src)[N],
                                                         const Shape &s, const QueryRowsSw128 &rows, int j,
                                                         unsigned tid) {
    constexpr int D = 128, CH = D / 8;
    size_t base = (size_t)j * s.B * s.heads * D;
    uint32_t sw = sw128_offset(ROWS, (int)(tid / CH), (int)(tid % CH));
    const unsigned char *block_rows[N];
#pragma unroll
    for (int k = 0; k < N; k++) block_rows[k] = (const unsigned char *)(src[k] + base);
#pragma unroll
    for (int it = 0; it < ROWS / 8; it++) {
        int bytes = rows.in_group >> it & 1 ? 16 : 0;
#pragma unroll
        for (int k = 0; k < N; k++)
            cp_async16((unsigned char *)dst[k] + sw + it * 1024, block_rows[k] + rows.bytes[it], bytes);
    }
}

/* The chunk's rows of block j, found and loaded (the kernels that load one block's rows a chunk). */
template <int N>
__device__ __forceinline__ void load_query_rows_sw128(bf16 *const (&dst)[N], const bf16 *const (&src)[N], const Shape &s,
                                                      int j, int g, int c, unsigned tid) {
    load_query_rows_at_sw128<N>(dst, src, s, query_rows_sw128(s, g, c, tid), j, tid);
}

/* The wgmma kernels' walk over n tiles of keys in two buffers: tile kt + 1
 * comes in (load(buf, kt + 1): one cp.async group) while tile kt is used
 * (use(buf, kt)); tile 0's group was issued before. The fence hands each
 * tile to wgmma's async proxy; the last barrier keeps a buffer until every
 * warp is done with it. */
template <typename Load, typename Use>
__device__ __forceinline__ void walk_key_tiles(int n, Load load, Use use) {
    for (int kt = 0; kt < n; kt++) {
        int buf = kt & 1;
        if (kt + 1 < n) {
            load(buf ^ 1, kt + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        use(buf, kt);
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
}

/* Keys t0 .. t0 + 63 of a list of visible keys (key < n_ctx: context row
 * c0 + key; key < n_vis: block row block_row(key - n_ctx); zeros past them)
 * of kv head g, of K and V into sw128 tiles at head_dim 128, one cp.async
 * group, by THREADS threads: thread t copies chunk t % 16 of rows t / 16 +
 * (THREADS / 16) i, a row's source found once for both.
 *
 * A tile of context rows only (all but a block's last one or two) is 64
 * consecutive rows: its sources are one pointer stepped by a fixed stride,
 * where the general case finds each row's source by two comparisons and a
 * 64-bit product. The kernels that take these tiles are bound by instruction
 * issue and latency, not by the tensor pipe (ncu, docs/kernels.md), and the
 * general case was about half of the dQ kernel's instructions a tile. */
template <int THREADS, typename BlockRow>
__device__ __forceinline__ void load_list_kv_sw128(bf16 *sk, bf16 *sv, const bf16 *kc, const bf16 *vc,
                                                   const bf16 *kb, const bf16 *vb, const Shape &s, int c0,
                                                   int n_ctx, int n_vis, BlockRow block_row, int g, int t0) {
    constexpr int D = 128, CH = D / 8, STEP = THREADS / CH;
    int ch = threadIdx.x % CH, i0 = threadIdx.x / CH;
    size_t ldk = (size_t)s.kv_heads * D, col = (size_t)g * D + (size_t)ch * 8;
    unsigned char *dk = (unsigned char *)sk + sw128_offset(ROWS, i0, ch), *dv = (unsigned char *)sv + (dk - (unsigned char *)sk);
    if (t0 + BN <= n_ctx) { /* the same for every thread of the CTA */
        size_t o = (size_t)(c0 + t0 + i0) * ldk + col, step = (size_t)STEP * ldk;
        const bf16 *pk = kc + o, *pv = vc + o;
#pragma unroll
        for (int it = 0; it < BN / STEP; it++) {
            cp_async16(dk + it * STEP * 128, pk, 16);
            cp_async16(dv + it * STEP * 128, pv, 16);
            pk += step, pv += step;
        }
        cp_async_commit();
        return;
    }
#pragma unroll
    for (int it = 0; it < BN / STEP; it++) {
        int key = t0 + i0 + it * STEP;
        const bf16 *pk = kc, *pv = vc;
        int bytes = 0;
        if (key < n_ctx) {
            size_t o = (size_t)(c0 + key) * ldk + col;
            pk = kc + o, pv = vc + o, bytes = 16;
        } else if (key < n_vis) {
            size_t o = (size_t)block_row(key - n_ctx) * ldk + col;
            pk = kb + o, pv = vb + o, bytes = 16;
        }
        cp_async16(dk + it * STEP * 128, pk, bytes);
        cp_async16(dv + it * STEP * 128, pv, bytes);
    }
    cp_async_commit();
}

/* Block j's visible keys (context rows c0.. below the anchor, then the
 * block's own rows), by a 128-thread CTA (the wgmma forward a block a CTA
 * and the backward's dQ). */
__device__ __forceinline__ void load_visible_kv_sw128(bf16 *sk, bf16 *sv, const bf16 *kc, const bf16 *vc,
                                                      const bf16 *kb, const bf16 *vb, const Shape &s, int c0,
                                                      int anchor, int j, int g, int t0) {
    load_list_kv_sw128<WARPS * 32>(sk, sv, kc, vc, kb, vb, s, c0, anchor, anchor + s.B,
                                   [&](int r) { return j * s.B + r; }, g, t0);
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

/* The double buffering of the query-major kernels' key loop: the copy of
 * visible K/V tile kt + 1 (if there is one) into the buffers [2][BN][D+8]
 * not read at kt starts, then the copy of tile kt is waited for (this
 * thread's; the caller's barrier makes it everyone's). */
template <int D>
__device__ __forceinline__ void prefetch_next_visible_kv(bf16 *sk, bf16 *sv, const bf16 *kc, const bf16 *vc,
                                                         const bf16 *kb, const bf16 *vb, const Shape &s, int c0,
                                                         int anchor, int j, int g, int kt, int n_kv) {
    constexpr int SD = D + 8;
    if (kt + 1 < n_kv) {
        int next = ((kt & 1) ^ 1) * BN * SD;
        load_visible_tile<D>(sk + next, kc, kb, s, c0, anchor, j, g, (kt + 1) * BN);
        load_visible_tile<D>(sv + next, vc, vb, s, c0, anchor, j, g, (kt + 1) * BN);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
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

/* The forward's output rows of a warp, rows 16 warp + lane/4 (+ 8) of chunk
 * c of block j: row sums over the quad, O / l into out, the lse (natural
 * log); rows past the group are not written. l > 0: every row sees its own
 * block. */
template <int D>
__device__ __forceinline__ void store_output_rows(bf16 *out, float *lse, const Shape &s, int j, int g, int c, int warp,
                                                  int lane, const float (&o)[D / 8][4], const float (&m_run)[2],
                                                  const float (&l_run)[2]) {
    store_normalized_rows<D>(out, lse, true, o, m_run, l_run, lane,
                             [&](int i) { return q_row<D>(s, j, g, c, warp * 16 + i); });
}

/* dQ's rows of a warp, rows 16 warp + lane/4 (+ 8) of a chunk of the PACK
 * blocks j (chunk_row), written once; invalid rows are not written. */
template <int D, int PACK>
__device__ __forceinline__ void store_dq_rows(bf16 *dq, const Shape &s, const int (&j)[PACK], int g, int c, int warp,
                                              int lane, const float (&acc)[D / 8][4]) {
    int gr = lane / 4, tq = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        QRow qr = chunk_row<D, PACK>(s, j, g, c, warp * 16 + gr + 8 * r);
        if (!qr.valid) continue;
        bf16 *row = dq + qr.off;
#pragma unroll
        for (int d = 0; d < D / 8; d++)
            *(__nv_bfloat162 *)(row + d * 8 + 2 * tq) = __floats2bfloat162_rn(acc[d][2 * r], acc[d][2 * r + 1]);
    }
}

/* Block j's chunk c of dQ rows (the kernels of one block a chunk). */
template <int D>
__device__ __forceinline__ void store_dq_rows(bf16 *dq, const Shape &s, int j, int g, int c, int warp, int lane,
                                              const float (&acc)[D / 8][4]) {
    const int js[1] = {j};
    store_dq_rows<D, 1>(dq, s, js, g, c, warp, lane, acc);
}

/* --- host side, shared by the forward and backward launches ------------------------ */

inline Shape shape_of(const DfBlockAttnArgs *a) {
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
    s.own_blocks = 1;
    return s;
}

inline bool misaligned(const DfBuffer *bufs, int n) {
    uintptr_t bits = 0;
    for (int i = 0; i < n; i++) bits |= (uintptr_t)bufs[i].ptr;
    return (bits & 15u) != 0;
}

/* Blocks a chunk (packed chunks, at pack_rows): ROWS / (G*B) where G*B is
 * whole m-tiles and at most half a chunk; else 1. The launches build packed
 * kernels at head_dim 64 only. */
inline int packing(const Shape &s) {
    int rows = s.G * s.B;
    if (rows % 16 != 0 || 2 * rows > ROWS) return 1;
    return ROWS / rows;
}

/* What the kernels cannot take, as a recorded failure; true when it can run. */
inline bool supported(DfBackend *be, const DfBlockAttnArgs *a, const char *op) {
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

} // namespace

#endif
