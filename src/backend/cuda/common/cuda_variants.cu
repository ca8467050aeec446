/* The CUDA backend's kernel variants by name (backend_ops.def set_variant,
 * variants): the values are declared in kernel_variants.def and kept in the
 * state's DfCudaVariants; a change to gemm_algo or gemm_search (replans)
 * has every matmul plan choose its algorithm again. */
#include "backend/cuda/gemm/cuda_matmul_plan.h"

extern "C" int df_cuda_set_variant(DfBackend *be, const char *name, int value, DfError *err) {
    DfCudaState *st = df_cuda_state(be);
    int replan = 0;
    if (!name)
        replan = df_cuda_variants_reset(&st->variant);
    else if (df_cuda_variants_set(&st->variant, name, value, &replan, err))
        return -1;
    if (replan) df_cuda_matmul_plans_free(st); /* every plan chooses again */
    return 0;
}

extern "C" void df_cuda_variants(DfBackend *be, char *buf, size_t cap) {
    df_cuda_variants_print(&df_cuda_state(be)->variant, buf, cap);
}
