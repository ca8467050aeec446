/* Backward kernels of the element-wise and normalization ops: RMSNorm (dx
 * and the weight gradient; with rope's backward folded in for the q/k
 * norms, rmsnorm_rope_backward) and SwiGLU. fp32 math on bf16 data, 16-byte
 * accesses where the sizes and pointers allow. (RoPE's backward is the
 * forward kernel with the opposite angle: cuda_elementwise.cu.) */
#include "backend/cuda/elementwise/cuda_head_math.h"
#include "backend/cuda/common/cuda_internal.h"

/* --- RMSNorm backward -------------------------------------------------------
 *
 * Stage 1 (k_rmsnorm_bwd_rows): a block owns a contiguous range of rows and
 * splits into G groups of TPR threads (TPR a power of two, enough threads to
 * cover a row with VEC-wide accesses, at most the whole block); each group
 * takes every G-th row of the range. A thread always handles the same
 * columns, so it adds its share of dw (dy * xh) into its own fp32 slots of a
 * shared-memory row per group: no atomics. At the end the block sums its
 * groups and writes one fp32 row of partial sums to the scratch.
 * Stage 2 (k_rmsnorm_bwd_colsum): dw[i] += the block partials of column i:
 * a block of 32 x 32 threads takes 32 columns, row y of its threads sums the
 * partials y, y + 32, ... and the 32 row sums are added in row order
 * (deterministic). The blocks of stage 1 fill the SMs (RMS_BWD_BLOCKS_PER_SM
 * each): at 512 blocks in all, about 4 an SM, the drafter step's norms at
 * 16,384 rows (dim 4096, and 128-wide q/k heads) waited on memory latency. */

#define RMS_BWD_THREADS 256
#define RMS_BWD_BLOCKS_PER_SM (2048 / RMS_BWD_THREADS)
#define RMS_COLSUM_COLS 32
#define RMS_COLSUM_ROWS 32

/* Sum of v over the TPR threads of a group (all threads of the block call it
 * the same number of times). red: 2 floats per warp of shared memory. */
__device__ __forceinline__ float2 group_sum2(float2 v, int tpr, float *red) {
    int width = tpr < 32 ? tpr : 32;
    for (int o = width / 2; o > 0; o /= 2) {
        v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
        v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    }
    if (tpr <= 32) return v;
    int warp = threadIdx.x / 32, warps_per_group = tpr / 32, first = warp / warps_per_group * warps_per_group;
    if (threadIdx.x % 32 == 0) red[2 * warp] = v.x, red[2 * warp + 1] = v.y;
    __syncthreads();
    float2 s = make_float2(0.0f, 0.0f);
    for (int w = first; w < first + warps_per_group; w++) s.x += red[2 * w], s.y += red[2 * w + 1];
    __syncthreads(); /* red is rewritten by the next call */
    return s;
}

template <bool VEC>
__global__ void k_rmsnorm_bwd_rows(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x, const bf16 *w, int rows,
                                   int dim, float eps, int accumulate, int rows_per_block, int tpr) {
    extern __shared__ float smem[]; /* red [2 * warps], then acc [groups][dim] */
    int groups = blockDim.x / tpr, group = threadIdx.x / tpr, lane = threadIdx.x % tpr;
    float *red = smem, *acc = smem + 2 * (blockDim.x / 32) + (size_t)group * dim;
    const int step = VEC ? 8 : 1, n_units = dim / step; /* VEC: dim % 8 == 0 */
    for (int u = lane; u < n_units; u += tpr)
        for (int j = 0; j < step; j++) acc[u * step + j] = 0.0f;
    int row0 = blockIdx.x * rows_per_block, row_end = min(rows, row0 + rows_per_block);
    int iters = (row_end - row0 + groups - 1) / groups;
    for (int it = 0; it < iters; it++) {
        int r = row0 + it * groups + group;
        bool active = r < row_end;
        const bf16 *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        bf16 *dxr = dx + (size_t)r * dim;
        float2 sums = make_float2(0.0f, 0.0f); /* sum x^2, sum dy w x */
        for (int u = lane; active && u < n_units; u += tpr) {
            if (VEC) {
                Pack8 xp, dp, wp;
                xp.u = *(const uint4 *)(xr + u * 8);
                dp.u = *(const uint4 *)(dyr + u * 8);
                wp.u = *(const uint4 *)(w + u * 8);
                for (int j = 0; j < 4; j++) {
                    float2 xf = __bfloat1622float2(xp.h2[j]), df = __bfloat1622float2(dp.h2[j]),
                           wf = __bfloat1622float2(wp.h2[j]);
                    sums.x += xf.x * xf.x + xf.y * xf.y;
                    sums.y += df.x * wf.x * xf.x + df.y * wf.y * xf.y;
                }
            } else {
                float xf = __bfloat162float(xr[u]);
                sums.x += xf * xf;
                sums.y += __bfloat162float(dyr[u]) * __bfloat162float(w[u]) * xf;
            }
        }
        sums = group_sum2(sums, tpr, red);
        if (!active) continue; /* the only barrier of the iteration is behind us */
        float inv = rsqrtf(sums.x / (float)dim + eps), mean_gxh = sums.y * inv / (float)dim;
        /* each thread rewrites only what it read: dx may be dy */
        for (int u = lane; u < n_units; u += tpr) {
            if (VEC) {
                Pack8 xp, dp, wp, op, out;
                xp.u = *(const uint4 *)(xr + u * 8);
                dp.u = *(const uint4 *)(dyr + u * 8);
                wp.u = *(const uint4 *)(w + u * 8);
                if (accumulate) op.u = *(const uint4 *)(dxr + u * 8);
                for (int j = 0; j < 4; j++) {
                    float2 xf = __bfloat1622float2(xp.h2[j]), df = __bfloat1622float2(dp.h2[j]),
                           wf = __bfloat1622float2(wp.h2[j]);
                    float xh0 = xf.x * inv, xh1 = xf.y * inv;
                    acc[u * 8 + 2 * j] += df.x * xh0;
                    acc[u * 8 + 2 * j + 1] += df.y * xh1;
                    float v0 = inv * (df.x * wf.x - xh0 * mean_gxh), v1 = inv * (df.y * wf.y - xh1 * mean_gxh);
                    if (accumulate) {
                        float2 o = __bfloat1622float2(op.h2[j]);
                        v0 += o.x, v1 += o.y;
                    }
                    out.h2[j] = __floats2bfloat162_rn(v0, v1);
                }
                *(uint4 *)(dxr + u * 8) = out.u;
            } else {
                float xh = __bfloat162float(xr[u]) * inv, d = __bfloat162float(dyr[u]);
                acc[u] += d * xh;
                float v = inv * (d * __bfloat162float(w[u]) - xh * mean_gxh);
                if (accumulate) v += __bfloat162float(dxr[u]);
                dxr[u] = __float2bfloat16_rn(v);
            }
        }
    }
    __syncthreads();
    const float *acc0 = smem + 2 * (blockDim.x / 32);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float s = 0.0f;
        for (int g = 0; g < groups; g++) s += acc0[(size_t)g * dim + i];
        partial[(size_t)blockIdx.x * dim + i] = s;
    }
}

/* rmsnorm_rope_backward's rotation: dy rotated back (rope_backward) as it
 * is loaded, rounded to bf16 as rope_backward rounds it; the rows are heads,
 * `heads` a token, one unit of 8 a thread, the partner half a head away in
 * the lane tpr / 2 off. sin_sign (-1) is passed, not folded, as k_rope_vec
 * takes it. */
struct RowRope {
    const int32_t *pos;
    const float *cos_t, *sin_t;
    float sin_sign;
    int heads, table_rows;
    DfCudaDeviceError *bad;
};

__device__ __forceinline__ uint4 shfl_xor_pack8(uint4 v, int mask) {
    return make_uint4(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask),
                      __shfl_xor_sync(0xffffffffu, v.z, mask), __shfl_xor_sync(0xffffffffu, v.w, mask));
}

/* Every lane of the warp calls it (the partner comes by shuffle). */
__device__ __forceinline__ uint4 rope_back(const Pack8 &d, long row, bool active, int lane, int tpr, const RowRope &rp) {
    int half = tpr / 2;
    Pack8 partner;
    partner.u = shfl_xor_pack8(d.u, half);
    if (!active) return d.u;
    int t = (int)(row / rp.heads), p = rp.pos[t];
    if (p < 0 || p >= rp.table_rows) {
        if (lane == 0 && atomicCAS(&rp.bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_POSITION) == DF_CUDA_BAD_NONE) {
            rp.bad->value = p;
            rp.bad->row = t;
            rp.bad->limit = rp.table_rows;
        }
        return d.u;
    }
    bool first = lane < half;
    int j0 = (first ? lane : lane - half) * 8;
    const float4 *c4 = (const float4 *)(rp.cos_t + (size_t)p * (tpr * 4) + j0);
    const float4 *s4 = (const float4 *)(rp.sin_t + (size_t)p * (tpr * 4) + j0);
    float4 cv[2] = {c4[0], c4[1]}, sv[2] = {s4[0], s4[1]};
    Pack8 a, b, oa, ob;
    a.u = first ? d.u : partner.u;
    b.u = first ? partner.u : d.u;
    df_pack8_rope(a, b, (const float *)cv, (const float *)sv, rp.sin_sign, oa, ob);
    return first ? oa.u : ob.u;
}

/* Rows held in registers (the path for 16-byte accesses and rows of at most
 * 4 units of 8 a thread, dim 8192 at 256 threads): a group reads its row's x
 * and dy once and keeps them for dx, each thread adds its columns' dy * xh
 * into registers across its rows, and w is read once a block. The two-pass
 * kernel above read every row twice and added into shared memory per row:
 * rmsnorm_backward in the 8B step took about 3x its bytes at the copy
 * bandwidth (docs/kernels.md). Unit i of a thread is lane + i * tpr. ROPE:
 * rmsnorm_rope_backward (UPT 1), dy rotated back at its load. */
template <int UPT, bool ROPE = false>
__global__ void __launch_bounds__(RMS_BWD_THREADS)
    k_rmsnorm_bwd_rows_held(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x, const bf16 *w, int rows,
                            int dim, float eps, int accumulate, int rows_per_block, int tpr, RowRope rope) {
    extern __shared__ float smem[]; /* red [2 * warps], then [groups][dim] when groups > 1 */
    int groups = blockDim.x / tpr, group = threadIdx.x / tpr, lane = threadIdx.x % tpr, n_units = dim / 8;
    float *red = smem;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    Pack8 wp[UPT];
    float acc[UPT][8];
#pragma unroll
    for (int i = 0; i < UPT; i++) {
        int u = lane + i * tpr;
        wp[i].u = u < n_units ? *(const uint4 *)(w + u * 8) : zero;
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
    }
    int row0 = blockIdx.x * rows_per_block, row_end = min(rows, row0 + rows_per_block);
    int iters = (row_end - row0 + groups - 1) / groups;
    for (int it = 0; it < iters; it++) {
        int r = row0 + it * groups + group;
        bool active = r < row_end;
        size_t base = (size_t)(active ? r : row0) * dim;
        Pack8 xp[UPT], dp[UPT], op[UPT];
        float2 sums = make_float2(0.0f, 0.0f); /* sum x^2, sum dy w x */
#pragma unroll
        for (int i = 0; i < UPT; i++) {
            int u = lane + i * tpr;
            bool ok = active && u < n_units;
            xp[i].u = ok ? *(const uint4 *)(x + base + u * 8) : zero;
            dp[i].u = ok ? *(const uint4 *)(dy + base + u * 8) : zero;
            op[i].u = ok && accumulate ? *(const uint4 *)(dx + base + u * 8) : zero;
            if (ROPE) dp[i].u = rope_back(dp[i], r, active, lane, tpr, rope); /* UPT 1: the head is the row */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 xf = __bfloat1622float2(xp[i].h2[j]), df = __bfloat1622float2(dp[i].h2[j]),
                       wf = __bfloat1622float2(wp[i].h2[j]);
                sums.x += xf.x * xf.x + xf.y * xf.y;
                sums.y += df.x * wf.x * xf.x + df.y * wf.y * xf.y;
            }
        }
        sums = group_sum2(sums, tpr, red);
        if (!active) continue; /* the only barrier of the iteration is behind us */
        float inv = rsqrtf(sums.x / (float)dim + eps), mean_gxh = sums.y * inv / (float)dim;
#pragma unroll
        for (int i = 0; i < UPT; i++) {
            int u = lane + i * tpr;
            if (u >= n_units) continue;
            Pack8 out;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 xf = __bfloat1622float2(xp[i].h2[j]), df = __bfloat1622float2(dp[i].h2[j]),
                       wf = __bfloat1622float2(wp[i].h2[j]), o = __bfloat1622float2(op[i].h2[j]);
                float xh0 = xf.x * inv, xh1 = xf.y * inv;
                acc[i][2 * j] += df.x * xh0;
                acc[i][2 * j + 1] += df.y * xh1;
                float v0 = inv * (df.x * wf.x - xh0 * mean_gxh), v1 = inv * (df.y * wf.y - xh1 * mean_gxh);
                out.h2[j] = __floats2bfloat162_rn(v0 + o.x, v1 + o.y); /* o is zero when not accumulating */
            }
            *(uint4 *)(dx + base + u * 8) = out.u;
        }
    }
    /* the block's partial row: the groups' registers added in group order */
    float *part = partial + (size_t)blockIdx.x * dim;
    if (groups == 1) {
#pragma unroll
        for (int i = 0; i < UPT; i++) {
            int u = lane + i * tpr;
            if (u < n_units)
                for (int j = 0; j < 8; j++) part[u * 8 + j] = acc[i][j];
        }
        return;
    }
    float *cols = smem + 2 * (blockDim.x / 32);
#pragma unroll
    for (int i = 0; i < UPT; i++) {
        int u = lane + i * tpr;
        if (u < n_units)
            for (int j = 0; j < 8; j++) cols[(size_t)group * dim + u * 8 + j] = acc[i][j];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float s = 0.0f;
        for (int g = 0; g < groups; g++) s += cols[(size_t)g * dim + c];
        part[c] = s;
    }
}

__global__ void __launch_bounds__(RMS_COLSUM_COLS *RMS_COLSUM_ROWS)
    k_rmsnorm_bwd_colsum(float *dw, const float *partial, int blocks, int dim) {
    __shared__ float rows_sum[RMS_COLSUM_ROWS][RMS_COLSUM_COLS];
    int tx = threadIdx.x % RMS_COLSUM_COLS, ty = threadIdx.x / RMS_COLSUM_COLS;
    int i = blockIdx.x * RMS_COLSUM_COLS + tx;
    float s = 0.0f;
    if (i < dim)
        for (int b = ty; b < blocks; b += RMS_COLSUM_ROWS) s += partial[(size_t)b * dim + i];
    rows_sum[ty][tx] = s;
    __syncthreads();
    if (ty != 0 || i >= dim) return;
    float total = 0.0f;
    for (int y = 0; y < RMS_COLSUM_ROWS; y++) total += rows_sum[y][tx];
    dw[i] += total;
}

/* Stage 1's launch: threads a row (a power of two covering its units, at
 * most the block; rows_grid) and one wave of blocks, the rows split evenly
 * over them (rows_grid_size). */
typedef struct RowsGrid {
    int tpr, groups, upt, blocks, rows_per_block;
    size_t smem;
} RowsGrid;

static RowsGrid rows_grid(int dim, bool vec) {
    RowsGrid g;
    int units = vec ? dim / 8 : dim;
    g.tpr = 1;
    while (g.tpr < units && g.tpr < RMS_BWD_THREADS) g.tpr *= 2;
    g.groups = RMS_BWD_THREADS / g.tpr, g.upt = (units + g.tpr - 1) / g.tpr;
    g.blocks = g.rows_per_block = 0, g.smem = 0;
    return g;
}

/* The blocks for `per_sm` resident an SM, and the shared memory (the held
 * kernel needs the group rows only to add its groups' registers). */
static void rows_grid_size(RowsGrid *g, DfCudaState *st, int rows, int dim, bool held, int per_sm) {
    size_t cols = held && g->groups == 1 ? 0 : (size_t)g->groups * dim;
    g->smem = (2 * (RMS_BWD_THREADS / 32) + cols) * sizeof(float);
    int blocks = (rows + g->groups - 1) / g->groups, max_blocks = (per_sm > 0 ? per_sm : 1) * df_cuda_sm_count(st);
    if (blocks > max_blocks) blocks = max_blocks;
    g->rows_per_block = (rows + blocks - 1) / blocks;
    g->blocks = (rows + g->rows_per_block - 1) / g->rows_per_block;
}

static void launch_colsum(DfBackend *be, DfBuffer dw, const float *partial, int blocks, int dim) {
    k_rmsnorm_bwd_colsum<<<(dim + RMS_COLSUM_COLS - 1) / RMS_COLSUM_COLS, RMS_COLSUM_COLS * RMS_COLSUM_ROWS, 0,
                           df_cuda_state(be)->stream>>>((float *)dw.ptr, partial, blocks, dim);
    DF_CUDA_CHECK_LAUNCH(be, "rmsnorm_backward (column sums)");
}

typedef void (*RmsBwdRowsKernel)(bf16 *, float *, const bf16 *, const bf16 *, const bf16 *, int, int, float, int,
                                 int, int);
typedef void (*RmsBwdHeldKernel)(bf16 *, float *, const bf16 *, const bf16 *, const bf16 *, int, int, float, int,
                                 int, int, RowRope);

static RmsBwdHeldKernel held_kernel(int upt) {
    return upt == 1 ? k_rmsnorm_bwd_rows_held<1> : upt == 2 ? k_rmsnorm_bwd_rows_held<2> : k_rmsnorm_bwd_rows_held<4>;
}

/* The held kernel's grid: as many blocks as fit the SMs at once (its occupancy). */
static bool held_grid(DfBackend *be, RowsGrid *g, int rows, int dim) {
    DfCudaState *st = df_cuda_state(be);
    RmsBwdHeldKernel k = held_kernel(g->upt);
    rows_grid_size(g, st, rows, dim, true, 1);
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, RMS_BWD_THREADS, g->smem);
    if (e != cudaSuccess) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "rmsnorm_backward: occupancy: %s", cudaGetErrorString(e));
        return false;
    }
    rows_grid_size(g, st, rows, dim, true, per_sm);
    return true;
}

/* Stage 1 held in registers where 16-byte accesses fit and a thread's
 * share of a row is at most 4 units; the two-pass kernel elsewhere and
 * under the variant rmsnorm_backward_two_pass. */
void df_cuda_rmsnorm_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w, int rows,
                              int dim, float eps, int accumulate) {
    DfCudaState *st = df_cuda_state(be);
    bool vec = dim % 8 == 0 && df_cuda_aligned16(dx.ptr) && df_cuda_aligned16(dy.ptr) && df_cuda_aligned16(x.ptr) && df_cuda_aligned16(w.ptr);
    RowsGrid g = rows_grid(dim, vec);
    bool held = vec && !st->variant.rmsnorm_backward_two_pass && g.upt <= 4;
    if (held) {
        if (!held_grid(be, &g, rows, dim)) return;
    } else {
        rows_grid_size(&g, st, rows, dim, false, RMS_BWD_BLOCKS_PER_SM);
    }
    const void *kernel = held ? (const void *)held_kernel(g.upt)
                              : (const void *)(vec ? k_rmsnorm_bwd_rows<true> : k_rmsnorm_bwd_rows<false>);
    if (g.smem > 48 * 1024 && !df_cuda_set_smem_bytes(be, kernel, g.smem, "rmsnorm_backward")) return;
    float *partial = (float *)df_cuda_scratch(be, (size_t)g.blocks * dim * sizeof(float));
    if (!partial) return;
    bf16 *o = (bf16 *)dx.ptr;
    const bf16 *d = (const bf16 *)dy.ptr, *xp = (const bf16 *)x.ptr, *wp = (const bf16 *)w.ptr;
    if (held)
        held_kernel(g.upt)<<<g.blocks, RMS_BWD_THREADS, g.smem, st->stream>>>(
            o, partial, d, xp, wp, rows, dim, eps, accumulate, g.rows_per_block, g.tpr, RowRope{});
    else
        ((RmsBwdRowsKernel)kernel)<<<g.blocks, RMS_BWD_THREADS, g.smem, st->stream>>>(
            o, partial, d, xp, wp, rows, dim, eps, accumulate, g.rows_per_block, g.tpr);
    DF_CUDA_CHECK_LAUNCH(be, "rmsnorm_backward (rows)");
    launch_colsum(be, dw, partial, g.blocks, dim);
}

/* rope_backward then rmsnorm_backward, as the ops would run them: dy copied
 * into dx first where they differ (dy is left as it was). */
static void rmsnorm_rope_backward_apart(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w,
                                        DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                                        int heads, int head_dim, float eps) {
    size_t n = (size_t)n_tokens * heads * head_dim;
    if (dx.ptr != dy.ptr)
        DF_CUDA_RECORD(be, cudaMemcpyAsync(dx.ptr, dy.ptr, n * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                           df_cuda_state(be)->stream));
    df_cuda_rope_backward(be, dx, positions, cos_table, sin_table, n_tokens, heads, head_dim);
    df_cuda_rmsnorm_backward(be, dx, dw, dx, x, w, n_tokens * heads, head_dim, eps, 0);
}

/* The held kernel with the rotation at the load, on the grid the held
 * kernel without it takes (so the column sums add the same partial rows:
 * bit for bit rope_backward then rmsnorm_backward). */
void df_cuda_rmsnorm_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer dw, DfBuffer dy, DfBuffer x, DfBuffer w,
                                   DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads,
                                   int head_dim, float eps) {
    DfCudaState *st = df_cuda_state(be);
    int rows = n_tokens * heads, dim = head_dim;
    bool fits = (dim == 64 || dim == 128 || dim == 256) && !st->variant.rmsnorm_backward_two_pass && df_cuda_aligned16(dx.ptr) &&
                df_cuda_aligned16(dy.ptr) && df_cuda_aligned16(x.ptr) && df_cuda_aligned16(w.ptr) &&
                df_cuda_aligned16(cos_table.ptr) && df_cuda_aligned16(sin_table.ptr);
    if (!fits) {
        rmsnorm_rope_backward_apart(be, dx, dw, dy, x, w, positions, cos_table, sin_table, n_tokens, heads, head_dim, eps);
        return;
    }
    RowsGrid g = rows_grid(dim, true); /* upt 1, tpr = dim / 8 */
    if (!held_grid(be, &g, rows, dim)) return;
    float *partial = (float *)df_cuda_scratch(be, (size_t)g.blocks * dim * sizeof(float));
    if (!partial) return;
    RowRope rope = {(const int32_t *)positions.ptr, (const float *)cos_table.ptr, (const float *)sin_table.ptr, -1.0f,
                    heads, (int)(cos_table.count / (size_t)(dim / 2)), st->dev_error};
    k_rmsnorm_bwd_rows_held<1, true><<<g.blocks, RMS_BWD_THREADS, g.smem, st->stream>>>(
        (bf16 *)dx.ptr, partial, (const bf16 *)dy.ptr, (const bf16 *)x.ptr, (const bf16 *)w.ptr, rows, dim, eps, 0,
        g.rows_per_block, g.tpr, rope);
    DF_CUDA_CHECK_LAUNCH(be, "rmsnorm_rope_backward (rows)");
    launch_colsum(be, dw, partial, g.blocks, dim);
}

/* --- SwiGLU backward ----------------------------------------------------------
 * silu(g) = g sigma(g), silu'(g) = sigma(g) (1 + g (1 - sigma(g))).
 * d_gate may be gate and d_up may be up: each element is read before it is
 * written, by the same thread. */

__device__ __forceinline__ void swiglu_grad(float d, float g, float u, float *dg, float *du) {
    float sig = 1.0f / (1.0f + __expf(-g));
    *dg = d * u * sig * (1.0f + g * (1.0f - sig));
    *du = d * g * sig;
}

__global__ void k_swiglu_bwd_vec(uint4 *d_gate, uint4 *d_up, const uint4 *d_out, const uint4 *gate, const uint4 *up,
                                 size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        Pack8 d, g, u, og, ou;
        d.u = d_out[i];
        g.u = gate[i];
        u.u = up[i];
        for (int j = 0; j < 4; j++) {
            float2 df = __bfloat1622float2(d.h2[j]), gf = __bfloat1622float2(g.h2[j]), uf = __bfloat1622float2(u.h2[j]);
            float g0, g1, u0, u1;
            swiglu_grad(df.x, gf.x, uf.x, &g0, &u0);
            swiglu_grad(df.y, gf.y, uf.y, &g1, &u1);
            og.h2[j] = __floats2bfloat162_rn(g0, g1);
            ou.h2[j] = __floats2bfloat162_rn(u0, u1);
        }
        d_gate[i] = og.u;
        d_up[i] = ou.u;
    }
}

__global__ void k_swiglu_bwd(bf16 *d_gate, bf16 *d_up, const bf16 *d_out, const bf16 *gate, const bf16 *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float dg, du;
        swiglu_grad(__bfloat162float(d_out[i]), __bfloat162float(gate[i]), __bfloat162float(up[i]), &dg, &du);
        d_gate[i] = __float2bfloat16_rn(dg);
        d_up[i] = __float2bfloat16_rn(du);
    }
}

void df_cuda_swiglu_backward(DfBackend *be, DfBuffer d_gate, DfBuffer d_up, DfBuffer d_out, DfBuffer gate,
                             DfBuffer up) {
    DfCudaState *st = df_cuda_state(be);
    size_t n = d_out.count;
    if (n % 8 == 0 && df_cuda_aligned16(d_gate.ptr) && df_cuda_aligned16(d_up.ptr) && df_cuda_aligned16(d_out.ptr) && df_cuda_aligned16(gate.ptr) &&
        df_cuda_aligned16(up.ptr))
        k_swiglu_bwd_vec<<<df_cuda_blocks(n / 8, 256), 256, 0, st->stream>>>(
            (uint4 *)d_gate.ptr, (uint4 *)d_up.ptr, (const uint4 *)d_out.ptr, (const uint4 *)gate.ptr,
            (const uint4 *)up.ptr, n / 8);
    else
        k_swiglu_bwd<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>((bf16 *)d_gate.ptr, (bf16 *)d_up.ptr,
                                                                     (const bf16 *)d_out.ptr, (const bf16 *)gate.ptr,
                                                                     (const bf16 *)up.ptr, n);
    DF_CUDA_CHECK_LAUNCH(be, "swiglu_backward");
}
