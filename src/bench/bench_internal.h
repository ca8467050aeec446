/* What the bench harness's figure files share (bench.h is the entry). */
#ifndef DF_BENCH_BENCH_INTERNAL_H
#define DF_BENCH_BENCH_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "backend/backend.h"
#include "bench/bench.h"
#include "target/model_config.h"
#include "target/target.h"

static inline void df_bench_add_number(cJSON *obj, const char *name, double v) {
    cJSON_AddNumberToObject(obj, name, v);
}

/* "66.9% of 989" for tflops against the GPU's nominal peak, or "nominal
 * unknown" where the GPU is not in backend/gpu_peaks.c (nominal 0). */
static inline const char *df_bench_of_nominal(char *buf, size_t cap, double tflops, double nominal) {
    if (nominal > 0) snprintf(buf, cap, "%.1f%% of %.0f", 100 * tflops / nominal, nominal);
    else snprintf(buf, cap, "nominal unknown");
    return buf;
}

/* The device figures time ops with the device's own timers and split them
 * with its per-op profile. */
int df_bench_require_timing(DfBackend *be, const char *device, DfError *err);

/* The model shapes the figures are taken at (bench_shapes.c). */
DfModelConfig df_bench_qwen3_8b_shape(void);
DfModelConfig df_bench_qwen36_27b_shape(int n_layers);

/* One figure family each; o's sizes are resolved (bench.c). */
int df_bench_cpu(const DfBenchOptions *o, cJSON *json, DfError *err);             /* bench_cpu.c */
int df_bench_decode_figures(const DfBenchOptions *o, cJSON *json, DfError *err);  /* bench_decode_figures.c */
int df_bench_gpu(const DfBenchOptions *o, cJSON *json, DfError *err);             /* bench_gpu.c */
int df_bench_hybrid(const DfBenchOptions *o, cJSON *json, DfError *err);          /* bench_gpu.c */

/* GFLOP/s of C[m,n] = A[m,k] B[n,k]^T with OpenBLAS on all cores, best of
 * `repeat` after a warm-up (bench_cpu.c). */
double df_bench_sgemm_gflops(int m, int n, int k, int repeat);

/* GPU op figures (bench_gpu_ops.c). */
int df_bench_gemm_tflops(DfBackend *be, int m, int n, int k, int iters, double *tflops, DfError *err);
int df_bench_attention_tflops(DfBackend *be, int seq_len, int n_seqs, int heads, int kv_heads, int hd, int iters,
                              double *tflops, DfError *err);

/* GPU prefill figures (bench_prefill.c). */
typedef struct DfPrefillResult {
    double ms, tokens_per_s, tflops;
    int layers;
    size_t peak_bytes;
    double op_ms[DF_OP_COUNT]; /* by DfOpId */
} DfPrefillResult;
int df_bench_prefill(DfBackend *be, DfTargetModel *m, int seq_len, int n_seqs, int with_logits, int repeat,
                     DfPrefillResult *r, DfError *err);
/* peak: the GEMM peak measured in the run; nominal: the GPU's (0: unknown). */
void df_bench_prefill_report(const char *label, const char *key, const DfPrefillResult *r, double peak,
                             double nominal, cJSON *json);
int df_bench_model_prefill(DfBackend *be, DfTargetModel *m, const char *name, const char *key,
                           const DfBenchOptions *o, double peak, double nominal, cJSON *json, DfError *err);

#endif
