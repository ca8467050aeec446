/* The model shapes the bench figures are taken at (bench_internal.h). */
#include <stdio.h>
#include <string.h>

#include "bench/bench_internal.h"

/* A target of Qwen3-8B's shape (config.json of Qwen/Qwen3-8B). */
DfModelConfig df_bench_qwen3_8b_shape(void) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3;
    snprintf(c.architecture_name, sizeof c.architecture_name, "Qwen3ForCausalLM");
    c.hidden_size = 4096, c.intermediate_size = 12288, c.num_layers = 36, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 128, c.vocab_size = 151936, c.max_position_embeddings = 40960, c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1, c.tie_word_embeddings = 0;
    c.bos_token_id = -1;
    return c;
}

/* Qwen3.6-27B's text model (the public Qwen3.5-27B / Qwen3.6-27B config.json):
 * 64 layers, every 4th full attention, hidden 5120, MLP 17408, 24 query / 4
 * kv heads of 256 with a gated q_proj and rotary on 64 of them (partial
 * factor 0.25, theta 1e7); DeltaNet 16 key / 48 value heads of 128, conv
 * kernel 4; vocabulary 248320, untied head. With n_layers < 64 the first
 * n_layers of that layout (the same 3:1 pattern). */
DfModelConfig df_bench_qwen36_27b_shape(int n_layers) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3_5;
    snprintf(c.architecture_name, sizeof c.architecture_name, "Qwen3_5ForCausalLM");
    c.hidden_size = 5120, c.intermediate_size = 17408, c.num_layers = n_layers, c.num_heads = 24, c.num_kv_heads = 4;
    c.head_dim = 256, c.rotary_dim = 64, c.vocab_size = 248320, c.max_position_embeddings = 262144;
    c.rms_norm_eps = 1e-6, c.rope.theta = 1e7, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1;
    c.tie_word_embeddings = 0, c.bos_token_id = -1;
    c.is_hybrid = 1, c.attn_output_gate = 1, c.norm_unit_offset = 1;
    c.linear = (DfLinearAttnConfig){.num_key_heads = 16, .num_value_heads = 48, .key_head_dim = 128,
                                    .value_head_dim = 128, .conv_kernel = 4};
    for (int i = 0; i < n_layers; i++) c.layer_is_linear[i] = (i + 1) % 4 != 0;
    return c;
}
