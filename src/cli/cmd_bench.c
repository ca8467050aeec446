/* dflash bench: measures this machine's speed (the harness and its figures
 * are bench/bench.h). */
#include <stdio.h>

#include "backend/select.h"
#include "base/paths_apart.h"
#include "bench/bench.h"
#include "cli/args.h"
#include "cli/commands.h"

/* The command line as the option table fills it. */
typedef struct BenchArgs {
    const char *target, *tokenizer, *data, *json_out, *device;
    int seq_len, n_seqs, repeat, train_seqs, train_repeat, train_only;
    int decode, prompt_len, new_tokens, hybrid, hybrid_layers;
    DfStringList kernel_variant; /* --kernel-variant NAME=VALUE, as given */
} BenchArgs;

int df_cmd_bench(int argc, char **argv) {
    /* seq_len, n_seqs, repeat 0: the device's default (CPU 4 x 1024, 3; GPU 8 x 2048, 10) */
    BenchArgs o = {.target = "assets/coder-tiny", .data = "assets/data/code-train.jsonl", .device = "cpu"};
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &o.target, "DIR", "target model directory (default assets/coder-tiny)", 0},
        {"tokenizer", DF_OPT_STRING, &o.tokenizer, "PATH", "tokenizer for the tokenizer figure (default: the target's)", 0},
        {"data", DF_OPT_STRING, &o.data, "FILE", "JSONL prompt/response text for the tokenizer and store figures "
                                                  "(default assets/data/code-train.jsonl)", 0},
        {"seq-len", DF_OPT_INT, &o.seq_len, "N", "tokens per packed sequence in the forward (default 1024; GPU 2048)", 0, DF_RANGE(1, 1 << 20)},
        {"seqs", DF_OPT_INT, &o.n_seqs, "N", "sequences packed into one forward batch (default 4; GPU 8)", 0, DF_RANGE(1, 4096)},
        {"repeat", DF_OPT_INT, &o.repeat, "N",
         "timed repetitions after one warm-up; CPU keeps the best (default 3), GPU the median (default 10)", 0, DF_RANGE(1, 10000)},
        {"train-seqs", DF_OPT_INT, &o.train_seqs, "N",
         "GPU: sequences of 2048 tokens in one benchmarked training step (default 2)", 0, DF_RANGE(1, 4096)},
        {"train-repeat", DF_OPT_INT, &o.train_repeat, "N",
         "GPU: timed training steps after one warm-up step, their median the figure (default 5)", 0, DF_RANGE(1, 10000)},
        {"train-only", DF_OPT_FLAG, &o.train_only, NULL,
         "GPU: only the GEMM peak and the training steps (skip the prefill figures)", 0},
        {"kernel-variant", DF_OPT_STRING_LIST, &o.kernel_variant, "NAME=VALUE",
         "GPU: the training steps (or, with --hybrid, the prefill) with this kernel variant instead of its "
         "default (repeatable; names as their `kernel variants:` line prints them): an A/B of two kernels with "
         "one binary", 0},
        {"json", DF_OPT_STRING, &o.json_out, "FILE", "also write the figures as JSON", 0},
        {"device", DF_OPT_STRING, &o.device, "DEV", "cpu (default) or cuda[:N]: the GPU figures instead", 0},
        {"decode", DF_OPT_FLAG, &o.decode, NULL, "batched decode tokens/s at batch 1 and 64 next to the bandwidth "
                                                 "limit, instead of the other figures", 0},
        {"prompt-len", DF_OPT_INT, &o.prompt_len, "N", "--decode: prompt tokens per sequence (default 512)", 0, DF_RANGE(1, 1 << 20)},
        {"new-tokens", DF_OPT_INT, &o.new_tokens, "N", "--decode: decode steps (default 128)", 0, DF_RANGE(16, 1 << 20)},
        {"hybrid", DF_OPT_FLAG, &o.hybrid, NULL, "GPU: prefill tokens/s and MFU of a Qwen3.6-27B-shaped hybrid "
                                                 "target with random weights, instead of the other figures (with "
                                                 "--decode: its decode instead of the Qwen3-8B shape's)", 0},
        {"hybrid-layers", DF_OPT_INT, &o.hybrid_layers, "N",
         "--hybrid: decoder layers built, 4..64 (default 64; fewer also print a per-layer-scaled estimate)", 0, DF_RANGE(4, 64)},
    };
    const DfCommandSpec spec = {"bench", "measure the CPU paths' speed next to OpenBLAS sgemm on this machine", NULL,
                                "Figures: sgemm GFLOP/s (all cores), target forward tokens/s and GFLOP/s (spec "
                                "section 8 count), drafter training step (forward + backward) GFLOP/s, tokenizer "
                                "MB/s, token store random access ns.\n"
                                "With --device cuda: cuBLASLt bf16 GEMM TFLOP/s (peak and the prefill's shapes), "
                                "target prefill\ntokens/s and MFU for --target and a Qwen3-8B-shaped random target, "
                                "time by op kind, peak GPU memory;\nthe whole training step (target forward, drafter "
                                "forward + backward, optimizer) in sequences/s and MFU\nwith its split by phase, "
                                "for coder-tiny's shape and Qwen3-8B's with a 5-layer drafter.\n"
                                "With --decode: batched decode tokens/s (batch 1 and 64) of --target (and on CUDA a "
                                "Qwen3-8B-shaped\nrandom target, or with --hybrid a Qwen3.6-27B-shaped one) next to the "
                                "memory-bandwidth limit measured in the same run.",
                                options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    const DfPathArg ins[] = {{"--target", o.target}, {"--tokenizer", o.tokenizer}, {"--data", o.data}};
    const DfPathArg outs[] = {{"--json", o.json_out}};
    if ((exit_code = df_paths_apart_or_usage("bench", ins, 3, outs, 1)) != 0) return exit_code;
    DfDeviceKind kind = df_device_kind(o.device);
    if (kind == DF_DEVICE_UNKNOWN) {
        fprintf(stderr, "dflash: bench: unknown --device '%s' (expected cpu, cuda or cuda:N)\n", o.device);
        return 2;
    }
    /* sizes left 0 take the device's defaults in df_bench; the option ranges keep the rest positive */
    DfBenchOptions b = {o.target, o.tokenizer, o.data, o.json_out, o.device, o.seq_len, o.n_seqs, o.repeat,
                        o.train_seqs, o.train_repeat, o.train_only, o.decode, o.prompt_len, o.new_tokens,
                        o.hybrid, o.hybrid_layers};
    if (df_kernel_variants_parse(&b.variants, o.kernel_variant.items, o.kernel_variant.count, "--kernel-variant",
                                 &err)) {
        fprintf(stderr, "dflash: bench: %s\n", err.msg);
        return 2;
    }
    if (b.variants.count > 0 && (kind != DF_DEVICE_ACCELERATOR || o.decode)) {
        fprintf(stderr, "dflash: bench: --kernel-variant sets the GPU training steps' or the hybrid prefill's "
                        "kernels: it needs --device cuda and not --decode\n");
        return 2;
    }
    if (df_bench(&b, &err) == 0) return 0;
    fprintf(stderr, "dflash: bench: %s\n", err.msg);
    return 1;
}
