/* dflash bench: measures this machine's speed (the harness and its figures
 * are bench/bench.h, the options cli/bench_options.def). */
#include <stdio.h>
#include <string.h>

#include "backend/select.h"
#include "base/paths_apart.h"
#include "bench/bench.h"
#include "bench/bench_recipe.h"
#include "cli/args.h"
#include "cli/commands.h"

/* The command line as the option table fills it. */
typedef struct BenchArgs {
    const char *target, *tokenizer, *data, *train_data, *json_out, *device;
    const char *decode_batches; /* --batch LIST, as given */
    int seq_len, n_seqs, repeat, train_seqs, train_repeat, train_only;
    int decode, prompt_len, new_tokens, hybrid, hybrid_layers;
    DfStringList kernel_variant; /* --kernel-variant NAME=VALUE, as given */
} BenchArgs;

/* A DF_BENCH_* number as a string literal, for bench_options.def's
 * .default_text where the device picks the default. */
#define BENCH_NUMBER_TEXT(n) BENCH_NUMBER_TEXT_(n)
#define BENCH_NUMBER_TEXT_(n) #n

/* Each field has the C type of its option's kind (what the parser writes). */
#define DF_OPTION(name, kind, field, ...) DF_OPTION_TYPE_CHECK(((BenchArgs *)0)->field, kind, name);
#include "cli/bench_options.def"
#undef DF_OPTION

static void bench_args_default(BenchArgs *a) {
    memset(a, 0, sizeof *a);
#define DF_OPTION(name, kind, field, value, ...) a->field = (value);
#include "cli/bench_options.def"
#undef DF_OPTION
}

int df_cmd_bench(int argc, char **argv) {
    BenchArgs o, defaults;
    bench_args_default(&o);
    bench_args_default(&defaults);
    const DfOption options[] = {
#define DF_OPTION(name, kind, field, value, metavar, help, ...) \
    DF_OPTION_ENTRY(o.field, defaults.field, name, kind, metavar, help, __VA_ARGS__),
#include "cli/bench_options.def"
#undef DF_OPTION
    };
    const DfCommandSpec spec = {"bench", "measure the CPU paths' speed next to OpenBLAS sgemm on this machine", NULL,
                                "Figures: sgemm GFLOP/s (all cores), target forward tokens/s and GFLOP/s (spec "
                                "section 8 count), drafter training step (forward + backward) GFLOP/s, tokenizer "
                                "MB/s, token store random access ns.\n"
                                "With --device cuda: cuBLASLt bf16 GEMM TFLOP/s (peak and the prefill's shapes), "
                                "target prefill\ntokens/s and MFU for --target and a Qwen3-8B-shaped random target, "
                                "time by op kind, peak GPU memory;\nthe whole training step (target forward, drafter "
                                "forward + backward, optimizer) in sequences/s, tokens/s and MFU\nwith its split by "
                                "phase and op kind, twice: the recipe's (what `dflash train --target` trains at its "
                                "defaults:\nits drafter on the fullest of epoch 0's first "
                                BENCH_NUMBER_TEXT(DF_BENCH_RECIPE_CANDIDATES) " batches of --train-data's records, "
                                "the target's weights\nrandom) and a Qwen3-8B-shaped target's with a 5-layer drafter "
                                "on --train-seqs random sequences of 2048 tokens.\n"
                                "With --decode: batched decode tokens/s (each --batch, 1 and 64 by default) of --target (and "
                                "on CUDA a Qwen3-8B-shaped\nrandom target, or with --hybrid a Qwen3.6-27B-shaped one) next "
                                "to its limit: the larger of the step's bytes over\nthe bandwidth and its FLOPs over the "
                                "GEMM peak, both measured in the same run.",
                                options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    const DfPathArg ins[] = {
        {"--target", o.target}, {"--tokenizer", o.tokenizer}, {"--data", o.data}, {"--train-data", o.train_data}};
    const DfPathArg outs[] = {{"--json", o.json_out}};
    if ((exit_code = df_paths_apart_or_usage("bench", ins, 4, outs, 1)) != 0) return exit_code;
    DfDeviceKind kind = df_device_kind(o.device);
    if (kind == DF_DEVICE_UNKNOWN) {
        fprintf(stderr, "dflash: bench: unknown --device '%s' (expected cpu, cuda or cuda:N)\n", o.device);
        return 2;
    }
    /* sizes left 0 take the device's defaults in df_bench; the option ranges keep the rest positive */
    DfBenchOptions b = {.target = o.target, .tokenizer = o.tokenizer, .data = o.data, .json_out = o.json_out,
                        .device = o.device, .seq_len = o.seq_len, .n_seqs = o.n_seqs, .repeat = o.repeat,
                        .train_data = o.train_data, .train_seqs = o.train_seqs, .train_repeat = o.train_repeat, .train_only = o.train_only,
                        .decode = o.decode, .prompt_len = o.prompt_len, .new_tokens = o.new_tokens,
                        .hybrid = o.hybrid, .hybrid_layers = o.hybrid_layers};
    if (strcmp(o.decode_batches, DF_BENCH_DECODE_BATCHES) != 0 && !o.decode) {
        fprintf(stderr, "dflash: bench: --batch lists the --decode figures' batches: it needs --decode\n");
        return 2;
    }
    if (df_bench_parse_batches(o.decode_batches, b.decode_batches, &b.n_decode_batches, &err)) {
        fprintf(stderr, "dflash: bench: %s\n", err.msg);
        return 2;
    }
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
