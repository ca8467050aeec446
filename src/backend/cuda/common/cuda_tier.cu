/* The GPU's facts and kernel tier, learned once when the backend is created
 * (backend/gpu_tier.h has the rules): compute capability and shared memory
 * from the device's properties, and whether the driver runs this binary's
 * sm_90a code on it, which only a kernel compiled into that code can tell. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/common/cuda_internal.h"

extern "C" {
#include "base/test_seam.h"
}

/* Writes 1 where the code the driver chose for this GPU is the sm_90a code. */
__global__ void k_runs_sm90a_code(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

/* Whether the driver runs this binary's sm_90a code on the current device:
 * the probe kernel, launched on stream, says which code it is. */
static int probe_sm90a(DfGpuFacts *g, cudaStream_t stream, DfError *err) {
    int *d = NULL, h = 0;
    DF_CUDA_TRY(cudaMalloc(&d, sizeof *d));
    k_runs_sm90a_code<<<1, 1, 0, stream>>>(d);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaFree(d);
    if (e != cudaSuccess)
        return df_fail(err, "cuda backend: GPU %d (%s, sm_%d%d) runs none of this binary's code (built for %s): %s",
                       g->index, g->name, g->major, g->minor, DF_CUDA_ARCHS, cudaGetErrorString(e));
    g->runs_sm90a_code = h;
    return 0;
}

/* What GPU `device` (current) is, the probe included; then the test seam,
 * which may make it look like another. */
static int learn_gpu(int device, cudaStream_t stream, DfGpuFacts *g, DfError *err) {
    cudaDeviceProp p;
    DF_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    memset(g, 0, sizeof *g);
    g->index = device;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->major = p.major;
    g->minor = p.minor;
    g->smem_optin = p.sharedMemPerBlockOptin;
    /* Below sm_80 no code of ours loads: the rules refuse the GPU by name. */
    if (g->major >= 8 && probe_sm90a(g, stream, err)) return -1;
    return df_test_seam(DF_SEAM_CUDA_DEVICE, g, err);
}

/* "sm_90a", "sm_80" or "sm_89 from compute_80 PTX": the code the driver
 * runs for the probe kernel, as for every kernel of the binary. */
static void code_text(const DfGpuFacts *g, char *buf, size_t cap) {
    cudaFuncAttributes a;
    if (g->runs_sm90a_code) snprintf(buf, cap, "sm_90a");
    else if (cudaFuncGetAttributes(&a, k_runs_sm90a_code) != cudaSuccess) snprintf(buf, cap, "unknown code");
    else if (a.binaryVersion != a.ptxVersion)
        snprintf(buf, cap, "sm_%d from compute_%d PTX", a.binaryVersion, a.ptxVersion);
    else snprintf(buf, cap, "sm_%d", a.binaryVersion);
}

/* GPU `device` (current): its facts, its tier and the code it runs (code[DF_CUDA_CODE_TEXT]). */
static int pick_tier(int device, cudaStream_t stream, DfGpuFacts *g, DfGpuTier *tier, char *code, DfError *err) {
    if (learn_gpu(device, stream, g, err) || df_gpu_tier_choose(g, getenv(DF_CUDA_TIER_ENV), tier, err)) return -1;
    code_text(g, code, DF_CUDA_CODE_TEXT);
    return 0;
}

int df_cuda_choose_tier(DfCudaState *st, DfError *err) {
    return pick_tier(st->device, st->stream, &st->gpu, &st->tier, st->code, err);
}

extern "C" void df_cuda_print_devices(FILE *fp) {
    int n = df_cuda_device_count();
    fprintf(fp, "cuda code built: %s\n", DF_CUDA_ARCHS);
    if (n == 0) fprintf(fp, "cuda devices: none (no GPU or no driver)\n");
    for (int i = 0; i < n; i++) {
        DfGpuFacts g;
        DfGpuTier tier;
        DfError err = {0};
        char code[DF_CUDA_CODE_TEXT] = "";
        if (cudaSetDevice(i) != cudaSuccess || pick_tier(i, 0, &g, &tier, code, &err)) {
            fprintf(fp, "cuda:%d: %s\n", i, err.msg[0] ? err.msg : "cannot be used");
            continue;
        }
        fprintf(fp, "cuda:%d: %s, sm_%d%d, %s kernels (%s)\n", i, g.name, g.major, g.minor, df_gpu_tier_name(tier),
                code);
    }
}

bool df_cuda_set_smem_bytes(DfBackend *be, const void *kernel, size_t bytes, const char *op) {
    DfCudaState *st = df_cuda_state(be);
    if (!df_cuda_smem_fits(st, bytes)) {
        df_cuda_record_failure(be, __FILE__, __LINE__,
                               "%s: needs %.1f KiB of shared memory a block; GPU %d (%s) allows %.1f KiB", op,
                               bytes / 1024.0, st->gpu.index, st->gpu.name, st->gpu.smem_optin / 1024.0);
        return false;
    }
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) return true;
    df_cuda_record_failure(be, __FILE__, __LINE__, "%s: %zu bytes of shared memory: %s", op, bytes,
                           cudaGetErrorString(e));
    return false;
}
