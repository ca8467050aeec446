/* The block attention's forward and backward ops: the shape and alignment
 * checks, then the kernels of one row of the table below (FlashAttention-3's
 * tile table: one row per head dim and tier, the first that matches runs).
 * Figures: docs/kernels.md, at 2 x 2048 context rows, 512 blocks of 16,
 * 32/8 heads. */
#include "backend/cuda/block_attention/cuda_block_attention_launch.h"
#include "backend/cuda/block_attention/cuda_block_attention_tiles.h"
#include "backend/cuda/block_attention/cuda_block_attention_wgmma.h"

namespace {

struct BlockAttnRoute {
    int head_dim;
    DfCudaTier tier;
    void (*forward)(DfBackend *be, const DfBlockAttnArgs *a);
    void (*backward)(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g);
    const char *why;
};

const BlockAttnRoute ROUTES[] = {
    {128, DF_TIER_WGMMA, df_cuda_block_attention_forward_wgmma, df_cuda_block_attn_backward_wgmma_128,
     "one block a CTA, Q in registers: forward 0.59 ms, backward 2.38-2.44 ms (H100)"},
    {64, DF_TIER_MMA_SYNC, df_cuda_block_attn_forward_mma_sync_64, df_cuda_block_attn_backward_mma_sync_64,
     "two blocks a CTA, every K/V fragment feeds both (1.74 -> 1.43 ms at head_dim 128, H200); packed chunks "
     "and registers capped for 3-4 CTAs an SM at the recipe's drafter: forward 0.35 ms, backward 0.99 ms (H100)"},
    {128, DF_TIER_MMA_SYNC, df_cuda_block_attn_forward_mma_sync_128, df_cuda_block_attn_backward_mma_sync_128,
     "the portable tier (variant block_attention_mma_sync): GPUs without wgmma"},
    {256, DF_TIER_MMA_SYNC, df_cuda_block_attn_forward_mma_sync_256, df_cuda_block_attn_backward_mma_sync_256,
     "drafters of Qwen3.5/3.6 targets: one block a CTA (16 x 256 accumulators take 128 registers), Q re-read "
     "from shared memory, dK and dV in two passes"},
};

/* The row for head_dim that the GPU's tier and the variants allow; NULL when
 * the table has none. (A GPU whose shared memory a row's kernels do not fit
 * is told so by their launch, naming the need and the limit.) */
const BlockAttnRoute *route_of(const DfCudaState *st, int head_dim) {
    for (const BlockAttnRoute &r : ROUTES) {
        if (r.head_dim != head_dim) continue;
        if (!df_cuda_tier_allows(st, r.tier, st->variant.block_attention_mma_sync)) continue;
        return &r;
    }
    return nullptr;
}

} // namespace

void df_cuda_block_attention(DfBackend *be, const DfBlockAttnArgs *a) {
    DfBuffer bufs[] = {a->q, a->k_ctx, a->v_ctx, a->k_blk, a->v_blk, a->out};
    if (!supported(be, a, "block_attention")) return;
    if (misaligned(bufs, 6)) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention: q, k, v and out must be 16-byte aligned");
        return;
    }
    const BlockAttnRoute *r = route_of(df_cuda_state(be), a->head_dim);
    if (!r) { /* supported() takes only the table's head dims */
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention: no kernel for head_dim %d", a->head_dim);
        return;
    }
    r->forward(be, a);
}

void df_cuda_block_attention_backward(DfBackend *be, const DfBlockAttnArgs *a, const DfBlockAttnGrads *g) {
    DfBuffer bufs[] = {a->q, a->k_ctx, a->v_ctx, a->k_blk, a->v_blk, a->out,
                       g->d_out, g->dq, g->dk_ctx, g->dv_ctx, g->dk_blk, g->dv_blk};
    if (!supported(be, a, "block_attention_backward")) return;
    if (misaligned(bufs, 12)) {
        df_cuda_record_failure(be, __FILE__, __LINE__,
                               "block_attention_backward: q, k, v, out and the gradients must be 16-byte aligned");
        return;
    }
    const BlockAttnRoute *r = route_of(df_cuda_state(be), a->head_dim);
    if (!r) { /* supported() takes only the table's head dims */
        df_cuda_record_failure(be, __FILE__, __LINE__, "block_attention_backward: no kernel for head_dim %d",
                               a->head_dim);
        return;
    }
    r->backward(be, a, g);
}
