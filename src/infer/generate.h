/* Plain autoregressive generation with the target's KV cache for a batch of
 * prompts at once (greedy or sampled), and the stop rules shared with
 * speculative decoding. */
#ifndef DF_INFER_GENERATE_H
#define DF_INFER_GENERATE_H

#include <stdint.h>

#include "base/buffer.h"
#include "formats/model_config.h"
#include "infer/target_decode.h"

typedef struct DfGenerateOptions {
    int max_new_tokens;
    double temperature; /* 0: greedy */
    double top_p;       /* 1: off */
    uint64_t seed;
    int32_t eos_ids[DF_MAX_EOS];
    int n_eos;
} DfGenerateOptions;

/* The ids that end a generation: generation_config.json's eos_token_id in
 * target_dir when that file gives one, else config.json's (already in cfg). */
int df_generation_eos_ids(const char *target_dir, const DfModelConfig *cfg, int32_t *eos, int *n_eos, DfError *err);

int df_is_eos(const DfGenerateOptions *opt, int32_t id);

/* Generates for n prompts (n <= the decoder's slots; slot i serves prompt
 * i; prompt_len + max_new_tokens must fit a slot). outputs[i] receives the
 * new tokens, the EOS that stopped it excluded. record_index[i] keys prompt
 * i's sampling generator. *steps (optional) receives the forward passes run. */
int df_generate_batch(DfTargetDecoder *d, int n, const int32_t *const *prompts, const int *prompt_lens,
                      const uint64_t *record_index, const DfGenerateOptions *opt, DfI32Vec *outputs, int *steps,
                      DfError *err);

#endif
