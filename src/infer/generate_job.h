/* The generate job: the target's own responses to prompts and conversations
 * (the recipe's regenerated training data), with a KV cache and continuous
 * batching, resumable.
 *
 * Each response stops at an EOS id (generation_config.json's eos_token_id,
 * else config.json's; the EOS is not written) or after max_new_tokens.
 * Records are written in input order, each flushed as soon as it and those
 * before it are done; running the same job again after an interruption
 * continues after the last complete record (infer/resume.h), with the same
 * settings only (infer/generate_settings.h). Conversations are rendered with
 * the target's chat template, and the token it writes after an assistant
 * turn ends a response too; every assistant turn after the first user turn
 * is regenerated in order. Sampling draws depend only on (seed, record
 * index), so batch does not change the output.
 *
 * Where the caller installed the SIGINT/SIGTERM handler (base/signals.h), a
 * signal stops the job when a record finishes, the records before it in
 * order written complete. */
#ifndef DF_INFER_GENERATE_JOB_H
#define DF_INFER_GENERATE_JOB_H

#include "base/error.h"
#include "infer/chat_turns.h"

/* The defaults are the command line's: cli/generate_options.def. */
typedef struct DfGenerateJobOptions {
    const char *target; /* Hugging Face model directory (config, weights, tokenizer.json) */
    const char *input;  /* JSONL prompts and/or conversations */
    const char *output; /* JSONL records; appended to when resuming */
    const char *device; /* cpu, cuda or cuda:N */
    DfChatOptions chat; /* the chat template's date, file and extra variables (each NULL: the target's) */
    int max_new_tokens; /* per prompt or assistant turn */
    int batch;          /* sequences decoded together (0: as many as fit, infer/generate_plan.h) */
    double temperature; /* 0: greedy */
    double top_p;       /* nucleus mass in (0, 1]; 1: off */
    int seed;           /* with the record index it keys each draw */
    int no_graphs;      /* every op of every decode step queued, none replayed (the same output) */
    int random_target_weights; /* random weights of the target's shape (df_target_random_weights_seed(seed)),
                                  not its safetensors: speed at a model's shape; recorded in the settings */
    int quiet;          /* no progress or notes; one result line on stdout */
} DfGenerateJobOptions;

/* Runs the job. Returns 0, or -1 with err saying what and where (a record's
 * "FILE:LINE: why"), or DF_GENERATE_BAD_OPTIONS when the output is one of
 * the inputs (a command reports that as a bad command line). */
enum { DF_GENERATE_BAD_OPTIONS = -2 };
int df_generate_job(const DfGenerateJobOptions *o, DfError *err);

#endif
