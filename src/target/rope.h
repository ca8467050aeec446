/* RoPE frequencies and cos/sin tables on the host, as transformers computes
 * them (modeling_rope_utils: default and llama3 rope types), in fp32. */
#ifndef DF_TARGET_ROPE_H
#define DF_TARGET_ROPE_H

#include "target/model_config.h"

/* inv_freq[i] for i < head_dim/2: theta^(-2i/head_dim), then for llama3 the
 * wavelength-dependent scaling (low frequencies divided by factor, high ones
 * kept, a smooth blend in between). */
void df_rope_inv_freq(const DfRopeConfig *rope, int head_dim, float *inv_freq);

/* cos/sin of pos * inv_freq[i] for pos < n_pos, i < head_dim/2: [n_pos, head_dim/2]. */
void df_rope_tables(const DfRopeConfig *rope, int head_dim, int n_pos, float *cos_out, float *sin_out);

#endif
