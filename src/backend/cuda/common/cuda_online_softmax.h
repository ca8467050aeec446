/* The flash-attention kernels' per-warp steps over one m-tile of 16 query
 * rows in the m16n8 accumulator layout (lane l: rows l/4 and l/4 + 8,
 * columns 2 (l % 4) and 2 (l % 4) + 1 of each 8-column n-tile), shared by
 * the causal kernels (cuda_attention.cu, cuda_attention_wgmma.cu) and the
 * block attention's forwards (cuda_block_attention*.cu): the online softmax
 * of a 64-key tile, and the normalized output rows with their lse. What
 * differs between them, which keys a row sees and where a row lives, comes
 * in as a function. */
#ifndef DF_BACKEND_CUDA_CUDA_ONLINE_SOFTMAX_H
#define DF_BACKEND_CUDA_CUDA_ONLINE_SOFTMAX_H

#include <math.h>

#include "backend/cuda/common/cuda_mma.h"

/* The online softmax of the 64 keys key0.. of this thread's two rows:
 * scores scaled to base 2, where need_mask the keys for which
 * hidden(key, half) holds (half 0: row l/4, 1: row l/4 + 8) set to -inf,
 * running max and sum updated; sc is left holding P, alpha the factor the
 * m-tile's accumulators are to be scaled by. The running max stays finite
 * when the caller's first tile holds a key every row sees; where a row may
 * see none of a tile before any key (GUARD), 0 stands in for its -inf max
 * so that no -inf - -inf appears. */
template <bool GUARD = false, typename Hidden>
__device__ __forceinline__ void online_softmax_tile(float (&sc)[8][4], float (&m_run)[2], float (&l_run)[2],
                                                    float (&alpha)[2], float scale_log2, int key0, int tq,
                                                    bool need_mask, Hidden hidden) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = sc[n][e] * scale_log2;
            if (need_mask && hidden(key0 + n * 8 + 2 * tq + (e & 1), e >> 1)) x = -INFINITY;
            sc[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(m_run[r], mx[r]);
        m_use[r] = GUARD && m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = fast_exp2(m_run[r] - m_use[r]);
        m_run[r] = m_new;
        l_run[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(sc[n][e] - m_use[e >> 1]);
            sc[n][e] = p;
            l_run[e >> 1] += p;
        }
}

/* The m-tile's output rows: row sums over the quad, O / l into out at
 * row_at(i).off (i = l/4, l/4 + 8: the row within the m-tile), the lse
 * (natural log) at row_at(i).lse_idx where write_lse; rows whose
 * row_at(i).valid is false are not written. */
template <int D, typename RowAt>
__device__ __forceinline__ void store_normalized_rows(bf16 *out, float *lse, bool write_lse, const float (&o)[D / 8][4],
                                                      const float (&m_run)[2], const float (&l_run)[2], int lane,
                                                      RowAt row_at) {
    int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        auto at = row_at(g + 8 * r);
        if (!at.valid) continue;
        float inv = 1.0f / l;
        bf16 *orow = out + at.off;
#pragma unroll
        for (int d = 0; d < D / 8; d++)
            *(__nv_bfloat162 *)(orow + d * 8 + 2 * tq) = __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
        if (write_lse && tq == 0) lse[at.lse_idx] = (m_run[r] + log2f(l)) * 0.69314718056f;
    }
}

#endif
