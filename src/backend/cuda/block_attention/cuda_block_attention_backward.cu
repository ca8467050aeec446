/* DFlash block attention on CUDA, the backward (the scheme is described at
 * the top of cuda_block_attention.cu; the shared tiles and products are in
 * cuda_block_attention_tiles.h, the key-major items in
 * cuda_block_attention_keys.h). */
#include <type_traits>

#include "backend/cuda/block_attention/cuda_block_attention_keys.h"
#include "backend/cuda/block_attention/cuda_block_attention_pairs.h"
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

/* dQ, query-major. Grid: x = group of PACK neighbouring blocks (reversed: the
 * later, longer ones first), y = kv head * chunks. The CTA walks the group's
 * one list of keys (NeighbourBlocks); PACK 1: one block's chunk c, the list
 * its visible keys; PACK > 1 (packed chunks, chunk_row): warp w's rows are
 * block w / (WARPS / PACK)'s, masked by what that block sees.
 * dq = sum over visible keys of dS K. */
template <int D, int PACK>
__global__ void __launch_bounds__(WARPS * 32, dq_ctas<D>) k_block_attn_dq(bf16 *dq, const float *lse, const float *dsum,
                                                               const bf16 *q, const bf16 *d_out, const bf16 *kc,
                                                               const bf16 *vc, const bf16 *kb, const bf16 *vb,
                                                               Shape s, int n_groups) {
    constexpr int SD = D + 8, KSTEPS = D / 16, DTILES = D / 8;
    constexpr bool Q_IN_REGS = q_in_regs<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw;
    bf16 *sdo = sq + ROWS * SD;
    bf16 *sk = sdo + ROWS * SD;  /* [2][BN][SD] */
    bf16 *sv = sk + 2 * BN * SD; /* [2][BN][SD] */

    NeighbourBlocks<PACK> nb = neighbour_blocks<PACK>(s, n_groups - 1 - (int)blockIdx.x);
    int g = blockIdx.y / s.chunks, c = blockIdx.y % s.chunks;
    int n_kv = (nb.n_vis + BN - 1) / BN;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int wb = PACK == 1 ? 0 : warp / (WARPS / PACK); /* the warp's block in the group */
    bool active = PACK == 1 ? c * ROWS + warp * 16 < s.G * s.B : wb < nb.n;
    SeenKeys seen = seen_keys(nb, s.B, wb);
    int js[PACK];
    present_blocks(nb, js);

    load_chunk_tile<D, PACK>(sq, q, s, js, g, c);
    load_chunk_tile<D, PACK>(sdo, d_out, s, js, g, c);
    load_list_tile<D, PACK>(sk, kc, kb, s, nb, g, 0);
    load_list_tile<D, PACK>(sv, vc, vb, s, nb, g, 0);
    cp_async_commit();

    /* per row (gr, gr + 8): lse in base 2 and dsum; rows past the group get
     * P = exp2(0 - inf) = 0 */
    float lse2[2], dsr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        QRow qr = chunk_row<D, PACK>(s, js, g, c, warp * 16 + gr + 8 * r);
        lse2[r] = qr.valid ? lse[qr.lse_idx] * LOG2E : INFINITY;
        dsr[r] = qr.valid ? dsum[qr.lse_idx] : 0.0f;
    }
    uint32_t qf[Q_IN_REGS ? KSTEPS : 1][4];
    float acc[DTILES][4];
    zero_acc(acc);

    for (int kt = 0; kt < n_kv; kt++) {
        int buf = kt & 1, t0 = kt * BN;
        prefetch_next_list_kv<D, PACK>(sk, sv, kc, vc, kb, vb, s, nb, g, kt, n_kv);
        __syncthreads();
        if constexpr (Q_IN_REGS)
            if (active && kt == 0)
#pragma unroll
                for (int kk = 0; kk < KSTEPS; kk++)
                    ldmatrix_x4(qf[kk], sq + (warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
        /* a tile none of whose keys the warp's block sees (another block's own rows) is skipped */
        if (active && seen.sees_any(t0, BN)) {
            const bf16 *skb = sk + buf * BN * SD, *svb = sv + buf * BN * SD;
            float p[8][4], dp[8][4];
            zero_acc(p);
            zero_acc(dp);
            if constexpr (Q_IN_REGS) rows_times_tile_t<D>(p, qf, skb, lane);
            else smem_rows_times_tile_t<D>(p, sq + warp * 16 * SD, skb, lane);
            smem_rows_times_tile_t<D>(dp, sdo + warp * 16 * SD, svb, lane);
            bool need_mask = !seen.sees_all_ctx(t0, BN);
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float pr = fast_exp2(p[n][e] * s.scale_log2 - lse2[e >> 1]);
                    if (need_mask && !seen.sees(t0 + n * 8 + 2 * tq + (e & 1))) pr = 0.0f;
                    dp[n][e] = pr * (dp[n][e] - dsr[e >> 1]) * s.scale; /* dS, the score scale folded in */
                }
            probs_times_tile<D>(acc, dp, skb, lane);
        }
        __syncthreads();
    }
    if (!active) return;
    store_dq_rows<D, PACK>(dq, s, js, g, c, warp, lane, acc);
}

/* dK, dV, key-major. Grid: x = item (context items, then the blocks' own keys), y = kv head.
 * Context sums go with atomics to ctx_dk/ctx_dv (fp32 [n_ctx_rows, kv_heads*D]);
 * block sums are added to dk_blk/dv_blk. A visit (Visit) is one chunk of
 * query rows: PACK 1, chunk c of one visitor block; PACK > 1, the rows of
 * PACK visitor blocks (packed chunks), a query row's visibility that of its
 * block: column col of S^T is block col / (ROWS / PACK)'s, which for the
 * accumulators' n-tile n (columns 8n..8n+7) is block n / (8 / PACK). */
template <int D, int PART, int PACK>
__global__ void __launch_bounds__(WARPS * 32, dkv_ctas<D>)
    k_block_attn_dkv(float *ctx_dk, float *ctx_dv, bf16 *dk_blk, bf16 *dv_blk, const float *lse, const float *dsum,
                     const bf16 *q, const bf16 *d_out, const bf16 *kc, const bf16 *vc, const bf16 *kb, const bf16 *vb,
                     Shape s, int n_ctx_items) {
    constexpr int SD = D + 8, DTILES = D / 8, NT_BLOCK = 8 / PACK; /* n-tiles of one visitor block */
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
    Visit<PACK> v;
    visitors_after(s, k, k.jb - 1, v);
    if (v.j[0] < 0) return; /* no block sees these keys */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int kw0 = warp * 16; /* this warp's keys in the tile */

    load_key_tile<D>(sk, kc, kb, s, k, g);
    if constexpr (DO_K) load_key_tile<D>(sv, vc, vb, s, k, g); /* V only feeds dP */
    load_visit<D, PACK>(sq, sdo, slse, sds, q, d_out, lse, dsum, s, v, g);

    float dk[DO_K ? DTILES : 1][4], dv[DO_V ? DTILES : 1][4];
    zero_acc(dk);
    zero_acc(dv);
    for (int buf = 0;; buf ^= 1) {
        Visit<PACK> nv;
        bool more = next_visit(s, k, v, &nv);
        if (more) {
            int nb = buf ^ 1;
            load_visit<D, PACK>(sq + nb * ROWS * SD, sdo + nb * ROWS * SD, slse + nb * ROWS, sds + nb * ROWS, q, d_out,
                                lse, dsum, s, nv, g);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        /* keys of the tile each visitor sees: from the window's start to
         * below the anchor, or the block's B; none for a missing visitor */
        VisitKeys vk[PACK];
        bool any = false;
#pragma unroll
        for (int b = 0; b < PACK; b++) {
            vk[b] = visit_keys(s, k, v.j[b]);
            any |= kw0 < vk[b].limit && kw0 + 16 > vk[b].first;
        }
        if (any) {
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
                    const VisitKeys &vis = vk[n / NT_BLOCK]; /* the column's visitor */
                    int key = kw0 + gr + 8 * (e >> 1), col = n * 8 + 2 * tq + (e & 1);
                    p[n][e] = key < vis.limit && key >= vis.first ? fast_exp2(p[n][e] * s.scale_log2 - lb[col]) : 0.0f;
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
        v = nv;
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

/* Shared memory of the mma.sync dQ and dK/dV kernels. */
template <int D>
constexpr size_t smem_dq = (size_t)(2 * ROWS + 4 * BN) * (D + 8) * sizeof(bf16);
template <int D>
constexpr size_t smem_dkv = (size_t)(6 * ROWS) * (D + 8) * sizeof(bf16) + 4 * ROWS * sizeof(float);

/* f(std::integral_constant<int, PACK>) for the launch's pack (packing()):
 * packed chunks are built for head_dim 64 only, the small drafters' (128
 * runs on wgmma, 256 has a group of at least 2 x 16 rows at any useful
 * block size). */
template <int D, typename F>
void with_pack(int pack, F f) {
    if constexpr (D == 64) {
        if (pack == 2) return f(std::integral_constant<int, 2>{});
        if (pack == 4) return f(std::integral_constant<int, 4>{});
    }
    f(std::integral_constant<int, 1>{});
}

/* The dynamic shared memory of the mma.sync steps 2 and 3 at this pack; false (recorded) when it cannot be had. */
template <int D>
bool set_mma_sync_smem(DfBackend *be, int pack) {
    constexpr bool SPLIT = split_dkv<D>;
    constexpr int PART0 = SPLIT ? DKV_V : DKV_BOTH; /* the first (or only) key-major pass */
    bool ok = true;
    with_pack<D>(pack, [&](auto P) {
        constexpr int PACK = decltype(P)::value;
        ok = df_cuda_set_smem(be, k_block_attn_dq<D, PACK>, smem_dq<D>, "block_attention_backward") &&
             df_cuda_set_smem(be, k_block_attn_dkv<D, PART0, PACK>, smem_dkv<D>, "block_attention_backward");
        if constexpr (SPLIT)
            ok = ok && df_cuda_set_smem(be, k_block_attn_dkv<D, DKV_K, PACK>, smem_dkv<D>, "block_attention_backward");
    });
    return ok;
}

/* The buffers steps 2 and 3 read and write. */
struct BackwardBufs {
    const bf16 *q, *kc, *vc, *kb, *vb, *dout;
    const float *lse, *dsum;
    bf16 *dq, *dk_blk, *dv_blk;
    float *ctx_dk, *ctx_dv;
};

/* Steps 2 and 3 on the mma.sync kernels, PACK blocks a chunk. */
template <int D, int PACK>
void launch_mma_sync_steps(DfBackend *be, const DfBlockAttnLayout *l, const Shape &s, const BackwardBufs &b,
                           int n_ctx_items) {
    constexpr bool SPLIT = split_dkv<D>;
    constexpr int PART0 = SPLIT ? DKV_V : DKV_BOTH;
    cudaStream_t stream = df_cuda_state(be)->stream;
    int n_groups = PACK == 1 ? s.n_blocks : count_groups(l, PACK);
    dim3 grid_q((unsigned)n_groups, (unsigned)(s.kv_heads * s.chunks));
    k_block_attn_dq<D, PACK><<<grid_q, WARPS * 32, smem_dq<D>, stream>>>(b.dq, b.lse, b.dsum, b.q, b.dout, b.kc,
                                                                         b.vc, b.kb, b.vb, s, n_groups);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dq)");
    Shape sk = s;
    if (PACK > 1) sk.own_blocks = ROWS / s.B; /* B divides ROWS: G*B is 16 or 32 */
    dim3 grid_kv((unsigned)(n_ctx_items + count_own_items(sk)), (unsigned)s.kv_heads);
    k_block_attn_dkv<D, PART0, PACK><<<grid_kv, WARPS * 32, smem_dkv<D>, stream>>>(
        b.ctx_dk, b.ctx_dv, b.dk_blk, b.dv_blk, b.lse, b.dsum, b.q, b.dout, b.kc, b.vc, b.kb, b.vb, sk, n_ctx_items);
    DF_CUDA_CHECK_LAUNCH(be, SPLIT ? "block_attention_backward (dv)" : "block_attention_backward (dk, dv)");
    if constexpr (SPLIT) { /* the dK pass: it writes neither output of the dV pass */
        k_block_attn_dkv<D, DKV_K, PACK><<<grid_kv, WARPS * 32, smem_dkv<D>, stream>>>(
            b.ctx_dk, b.ctx_dv, b.dk_blk, b.dv_blk, b.lse, b.dsum, b.q, b.dout, b.kc, b.vc, b.kb, b.vb, sk,
            n_ctx_items);
        DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dk)");
    }
}

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
    int pack = packing(s);
    if (!WGMMA && !set_mma_sync_smem<D>(be, pack)) return;

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

    BackwardBufs b = {(const bf16 *)a->q.ptr,     (const bf16 *)a->k_ctx.ptr,  (const bf16 *)a->v_ctx.ptr,
                      (const bf16 *)a->k_blk.ptr, (const bf16 *)a->v_blk.ptr,  (const bf16 *)gr->d_out.ptr,
                      (const float *)a->lse.ptr,  dsum,                        (bf16 *)gr->dq.ptr,
                      (bf16 *)gr->dk_blk.ptr,     (bf16 *)gr->dv_blk.ptr,      ctx_dk,
                      ctx_dv};
    k_block_attn_dsum<D><<<(unsigned)((n_dsum + WARPS - 1) / WARPS), WARPS * 32, 0, st->stream>>>(
        dsum, b.dout, (const bf16 *)a->out.ptr, s.n_q, a->heads);
    DF_CUDA_CHECK_LAUNCH(be, "block_attention_backward (dO.O)");
    if constexpr (WGMMA) {
        df_cuda_block_attn_dq_wgmma(be, a, gr, dsum);
        df_cuda_block_attn_dkv_wgmma(be, a, gr, dsum, ctx_dk, ctx_dv, n_ctx_items);
    } else {
        with_pack<D>(pack, [&](auto P) { launch_mma_sync_steps<D, decltype(P)::value>(be, l, s, b, n_ctx_items); });
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
