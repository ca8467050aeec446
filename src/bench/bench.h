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
 *     peak and over the GPU's nominal dense bf16 peak, backend/gpu_peaks.c)
 *     for the given target (real weights) and a Qwen3-8B-shaped target with
 *     random weights built in GPU memory; time split by op kind; peak memory;
 *   - the whole training step (target forward, drafter forward + backward,
 *     optimizer): the recipe's (the drafter and a batch of real records as
 *     `dflash train --target` trains them at its defaults, the target's
 *     weights random; bench/bench_recipe.h) and a Qwen3-8B-shaped one on
 *     random sequences; MFU, time by phase and by op kind;
 *   - with --hybrid, instead: the prefill of a Qwen3.6-27B-shaped hybrid
 *     target (Gated DeltaNet + gated attention) with random weights, all or
 *     --hybrid-layers of its 64 layers (dev/compare/hybrid_transformers.py times
 *     transformers' forward of the same model).
 * The figures are printed and gathered as JSON (json_out) for bench/ records. */
#ifndef DF_BENCH_BENCH_H
#define DF_BENCH_BENCH_H

#include "backend/kernel_variants.h"
#include "base/error.h"

#define DF_BENCH_MAX_BATCHES 16
#define DF_BENCH_MAX_BATCH 4096 /* sequences of one decode figure at most */

typedef struct DfBenchOptions {
    const char *target;
    const char *tokenizer; /* NULL: the target's */
    const char *data;      /* JSONL text for the tokenizer and store figures */
    const char *json_out;  /* NULL: no JSON file */
    const char *device;
    int seq_len;
    int n_seqs;
    int repeat;
    const char *train_data; /* GPU: the records of the recipe's training step (bench/bench_recipe.h) */
    int train_seqs; /* sequences of the Qwen3-8B-shaped GPU training step */
    int train_repeat; /* timed GPU training steps after the warm-up (their median is the figure) */
    int train_only; /* GPU: the GEMM peak and the training steps, no prefill figures */
    int decode;                   /* the decode figures instead */
    int decode_batches[DF_BENCH_MAX_BATCHES]; /* of the decode figures, in order (none: DF_BENCH_DECODE_BATCHES) */
    int n_decode_batches;
    int prompt_len, new_tokens;   /* of the decode figures */
    int hybrid;                   /* a Qwen3.6-27B-shaped hybrid target's prefill instead */
    int hybrid_layers;            /* of it: 4..64 decoder layers built (3 default taps need 4) */
    DfKernelVariants variants;    /* for the training steps or the hybrid prefill */
} DfBenchOptions;

/* The default sizes, by device where they differ (plain numbers: the
 * command's --help prints them as text too). */
#define DF_BENCH_CPU_SEQ_LEN 1024
#define DF_BENCH_GPU_SEQ_LEN 2048
#define DF_BENCH_CPU_SEQS 4
#define DF_BENCH_GPU_SEQS 8
#define DF_BENCH_CPU_REPEAT 3
#define DF_BENCH_GPU_REPEAT 10
#define DF_BENCH_TRAIN_SEQS 2
#define DF_BENCH_TRAIN_REPEAT 5
#define DF_BENCH_PROMPT_LEN 512
#define DF_BENCH_NEW_TOKENS 128
#define DF_BENCH_HYBRID_LAYERS 64
#define DF_BENCH_DECODE_BATCHES "1,64" /* --decode --batch */

/* A --batch list ("1,64,256"): at most DF_BENCH_MAX_BATCHES distinct
 * batches of 1..DF_BENCH_MAX_BATCH, comma-separated; anything else fails
 * naming what is wrong. */
int df_bench_parse_batches(const char *text, int *batches, int *n, DfError *err);

/* The figures o asks for, printed on stdout and written to o->json_out.
 * Zero sizes take the defaults above (the device's where they differ). */
int df_bench(const DfBenchOptions *o, DfError *err);

#endif
