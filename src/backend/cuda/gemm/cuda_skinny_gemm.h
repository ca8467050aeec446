/* The skinny GEMM's routing as its tests (tests/test_cuda_skinny_gemm.c)
 * set and observe it. Which products of at most DF_SKINNY_GEMM_MAX_M rows
 * against [N,K] weights (decoding's shapes) take the skinny-GEMM kernel
 * (cuda_skinny_gemm.cu) instead of cuBLASLt: only the shapes where it
 * measured faster on the H200 (the default: at most 16 rows against at most
 * 2048 weight rows, a Qwen3-8B-sized k/v projection, 1.27x at one row;
 * elsewhere cuBLASLt was as fast or faster, see docs/kernels.md); none; or
 * every shape it fits (tests, timings). The values are those of the variant
 * skinny_gemm (kernel_variants.def). */
#ifndef DF_BACKEND_CUDA_GEMM_CUDA_SKINNY_GEMM_H
#define DF_BACKEND_CUDA_GEMM_CUDA_SKINNY_GEMM_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum DfCudaSkinnyGemm { DF_SKINNY_GEMM_AUTO = 0, DF_SKINNY_GEMM_OFF = 1, DF_SKINNY_GEMM_ALWAYS = 2 } DfCudaSkinnyGemm;

/* The variant skinny_gemm of be, as df_backend_set_variant(be, "skinny_gemm", mode) sets it. */
void df_cuda_set_skinny_gemm(DfBackend *be, DfCudaSkinnyGemm mode);

/* Products the skinny-GEMM kernel has run on this backend (tests check that
 * the shapes meant for it take it). */
size_t df_cuda_skinny_gemm_count(DfBackend *be);

#ifdef __cplusplus
}
#endif

#endif
