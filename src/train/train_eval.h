/* Held-out evaluation during training (train --eval-data, train/trainer.h):
 * real greedy speculative decoding (spec section 6, infer/speculative.h) of
 * the first K prompts of a file (prompt records or conversations, as
 * `dflash eval` takes them), between steps, on the training device, with
 * the drafter's weights as the training holds them at that step (the
 * drafter's own buffer, ACT: fp32 on the CPU, bf16 rounded from the fp32
 * master weights on CUDA, which is what `dflash eval` of that step's
 * checkpoint uploads), and the whole target with its head. Each eval's
 * result is one line of OUTPUT/eval.jsonl:
 *   {"step", "tau", "tau_prompt_mean", "accept_by_position": [positions 1..B-1],
 *    "accepted_hist": [n = 0..B-1], "lossless", "mismatches", "prompts",
 *    "tokens", "cycles", "target_passes", "greedy_passes", "seconds",
 *    "tokens_per_s", "elapsed_s"}
 * "lossless": every prompt's speculative output equals the target's plain
 * greedy decoding of it (made once, at the first eval of the call: the
 * target is frozen; "greedy_passes" are its target passes); "seconds" and
 * "tokens_per_s" are the speculative decoding's. */
#ifndef DF_TRAIN_TRAIN_EVAL_H
#define DF_TRAIN_TRAIN_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "base/buffer.h"
#include "base/error.h"
#include "target/model_config.h"
#include "infer/chat_turns.h"
#include "infer/drafter_infer.h"
#include "infer/speculative.h"
#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "target/target.h"

typedef struct DfTrainEval {
    const char *data;       /* the file, for messages */
    int n_prompts;
    DfI32Vec *prompts;      /* [n_prompts] token ids */
    DfI32Vec *reference;    /* [n_prompts] the target's greedy continuations (have_reference) */
    int have_reference;
    int64_t reference_passes; /* target passes of that greedy decoding */
    int64_t max_prompt;     /* the longest prompt's tokens */
    int64_t slot_rows;      /* the decoding slot: max_prompt + max_new_tokens + block */
    DfSpecOptions spec;
    DfGenerateOptions greedy;
    DfTargetDecoder dec;
    DfDrafterRunner runner;
    int attached;
    FILE *fp;               /* OUTPUT/eval.jsonl, appended */
    char path[4200];
    /* over the whole run (the lines kept at a resume included) */
    int64_t evals, best_step, last_step;
    double best_tau, last_tau;
} DfTrainEval;

/* The result of one eval, as written. */
#define DF_TRAIN_EVAL_MAX_POSITIONS 64
typedef struct DfTrainEvalResult {
    double tau, seconds;
    int64_t tokens, mismatches;
    double tau_prompt_mean;
    int n_positions; /* block size - 1 */
    double accept_by_position[DF_TRAIN_EVAL_MAX_POSITIONS]; /* [k-1]: fraction of cycles reaching position k */
} DfTrainEvalResult;

/* Reads the first n_prompts prompts of data (all when it has fewer),
 * renders its conversations with the target's chat template as chat asks
 * (--chat-template, --chat-template-kwargs; may be NULL), tokenizes them
 * with the target's tokenizer and takes its end-of-generation ids; nothing
 * goes to a device yet. block_size: the drafter's. */
int df_train_eval_read(DfTrainEval *e, const char *target_dir, const DfModelConfig *tcfg, const char *data,
                       const DfChatOptions *chat, int n_prompts, int max_new_tokens, int block_size, DfError *err);

/* OUTPUT/eval.jsonl: created empty (resume_step < 0), or cut back to the
 * lines of steps <= resume_step, whose best tau it remembers. */
int df_train_eval_open_log(DfTrainEval *e, const char *output_dir, int64_t resume_step, DfError *err);

/* The decoder over target (all layers and the head loaded) and the drafter
 * runner over the training's weights `params` (ACT, in dcfg's layout: not
 * copied, so each eval sees them as they are then). */
int df_train_eval_attach(DfTrainEval *e, DfTargetModel *target, const DfDrafterConfig *dcfg, DfBuffer params,
                         DfError *err);

/* One eval at `step`: decodes every prompt, appends and flushes its line. */
int df_train_eval_run(DfTrainEval *e, int64_t step, double elapsed_s, DfTrainEvalResult *res, DfError *err);

void df_train_eval_free(DfTrainEval *e);

#endif
