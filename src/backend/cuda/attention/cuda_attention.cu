/* Causal GQA attention over a packed batch, flash-style (FlashAttention-2
 * scheme, written here from the published algorithm): a block of 4 warps
 * owns 64 (or 128) query rows of one (sequence, head); it walks the
 * key/value tiles of 64 rows from the sequence start up to the diagonal,
 * keeping a running row max and row sum (online softmax, fp32, base-2
 * exponentials), so no score matrix larger than a block's rows x 64 ever
 * exists, and only in registers.
 *
 * Tensor cores: S = Q K^T and O += P V are mma.sync m16n8k16 (bf16 in, fp32
 * accumulate); each warp owns 16 (or 32) query rows; head dims 64, 128 and
 * 256. With 16 (and head dim up to 128), Q stays in
 * registers as mma A fragments; K and V tiles are double-buffered in shared memory, filled with
 * cp.async (rows past the sequence end are zero-filled, never read), read
 * with ldmatrix (V with .trans, since PV needs V as the column operand). The
 * probabilities P go from the S accumulators straight into A fragments: the
 * m16n8 accumulator layout of two adjacent n-tiles is the m16k16 A layout.
 * Rows are padded by 16 bytes so that the 8 row addresses of an ldmatrix
 * fall in different banks.
 *
 * Grid: x = query tile (reversed: the longest tiles, near sequence ends,
 * start first), y = head, z = sequence; tiles past a sequence's end exit.
 *
 * Head dim 128 runs on Hopper's wgmma instead (cuda_attention_wgmma.cu),
 * unless the variant attention_mma_sync asks for this kernel, and other head
 * dims on CUDA cores: the table ROUTES at the end says which kernel runs. */
#include <math.h>

#include "backend/cuda/attention/cuda_attention_rows.h"
#include "backend/cuda/common/cuda_internal.h"

#define BN 64 /* key rows per tile */
#define WARPS 4

/* Rows row0 .. row0+ROWS-1 of a [len, ld] head slice into shared [ROWS][SD]. */
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *base, int ld, int row0, int len) {
    constexpr int SD = D + 8, CHUNKS = D / 8;
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += WARPS * 32) {
        int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        int row = row0 + r;
        bool ok = row < len;
        cp_async16(dst + r * SD + col, ok ? base + (size_t)row * ld + col : base, ok ? 16 : 0);
    }
}

/* MT: m-tiles of 16 query rows per warp. MT 1 keeps Q's fragments in
 * registers; MT 2 (128 rows per block) reloads them from shared memory at
 * each k-step but reuses every K and V fragment for two m-tiles. At head
 * dim 256 (MT 1) the output accumulators alone take 128 registers a thread,
 * so Q is read from shared memory there too instead of spilling. */
template <int D, int MT>
__global__ void __launch_bounds__(WARPS * 32) k_flash_attention(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                                 const bf16 *v, const int32_t *seq_starts,
                                                                 int n_tokens, int heads, int kv_heads,
                                                                 float scale_log2) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8, BMT = WARPS * 16 * MT;
    constexpr bool Q_IN_REGS = MT == 1 && D <= 128;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw;
    bf16 *sk = sq + BMT * SD;     /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD;  /* [2][BN][SD] */

    int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int t0 = seq_starts[s], len = seq_starts[s + 1] - t0;
    int q0 = tile * BMT;
    if (q0 >= len) return;
    int kvh = h / (heads / kv_heads);
    int ldq = heads * D, ldk = kv_heads * D;
    const bf16 *qb = q + (size_t)t0 * ldq + (size_t)h * D;
    const bf16 *kb = k + (size_t)t0 * ldk + (size_t)kvh * D;
    const bf16 *vb = v + (size_t)t0 * ldk + (size_t)kvh * D;

    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    int kv_end = len < q0 + BMT ? len : q0 + BMT;
    int n_kv = (kv_end + BN - 1) / BN; /* key tiles up to the block's last row */
    int wrow0 = q0 + warp * 16 * MT;  /* this warp's first row, in the sequence */

    load_tile<D, BMT>(sq, qb, ldq, q0, len);
    load_tile<D, BN>(sk, kb, ldk, 0, len);
    load_tile<D, BN>(sv, vb, ldk, 0, len);
    cp_async_commit();

    uint32_t qf[Q_IN_REGS ? KSTEPS : 1][4];
    float o[MT][DTILES][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int d = 0; d < DTILES; d++) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
    /* per m-tile, this thread's rows g and g + 8 */
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;

    for (int j = 0; j < n_kv; j++) {
        int buf = j & 1;
        if (j + 1 < n_kv) {
            load_tile<D, BN>(sk + (buf ^ 1) * BN * SD, kb, ldk, (j + 1) * BN, len);
            load_tile<D, BN>(sv + (buf ^ 1) * BN * SD, vb, ldk, (j + 1) * BN, len);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (Q_IN_REGS && j == 0) {
#pragma unroll
            for (int kk = 0; kk < (Q_IN_REGS ? KSTEPS : 1); kk++)
                ldmatrix_x4(qf[kk], sq + (warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
        }
        /* a warp whose rows all precede this key tile has nothing to do in it */
        if (j * BN <= wrow0 + 16 * MT - 1) {
            const bf16 *skb = sk + buf * BN * SD, *svb = sv + buf * BN * SD;

            /* S = Q K^T: per m-tile 16 rows x BN keys, as n-tiles of 8 keys */
            float sc[MT][BN / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < BN / 8; n++) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (Q_IN_REGS) {
#pragma unroll
                        for (int r = 0; r < 4; r++) qa[mt][r] = qf[Q_IN_REGS ? kk : 0][r];
                    } else {
                        ldmatrix_x4(qa[mt], sq + (warp * 16 * MT + mt * 16 + (lane & 15)) * SD + kk * 16 +
                                                (lane >> 4) * 8);
                    }
                }
#pragma unroll
                for (int np = 0; np < BN / 16; np++) {
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

            /* scale to base 2, mask keys past each row, online softmax */
            bool need_mask = (j + 1) * BN - 1 > wrow0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float alpha[2];
                causal_softmax_tile(sc[mt], m_run[mt], l_run[mt], alpha, j * BN, wrow0 + mt * 16 + g, need_mask, tq,
                                    scale_log2);
                scale_acc_rows(o[mt], alpha);
            }

            probs_times_tile_mt<D, MT>(o, sc, svb, lane); /* O += P V */
        }
        __syncthreads(); /* this buffer is refilled in the next iteration */
    }

    /* finish: row sums over the quad, normalize, store valid rows */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        store_attention_rows<D>(out, lse, o[mt], m_run[mt], l_run[mt], wrow0 + mt * 16, len, t0, ldq, h, n_tokens, lane);
}

/* The shared memory of k_flash_attention<D, MT>: Q + 2 K + 2 V tiles. */
static constexpr size_t mma_sync_smem(int d, int mt) {
    return (size_t)(WARPS * 16 * mt + 4 * BN) * (d + 8) * sizeof(bf16);
}

template <int D, int MT>
static void launch(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                   const DfPackedBatch *batch, int heads, int kv_heads, float scale) {
    DfCudaState *st = df_cuda_state(be);
    constexpr int BMT = WARPS * 16 * MT;
    constexpr size_t smem = mma_sync_smem(D, MT);
    if (!df_cuda_set_smem(be, k_flash_attention<D, MT>, smem, "attention")) return;
    dim3 grid((unsigned)((batch->max_seq_len + BMT - 1) / BMT), (unsigned)heads, (unsigned)batch->n_seqs);
    k_flash_attention<D, MT><<<grid, WARPS * 32, smem, st->stream>>>(
        (bf16 *)out.ptr, (float *)lse.ptr, (const bf16 *)q.ptr, (const bf16 *)k.ptr, (const bf16 *)v.ptr,
        (const int32_t *)batch->seq_starts.ptr, batch->n_tokens, heads, kv_heads, scale * 1.4426950408889634f);
    DF_CUDA_CHECK_LAUNCH(be, "attention");
}

/* Sequences at least this long take the 128-row blocks when the choice is
 * automatic: on the H200 at 8 x 2048 tokens, 32/8 heads of 128, they ran the
 * op at 261 TFLOP/s against 202 for 64-row blocks; short sequences keep the
 * smaller blocks, which waste less on the causal diagonal and fill the GPU
 * with more of them. */
#define WIDE_MIN_SEQ_LEN 512

typedef void (*AttentionLaunch)(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                                const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale);

template <int D, int MT>
static void mma_sync_rows(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                          const DfPackedBatch *batch, int heads, int kv_heads, int /* head_dim: D */, float scale) {
    launch<D, MT>(be, out, lse, q, k, v, batch, heads, kv_heads, scale);
}

static void wgmma_rows(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                       const DfPackedBatch *batch, int heads, int kv_heads, int /* head_dim: 128 */, float scale) {
    df_cuda_attention_wgmma(be, out, lse, q, k, v, batch, heads, kv_heads, scale);
}

/* One row per head dim and tier; the first row of the head dim (0: any)
 * that the GPU's tier and the variants allow, and whose 64-row blocks fit
 * the GPU's shared memory, runs: 64-row blocks (16 rows a warp) or, for
 * long sequences or attention_rows_per_warp 32, 128-row blocks where they
 * fit too. smem64 and smem128: the shared memory each needs (0: none to
 * check: the wgmma kernel runs on Hopper only, the CUDA-core one needs
 * little). */
typedef struct AttentionRoute {
    int head_dim;
    DfCudaTier tier;
    AttentionLaunch rows64, rows128;
    size_t smem64, smem128;
    const char *why;
} AttentionRoute;

static const AttentionRoute ROUTES[] = {
    {128, DF_TIER_WGMMA, wgmma_rows, wgmma_rows, 0, 0,
     "two warpgroups over 128 rows share each K/V tile: 8 x 2048 in 0.641 ms (H100), cuda_attention_wgmma.cu"},
    {64, DF_TIER_MMA_SYNC, mma_sync_rows<64, 1>, mma_sync_rows<64, 2>, mma_sync_smem(64, 1), mma_sync_smem(64, 2),
     "the drafters' small heads; no wgmma kernel"},
    {128, DF_TIER_MMA_SYNC, mma_sync_rows<128, 1>, mma_sync_rows<128, 2>, mma_sync_smem(128, 1),
     mma_sync_smem(128, 2), "the portable tier (variant attention_mma_sync): GPUs without wgmma"},
    {256, DF_TIER_MMA_SYNC, mma_sync_rows<256, 1>, mma_sync_rows<256, 1>, mma_sync_smem(256, 1),
     mma_sync_smem(256, 1),
     "hybrid targets (Qwen3.5/3.6): 165 KiB of shared memory (more than an A100's 163), one block an SM"},
    {0, DF_TIER_CUDA_CORES, df_cuda_attention_generic, df_cuda_attention_generic, 0, 0,
     "any other head dim up to 256 on CUDA cores (cuda_attention_generic.cu), and GPUs whose shared memory the "
     "rows above do not fit"},
};

static const AttentionRoute *route_of(const DfCudaState *st, int head_dim) {
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const AttentionRoute *r = &ROUTES[i];
        if (r->head_dim != head_dim && r->head_dim != 0) continue;
        if (!df_cuda_tier_allows(st, r->tier, st->variant.attention_mma_sync)) continue;
        if (!df_cuda_smem_fits(st, r->smem64)) continue;
        return r;
    }
    return NULL; /* not reached: the last row takes any head dim */
}

void df_cuda_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                       const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    const DfCudaState *st = df_cuda_state(be);
    int rows = st->variant.attention_rows_per_warp;
    bool wide = rows == 32 || (rows == 0 && batch->max_seq_len >= WIDE_MIN_SEQ_LEN);
    if (batch->n_seqs > 65535 || heads > 65535) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "attention: %d sequences x %d heads exceed the grid limits",
                               batch->n_seqs, heads);
        return;
    }
    if (((uintptr_t)q.ptr | (uintptr_t)k.ptr | (uintptr_t)v.ptr | (uintptr_t)out.ptr) & 15u) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "attention: q, k, v and out must be 16-byte aligned");
        return;
    }
    const AttentionRoute *r = route_of(st, head_dim);
    wide = wide && df_cuda_smem_fits(st, r->smem128);
    (wide ? r->rows128 : r->rows64)(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
}
