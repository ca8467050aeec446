/* Element-wise and data-movement kernels: dtype conversion, RMSNorm, RoPE,
 * embedding gather, SwiGLU, residual add, strided 2-D copy. All memory-bound:
 * 16-byte accesses (8 bf16) where the sizes and pointers allow, fp32 math. */
#include "backend/cuda/elementwise/cuda_head_math.h"
#include "backend/cuda/common/cuda_internal.h"

/* --- conversion ------------------------------------------------------------ */

__global__ void k_f32_to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void k_bf16_to_f32(float *dst, const bf16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

void df_cuda_f32_to_bf16(cudaStream_t s, bf16 *dst, const float *src, size_t n) {
    k_f32_to_bf16<<<df_cuda_blocks(n, 256), 256, 0, s>>>(dst, src, n);
}

void df_cuda_bf16_to_f32(cudaStream_t s, float *dst, const bf16 *src, size_t n) {
    k_bf16_to_f32<<<df_cuda_blocks(n, 256), 256, 0, s>>>(dst, src, n);
}

/* --- RMSNorm: a group of lanes per row ------------------------------------------- */

/* LPR lanes own a row (16-byte accesses: LPR = dim / 8 up to a warp), so a
 * warp holds 32 / LPR rows: the q/k norms' 128-wide head rows take 16 lanes
 * each instead of a warp with half of it idle. The sum of squares runs over
 * the group with the lane layout and order of a warp whose lanes past the
 * row add zeros (df_warp_sum): bit for bit the warp-per-row results, which
 * qkv_rope_cache reproduces. */
template <bool VEC>
__global__ void k_rmsnorm(bf16 *out, const bf16 *x, const bf16 *w, int rows, int dim, float eps, int lpr) {
    int lane = threadIdx.x % 32, group = lane / lpr, gl = lane % lpr;
    int row = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * (32 / lpr) + group;
    if (row >= rows) return; /* whole groups: their shuffles stay inside the group */
    unsigned mask = lpr == 32 ? 0xffffffffu : ((1u << lpr) - 1) << (group * lpr);
    const bf16 *xr = x + (size_t)row * dim;
    bf16 *orow = out + (size_t)row * dim;
    float ss = 0.0f;
    if (VEC) {
        for (int i = gl * 8; i < dim; i += lpr * 8) {
            Pack8 p;
            p.u = *(const uint4 *)(xr + i);
            ss = df_pack8_add_squares(ss, p);
        }
    } else {
        for (int i = gl; i < dim; i += lpr) {
            float f = __bfloat162float(xr[i]);
            ss += f * f;
        }
    }
    for (int o = lpr / 2; o > 0; o /= 2) ss += __shfl_xor_sync(mask, ss, o);
    float inv = df_rms_inverse(ss, dim, eps);
    /* each lane rewrites only the elements it read: in place (out == x) is safe */
    if (VEC) {
        for (int i = gl * 8; i < dim; i += lpr * 8) {
            Pack8 p, wp;
            p.u = *(const uint4 *)(xr + i);
            wp.u = *(const uint4 *)(w + i);
            *(uint4 *)(orow + i) = df_pack8_rmsnorm(p, wp, inv);
        }
    } else {
        for (int i = gl; i < dim; i += lpr)
            orow[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * inv * __bfloat162float(w[i]));
    }
}

/* Rows wider than a warp's 32 x 8 values (the hidden rows), held in
 * registers: a lane issues all its loads of the row at once (up to MAXU
 * units of 8), where the loop above read them one after another and then
 * again for the output (about 55% of the copy bandwidth at 4096). Each
 * lane adds the same values in the same order as in k_rmsnorm<true> at 32
 * lanes a row, and the butterfly is the same. At 4096 a lane holds x
 * and w, 159 registers: blocks of 4 warps, so that 3 fit an SM. */
#define RMSNORM_WIDE_WARPS 4
template <int MAXU>
__global__ void __launch_bounds__(RMSNORM_WIDE_WARPS * 32) k_rmsnorm_wide(bf16 *out, const bf16 *x, const bf16 *w, int rows, int dim, float eps) {
    int lane = threadIdx.x % 32, row = blockIdx.x * RMSNORM_WIDE_WARPS + threadIdx.x / 32, units = dim / 8;
    if (row >= rows) return; /* whole warps */
    const bf16 *xr = x + (size_t)row * dim;
    bf16 *orow = out + (size_t)row * dim;
    Pack8 v[MAXU];
#pragma unroll
    for (int k = 0; k < MAXU; k++) {
        int u = lane + 32 * k;
        if (u < units) v[k].u = *(const uint4 *)(xr + u * 8);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXU; k++)
        if (lane + 32 * k < units) ss = df_pack8_add_squares(ss, v[k]);
    ss = df_warp_sum(ss);
    float inv = df_rms_inverse(ss, dim, eps);
#pragma unroll
    for (int k = 0; k < MAXU; k++) {
        int u = lane + 32 * k;
        if (u >= units) continue;
        Pack8 wp;
        wp.u = *(const uint4 *)(w + u * 8);
        *(uint4 *)(orow + u * 8) = df_pack8_rmsnorm(v[k], wp, inv);
    }
}

void df_cuda_rmsnorm(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim, float eps) {
    DfCudaState *st = df_cuda_state(be);
    const int warps_per_block = 8;
    bool vec = dim % 8 == 0 && df_cuda_aligned16(out.ptr) && df_cuda_aligned16(x.ptr) && df_cuda_aligned16(w.ptr);
    int lpr = 32;
    while (vec && lpr > 8 && lpr / 2 * 8 >= dim) lpr /= 2; /* the fewest lanes that still cover the row once */
    int rows_per_block = warps_per_block * (32 / lpr);
    unsigned blocks = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    int lane_units = (dim / 8 + 31) / 32; /* units of 8 a lane, at 32 lanes a row */
    bf16 *o = (bf16 *)out.ptr;
    const bf16 *xp = (const bf16 *)x.ptr, *wp = (const bf16 *)w.ptr;
    if (vec && lane_units > 1 && lane_units <= 32) {
        dim3 grid((rows + RMSNORM_WIDE_WARPS - 1) / RMSNORM_WIDE_WARPS), block(32 * RMSNORM_WIDE_WARPS);
        if (lane_units <= 4) k_rmsnorm_wide<4><<<grid, block, 0, st->stream>>>(o, xp, wp, rows, dim, eps);
        else if (lane_units <= 8) k_rmsnorm_wide<8><<<grid, block, 0, st->stream>>>(o, xp, wp, rows, dim, eps);
        else if (lane_units <= 16) k_rmsnorm_wide<16><<<grid, block, 0, st->stream>>>(o, xp, wp, rows, dim, eps);
        else k_rmsnorm_wide<32><<<grid, block, 0, st->stream>>>(o, xp, wp, rows, dim, eps);
    } else if (vec) {
        k_rmsnorm<true><<<blocks, 32 * warps_per_block, 0, st->stream>>>(o, xp, wp, rows, dim, eps, lpr);
    } else {
        k_rmsnorm<false><<<blocks, 32 * warps_per_block, 0, st->stream>>>(o, xp, wp, rows, dim, eps, lpr);
    }
    DF_CUDA_CHECK_LAUNCH(be, "rmsnorm");
}

/* --- RoPE: one thread per (token, head, pair i < half) ---------------------- */

/* sin_sign -1 rotates by the opposite angle: the backward (the rotation is
 * orthogonal, so its transpose is its inverse). */
__global__ void k_rope(bf16 *x, const int32_t *pos, const float *cos_t, const float *sin_t, float sin_sign,
                       int n_tokens, int heads, int head_dim, int half, int table_rows, DfCudaDeviceError *bad) {
    size_t total = (size_t)n_tokens * heads * half;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i % half);
        size_t th = i / half; /* token * heads + head */
        int t = (int)(th / heads);
        int p = pos[t];
        if (p < 0 || p >= table_rows) {
            if (atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_POSITION) == DF_CUDA_BAD_NONE) {
                bad->value = p;
                bad->row = t;
                bad->limit = table_rows;
            }
            continue;
        }
        bf16 *x1 = x + th * head_dim;
        float c = cos_t[(size_t)p * half + j], s = sin_sign * sin_t[(size_t)p * half + j];
        float a = __bfloat162float(x1[j]), b = __bfloat162float(x1[j + half]);
        x1[j] = __float2bfloat16_rn(a * c - b * s);
        x1[j + half] = __float2bfloat16_rn(b * c + a * s);
    }
}

/* The same, 8 pairs per thread: 16-byte loads of x and 2 x 16 of cos/sin. */
__global__ void k_rope_vec(bf16 *x, const int32_t *pos, const float *cos_t, const float *sin_t, float sin_sign,
                           int n_tokens, int heads, int head_dim, int half, int table_rows, DfCudaDeviceError *bad) {
    int groups = half / 8;
    size_t total = (size_t)n_tokens * heads * groups;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int j0 = (int)(i % groups) * 8;
        size_t th = i / groups; /* token * heads + head */
        int t = (int)(th / heads);
        int p = pos[t];
        if (p < 0 || p >= table_rows) {
            if (atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_POSITION) == DF_CUDA_BAD_NONE) {
                bad->value = p;
                bad->row = t;
                bad->limit = table_rows;
            }
            continue;
        }
        bf16 *x1 = x + th * head_dim + j0, *x2 = x1 + half;
        const float4 *c4 = (const float4 *)(cos_t + (size_t)p * half + j0);
        const float4 *s4 = (const float4 *)(sin_t + (size_t)p * half + j0);
        float4 cv[2] = {c4[0], c4[1]}, sv[2] = {s4[0], s4[1]};
        Pack8 a, b, oa, ob;
        a.u = *(const uint4 *)x1;
        b.u = *(const uint4 *)x2;
        df_pack8_rope(a, b, (const float *)cv, (const float *)sv, sin_sign, oa, ob);
        *(uint4 *)x1 = oa.u;
        *(uint4 *)x2 = ob.u;
    }
}

void df_cuda_rope_rotate(DfBackend *be, const char *op, DfBuffer x, DfBuffer positions, DfBuffer cos_table,
                         DfBuffer sin_table, int n_tokens, int heads, int head_dim, int rotary_dim, float sin_sign) {
    DfCudaState *st = df_cuda_state(be);
    int half = rotary_dim / 2;
    size_t total = (size_t)n_tokens * heads * half;
    int table_rows = (int)(cos_table.count / (size_t)half);
    /* 16-byte accesses need every head's first and second halves 16-byte aligned */
    if (half % 8 == 0 && head_dim % 8 == 0 && df_cuda_aligned16(x.ptr) && df_cuda_aligned16(cos_table.ptr) && df_cuda_aligned16(sin_table.ptr))
        k_rope_vec<<<df_cuda_blocks(total / 8, 256), 256, 0, st->stream>>>(
            (bf16 *)x.ptr, (const int32_t *)positions.ptr, (const float *)cos_table.ptr, (const float *)sin_table.ptr,
            sin_sign, n_tokens, heads, head_dim, half, table_rows, st->dev_error);
    else
        k_rope<<<df_cuda_blocks(total, 256), 256, 0, st->stream>>>(
            (bf16 *)x.ptr, (const int32_t *)positions.ptr, (const float *)cos_table.ptr, (const float *)sin_table.ptr,
            sin_sign, n_tokens, heads, head_dim, half, table_rows, st->dev_error);
    DF_CUDA_CHECK_LAUNCH(be, op);
}

void df_cuda_rope(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                  int heads, int head_dim) {
    df_cuda_rope_rotate(be, "rope", x, positions, cos_table, sin_table, n_tokens, heads, head_dim, head_dim, 1.0f);
}

void df_cuda_rope_backward(DfBackend *be, DfBuffer dx, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                           int n_tokens, int heads, int head_dim) {
    df_cuda_rope_rotate(be, "rope_backward", dx, positions, cos_table, sin_table, n_tokens, heads, head_dim, head_dim,
                        -1.0f);
}

/* --- embedding gather: one block per token ------------------------------------ */

__global__ void k_embedding(bf16 *out, const bf16 *table, const int32_t *ids, int dim, long vocab, bool vec,
                            DfCudaDeviceError *bad) {
    int t = blockIdx.x;
    int id = ids[t];
    bf16 *o = out + (size_t)t * dim;
    if (id < 0 || id >= vocab) {
        if (threadIdx.x == 0 && atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_TOKEN_ID) == DF_CUDA_BAD_NONE) {
            bad->value = id;
            bad->row = t;
            bad->limit = (int)vocab;
        }
        for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
        return;
    }
    const bf16 *src = table + (size_t)id * dim;
    if (vec) {
        for (int i = threadIdx.x * 8; i < dim; i += blockDim.x * 8) *(uint4 *)(o + i) = *(const uint4 *)(src + i);
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = src[i];
    }
}

void df_cuda_embedding(DfBackend *be, DfBuffer out, DfBuffer table, DfBuffer ids, int n_tokens, int dim) {
    DfCudaState *st = df_cuda_state(be);
    bool vec = dim % 8 == 0 && df_cuda_aligned16(out.ptr) && df_cuda_aligned16(table.ptr);
    long vocab = (long)(table.count / (size_t)dim);
    k_embedding<<<(unsigned)n_tokens, 128, 0, st->stream>>>((bf16 *)out.ptr, (const bf16 *)table.ptr,
                                                            (const int32_t *)ids.ptr, dim, vocab, vec, st->dev_error);
    DF_CUDA_CHECK_LAUNCH(be, "embedding");
}

/* --- SwiGLU and residual add ------------------------------------------------ */

__device__ __forceinline__ float silu_mul(float g, float u) {
    return g / (1.0f + __expf(-g)) * u;
}

__global__ void k_swiglu_vec(uint4 *out, const uint4 *gate, const uint4 *up, size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        Pack8 g, u, o;
        g.u = gate[i];
        u.u = up[i];
        for (int j = 0; j < 4; j++) {
            float2 gf = __bfloat1622float2(g.h2[j]), uf = __bfloat1622float2(u.h2[j]);
            o.h2[j] = __floats2bfloat162_rn(silu_mul(gf.x, uf.x), silu_mul(gf.y, uf.y));
        }
        out[i] = o.u;
    }
}

__global__ void k_swiglu(bf16 *out, const bf16 *gate, const bf16 *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(silu_mul(__bfloat162float(gate[i]), __bfloat162float(up[i])));
}

void df_cuda_swiglu(DfBackend *be, DfBuffer out, DfBuffer gate, DfBuffer up) {
    DfCudaState *st = df_cuda_state(be);
    size_t n = out.count;
    if (n % 8 == 0 && df_cuda_aligned16(out.ptr) && df_cuda_aligned16(gate.ptr) && df_cuda_aligned16(up.ptr))
        k_swiglu_vec<<<df_cuda_blocks(n / 8, 256), 256, 0, st->stream>>>((uint4 *)out.ptr, (const uint4 *)gate.ptr,
                                                                         (const uint4 *)up.ptr, n / 8);
    else
        k_swiglu<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>((bf16 *)out.ptr, (const bf16 *)gate.ptr,
                                                                 (const bf16 *)up.ptr, n);
    DF_CUDA_CHECK_LAUNCH(be, "swiglu");
}

/* swiglu on the fused gate/up product: row r's gate is gate_up[r, 0..inter),
 * its up gate_up[r, inter..2*inter); in units of 8 values (inter8 = inter/8). */
__global__ void k_swiglu_packed_vec(uint4 *out, const uint4 *gate_up, size_t rows, size_t inter8) {
    size_t total = rows * inter8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / inter8, c = i % inter8;
        Pack8 g, u, o;
        g.u = gate_up[r * 2 * inter8 + c];
        u.u = gate_up[r * 2 * inter8 + inter8 + c];
        for (int j = 0; j < 4; j++) {
            float2 gf = __bfloat1622float2(g.h2[j]), uf = __bfloat1622float2(u.h2[j]);
            o.h2[j] = __floats2bfloat162_rn(silu_mul(gf.x, uf.x), silu_mul(gf.y, uf.y));
        }
        out[i] = o.u;
    }
}

__global__ void k_swiglu_packed(bf16 *out, const bf16 *gate_up, size_t rows, size_t inter) {
    size_t total = rows * inter;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / inter, c = i % inter;
        const bf16 *g = gate_up + r * 2 * inter;
        out[i] = __float2bfloat16_rn(silu_mul(__bfloat162float(g[c]), __bfloat162float(g[inter + c])));
    }
}

void df_cuda_swiglu_packed(DfBackend *be, DfBuffer out, DfBuffer gate_up, int rows, int inter) {
    DfCudaState *st = df_cuda_state(be);
    size_t n = (size_t)rows * inter;
    if (inter % 8 == 0 && df_cuda_aligned16(out.ptr) && df_cuda_aligned16(gate_up.ptr))
        k_swiglu_packed_vec<<<df_cuda_blocks(n / 8, 256), 256, 0, st->stream>>>(
            (uint4 *)out.ptr, (const uint4 *)gate_up.ptr, (size_t)rows, (size_t)inter / 8);
    else
        k_swiglu_packed<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>((bf16 *)out.ptr, (const bf16 *)gate_up.ptr,
                                                                        (size_t)rows, (size_t)inter);
    DF_CUDA_CHECK_LAUNCH(be, "swiglu_packed");
}

__global__ void k_add_vec(uint4 *y, const uint4 *x, size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        Pack8 a, b, o;
        a.u = y[i];
        b.u = x[i];
        for (int j = 0; j < 4; j++) {
            float2 af = __bfloat1622float2(a.h2[j]), bf = __bfloat1622float2(b.h2[j]);
            o.h2[j] = __floats2bfloat162_rn(af.x + bf.x, af.y + bf.y);
        }
        y[i] = o.u;
    }
}

__global__ void k_add(bf16 *y, const bf16 *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}

void df_cuda_add_inplace(DfBackend *be, DfBuffer y, DfBuffer x) {
    DfCudaState *st = df_cuda_state(be);
    size_t n = y.count;
    if (n % 8 == 0 && df_cuda_aligned16(y.ptr) && df_cuda_aligned16(x.ptr))
        k_add_vec<<<df_cuda_blocks(n / 8, 256), 256, 0, st->stream>>>((uint4 *)y.ptr, (const uint4 *)x.ptr, n / 8);
    else
        k_add<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>((bf16 *)y.ptr, (const bf16 *)x.ptr, n);
    DF_CUDA_CHECK_LAUNCH(be, "add_inplace");
}

/* --- strided 2-D copy, in units of W bytes (16, 4 or 2) --------------------- */

template <typename W>
__global__ void k_copy2d(char *dst, size_t ld_dst_bytes, const char *src, size_t ld_src_bytes, int rows,
                         size_t row_units) {
    size_t total = (size_t)rows * row_units;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / row_units, c = i % row_units;
        ((W *)(dst + r * ld_dst_bytes))[c] = ((const W *)(src + r * ld_src_bytes))[c];
    }
}

void df_cuda_copy2d(DfBackend *be, DfBuffer dst, int ld_dst, DfBuffer src, int ld_src, int rows, int cols) {
    DfCudaState *st = df_cuda_state(be);
    size_t es = (size_t)dst.elem_size;
    size_t row_bytes = (size_t)cols * es, ldd = (size_t)ld_dst * es, lds = (size_t)ld_src * es;
    uintptr_t all = (uintptr_t)dst.ptr | (uintptr_t)src.ptr | row_bytes | ldd | lds;
    char *d = (char *)dst.ptr;
    const char *s = (const char *)src.ptr;
    if ((all & 15u) == 0)
        k_copy2d<uint4><<<df_cuda_blocks((size_t)rows * row_bytes / 16, 256), 256, 0, st->stream>>>(d, ldd, s, lds,
                                                                                                   rows, row_bytes / 16);
    else if ((all & 3u) == 0)
        k_copy2d<uint32_t><<<df_cuda_blocks((size_t)rows * row_bytes / 4, 256), 256, 0, st->stream>>>(d, ldd, s, lds,
                                                                                                     rows, row_bytes / 4);
    else
        k_copy2d<uint16_t><<<df_cuda_blocks((size_t)rows * row_bytes / 2, 256), 256, 0, st->stream>>>(d, ldd, s, lds,
                                                                                                     rows, row_bytes / 2);
    DF_CUDA_CHECK_LAUNCH(be, "copy2d");
}
