/* matmul through cuBLASLt: bf16 A, B, C, fp32 accumulation and scaling.
 *
 * Row-major to column-major: a row-major [r, c] matrix is the column-major
 * [c, r] matrix with leading dimension c. So the row-major C = op(A) op(B)
 * is computed as the column-major C^T [N, M] = op(B)^T op(A)^T, passing B
 * as cuBLASLt's first operand and A as its second:
 *   - B stored [K, N] (no trans_b) is column-major [N, K], ld N: used as is;
 *     stored [N, K] (trans_b) is column-major [K, N], ld K: transposed.
 *   - A stored [M, K] (no trans_a) is column-major [K, M], ld K: as is;
 *     stored [K, M] (trans_a) is column-major [M, K], ld M: transposed.
 *   - C [M, N] row-major is column-major [N, M], ld N.
 * beta 1 accumulates into C (C and D are the same buffer).
 *
 * A plan (descriptors, layouts and the heuristic's algorithm) is built once
 * per (shape, transposes, pointer alignment) and cached: the heuristic query
 * costs far more than a launch. When cuBLASLt offers no algorithm (odd
 * leading dimensions with 2-byte aligned pointers can do that), a plain
 * kernel, one thread per output element with fp32 accumulation, is used:
 * slow, but only such shapes ever take it. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

struct DfMatmulPlan {
    int m, n, k, trans_a, trans_b, align;
    int fallback; /* cuBLASLt has no algorithm: use k_matmul_fallback */
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

static void plan_destroy(DfMatmulPlan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

void df_cuda_matmul_plans_free(DfCudaState *st) {
    for (int i = 0; i < st->n_plans; i++) plan_destroy(&st->plans[i]);
    free(st->plans);
    st->plans = NULL;
    st->n_plans = st->cap_plans = 0;
}

/* Largest power of two up to 256 dividing every pointer: what the heuristic
 * may assume about the buffers. */
static int common_alignment(const void *a, const void *b, const void *c) {
    uintptr_t all = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | 256u;
    return (int)(all & (~all + 1));
}

static int plan_build(DfBackend *be, DfMatmulPlan *p) {
    DfCudaState *st = df_cuda_state(be);
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_first = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
    uint64_t m = (uint64_t)p->m, n = (uint64_t)p->n, k = (uint64_t)p->k;
    if (p->trans_b)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, k, n, (int64_t)k));
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, n, k, (int64_t)n));
    if (p->trans_a)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, m, k, (int64_t)m));
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, k, m, (int64_t)k));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_16BF, n, m, (int64_t)n));

    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint32_t align = (uint32_t)p->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &st->lt_workspace_bytes,
                                         sizeof st->lt_workspace_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &result,
                                                      &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0)
        p->algo = result.algo;
    else if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED)
        p->fallback = 1;
    else
        LT_TRY(s);
    return 0;
}

static DfMatmulPlan *plan_for(DfBackend *be, int m, int n, int k, int ta, int tb, int align) {
    DfCudaState *st = df_cuda_state(be);
    for (int i = 0; i < st->n_plans; i++) {
        DfMatmulPlan *p = &st->plans[i];
        if (p->m == m && p->n == n && p->k == k && p->trans_a == ta && p->trans_b == tb && p->align == align) return p;
    }
    if (st->n_plans == st->cap_plans) {
        st->cap_plans = st->cap_plans ? 2 * st->cap_plans : 32;
        st->plans = (DfMatmulPlan *)df_xrealloc(st->plans, (size_t)st->cap_plans * sizeof *st->plans, "matmul plans");
    }
    DfMatmulPlan *p = &st->plans[st->n_plans];
    memset(p, 0, sizeof *p);
    p->m = m, p->n = n, p->k = k, p->trans_a = ta, p->trans_b = tb, p->align = align;
    if (plan_build(be, p)) {
        plan_destroy(p);
        return NULL;
    }
    st->n_plans++;
    return p;
}

__global__ void k_matmul_fallback(__nv_bfloat16 *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int m, int n,
                                  int k, int ta, int tb, float beta) {
    size_t total = (size_t)m * n;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx / n), j = (int)(idx % n);
        float acc = 0.0f;
        for (int p = 0; p < k; p++) {
            float av = __bfloat162float(ta ? a[(size_t)p * m + i] : a[(size_t)i * k + p]);
            float bv = __bfloat162float(tb ? b[(size_t)j * k + p] : b[(size_t)p * n + j]);
            acc += av * bv;
        }
        if (beta != 0.0f) acc += beta * __bfloat162float(c[idx]);
        c[idx] = __float2bfloat16_rn(acc);
    }
}

void df_cuda_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                    float beta) {
    DfCudaState *st = df_cuda_state(be);
    df_cuda_prof_begin(be, DF_CUDA_OP_MATMUL);
    DfMatmulPlan *p = plan_for(be, m, n, k, trans_a != 0, trans_b != 0, common_alignment(a.ptr, b.ptr, c.ptr));
    if (p && p->fallback) {
        k_matmul_fallback<<<df_cuda_blocks((size_t)m * n, 256), 256, 0, st->stream>>>(
            (__nv_bfloat16 *)c.ptr, (const __nv_bfloat16 *)a.ptr, (const __nv_bfloat16 *)b.ptr, m, n, k, trans_a != 0,
            trans_b != 0, beta);
        DF_CUDA_CHECK_LAUNCH(be, "matmul (fallback kernel)");
    } else if (p) {
        float alpha = 1.0f;
        cublasStatus_t s = cublasLtMatmul(st->lt, p->desc, &alpha, b.ptr, p->la, a.ptr, p->lb, &beta, c.ptr, p->lc,
                                          c.ptr, p->lc, &p->algo, st->lt_workspace, st->lt_workspace_bytes,
                                          st->stream);
        if (s != CUBLAS_STATUS_SUCCESS)
            df_cuda_record_failure(be, __FILE__, __LINE__, "cublasLtMatmul M=%d N=%d K=%d: %s", m, n, k,
                                   cublasLtGetStatusString(s));
    }
    df_cuda_prof_end(be);
}
