/* The per-8-values arithmetic of RMSNorm and RoPE on bf16 (Pack8), shared
 * by the element-wise kernels (cuda_elementwise.cu) and the fused q/k/v
 * kernel (cuda_qkv_rope_cache.cu): one definition of every expression, so
 * that the fused kernel rounds exactly as rmsnorm followed by rope does. */
#ifndef DF_BACKEND_CUDA_CUDA_HEAD_MATH_H
#define DF_BACKEND_CUDA_CUDA_HEAD_MATH_H

#include "backend/cuda/common/cuda_internal.h"

/* ss plus the squares of the 8 values, added pair by pair. */
__device__ __forceinline__ float df_pack8_add_squares(float ss, const Pack8 &p) {
    for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(p.h2[j]);
        ss += f.x * f.x + f.y * f.y;
    }
    return ss;
}

/* The sum of ss over the warp (xor butterfly: every lane gets the same sum). */
__device__ __forceinline__ float df_warp_sum(float ss) {
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    return ss;
}

/* 1 / rms of a row of `dim` values whose squares sum to ss. */
__device__ __forceinline__ float df_rms_inverse(float ss, int dim, float eps) {
    return rsqrtf(ss / (float)dim + eps);
}

/* x * inv * w, rounded to bf16 (Pack8 has no copy: the 16 bytes are returned). */
__device__ __forceinline__ uint4 df_pack8_rmsnorm(const Pack8 &x, const Pack8 &w, float inv) {
    Pack8 o;
    for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(x.h2[j]), g = __bfloat1622float2(w.h2[j]);
        o.h2[j] = __floats2bfloat162_rn(f.x * inv * g.x, f.y * inv * g.y);
    }
    return o.u;
}

/* RoPE (rotate_half) of 8 pairs: a from a head's first half, b the 8
 * values half a head later, c and sn their 8 table entries; oa, ob the
 * rotated values, rounded to bf16. sin_sign -1: the inverse rotation. */
__device__ __forceinline__ void df_pack8_rope(const Pack8 &a, const Pack8 &b, const float *c, const float *sn,
                                              float sin_sign, Pack8 &oa, Pack8 &ob) {
    for (int k = 0; k < 4; k++) {
        float2 af = __bfloat1622float2(a.h2[k]), bf = __bfloat1622float2(b.h2[k]);
        float c0 = c[2 * k], c1 = c[2 * k + 1], s0 = sin_sign * sn[2 * k], s1 = sin_sign * sn[2 * k + 1];
        oa.h2[k] = __floats2bfloat162_rn(af.x * c0 - bf.x * s0, af.y * c1 - bf.y * s1);
        ob.h2[k] = __floats2bfloat162_rn(bf.x * c0 + af.x * s0, bf.y * c1 + af.y * s1);
    }
}

#endif
