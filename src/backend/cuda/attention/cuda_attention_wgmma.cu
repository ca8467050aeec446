/* Causal GQA attention over a packed batch at head_dim 128 on Hopper's
 * wgmma (sm_90a): the scheme of cuda_attention.cu (online softmax in fp32
 * with base-2 exponentials, K/V tiles of 64 rows double-buffered with
 * cp.async, the probabilities handed from accumulators to A fragments in
 * registers), with the products as warpgroup MMAs (cuda_wgmma.h). The
 * mma.sync kernel still serves head_dims 64 and 256 and the variant
 * attention_mma_sync.
 *
 * Why: at mma.sync every warp reads each K and V fragment of its rows from
 * shared memory itself; the 8B training step's target forward ran this op
 * at about 190 TFLOP/s. Here a warpgroup (4 warps) owns 64 query rows and
 * each product reads its tiles once for all of them:
 *   S = Q K^T   (Q and K K-major sw128 tiles),
 *   O += P V    (P from registers, V an MN-major sw128 tile).
 * A CTA is two warpgroups over 128 query rows of one (sequence, head); they
 * share each K/V tile brought into shared memory, as the 128-row mma.sync
 * blocks do. Warp w of a warpgroup keeps the mma.sync accumulator layout
 * of its 16 rows, so the mask, the softmax and the epilogue are those of
 * cuda_attention.cu (cuda_attention_rows.h).
 *
 * Grid: x = head, y = sequence, z = query tile of 128 rows (reversed: the
 * longest first); tiles past a sequence's end exit. The tile is the slowest
 * index so that the CTAs start longest first over the whole grid, not only
 * within each (head, sequence): with x = tile, the last (head, sequence)
 * started its longest tile among the last CTAs and the rest of the GPU
 * waited for it (bench_attention at 2 x 2048 tokens: 0.213 ms that way,
 * 0.174 this way; docs/kernels.md). */
#include <math.h>

#include "backend/cuda/attention/cuda_attention_rows.h"
#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/common/cuda_wgmma.h"

namespace {

constexpr int D = 128;                 /* head_dim of this kernel */
constexpr int WG_ROWS = 64;            /* query rows a warpgroup */
constexpr int WGS = 2;                 /* warpgroups a CTA */
constexpr int BM = WGS * WG_ROWS;      /* query rows a CTA */
constexpr int BN = 64;                 /* keys a tile */
constexpr int THREADS = WGS * 128;
constexpr int TILE = 64 * D;           /* values of a 64-row sw128 tile (16 KiB) */
/* Q (one tile a warpgroup), K[2], V[2], and room to align the tiles to 1024 bytes */
constexpr size_t SMEM = (size_t)(WGS + 4) * TILE * sizeof(bf16) + 1024;

/* Rows row0 .. row0+63 of a [len, ld] head slice into a 64-row sw128 tile,
 * zeros past len, as cp.async (the caller commits). Thread t copies 16-byte
 * chunk t % 16 of rows t / 16 + 16 i: a row 16 further sits 2048 bytes
 * further in the tile, its swizzle unchanged. A whole tile (every one but a
 * sequence's last) steps one source pointer by 16 rows instead of testing
 * and multiplying out each row (as the block attention's context tiles do,
 * cuda_block_attention_tiles.h). */
__device__ __forceinline__ void load_rows_sw128(bf16 *dst, const bf16 *base, int ld, int row0, int len) {
    constexpr int CH = D / 8, STEP = THREADS / CH;
    int ch = threadIdx.x % CH, i0 = threadIdx.x / CH;
    unsigned char *d = (unsigned char *)dst + sw128_offset(64, i0, ch);
    if (row0 + 64 <= len) { /* the same for every thread of the CTA */
        const bf16 *p = base + (size_t)(row0 + i0) * ld + ch * 8;
        size_t step = (size_t)STEP * ld;
#pragma unroll
        for (int it = 0; it < 64 / STEP; it++, p += step) cp_async16(d + it * STEP * 128, p, 16);
        return;
    }
#pragma unroll
    for (int it = 0; it < 64 / STEP; it++) {
        int row = row0 + i0 + it * STEP;
        bool ok = row < len;
        cp_async16(d + it * STEP * 128, ok ? base + (size_t)row * ld + ch * 8 : base, ok ? 16 : 0);
    }
}

/* The CTA's position: its sequence's rows, its warpgroup's and warp's. */
struct AttnTile {
    int t0, len, q0, h, wg, wg_row0, wrow0, n_kv;
    bool wg_active; /* the warpgroup has rows in the sequence */
    const bf16 *qb, *kb, *vb;
    int ldq, ldk;
};

__device__ __forceinline__ AttnTile attn_tile(const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seq_starts,
                                              int heads, int kv_heads) {
    AttnTile a;
    int tile = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, s = blockIdx.y;
    a.h = h;
    a.t0 = seq_starts[s], a.len = seq_starts[s + 1] - a.t0;
    a.q0 = tile * BM;
    int kvh = h / (heads / kv_heads);
    a.ldq = heads * D, a.ldk = kv_heads * D;
    a.qb = q + (size_t)a.t0 * a.ldq + (size_t)h * D;
    a.kb = k + (size_t)a.t0 * a.ldk + (size_t)kvh * D;
    a.vb = v + (size_t)a.t0 * a.ldk + (size_t)kvh * D;
    a.wg = threadIdx.x / 128;
    a.wg_row0 = a.q0 + a.wg * WG_ROWS; /* its last key tile starts there */
    a.wrow0 = a.wg_row0 + threadIdx.x / 32 % 4 * 16;
    a.wg_active = a.wg_row0 < a.len;
    int kv_end = a.len < a.q0 + BM ? a.len : a.q0 + BM;
    a.n_kv = (kv_end + BN - 1) / BN;
    return a;
}

/* One key tile at a time: S = Q K_j^T, its softmax, O += P V_j, each
 * product waited for; the other warpgroups of the SM (two CTAs) fill the
 * tensor pipe meanwhile. A pipelined form (S_{j+1} in flight with P_j V_j,
 * FlashAttention-3's intra-warpgroup overlap) needs P_j, S_{j+1} and O live
 * at once, 168 registers, one CTA an SM, and measured slower (docs/kernels.md). */
__global__ void __launch_bounds__(THREADS, 2) /* two CTAs an SM: at most 128 registers */
    k_flash_attention_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                            const int32_t *seq_starts, int n_tokens, int heads, int kv_heads, float scale_log2) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = aligned_tiles(smem_raw); /* [WGS][TILE] */
    bf16 *sk = sq + WGS * TILE;         /* [2][TILE] */
    bf16 *sv = sk + 2 * TILE;           /* [2][TILE] */
    AttnTile a = attn_tile(q, k, v, seq_starts, heads, kv_heads);
    if (a.q0 >= a.len) return;
    int g = threadIdx.x % 32 / 4, tq = threadIdx.x % 4;

#pragma unroll
    for (int w = 0; w < WGS; w++) load_rows_sw128(sq + w * TILE, a.qb, a.ldq, a.q0 + w * WG_ROWS, a.len);
    load_rows_sw128(sk, a.kb, a.ldk, 0, a.len);
    load_rows_sw128(sv, a.vb, a.ldk, 0, a.len);
    cp_async_commit();

    float o[D / 8][4], sc[8][4], alpha[2];
    uint32_t pa[4][4];
    zero_acc(o);
    zero_acc(sc); /* S starts from zero at each tile (its first k-step adds nothing) */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; /* rows g and g + 8 */

    for (int j = 0; j < a.n_kv; j++) {
        int buf = j & 1;
        if (j + 1 < a.n_kv) {
            load_rows_sw128(sk + (buf ^ 1) * TILE, a.kb, a.ldk, (j + 1) * BN, a.len);
            load_rows_sw128(sv + (buf ^ 1) * TILE, a.vb, a.ldk, (j + 1) * BN, a.len);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        /* the warpgroup's rows see keys of this tile: it does not start past its diagonal tile */
        if (a.wg_active && j * BN <= a.wg_row0) {
            wgmma_fence();
            tile_times_tile_t(sc, sq + a.wg * TILE, sk + buf * TILE); /* S = Q K^T */
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_acc(sc);
            causal_softmax_tile(sc, m_run, l_run, alpha, j * BN, a.wrow0 + g, (j + 1) * BN - 1 > a.wrow0, tq,
                                scale_log2);
            scale_acc_rows(o, alpha);
            pack_a_fragments(pa, sc);
            wgmma_fence(); /* o was rescaled above */
            frags_times_tile(o, pa, sv + buf * TILE); /* O += P V */
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_acc(o);
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }
    store_attention_rows<D>(out, lse, o, m_run, l_run, a.wrow0, a.len, a.t0, a.ldq, a.h, n_tokens,
                            threadIdx.x % 32);
}

} // namespace

void df_cuda_attention_wgmma(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                             const DfPackedBatch *batch, int heads, int kv_heads, float scale) {
    DfCudaState *st = df_cuda_state(be);
    if (!df_cuda_set_smem(be, k_flash_attention_wgmma, SMEM, "attention")) return;
    unsigned tiles = (unsigned)((batch->max_seq_len + BM - 1) / BM);
    dim3 grid((unsigned)heads, (unsigned)batch->n_seqs, tiles);
    k_flash_attention_wgmma<<<grid, THREADS, SMEM, st->stream>>>(
        (bf16 *)out.ptr, (float *)lse.ptr, (const bf16 *)q.ptr, (const bf16 *)k.ptr, (const bf16 *)v.ptr,
        (const int32_t *)batch->seq_starts.ptr, batch->n_tokens, heads, kv_heads, scale * 1.4426950408889634f);
    DF_CUDA_CHECK_LAUNCH(be, "attention (wgmma)");
}
