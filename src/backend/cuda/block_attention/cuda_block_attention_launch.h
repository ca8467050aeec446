/* The block attention's kernels by tier and head dim, one launch each, as
 * the dispatch table (cuda_block_attention_dispatch.cu) runs them: the
 * forwards (cuda_block_attention.cu; wgmma: cuda_block_attention_wgmma.h)
 * and the backwards (cuda_block_attention_backward.cu). The caller checked
 * the shape and the alignment. */
#ifndef DF_BACKEND_CUDA_BLOCK_ATTENTION_CUDA_BLOCK_ATTENTION_LAUNCH_H
#define DF_BACKEND_CUDA_BLOCK_ATTENTION_CUDA_BLOCK_ATTENTION_LAUNCH_H

#include "backend/backend.h"

void df_cuda_block_attn_forward_mma_sync_64(DfBackend *be, const DfBlockAttnArgs *a);
void df_cuda_block_attn_forward_mma_sync_128(DfBackend *be, const DfBlockAttnArgs *a);
void df_cuda_block_attn_forward_mma_sync_256(DfBackend *be, const DfBlockAttnArgs *a);

void df_cuda_block_attn_backward_mma_sync_64(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
void df_cuda_block_attn_backward_mma_sync_128(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
void df_cuda_block_attn_backward_mma_sync_256(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
void df_cuda_block_attn_backward_wgmma_128(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);

#endif
