/* Which of the CUDA backend's kernel tiers a GPU runs (docs/kernels.md,
 * "GPU tiers"), decided once when the backend is created:
 *
 *   hopper    the wgmma kernels (sm_90a code: H100, H200), the portable
 *             kernels where no wgmma kernel exists;
 *   portable  mma.sync tensor-core kernels and plain CUDA (sm_80 code, or
 *             the compute_80 PTX the driver compiles for a newer GPU:
 *             A100, A10, L4, L40S, RTX 30/40/50, B200).
 *
 * A GPU below compute capability 8.0 has no bf16 tensor cores and is
 * refused. The environment variable DFLASH_CUDA_TIER (hopper, portable or
 * auto) forces a tier, a diagnostic: the portable tier on a Hopper GPU runs
 * what an A100 runs. Plain C, no CUDA: the rules are unit-tested without a
 * GPU (tests/test_gpu_tier.c). */
#ifndef DF_BACKEND_GPU_TIER_H
#define DF_BACKEND_GPU_TIER_H

#include <stddef.h>

#include "base/error.h"

typedef enum DfGpuTier { DF_GPU_TIER_HOPPER, DF_GPU_TIER_PORTABLE } DfGpuTier;

/* The environment variable that forces a tier. */
#define DF_CUDA_TIER_ENV "DFLASH_CUDA_TIER"

/* What the backend learned of its GPU before choosing. */
typedef struct DfGpuFacts {
    int index;             /* the GPU's number (cuda:N) */
    char name[256];        /* e.g. "NVIDIA H100 80GB HBM3" (cudaDeviceProp.name's size) */
    int major, minor;      /* compute capability */
    int runs_sm90a_code;   /* 1: the driver loaded this binary's sm_90a code for it */
    size_t smem_optin;     /* shared memory a block may ask for, bytes */
} DfGpuFacts;

/* The tier for gpu, with `forced` the value of DFLASH_CUDA_TIER (NULL or ""
 * for none). -1 with err naming the GPU and what it lacks when it cannot run
 * dflash (below sm_80) or cannot run the forced tier, or naming the variable
 * when its value is not a tier. */
int df_gpu_tier_choose(const DfGpuFacts *gpu, const char *forced, DfGpuTier *tier, DfError *err);

/* "hopper" or "portable". */
const char *df_gpu_tier_name(DfGpuTier tier);

#endif
