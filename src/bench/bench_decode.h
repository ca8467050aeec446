/* Batched decode throughput for the bench command: a
 * batch of prompts prefilled, then one new token per sequence per step
 * (greedy, through df_target_decode as `generate` runs it), next to its
 * limit: the larger of the time to move the bytes one step must move (every
 * weight read once, each sequence's cached keys and values read, and a
 * hybrid target's recurrent and convolution states read and written) at the
 * measured bandwidth, and the time of its FLOPs (df_target_decode_flops) at
 * the measured GEMM peak. */
#ifndef DF_BENCH_BENCH_DECODE_H
#define DF_BENCH_BENCH_DECODE_H

#include "target/target.h"

typedef struct DfDecodeBenchResult {
    int batch, prompt_len, new_tokens, timed_steps;
    int graphs;                /* steps recorded and replayed (target/decode_graphs.h): asked, and the backend records */
    double step_ms;            /* wall clock per decode step (median) */
    double tokens_per_s;       /* batch / step time */
    double weight_bytes;       /* read per step */
    double kv_bytes;           /* read per step, mean over the timed steps */
    double state_bytes;        /* a hybrid's recurrent + convolution states, read and written per step */
    double flops;              /* of one step, mean over the timed steps */
    double bandwidth_limit_tokens_per_s; /* batch / ((weight + kv + state bytes) / bandwidth) */
    double compute_limit_tokens_per_s;   /* batch / (flops / GEMM peak); 0 without a peak */
    double limit_tokens_per_s; /* the lower of the two: the step's time is at least the larger */
    double device_ms;          /* GPU: kernel time per step (0 elsewhere) */
    double attention_ms;       /* GPU: of which kv attention */
    char kinds[1024];          /* where the backend profiles: ms per step of each op, as text ("" elsewhere) */
} DfDecodeBenchResult;

/* Bytes of the weights one decode step reads (element size of the model's
 * buffers; the embedding's gather of a few rows is not counted). */
double df_decode_weight_bytes(const DfTargetModel *m);

/* Bytes of one sequence's Gated DeltaNet states (the delta rule's and the
 * convolution window, F32) that a decode step reads and writes back, over
 * all linear-attention layers; 0 for a dense target. */
double df_decode_state_bytes(const DfModelConfig *cfg);

/* Prefills `batch` prompts of prompt_len tokens (fixed pseudo-random ids;
 * DF_BENCH_PREFILL_SEQS of them a step, so that the prefill's workspace
 * stays small beside a large batch's KV cache), then runs new_tokens decode
 * steps; times all but the first two (and, on CUDA, profiles the last 8 for
 * the kernel time). bandwidth_gbs: the device's measured bandwidth (bytes
 * read + written per second / 1e9); peak_tflops: its measured GEMM peak in
 * the model's element type (0: no compute limit). graphs: replay recorded
 * steps where the backend records (else every op of every step is queued
 * one by one). */
#define DF_BENCH_PREFILL_SEQS 32
int df_bench_decode(DfTargetModel *m, int batch, int prompt_len, int new_tokens, double bandwidth_gbs,
                    double peak_tflops, int graphs, DfDecodeBenchResult *r, DfError *err);

/* Bytes the decode figure of `batch` sequences of `rows` rows adds on the
 * device beside the weights: the decoder's slots and logits, its rope tables
 * and the workspace of a prefill step of DF_BENCH_PREFILL_SEQS prompts of
 * prompt_len tokens (target/target_memory.h). */
size_t df_bench_decode_bytes(const DfModelConfig *cfg, int batch, int prompt_len, int rows, size_t act_elem);

/* Host memory bandwidth (bytes read + written / s / 1e9) of a parallel
 * copy of `bytes` bytes, best of `repeat`. */
double df_host_copy_bandwidth(size_t bytes, int repeat);

#endif
