/* The CUDA backend's kernel variants, for its tests (tests/test_cuda_*.c)
 * and the kernel timings (dev/cuda/) only: production code never includes
 * this header; the registry of op tests and the benchmarks choose variants by
 * name through the op table instead (df_backend_set_variant: the names are
 * those of cuda_variants.cu).
 * Results agree within rounding whichever variant runs. */
#ifndef DF_BACKEND_CUDA_CUDA_VARIANTS_H
#define DF_BACKEND_CUDA_CUDA_VARIANTS_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "attention_rows_per_warp": query rows per warp of the mma.sync attention kernel:
 * 16 (64 rows per block, Q in registers) or 32 (128 rows per block, every
 * K/V fragment used twice); 0, the default, picks 32 when the batch's
 * longest sequence has 512 tokens or more. */
void df_cuda_set_attention_rows_per_warp(DfBackend *be, int rows);

/* "attention_mma_sync": 1 runs attention at head_dim 128 on the mma.sync
 * kernel (cuda_attention.cu, whose rows per warp attention_rows_per_warp
 * chooses) that head_dims 64 and 256 take, instead of the wgmma one
 * (cuda_attention_wgmma.cu); 0, the default, wgmma. */
void df_cuda_set_attention_mma_sync(DfBackend *be, int on);

/* "lm_head_chunk_rows": rows of hidden states per chunk of lm_head_ce (the
 * logits of one chunk are the op's scratch); 0, the default, picks chunks
 * of at most 1024 rows whose logits fit in 1 GiB. */
void df_cuda_set_lm_head_chunk_rows(DfBackend *be, int rows);

/* "lm_head_logits_bf16": lm_head_ce's logits in bf16 (half the scratch
 * traffic, logits rounded to 8 bits of mantissa before the softmax) instead
 * of fp32, the default. */
void df_cuda_set_lm_head_logits_bf16(DfBackend *be, int on);

/* "skinny_gemm": which matrix products with at most 64 rows of activations
 * against [N,K] weights (decoding's shapes) take the skinny-GEMM kernel
 * (cuda_skinny_gemm.cu) instead of cuBLASLt: none; only the shapes where it
 * measured faster on the H200 (the default: at most 16 rows against at most
 * 2048 weight rows, a Qwen3-8B-sized k/v projection, 1.27x at one row;
 * elsewhere cuBLASLt was as fast or faster, see docs/kernels.md); or every
 * shape it fits (tests, timings). As a variant value: 0 auto, 1 off, 2 always. */
typedef enum DfCudaSkinnyGemm { DF_SKINNY_GEMM_OFF, DF_SKINNY_GEMM_AUTO, DF_SKINNY_GEMM_ALWAYS } DfCudaSkinnyGemm;
void df_cuda_set_skinny_gemm(DfBackend *be, DfCudaSkinnyGemm mode);
/* Products the skinny-GEMM kernel has run on this backend (tests check that
 * the shapes meant for it take it). */
size_t df_cuda_skinny_gemm_count(DfBackend *be);

/* "gemm_algo": which of cuBLASLt's heuristic algorithms the matmul plans
 * run: 0, the default, its first; k >= 1 its k-th candidate (its last when it
 * offers fewer) for every product. The plans are rebuilt. */
void df_cuda_set_gemm_algo(DfBackend *be, int rank);

/* "gemm_search": 1 times the heuristic's candidates of every product large
 * enough for it to matter and keeps the fastest (cuda_matmul_search.cu: why
 * it is not the default); 0, the default, off. A gemm_algo k >= 1 takes
 * precedence. The plans are rebuilt. */
void df_cuda_set_gemm_search(DfBackend *be, int on);

/* "block_attention_mma_sync": 1 runs the block attention's forward and
 * backward (dQ, dK and dV) at head_dim 128 on the mma.sync kernels that
 * head_dim 64 and 256 take, instead of the wgmma ones
 * (cuda_block_attention_forward_wgmma.cu, cuda_block_attention_backward_wgmma.cu);
 * 0, the default, wgmma. */
void df_cuda_set_block_attention_mma_sync(DfBackend *be, int on);

/* "block_attention_forward_pairs": 1 runs the wgmma forward two
 * neighbouring blocks a CTA on one key list (k_block_attn_forward_pair_wgmma,
 * two warpgroups); 0, the default, one block a CTA
 * (k_block_attn_forward_wgmma: one warpgroup, the block's own key list).
 * Both in cuda_block_attention_forward_wgmma.cu. */
void df_cuda_set_block_attention_forward_pairs(DfBackend *be, int on);

/* "block_attention_dq_q_regs": 1 runs the wgmma backward's dQ kernel with the
 * CTA's Q and dO rows held in registers as A fragments (S = Q K^T and
 * dP = dO V^T then read only K or V from shared memory); 0, the default,
 * both operands of those products from shared memory
 * (cuda_block_attention_backward_wgmma.cu; measured a tie). */
void df_cuda_set_block_attention_dq_q_regs(DfBackend *be, int on);

/* "rmsnorm_backward_two_pass": 1 runs rmsnorm_backward's row stage on the
 * two-pass kernel (each row read twice, dw added in shared memory) that odd
 * sizes and rows wider than 8192 take, instead of the kernel that holds the
 * row in registers; 0, the default, the held kernel where it fits. */
void df_cuda_set_rmsnorm_backward_two_pass(DfBackend *be, int on);

/* "delta_rule_recurrent": 1 runs gated_delta_rule token by token
 * (k_gated_delta_rule, cuda_hybrid.cu) for every shape; 0, the default, by
 * chunks of 32 tokens on tensor cores (cuda_delta_rule_chunked.cu) where
 * both head dims are 128. */
void df_cuda_set_delta_rule_recurrent(DfBackend *be, int on);

/* "kv_attention_blocks_per_sm": the blocks per SM that kv_attention's
 * split-K aims for: the key range of each (sequence, kv head) is split until
 * sequences x kv heads x splits reach this many blocks per SM (chunks of at
 * least 64 keys); 0 restores the default. */
void df_cuda_set_kv_attention_blocks_per_sm(DfBackend *be, int blocks);

#ifdef __cplusplus
}
#endif

#endif
