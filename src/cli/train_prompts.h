/* train --prompts FILE: the recipe's first half inside train (spec section
 * 5). The prompt or conversation records (cut into more prompts with
 * --prompt-cuts N, infer/prompt_cuts.h, into OUTPUT/prompts.cut.jsonl) go
 * through the generate job `dflash generate` runs (infer/generate_job.h),
 * on the training device, into
 * OUTPUT/regenerated.jsonl with its settings file beside it
 * (OUTPUT/regenerated.jsonl.generate.json), so the file is what `dflash
 * generate` writes for the same records and options, and a rerun (--resume
 * or not) continues after its last complete record, or does nothing when it
 * is complete. Training then reads that file as --data. With
 * --random-target-weights the regeneration runs the random target that
 * training then runs (the same seed), its settings file saying so. */
#ifndef DF_CLI_TRAIN_PROMPTS_H
#define DF_CLI_TRAIN_PROMPTS_H

#include <stddef.h>

#include "base/error.h"
#include "train/trainer.h"

typedef struct DfTrainPrompts {
    const char *path;   /* --prompts FILE (NULL: train on --data) */
    int cuts;           /* --prompt-cuts N (0: the records as given) */
    int max_new_tokens; /* generate's options, as generate takes them */
    double temperature, top_p;
    int batch;
    int no_graphs;
} DfTrainPrompts;

/* generate's defaults (cli/generate_options.def): no --prompts, no cuts. */
void df_train_prompts_default(DfTrainPrompts *p);

/* Regenerates the responses to p->path into OUTPUT/regenerated.jsonl with
 * o's target, device and seed; its path goes to data[cap]. quiet: generate
 * runs with --quiet. */
int df_train_regenerate(const DfTrainPrompts *p, const DfTrainOptions *o, int quiet, char *data, size_t cap,
                        DfError *err);

#endif
