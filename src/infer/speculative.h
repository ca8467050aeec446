/* Greedy speculative decoding with a DFlash drafter (spec section 6), one
 * prompt at a time, and the acceptance statistics that tau comes from.
 *
 * Cycle: block = [t, MASK x (B-1)] at positions start .. start+B-1 (start =
 * committed tokens, prompt included); the drafter, which has the context
 * K/V of positions < start, fills positions 1..B-1 by argmax; the target runs
 * the B block tokens with its KV cache; n = leading drafts equal to the
 * target's argmax; t and those n drafts are committed and the target's token
 * after them (the bonus) becomes the next t; the target cache is rolled back
 * to start + n + 1 (a hybrid target's recurrent state with it, see
 * target/hybrid_state.h) and the drafter's context grows by those n + 1 positions
 * (their features come from the verification pass). */
#ifndef DF_INFER_SPECULATIVE_H
#define DF_INFER_SPECULATIVE_H

#include <stdint.h>

#include "base/buffer.h"
#include "infer/drafter_infer.h"
#include "infer/generate.h"
#include "target/target_decode.h"

/* The data of the test seam point DF_SEAM_SPEC_DRAFT (base/test_seam.h):
 * each block after the drafter filled it (block[0] is t, block[1..B-1] the
 * draft) and the number of tokens generated so far; a test may overwrite
 * block[1..B-1]. */
typedef struct DfSpecDraftSeam {
    int n_generated;
    int32_t *block;
    int block_size;
} DfSpecDraftSeam;

typedef struct DfSpecOptions {
    int max_new_tokens;
    int block_size; /* >= 2 */
    int32_t eos_ids[DF_MAX_EOS];
    int n_eos;
} DfSpecOptions;

typedef struct DfSpecResult {
    DfI32Vec tokens;   /* generated tokens, the stopping EOS excluded */
    DfI32Vec accepted; /* n of every cycle */
    int target_passes; /* prefill + one verification per cycle */
} DfSpecResult;

/* Generates for one prompt in `slot` of both the target decoder (which must
 * tap the drafter's target_layer_ids) and the drafter; each slot must hold
 * n_prompt + max_new_tokens + block_size rows. res is reset first. */
int df_speculative_generate(DfTargetDecoder *target, DfDrafterRunner *drafter, int slot, const int32_t *prompt,
                            int n_prompt, const DfSpecOptions *opt, DfSpecResult *res, DfError *err);

void df_spec_result_free(DfSpecResult *res);

/* tau of one result: mean over cycles of (n + 1); 0 when there was no cycle. */
double df_spec_tau(const DfSpecResult *res);

#endif
