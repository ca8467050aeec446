/* The causal attention kernels' (cuda_attention.cu on mma.sync,
 * cuda_attention_wgmma.cu on wgmma) use of the shared softmax and output
 * steps (cuda_online_softmax.h) for one m-tile of 16 query rows: keys past a
 * row are hidden from it, and rows are consecutive tokens of a sequence. */
#ifndef DF_BACKEND_CUDA_CUDA_ATTENTION_ROWS_H
#define DF_BACKEND_CUDA_CUDA_ATTENTION_ROWS_H

#include "backend/cuda/common/cuda_online_softmax.h"

/* The online softmax of the 64 keys key0.. for this thread's rows row_a and
 * row_a + 8, keys past a row masked where need_mask (the diagonal tile); the
 * first tile holds key 0, which every row sees. */
__device__ __forceinline__ void causal_softmax_tile(float (&sc)[8][4], float (&m_run)[2], float (&l_run)[2],
                                                    float (&alpha)[2], int key0, int row_a, bool need_mask, int tq,
                                                    float scale_log2) {
    int row_b = row_a + 8;
    online_softmax_tile(sc, m_run, l_run, alpha, scale_log2, key0, tq, need_mask,
                        [=](int key, int half) { return key > (half ? row_b : row_a); });
}

/* The m-tile's rows row0 + l/4 (+ 8) of a sequence starting at token t0, of
 * length len: O / l into out (rows ld apart, head h at h * D), lse (natural
 * log, [heads, n_tokens]) where lse is not NULL; rows past len are not written. */
template <int D>
__device__ __forceinline__ void store_attention_rows(bf16 *out, float *lse, const float (&o)[D / 8][4],
                                                     const float (&m_run)[2], const float (&l_run)[2], int row0,
                                                     int len, int t0, int ld, int h, int n_tokens, int lane) {
    struct At {
        bool valid;
        size_t off, lse_idx;
    };
    store_normalized_rows<D>(out, lse, lse != nullptr, o, m_run, l_run, lane, [=](int i) {
        int row = row0 + i;
        return At{row < len, (size_t)(t0 + row) * ld + (size_t)h * D, (size_t)h * n_tokens + t0 + row};
    });
}

#endif
