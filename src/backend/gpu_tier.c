#include "backend/gpu_tier.h"

#include <string.h>

/* The oldest GPUs dflash runs on: bf16 mma.sync, cp.async and ldmatrix of
 * the portable kernels are sm_80 instructions. */
#define MIN_MAJOR 8

const char *df_gpu_tier_name(DfGpuTier tier) {
    return tier == DF_GPU_TIER_HOPPER ? "hopper" : "portable";
}

static int refuse_old_gpu(const DfGpuFacts *gpu, DfError *err) {
    return df_fail(err,
                   "GPU %d (%s, compute capability %d.%d) cannot run dflash: it needs compute "
                   "capability %d.0 or later, for bf16 tensor cores (A100, A10, L4, L40S, RTX 30/40/50 series, "
                   "H100, H200, B200)",
                   gpu->index, gpu->name, gpu->major, gpu->minor, MIN_MAJOR);
}

int df_gpu_tier_choose(const DfGpuFacts *gpu, const char *forced, DfGpuTier *tier, DfError *err) {
    if (gpu->major < MIN_MAJOR) return refuse_old_gpu(gpu, err);
    if (!forced || !*forced || strcmp(forced, "auto") == 0) {
        *tier = gpu->runs_sm90a_code ? DF_GPU_TIER_HOPPER : DF_GPU_TIER_PORTABLE;
        return 0;
    }
    if (strcmp(forced, "portable") == 0) {
        *tier = DF_GPU_TIER_PORTABLE;
        return 0;
    }
    if (strcmp(forced, "hopper") == 0) {
        if (!gpu->runs_sm90a_code)
            return df_fail(err,
                           "%s=hopper: GPU %d (%s, compute capability %d.%d) does not run this binary's sm_90a "
                           "code (that needs an H100 or H200 and sm_90a in the build's CUDA_ARCHS)",
                           DF_CUDA_TIER_ENV, gpu->index, gpu->name, gpu->major, gpu->minor);
        *tier = DF_GPU_TIER_HOPPER;
        return 0;
    }
    return df_fail(err, "%s=%s: expected hopper, portable or auto", DF_CUDA_TIER_ENV, forced);
}
