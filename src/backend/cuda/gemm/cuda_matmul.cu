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
 * The general form, df_cuda_gemm, also takes leading dimensions (a matrix
 * inside a wider one: the lm head's logits chunk) and an fp32 C (weight
 * gradients, logits); A and B are always bf16, accumulation always fp32.
 *
 * A plan (descriptors, layouts and an algorithm) is built once per (shape,
 * transposes, leading dimensions, C type, pointer alignment) and cached: the
 * heuristic query costs far more than a launch. Which of the heuristic's
 * algorithms a plan runs is cuda_matmul_search.cu's (its first, unless the
 * variant gemm_search has large products time them). When cuBLASLt offers
 * no algorithm (odd leading dimensions with 2-byte aligned pointers
 * can do that), a plain kernel, one thread per output element with fp32
 * accumulation, is used: slow, but only such shapes ever take it.
 *
 * matmul with at most DF_SKINNY_GEMM_MAX_M rows against [N,K] weights
 * (decoding) takes cuda_skinny_gemm.cu instead where its layout and
 * alignment allow and it measured faster (the variant skinny_gemm). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gemm/cuda_matmul_plan.h"
#include "backend/cuda/gemm/cuda_skinny_gemm.h"

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
static int common_alignment(const void *a, const void *b, const void *c, const void *c_in) {
    uintptr_t all = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)c_in | 256u;
    return (int)(all & (~all + 1));
}

/* A plan's key: the fields plan_for matches on. */
static int plan_matches(const DfMatmulPlan *p, const DfCudaGemm *g, int align) {
    return p->m == g->m && p->n == g->n && p->k == g->k && p->trans_a == (g->trans_a != 0) &&
           p->trans_b == (g->trans_b != 0) && p->lda == g->lda && p->ldb == g->ldb && p->ldc == g->ldc &&
           p->c_f32 == (g->c_f32 != 0) && p->align == align;
}

static int plan_build(DfBackend *be, DfMatmulPlan *p, const DfCudaGemm *g) {
    DfCudaState *st = df_cuda_state(be);
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_first = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
    uint64_t m = (uint64_t)p->m, n = (uint64_t)p->n, k = (uint64_t)p->k;
    if (p->trans_b)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, k, n, p->ldb));
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, n, k, p->ldb));
    if (p->trans_a)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, m, k, p->lda));
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, k, m, p->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, p->c_f32 ? CUDA_R_32F : CUDA_R_16BF, n, m, p->ldc));

    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint32_t align = (uint32_t)p->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &st->lt_workspace_bytes,
                                         sizeof st->lt_workspace_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t cand[DF_GEMM_CANDIDATES];
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref,
                                                      df_cuda_gemm_candidates_wanted(st), cand, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0)
        df_cuda_gemm_choose_algo(be, p, g, cand, found);
    else if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED)
        p->fallback = 1;
    else
        LT_TRY(s);
    return 0;
}

static DfMatmulPlan *plan_for(DfBackend *be, const DfCudaGemm *g, int align) {
    DfCudaState *st = df_cuda_state(be);
    for (int i = 0; i < st->n_plans; i++)
        if (plan_matches(&st->plans[i], g, align)) return &st->plans[i];
    if (st->n_plans == st->cap_plans) {
        st->cap_plans = st->cap_plans ? 2 * st->cap_plans : 32;
        st->plans = (DfMatmulPlan *)df_xrealloc(st->plans, (size_t)st->cap_plans * sizeof *st->plans, "matmul plans");
    }
    DfMatmulPlan *p = &st->plans[st->n_plans];
    memset(p, 0, sizeof *p);
    p->m = g->m, p->n = g->n, p->k = g->k, p->trans_a = g->trans_a != 0, p->trans_b = g->trans_b != 0;
    p->lda = g->lda, p->ldb = g->ldb, p->ldc = g->ldc, p->c_f32 = g->c_f32 != 0, p->align = align;
    if (plan_build(be, p, g)) {
        plan_destroy(p);
        return NULL;
    }
    st->n_plans++;
    return p;
}

cublasStatus_t df_cuda_plan_run(DfCudaState *st, const DfMatmulPlan *p, const DfCudaGemm *g,
                                const cublasLtMatmulAlgo_t *algo) {
    float alpha = 1.0f, beta = g->beta;
    const void *c_in = g->c_in ? g->c_in : g->c;
    return cublasLtMatmul(st->lt, p->desc, &alpha, g->b, p->la, g->a, p->lb, &beta, c_in, p->lc, g->c, p->lc, algo,
                          st->lt_workspace, st->lt_workspace_bytes, st->stream);
}

template <typename C>
__global__ void k_matmul_fallback(C *c, const C *c_in, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int m, int n,
                                  int k, int ta, int tb, int lda, int ldb, int ldc, float beta) {
    size_t total = (size_t)m * n;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx / n), j = (int)(idx % n);
        float acc = 0.0f;
        for (int p = 0; p < k; p++) {
            float av = __bfloat162float(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
            float bv = __bfloat162float(tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            acc += av * bv;
        }
        size_t at = (size_t)i * ldc + j;
        if (beta != 0.0f) acc += beta * (float)c_in[at];
        c[at] = (C)acc;
    }
}

void df_cuda_gemm(DfBackend *be, const DfCudaGemm *g) {
    DfCudaState *st = df_cuda_state(be);
    DfMatmulPlan *p = plan_for(be, g, common_alignment(g->a, g->b, g->c, g->c_in));
    if (p && p->fallback) {
        unsigned blocks = df_cuda_blocks((size_t)g->m * g->n, 256);
        const __nv_bfloat16 *a = (const __nv_bfloat16 *)g->a, *b = (const __nv_bfloat16 *)g->b;
        if (g->c_f32)
            k_matmul_fallback<float><<<blocks, 256, 0, st->stream>>>(
                (float *)g->c, (const float *)(g->c_in ? g->c_in : g->c), a, b, g->m, g->n, g->k, g->trans_a != 0,
                g->trans_b != 0, g->lda, g->ldb, g->ldc, g->beta);
        else
            k_matmul_fallback<__nv_bfloat16><<<blocks, 256, 0, st->stream>>>(
                (__nv_bfloat16 *)g->c, (const __nv_bfloat16 *)(g->c_in ? g->c_in : g->c), a, b, g->m, g->n, g->k,
                g->trans_a != 0, g->trans_b != 0, g->lda, g->ldb, g->ldc, g->beta);
        DF_CUDA_CHECK_LAUNCH(be, "matmul (fallback kernel)");
    } else if (p) {
        cublasStatus_t s = df_cuda_plan_run(st, p, g, &p->algo);
        if (s != CUBLAS_STATUS_SUCCESS)
            df_cuda_record_failure(be, __FILE__, __LINE__, "cublasLtMatmul M=%d N=%d K=%d: %s", g->m, g->n, g->k,
                                   cublasLtGetStatusString(s));
    }
}

void df_cuda_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                    float beta) {
    DfCudaGemm g = {c.ptr, a.ptr, b.ptr, m, n, k, trans_a, trans_b, trans_a ? m : k, trans_b ? k : n, n, 0, beta, nullptr};
    int skinny = df_cuda_state(be)->variant.skinny_gemm;
    if (skinny != DF_SKINNY_GEMM_OFF && df_cuda_skinny_gemm_fits(&g) &&
        (skinny == DF_SKINNY_GEMM_ALWAYS || df_cuda_skinny_gemm_pays(&g)))
        df_cuda_skinny_gemm(be, &g); /* decoding's few rows against a weight matrix */
    else
        df_cuda_gemm(be, &g);
}

/* y = x W^T + r through cuBLASLt's separate C (never the skinny kernel, which has none). */
void df_cuda_linear_residual(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, DfBuffer r, int m, int n, int k) {
    DfCudaGemm g = {y.ptr, x.ptr, w.ptr, m, n, k, 0, 1, k, k, n, 0, 1.0f, r.ptr};
    df_cuda_gemm(be, &g);
}

void df_cuda_linear_weight_grad(DfBackend *be, DfBuffer dw, DfBuffer dy, DfBuffer x, int m, int n, int k,
                                float beta) {
    /* dw [n, k] = beta dw + dy^T (dy stored [m, n]) times x [m, k], fp32 C */
    DfCudaGemm g = {dw.ptr, dy.ptr, x.ptr, n, k, m, 1, 0, n, k, k, 1, beta, nullptr};
    df_cuda_gemm(be, &g);
}
