/* What the causal attention kernels (cuda_attention.cu on mma.sync,
 * cuda_attention_wgmma.cu on wgmma) do with one m-tile of 16 query rows in
 * the m16n8 accumulator layout (lane l: rows l/4 and l/4 + 8): the online
 * softmax of a 64-key tile, and the normalized output rows with their lse. */
#ifndef DF_BACKEND_CUDA_CUDA_ATTENTION_ROWS_H
#define DF_BACKEND_CUDA_CUDA_ATTENTION_ROWS_H

#include <math.h>

#include "backend/cuda/cuda_mma.h"

/* The online softmax of the 64 keys key0.. for this thread's rows row_a
 * and row_a + 8: scores scaled to base 2, keys past a row masked where
 * need_mask (the diagonal tile), running max and sum updated; sc is left
 * holding P, alpha the factor the m-tile's accumulators are to be scaled by. */
__device__ __forceinline__ void causal_softmax_tile(float (&sc)[8][4], float (&m_run)[2], float (&l_run)[2],
                                                    float (&alpha)[2], int key0, int row_a, bool need_mask, int tq,
                                                    float scale_log2) {
    int row_b = row_a + 8;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = sc[n][e] * scale_log2;
            int key = key0 + n * 8 + 2 * tq + (e & 1);
            if (need_mask && key > (e < 2 ? row_a : row_b)) x = -INFINITY;
            sc[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        /* finite: key 0 of tile 0 is visible to every row, and tile 0 comes first */
        float m_new = fmaxf(m_run[r], mx[r]);
        alpha[r] = fast_exp2(m_run[r] - m_new);
        m_run[r] = m_new;
        l_run[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(sc[n][e] - m_run[e >> 1]);
            sc[n][e] = p;
            l_run[e >> 1] += p;
        }
}

/* The m-tile's rows row0 + l/4 (+ 8) of a sequence starting at token t0, of
 * length len: row sums over the quad, O / l into out (rows ld apart, head h
 * at h * D), lse (natural log, [heads, n_tokens]) where lse is not NULL;
 * rows past len are not written. */
template <int D>
__device__ __forceinline__ void store_attention_rows(bf16 *out, float *lse, const float (&o)[D / 8][4],
                                                     const float (&m_run)[2], const float (&l_run)[2], int row0,
                                                     int len, int t0, int ld, int h, int n_tokens, int lane) {
    int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        int row = row0 + g + 8 * r;
        if (row >= len) continue;
        float inv = 1.0f / l;
        bf16 *orow = out + (size_t)(t0 + row) * ld + (size_t)h * D;
#pragma unroll
        for (int d = 0; d < D / 8; d++)
            *(__nv_bfloat162 *)(orow + d * 8 + 2 * tq) = __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
        if (lse && tq == 0) lse[(size_t)h * n_tokens + t0 + row] = (m_run[r] + log2f(l)) * 0.69314718056f;
    }
}

#endif
