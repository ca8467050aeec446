/* The block attention's kernels at head_dim 128 on Hopper's wgmma: the
 * forward (cuda_block_attention_forward_wgmma.cu), run by the dispatch table
 * (cuda_block_attention_dispatch.cu), and the backward's dQ and dK/dV
 * (cuda_block_attention_backward_wgmma.cu), launched by
 * cuda_block_attention_backward.cu, unless the variant
 * block_attention_mma_sync asks for the mma.sync kernels. The backward's
 * take dsum as step 1 of the backward left it; a kernel that cannot be set
 * up is a recorded failure. */
#ifndef DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_WGMMA_H
#define DF_BACKEND_CUDA_CUDA_BLOCK_ATTENTION_WGMMA_H

#include <cuda_bf16.h>

#include "backend/backend.h"

/* The forward (out and lse), a block a CTA. */
void df_cuda_block_attention_forward_wgmma(DfBackend *be, const DfBlockAttnArgs *a);
/* Step 2, dQ (written, not added to). */
void df_cuda_block_attn_dq_wgmma(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g, const float *dsum);

/* Step 3, dK and dV: the fp32 context sums into ctx_dk/ctx_dv (zeroed by the
 * caller), the block rows' added to dk_blk/dv_blk; n_ctx_items as
 * count_ctx_items (cuda_block_attention_keys.h) counts them. */
void df_cuda_block_attn_dkv_wgmma(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g, const float *dsum,
                                  float *ctx_dk, float *ctx_dv, int n_ctx_items);

#endif
