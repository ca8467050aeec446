/* Skinny matrix products for decoding: C[M,N] (bf16, row-major, leading
 * dimension ldc) = A[M,K] B^T + beta C, A the bf16 activations [M,K], B the
 * bf16 weights [N,K] (the layout of every linear layer: trans_a 0, trans_b 1),
 * fp32 accumulation, for M up to DF_SKINNY_GEMM_MAX_M. At such M the product
 * is a stream over the weights (M x 2 FLOPs per weight byte read): the aim is
 * to read every weight byte once at close to the HBM bandwidth.
 *
 * Tensor cores compute C^T = B A^T: weight rows are the mma's M dimension
 * (one m16n8k16 m-tile = 16 weight rows per warp), tokens its N dimension
 * (NT = ceil(M / 8) n-tiles of 8 tokens). At M = 1 seven of the eight token
 * columns are zero: the tensor cores have time to spare at these sizes (64
 * tokens: 16 mma per KiB of weights, about 32 cycles per SM against the ~57
 * cycles a KiB takes to arrive at 4.8 TB/s over 132 SMs).
 *
 * Fragments come straight from 16-byte loads, no shuffles: the order of the
 * products within an mma's 16-wide k step is free as long as the A (weights)
 * and B (activations) fragments agree on it. Over a 32-wide k chunk, lane l
 * (row r = l/4, quad q = l%4) loads weight rows r and r+8 at k = 8q..8q+7
 * (16 bytes each) and, for each n-tile, token r's activations at the same k.
 * mma j (0, 1) of the chunk takes the physical k 8q+4j..8q+4j+3 as the
 * logical columns {2q, 2q+1, 2q+8, 2q+9} that the PTX fragment layout gives
 * lane l (a0/a2 of row r, a1/a3 of row r+8; b0/b1 of token r): words 2j and
 * 2j+1 of each 16-byte load.
 *
 * A block is 8 warps on 8 consecutive m-tiles (128 weight rows), all over
 * the same k range, in stages of 128 k: each warp loads its weights for the
 * next stage into registers (8 x 16 bytes per lane, 4 KiB per warp) before
 * computing the current one, and the block stages the tokens' activations of
 * the next stage in shared memory by cp.async (read once per block from L2,
 * not once per warp). Where the row blocks alone leave resident slots (two
 * blocks per SM) empty (N = 1024, 4096, 12288), the k range is split across
 * blocks (grid.y); each split writes fp32 partial sums to scratch, added in
 * split order (deterministic: no float atomics) by the row block's last
 * split to finish where they are few (no second launch, whose gap would
 * cost more than the sum at a few tokens), else by a second kernel.
 *
 * Requirements (df_cuda_skinny_gemm_fits; cuBLASLt otherwise): K, lda, ldb
 * multiples of 8, A and B 16-byte aligned, bf16 C. N and K need not be
 * multiples of the tiles: weights past N or K load as zeros, activations
 * past M or K as zeros, and outputs past M or N are not written. */
#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/common/cuda_mma.h"
#include "backend/cuda/gemm/cuda_skinny_gemm.h"

namespace {

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int BLOCK_ROWS = WARPS * 16; /* weight rows (C columns) per block */
constexpr int KT = 128;                /* k per pipeline stage */
constexpr int CHUNKS = KT / 32;        /* 32-wide k chunks per stage (two mma k steps each) */
/* Activation rows in shared memory are KT + 32 elements (320 bytes, 64 mod
 * 128) apart: the 8 lanes of a 16-byte load phase read two tokens' 64-byte
 * pieces, which then fall on disjoint banks. */
constexpr int A_STRIDE = KT + 32;
constexpr int MAX_SPLITS = 64;
/* Split-K partial sums are added by the row block's last split when there
 * are at most this many per output column (splits x M): one block reads
 * them, 64 x 128 x 4 = 32 KiB, a few L2 round trips; beyond, by a second
 * kernel over the whole GPU (its launch costs less than one block reading
 * more). */
constexpr int SUM_IN_KERNEL = 64;

struct SkinnyArgs {
    bf16 *c;
    float *part;   /* split-K partial sums [splits][m][n], NULL with one split */
    int *arrivals; /* per row block: splits done so far (0 between calls); NULL: k_skinny_sum_splits adds */
    const bf16 *a, *b;
    int m, n, k, lda, ldb, ldc;
    int tiles_per_split; /* KT stages per split */
    float beta;
};

/* 16 bytes of weights, read once: no L1 allocation; L2 fetches the aligned
 * 256 bytes around them (a row's whole stage, which the lane's quad reads
 * in the same few instructions). volatile keeps the loads where they are
 * written, ahead of the current stage's mma. */
__device__ __forceinline__ uint4 load_weights16(const bf16 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* The activations of one stage, k0 .. k0 + KT, of the NT * 8 token rows into
 * shared memory; rows past M and columns past K are zero-filled. */
template <int NT>
__device__ __forceinline__ void stage_activations(bf16 (*as)[A_STRIDE], const SkinnyArgs &p, int k0) {
    constexpr int PER_ROW = KT / 8;
    for (int i = threadIdx.x; i < NT * 8 * PER_ROW; i += THREADS) {
        int row = i / PER_ROW, col = (i % PER_ROW) * 8, k = k0 + col;
        bool ok = row < p.m && k < p.k;
        const bf16 *src = ok ? p.a + (size_t)row * p.lda + k : p.a;
        cp_async16(&as[row][col], src, ok ? 16 : 0);
    }
}

/* One lane's weights of one stage: rows r and r + 8 of the warp's m-tile at
 * k0 + 32 c + 8 q (row pointers already hold the 8 q); zeros past N or K. */
__device__ __forceinline__ void stage_weights(uint4 w[CHUNKS][2], const bf16 *row_lo, const bf16 *row_hi, bool lo_ok,
                                              bool hi_ok, int k0, int kq, int k) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        bool in_k = k0 + 32 * c + kq < k;
        w[c][0] = lo_ok && in_k ? load_weights16(row_lo + k0 + 32 * c) : zero;
        w[c][1] = hi_ok && in_k ? load_weights16(row_hi + k0 + 32 * c) : zero;
    }
}

/* acc[nt] += the stage's weights x the stage's activations of n-tile nt. */
template <int NT>
__device__ __forceinline__ void stage_mma(float acc[NT][4], const uint4 w[CHUNKS][2], const bf16 (*as)[A_STRIDE],
                                          int r, int q) {
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const uint32_t a0[4] = {w[c][0].x, w[c][1].x, w[c][0].y, w[c][1].y};
        const uint32_t a1[4] = {w[c][0].z, w[c][1].z, w[c][0].w, w[c][1].w};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            uint4 x = *(const uint4 *)&as[nt * 8 + r][32 * c + 8 * q];
            mma_bf16(acc[nt], a0, x.x, x.y);
            mma_bf16(acc[nt], a1, x.z, x.w);
        }
    }
}

/* The lane's place in the block and the block's k range. */
struct Lane {
    int r, q, n0, t_begin, t_end;
    bool lo_ok, hi_ok;
    const bf16 *row_lo, *row_hi;
};

/* Stage t of the pipeline: queue stage t + 1 (activations by cp.async into
 * the other shared buffer, weights into `next`), then multiply stage t
 * (weights in `cur`). */
template <int NT>
__device__ __forceinline__ void pipeline_step(float acc[NT][4], const uint4 cur[CHUNKS][2], uint4 next[CHUNKS][2],
                                              bf16 (*as)[NT * 8][A_STRIDE], const SkinnyArgs &p, const Lane &l,
                                              int t) {
    const int buf = (t - l.t_begin) & 1;
    const bool more = t + 1 < l.t_end;
    if (more) stage_activations<NT>(as[buf ^ 1], p, (t + 1) * KT);
    cp_async_commit(); /* possibly empty: wait<1> below then always means "stage t is in" */
    if (more) stage_weights(next, l.row_lo, l.row_hi, l.lo_ok, l.hi_ok, (t + 1) * KT, 8 * l.q, p.k);
    cp_async_wait<1>();
    __syncthreads();
    stage_mma<NT>(acc, cur, as[buf], l.r, l.q);
    __syncthreads(); /* every warp is done with as[buf] before stage t + 2 refills it */
}

/* C[tok, n] = v (+ beta C[tok, n]); C is not read when beta is 0. */
__device__ __forceinline__ void store_output(const SkinnyArgs &p, int tok, int n, float v) {
    bf16 *out = p.c + (size_t)tok * p.ldc + n;
    if (p.beta != 0.0f) v += p.beta * __bfloat162float(*out);
    *out = __float2bfloat16(v);
}

/* The sum of `splits` partial sums `stride` apart, in split order; eight
 * loads in flight before they are added (from L2: __ldcg, never a stale L1
 * line, the sums were written by other SMs). */
__device__ __forceinline__ float sum_partials(const float *src, size_t stride, int splits) {
    float v = 0.0f;
    int s = 0;
    for (; s + 8 <= splits; s += 8) {
        float x[8];
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = __ldcg(src + (size_t)(s + j) * stride);
#pragma unroll
        for (int j = 0; j < 8; j++) v += x[j];
    }
    for (; s < splits; s++) v += __ldcg(src + (size_t)s * stride);
    return v;
}

/* Split-K with few partial sums (splits x M <= SUM_IN_KERNEL): the last of a
 * row block's splits to finish (an integer counter, whose order does not
 * matter) adds all the splits' partial sums of the row block in split order,
 * so the result does not depend on which one is last, and writes C; then it
 * sets the counter back to 0 for the next call. The fences make every
 * split's partial sums visible before its arrival is counted. */
__device__ void sum_splits_if_last(const SkinnyArgs &p) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&p.arrivals[blockIdx.x], 1) == (int)gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int nb = blockIdx.x * BLOCK_ROWS;
    for (int i = threadIdx.x; i < p.m * BLOCK_ROWS; i += THREADS) {
        int tok = i / BLOCK_ROWS, n = nb + i % BLOCK_ROWS;
        if (n < p.n)
            store_output(p, tok, n, sum_partials(p.part + (size_t)tok * p.n + n, (size_t)p.m * p.n, gridDim.y));
    }
    if (threadIdx.x == 0) p.arrivals[blockIdx.x] = 0;
}

/* Split-K with many partial sums: a second kernel over all of C, so that
 * the whole GPU reads them instead of one block per row block. */
__global__ void k_skinny_sum_splits(SkinnyArgs p, int splits) {
    size_t total = (size_t)p.m * p.n;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x)
        store_output(p, (int)(idx / p.n), (int)(idx % p.n), sum_partials(p.part + idx, total, splits));
}

template <int NT>
__global__ void __launch_bounds__(THREADS, 2) k_skinny_gemm(SkinnyArgs p) {
    __shared__ __align__(16) bf16 as[2][NT * 8][A_STRIDE];
    Lane l;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    l.r = lane >> 2, l.q = lane & 3;
    l.n0 = blockIdx.x * BLOCK_ROWS + warp * 16;
    l.t_begin = blockIdx.y * p.tiles_per_split;
    l.t_end = min(l.t_begin + p.tiles_per_split, (p.k + KT - 1) / KT);
    l.lo_ok = l.n0 + l.r < p.n, l.hi_ok = l.n0 + l.r + 8 < p.n;
    l.row_lo = p.b + (l.lo_ok ? (size_t)(l.n0 + l.r) * p.ldb : 0) + 8 * l.q;
    l.row_hi = p.b + (l.hi_ok ? (size_t)(l.n0 + l.r + 8) * p.ldb : 0) + 8 * l.q;
    const int r = l.r, q = l.q, n0 = l.n0;

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    /* two register buffers of weights, used in turn (no copies between them) */
    uint4 wa[CHUNKS][2], wb[CHUNKS][2];
    stage_activations<NT>(as[0], p, l.t_begin * KT);
    cp_async_commit();
    stage_weights(wa, l.row_lo, l.row_hi, l.lo_ok, l.hi_ok, l.t_begin * KT, 8 * q, p.k);
    for (int t = l.t_begin; t < l.t_end; t += 2) {
        pipeline_step<NT>(acc, wa, wb, as, p, l, t);
        if (t + 1 >= l.t_end) break;
        pipeline_step<NT>(acc, wb, wa, as, p, l, t + 1);
    }

    /* acc[nt][i]: weight row n0 + r (+ 8 for i >= 2), token 8 nt + 2 q + (i & 1) */
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int n = n0 + r + (i >= 2 ? 8 : 0), tok = nt * 8 + 2 * q + (i & 1);
            if (tok >= p.m || n >= p.n) continue;
            if (p.part)
                p.part[((size_t)blockIdx.y * p.m + tok) * p.n + n] = acc[nt][i];
            else
                store_output(p, tok, n, acc[nt][i]);
        }
    if (p.arrivals) sum_splits_if_last(p);
}

template <int NT>
void launch(const SkinnyArgs &p, dim3 grid, cudaStream_t stream) {
    k_skinny_gemm<NT><<<grid, THREADS, 0, stream>>>(p);
}

} // namespace

int df_cuda_skinny_gemm_fits(const DfCudaGemm *g) {
    uintptr_t ab = (uintptr_t)g->a | (uintptr_t)g->b;
    return !g->c_f32 && !g->trans_a && g->trans_b && g->m >= 1 && g->m <= DF_SKINNY_GEMM_MAX_M && g->n >= 1 &&
           g->k >= 8 && g->k % 8 == 0 && g->lda % 8 == 0 && g->ldb % 8 == 0 && g->lda >= g->k && g->ldb >= g->k &&
           g->ldc >= g->n && ab % 16 == 0;
}

/* Splits of the k range: as many as keep row blocks x splits within the
 * blocks resident at once (two per SM), so that no second wave of a few
 * blocks runs at a fraction of the bandwidth, and each split at least two
 * stages long (the register pipeline needs a next stage to overlap); none
 * empty. Products with more row blocks than resident slots (the lm head)
 * take one split and many waves, whose last partial wave still has bytes
 * enough in flight. Each split costs 8 M bytes per weight row (partial sums
 * written and read, through L2). */
static int skinny_splits(int row_blocks, int tiles, int sm_count, int *tiles_per_split) {
    int want = 2 * sm_count / row_blocks;
    int cap = tiles / 2 < MAX_SPLITS ? tiles / 2 : MAX_SPLITS;
    int splits = want < cap ? want : cap;
    if (splits < 1) splits = 1;
    *tiles_per_split = (tiles + splits - 1) / splits;
    return (tiles + *tiles_per_split - 1) / *tiles_per_split;
}

/* The split-K arrival counters, one per row block, zero between calls: kept
 * in the state, grown (and zeroed on the stream) when a product has more row
 * blocks than any before. */
static int *arrival_counters(DfBackend *be, int count) {
    DfCudaState *st = df_cuda_state(be);
    if (count <= st->skinny_arrivals_count) return st->skinny_arrivals;
    if (count < 2 * st->skinny_arrivals_count) count = 2 * st->skinny_arrivals_count;
    cudaError_t e = cudaFree(st->skinny_arrivals); /* waits for queued work that uses them */
    st->bytes_in_use -= (size_t)st->skinny_arrivals_count * sizeof(int);
    st->skinny_arrivals = NULL;
    st->skinny_arrivals_count = 0;
    if (e == cudaSuccess) e = cudaMalloc(&st->skinny_arrivals, (size_t)count * sizeof(int));
    if (e == cudaSuccess) e = cudaMemsetAsync(st->skinny_arrivals, 0, (size_t)count * sizeof(int), st->stream);
    if (e != cudaSuccess) {
        cudaFree(st->skinny_arrivals);
        st->skinny_arrivals = NULL;
        df_cuda_record_failure(be, __FILE__, __LINE__, "skinny matmul: %d split-K counters: %s", count,
                               cudaGetErrorString(e));
        return NULL;
    }
    st->skinny_arrivals_count = count;
    st->mem_epoch++;
    st->bytes_in_use += (size_t)count * sizeof(int);
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return st->skinny_arrivals;
}

void df_cuda_skinny_gemm(DfBackend *be, const DfCudaGemm *g) {
    DfCudaState *st = df_cuda_state(be);
    int row_blocks = (g->n + BLOCK_ROWS - 1) / BLOCK_ROWS, tiles = (g->k + KT - 1) / KT, tiles_per_split;
    int splits = skinny_splits(row_blocks, tiles, df_cuda_sm_count(st), &tiles_per_split);
    int sum_in_kernel = splits * g->m <= SUM_IN_KERNEL;
    SkinnyArgs p = {(bf16 *)g->c,  NULL, NULL,   (const bf16 *)g->a, (const bf16 *)g->b, g->m,
                    g->n,          g->k, g->lda, g->ldb,             g->ldc,             tiles_per_split,
                    g->beta};
    if (splits > 1) { /* failures are recorded */
        if (sum_in_kernel && !(p.arrivals = arrival_counters(be, row_blocks))) return;
        if (!(p.part = (float *)df_cuda_scratch(be, (size_t)splits * g->m * g->n * sizeof(float)))) return;
    }
    dim3 grid((unsigned)row_blocks, (unsigned)splits);
    switch ((g->m + 7) / 8) {
    case 1: launch<1>(p, grid, st->stream); break;
    case 2: launch<2>(p, grid, st->stream); break;
    case 3: launch<3>(p, grid, st->stream); break;
    case 4: launch<4>(p, grid, st->stream); break;
    case 5: launch<5>(p, grid, st->stream); break;
    case 6: launch<6>(p, grid, st->stream); break;
    case 7: launch<7>(p, grid, st->stream); break;
    default: launch<8>(p, grid, st->stream); break;
    }
    DF_CUDA_CHECK_LAUNCH(be, "skinny matmul");
    if (splits > 1 && !sum_in_kernel) {
        k_skinny_sum_splits<<<df_cuda_blocks((size_t)g->m * g->n, 256), 256, 0, st->stream>>>(p, splits);
        DF_CUDA_CHECK_LAUNCH(be, "skinny matmul (sum of the splits)");
    }
    st->skinny_calls++;
}

extern "C" void df_cuda_set_skinny_gemm(DfBackend *be, DfCudaSkinnyGemm mode) {
    df_cuda_state(be)->variant.skinny_gemm = mode;
}

/* The shapes where the kernel beat cuBLASLt on the H200 (docs/kernels.md, "Skinny GEMM
 * for decoding"): few rows against a small weight matrix. */
int df_cuda_skinny_gemm_pays(const DfCudaGemm *g) {
    return g->m <= 16 && g->n <= 2048;
}

extern "C" size_t df_cuda_skinny_gemm_count(DfBackend *be) {
    return df_cuda_state(be)->skinny_calls;
}
