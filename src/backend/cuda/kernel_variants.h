/* The CUDA backend's kernel variants (kernel_variants.def declares each
 * once): their values as the kernels read them (DfCudaVariants, a field per
 * variant, in the backend's state), and setting, resetting and printing them
 * by name. Plain C with no CUDA dependency, so that the CPU build and its
 * tests see the same list (tests/test_kernel_variants.c). */
#ifndef DF_BACKEND_CUDA_KERNEL_VARIANTS_H
#define DF_BACKEND_CUDA_KERNEL_VARIANTS_H

#include <stddef.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many of cuBLASLt's heuristic algorithms a matmul plan considers (the
 * range of the variant gemm_algo). */
#define DF_GEMM_CANDIDATES 8

/* The values a variant takes (its lo and hi in the list):
 * FLAG    0 or 1 (any other value is 1);
 * COUNT   a count (a negative value is 0);
 * RANGE   lo..hi, any other value refused;
 * CHOICE  0, lo or hi, any other value refused;
 * MODE    lo..hi, any other value its default. */
typedef enum DfKernelVariantKind {
    DF_VARIANT_FLAG,
    DF_VARIANT_COUNT,
    DF_VARIANT_RANGE,
    DF_VARIANT_CHOICE,
    DF_VARIANT_MODE
} DfKernelVariantKind;

typedef struct DfCudaVariants {
#define DF_KERNEL_VARIANT(name, kind, lo, hi, def, replans, why) int name;
#include "backend/cuda/kernel_variants.def"
#undef DF_KERNEL_VARIANT
} DfCudaVariants;

/* One declared variant, as the list gives it. */
typedef struct DfKernelVariantDecl {
    const char *name;
    DfKernelVariantKind kind;
    int lo, hi, def, replans;
    const char *why;
    size_t offset; /* of its field in DfCudaVariants */
} DfKernelVariantDecl;

/* The declared variants in the list's order; n their count. */
const DfKernelVariantDecl *df_cuda_kernel_variants(int *n);

/* Every variant of v to its default; returns 1 when one with replans changed. */
int df_cuda_variants_reset(DfCudaVariants *v);

/* Variant `name` of v to value (as its kind takes it); *replan set to 1 when
 * a variant with replans changed. -1 with a message naming it when there is
 * no such variant or its kind refuses the value. */
int df_cuda_variants_set(DfCudaVariants *v, const char *name, int value, int *replan, DfError *err);

/* "name=value" of every variant, in the list's order, space-separated. */
void df_cuda_variants_print(const DfCudaVariants *v, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
