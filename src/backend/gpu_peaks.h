/* The nominal dense bf16 tensor-core peak (fp32 accumulate) of the GPU
 * models dflash knows: the reference of MFU (train's --peak-tflops default,
 * bench's "of nominal" column). One table, backend/gpu_peaks.c. */
#ifndef DF_BACKEND_GPU_PEAKS_H
#define DF_BACKEND_GPU_PEAKS_H

/* TFLOP/s for the GPU a backend description names (df_backend_describe:
 * "NVIDIA H100 80GB HBM3, sm_90, ..."); 0 for the CPU and for a GPU not in
 * the table, whose peak the user gives (--peak-tflops). */
double df_gpu_nominal_bf16_tflops(const char *description);

#endif
