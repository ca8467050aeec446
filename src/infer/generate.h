/* Plain autoregressive generation with the target's KV cache for a batch of
 * prompts at once (greedy or sampled), and the stop rules shared with
 * speculative decoding. */
#ifndef DF_INFER_GENERATE_H
#define DF_INFER_GENERATE_H

#include <stdint.h>

#include "base/buffer.h"
#include "target/model_config.h"
#include "target/target_decode.h"

/* The prompt tokens one step takes at most, over all the records being
 * prefilled (chunked prefill): a long prompt runs over several steps, each
 * beside the other records' next tokens, so their decoding never waits for
 * a whole prompt and the step's workspace is bounded by this rather than by
 * every slot's prompt at once. A multiple of DF_GENERATE_PROMPT_SLICE (a
 * prompt is cut into whole slices of 64 tokens, so that each slice starts
 * where the attention kernels' 64-row tiles do); large enough that the
 * products of a prefill step stay near their peak. */
#define DF_GENERATE_STEP_PROMPT_TOKENS 2048
#define DF_GENERATE_PROMPT_SLICE 64

typedef struct DfGenerateOptions {
    int max_new_tokens;
    double temperature; /* 0: greedy */
    double top_p;       /* 1: off */
    uint64_t seed;
    uint64_t record_offset; /* added to record indices in the sampling key (a resumed run starts past 0) */
    int32_t eos_ids[DF_MAX_EOS];
    int n_eos;
    int step_prompt_tokens; /* 0: DF_GENERATE_STEP_PROMPT_TOKENS; else a multiple of DF_GENERATE_PROMPT_SLICE or
                               less than it (tests cut prompts finer) */
} DfGenerateOptions;

/* The ids that end a generation: generation_config.json's eos_token_id in
 * target_dir when that file gives one, else config.json's (already in cfg). */
int df_generation_eos_ids(const char *target_dir, const DfModelConfig *cfg, int32_t *eos, int *n_eos, DfError *err);

int df_is_eos(const DfGenerateOptions *opt, int32_t id);

/* Continuous batching over the decoder's slots: record i's prompt comes
 * from source(ctx, i, ids) (appending to an empty ids) when a slot is free,
 * is prefilled in slices of at most opt->step_prompt_tokens a step (chunked
 * prefill), in the same steps as the other slots' next tokens, and when it
 * ends (EOS, not kept, or max_new_tokens) its new tokens go to sink(ctx, i,
 * out) and its slot takes the next record. Records finish out of order.
 * A record of several turns (a conversation) continues: when its sink
 * returns 1 instead of 0, the record keeps its slot, source(ctx, i, ids) is
 * called again for its next prompt, which is prefilled from an empty cache
 * row (the whole prompt, not just the new part), and its sampling generator
 * goes on where the previous turn left it.
 * Record i's sampling generator is keyed by (seed, record_offset + i), so the output of a
 * record depends on neither the slot count nor its neighbours. prompt length
 * + max_new_tokens must fit a slot. *steps (optional): forward passes run. */
typedef int (*DfGenerateSource)(void *ctx, int index, DfI32Vec *ids, DfError *err);
typedef int (*DfGenerateSink)(void *ctx, int index, const DfI32Vec *out, DfError *err); /* -1, 0 or 1 */

int df_generate_stream(DfTargetDecoder *d, int n_records, DfGenerateSource source, DfGenerateSink sink, void *ctx,
                       const DfGenerateOptions *opt, int *steps, DfError *err);

/* The stream over arrays: prompts[i] (prompt_lens[i] tokens) in, outputs[i]
 * out, record index i. */
int df_generate_batch(DfTargetDecoder *d, int n, const int32_t *const *prompts, const int *prompt_lens,
                      const DfGenerateOptions *opt, DfI32Vec *outputs, int *steps, DfError *err);

#endif
