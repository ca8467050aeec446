/* A cuBLASLt matmul plan (cuda_matmul.cu builds and caches them) and the
 * choice of its algorithm (cuda_matmul_search.cu). */
#ifndef DF_BACKEND_CUDA_CUDA_MATMUL_PLAN_H
#define DF_BACKEND_CUDA_CUDA_MATMUL_PLAN_H

#include "backend/cuda/common/cuda_internal.h" /* DF_GEMM_CANDIDATES: kernel_variants.h */

struct DfMatmulPlan {
    int m, n, k, trans_a, trans_b, align;
    int lda, ldb, ldc, c_f32;
    int fallback; /* cuBLASLt has no algorithm: use k_matmul_fallback */
    int searched; /* the algorithm was chosen by timing the candidates at this plan's shape */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C */
    cublasLtMatmulAlgo_t algo;
};

#define LT_TRY(call)                                                                                          \
    do {                                                                                                      \
        cublasStatus_t s_ = (call);                                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            df_cuda_record_failure(be, __FILE__, __LINE__, "%s: %s", #call, cublasLtGetStatusString(s_));      \
            return -1;                                                                                        \
        }                                                                                                     \
    } while (0)

/* One cuBLASLt run of the product g through plan p with algorithm algo, on the backend's stream. */
cublasStatus_t df_cuda_plan_run(DfCudaState *st, const DfMatmulPlan *p, const DfCudaGemm *g,
                                const cublasLtMatmulAlgo_t *algo);

/* How many of the heuristic's candidates a new plan asks for (at most
 * DF_GEMM_CANDIDATES): one unless the variants gemm_search or gemm_algo want
 * more, so that the default's query stays the single-answer one. */
int df_cuda_gemm_candidates_wanted(const DfCudaState *st);

/* Sets p->algo, the algorithm the plan runs, from the heuristic's n >= 1
 * candidates (best first by its own estimate); g is the product the plan is
 * built for, whose buffers a search times the candidates on and leaves as
 * they were (cuda_matmul_search.cu says when). */
void df_cuda_gemm_choose_algo(DfBackend *be, DfMatmulPlan *p, const DfCudaGemm *g,
                              const cublasLtMatmulHeuristicResult_t *cand, int n);

#endif
