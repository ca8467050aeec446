/* Warp-level building blocks of the tensor-core kernels (mma.sync
 * m16n8k16 bf16 -> fp32, ldmatrix, cp.async), shared by the attention
 * kernels. Fragment layouts are those of the PTX ISA for m16n8k16: lane l
 * holds rows l/4 and l/4 + 8, columns 2*(l%4) and 2*(l%4) + 1 of each
 * accumulator tile. */
#ifndef DF_BACKEND_CUDA_CUDA_MMA_H
#define DF_BACKEND_CUDA_CUDA_MMA_H

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; src_bytes 0 zero-fills without reading. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
/* 4 bytes global -> shared (through L1); src_bytes 0 zero-fills without reading. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* p[0] += v.x, p[1] += v.y in global memory (p 8-byte aligned): one vector
 * atomic where the GPU has it (sm_90), two scalar ones before (sm_80's
 * portable code); the same sums, each of them atomic. */
__device__ __forceinline__ void atomic_add_pair(float *p, float2 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd((float2 *)p, v);
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c += a b for one m16n8k16 tile */
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The online softmax's correction of an accumulator tile of 16 rows: the
 * rows gr (entries 0 and 1 of each fragment) times alpha[0], the rows gr + 8
 * (entries 2 and 3) times alpha[1]. */
template <int N>
__device__ __forceinline__ void scale_acc_rows(float (&acc)[N][4], const float alpha[2]) {
#pragma unroll
    for (int d = 0; d < N; d++) {
        acc[d][0] *= alpha[0];
        acc[d][1] *= alpha[0];
        acc[d][2] *= alpha[1];
        acc[d][3] *= alpha[1];
    }
}

template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* acc[mt] (16 x D) += P[mt] (16 x 64: fp32 accumulators, rounded to bf16 as
 * A fragments, the m16n8 layout of two adjacent n-tiles being the m16k16 A
 * layout) times a 64-row tile [64][D+8] of shared memory, for MT m-tiles at
 * once: each B fragment (ldmatrix .trans) feeds every m-tile. O += P V of
 * the flash-attention kernels. */
template <int D, int MT>
__device__ __forceinline__ void probs_times_tile_mt(float (&acc)[MT][D / 8][4], const float (&p)[MT][8][4],
                                                    const bf16 *tile, int lane) {
    constexpr int SD = D + 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            pa[mt][0] = pack_bf16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            pa[mt][1] = pack_bf16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            pa[mt][2] = pack_bf16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            pa[mt][3] = pack_bf16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, tile + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + dp * 16 +
                                     ((lane >> 4) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][2 * dp], pa[mt], b[0], b[1]);
                mma_bf16(acc[mt][2 * dp + 1], pa[mt], b[2], b[3]);
            }
        }
    }
}

#endif
