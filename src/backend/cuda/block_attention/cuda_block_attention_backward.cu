/* DFlash block attention on CUDA, the backward (the scheme is described at
 * the top of cuda_block_attention.cu; the shared tiles and products are in
 * cuda_block_attention_tiles.h, the key-major items in
 * cuda_block_attention_keys.h). */
#include "backend/cuda/block_attention/cuda_block_attention_keys.h"
#include "backend/cuda/block_attention/cuda_block_attention_launch.h"
#include "backend/cuda/block_attention/cuda_block_attention_wgmma.h"

namespace {

/* What one key-major (dK/dV) launch accumulates. Up to head_dim 128 both in
 * one pass. At 256 the two [16 x 256] accumulators of a warp would take 256
 * registers a thread, so a dV pass (P only) and a dK pass (P and dP) run one
 * after the other, both recomputing P: 5 products per tile instead of 4. */
enum DkvPart { DKV_BOTH, DKV_V, DKV_K };
template <int D>
constexpr bool split_dkv = D > 128;

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
        prefetch_next_visible_kv<D>(sk, sv, kc, vc, kb, vb, s, c0, anchor, j, g, kt, n_kv);
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
    store_dq_rows<D>(dq, s, j, g, c, warp, lane, acc);
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

    add_key_sums<D, DO_K, DO_V>(s, k, g, kw0, lane, dk, dv, ctx_dk, ctx_dv, dk_blk, dv_blk);
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

/* WGMMA: steps 2 and 3 on the wgmma kernels (cuda_block_attention_backward_wgmma.cu, head_dim 128). */
template <int D, bool WGMMA>
void launch_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *gr) {
    static_assert(!WGMMA || D == 128, "the wgmma backward is head_dim 128's");
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
    bool ok = df_cuda_set_smem(be, k_block_attn_dq<D>, smem_dq, "block_attention_backward") &&
              df_cuda_set_smem(be, k_block_attn_dkv<D, PART0>, smem_dkv, "block_attention_backward");
    if constexpr (SPLIT)
        ok = ok && df_cuda_set_smem(be, k_block_attn_dkv<D, DKV_K>, smem_dkv, "block_attention_backward");
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
    constexpr bool wgmma = WGMMA;
    dim3 grid_q((unsigned)s.n_blocks, (unsigned)(s.kv_heads * s.chunks));
    if (wgmma) {
        df_cuda_block_attn_dq_wgmma(be, a, gr, dsum);
    } else {
        k_block_attn_dq<D><<<grid_q, WARPS * 32, smem_dq, st->stream>>>((bf16 *)gr->dq.ptr, lse, dsum, q, dout, kc,
                                                                        vc, kb, vb, s);
        DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dq)");
    }
    dim3 grid_kv((unsigned)(n_ctx_items + s.n_blocks), (unsigned)s.kv_heads);
    if (wgmma) {
        df_cuda_block_attn_dkv_wgmma(be, a, gr, dsum, ctx_dk, ctx_dv, n_ctx_items);
    } else {
        k_block_attn_dkv<D, PART0><<<grid_kv, WARPS * 32, smem_dkv, st->stream>>>(
            ctx_dk, ctx_dv, (bf16 *)gr->dk_blk.ptr, (bf16 *)gr->dv_blk.ptr, lse, dsum, q, dout, kc, vc, kb, vb, s,
            n_ctx_items);
        DF_CUDA_CHECK_LAUNCH(be, SPLIT ? "block_attention_backward (dv)" : "block_attention_backward (dk, dv)");
    }
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

/* The tiers' backwards for the dispatch table (cuda_block_attention_dispatch.cu). */
void df_cuda_block_attn_backward_mma_sync_64(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    launch_backward<64, false>(be, a, g);
}

void df_cuda_block_attn_backward_mma_sync_128(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    launch_backward<128, false>(be, a, g);
}

void df_cuda_block_attn_backward_mma_sync_256(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    launch_backward<256, false>(be, a, g);
}

void df_cuda_block_attn_backward_wgmma_128(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    launch_backward<128, true>(be, a, g);
}
