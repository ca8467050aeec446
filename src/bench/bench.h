/* The bench harness (`dflash bench`): measures this machine's speed on the CPU paths, each figure
 * next to the hardware reference measured in the same run:
 *   - OpenBLAS sgemm GFLOP/s (all cores) at the target forward's shapes;
 *   - the target forward (tokens/s, GFLOP/s counted per spec section 8);
 *   - tokenizer encode MB/s (one thread, and all threads);
 *   - token store random sample access (ns per access).
 * With --device cuda[:N], the GPU figures instead:
 *   - cuBLASLt bf16 GEMM TFLOP/s (8192^3 and the prefill's own shapes),
 *     CUDA events, warm-up, median of many; the best of them is the
 *     measured peak;
 *   - the attention op alone at the Qwen3-8B shape (both kernel shapes);
 *   - target prefill tokens/s and MFU (spec section 8 FLOPs over the measured
 *     peak and over the nominal 989 TFLOP/s dense bf16 of an H100/H200 SXM)
 *     for the given target (real weights) and a Qwen3-8B-shaped target with
 *     random weights built in GPU memory; time split by op kind; peak memory;
 *   - with --hybrid, instead: the prefill of a Qwen3.6-27B-shaped hybrid
 *     target (Gated DeltaNet + gated attention) with random weights, all or
 *     --hybrid-layers of its 64 layers (dev/compare/hybrid_transformers.py times
 *     transformers' forward of the same model).
 * The figures are printed and gathered as JSON (json_out) for bench/ records. */
#ifndef DF_BENCH_BENCH_H
#define DF_BENCH_BENCH_H

#include "backend/kernel_variants.h"
#include "base/error.h"

typedef struct DfBenchOptions {
    const char *target;
    const char *tokenizer; /* NULL: the target's */
    const char *data;      /* JSONL text for the tokenizer and store figures */
    const char *json_out;  /* NULL: no JSON file */
    const char *device;
    int seq_len;
    int n_seqs;
    int repeat;
    int train_seqs; /* sequences of one benchmarked GPU training step */
    int train_repeat; /* timed GPU training steps after the warm-up (their median is the figure) */
    int train_only; /* GPU: the GEMM peak and the training steps, no prefill figures */
    int decode;                   /* the decode figures instead */
    int prompt_len, new_tokens;   /* of the decode figures */
    int hybrid;                   /* a Qwen3.6-27B-shaped hybrid target's prefill instead */
    int hybrid_layers;            /* of it: 4..64 decoder layers built (3 default taps need 4) */
    DfKernelVariants variants;    /* for the training steps or the hybrid prefill */
} DfBenchOptions;

/* The figures o asks for, printed on stdout and written to o->json_out.
 * Zero sizes take the device's defaults: seq_len x n_seqs 1024 x 4 and
 * repeat 3 on the CPU, 2048 x 8 and 10 on a GPU; train_seqs 2,
 * train_repeat 5, prompt_len 512, new_tokens 128, hybrid_layers 64. */
int df_bench(const DfBenchOptions *o, DfError *err);

#endif
