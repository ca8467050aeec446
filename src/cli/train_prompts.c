#include "cli/train_prompts.h"

#include <stdio.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "infer/prompt_cuts.h"

void df_train_prompts_default(DfTrainPrompts *p) {
    *p = (DfTrainPrompts){.max_new_tokens = 256, .temperature = 0.0, .top_p = 1.0, .batch = 8};
}

int df_train_regenerate(const DfTrainPrompts *p, const DfTrainOptions *o, int quiet, char *data, size_t cap,
                        DfError *err) {
    char input[4200];
    snprintf(input, sizeof input, "%s", p->path);
    if (p->cuts > 0) {
        snprintf(input, sizeof input, "%s/prompts.cut.jsonl", o->output_dir);
        int n = 0;
        if (df_prompt_cuts_write(p->path, p->cuts, input, &n, err)) return df_context(err, "--prompt-cuts");
        if (!quiet) fprintf(stderr, "train: %d prompts cut from %s (--prompt-cuts %d) in %s\n", n, p->path, p->cuts, input);
    }
    snprintf(data, cap, "%s/regenerated.jsonl", o->output_dir);
    if (!quiet) fprintf(stderr, "train: the target's responses to %s into %s (dflash generate)\n", input, data);
    char max_new[32], temperature[64], top_p[64], seed[32], batch[32];
    snprintf(max_new, sizeof max_new, "%d", p->max_new_tokens);
    snprintf(temperature, sizeof temperature, "%.17g", p->temperature);
    snprintf(top_p, sizeof top_p, "%.17g", p->top_p);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    snprintf(batch, sizeof batch, "%d", p->batch);
    char *argv[24] = {"generate", "--target", (char *)o->target_dir, "--input", input, "--output", data,
                      "--max-new-tokens", max_new, "--temperature", temperature, "--top-p", top_p, "--seed", seed,
                      "--batch", batch, "--device", (char *)(o->device ? o->device : "cpu")};
    int argc = 19;
    if (p->no_graphs) argv[argc++] = "--no-graphs";
    if (quiet) argv[argc++] = "--quiet";
    argv[argc] = NULL;
    if (df_cmd_generate(argc, argv) != 0) return df_fail(err, "--prompts %s: the regeneration failed (see above)", p->path);
    return 0;
}
