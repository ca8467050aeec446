/* The CUDA backend (NVIDIA GPUs from sm_80: Hopper's wgmma kernels, a
 * portable tier for the others; backend/gpu_tier.h): DF_BUF_ACT is
 * bf16 in device memory, every op accumulates in fp32. Compute ops are queued
 * on one stream; launch failures and bad data met by a kernel (a token id
 * outside the vocabulary, a position outside the rope table) are kept and
 * reported by sync(). Only built when nvcc is found (DF_HAVE_CUDA).
 *
 * Everything else it offers (its description, memory, streams for NCCL,
 * timers, the per-op profile, recorded graphs, kernel variants) is in its
 * op table: backend/backend_ops.def, DF_CAP_* in backend/backend.h. Only
 * backend/select.c (and tests) include this header. */
#ifndef DF_BACKEND_CUDA_CUDA_BACKEND_H
#define DF_BACKEND_CUDA_CUDA_BACKEND_H

#include <stddef.h>
#include <stdio.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when the driver or a GPU is missing. */
int df_cuda_device_count(void);

/* Backend on GPU `device`; NULL with a message when there is none, or when
 * it cannot run dflash (below sm_80; backend/gpu_tier.h). */
DfBackend *df_backend_cuda_create(int device, DfError *err);

/* The GPU code built in and, for each GPU, its kernel tier (or why it cannot
 * be used): `dflash --version`. */
void df_cuda_print_devices(FILE *fp);

#ifdef __cplusplus
}
#endif

#endif
