/* A Hugging Face target's config.json: the fields the target forward needs,
 * for the Qwen3 and Llama-3 families and the dense hybrid Qwen3.5 / Qwen3.6
 * family (Gated DeltaNet linear attention mixed with gated full attention). */
#ifndef DF_TARGET_MODEL_CONFIG_H
#define DF_TARGET_MODEL_CONFIG_H

#include "base/error.h"

typedef enum DfArchitecture {
    DF_ARCH_QWEN3, /* Qwen3ForCausalLM: q_norm / k_norm per head */
    DF_ARCH_LLAMA, /* LlamaForCausalLM: no q/k norm */
    DF_ARCH_QWEN3_5, /* Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (text part): hybrid */
} DfArchitecture;

typedef enum DfRopeType {
    DF_ROPE_DEFAULT,
    DF_ROPE_LLAMA3, /* rope_scaling / rope_parameters with rope_type "llama3" */
} DfRopeType;

typedef struct DfRopeConfig {
    double theta;
    DfRopeType type;
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} DfRopeConfig;

#define DF_MAX_EOS 8
#define DF_MAX_LAYERS 1024

/* Gated DeltaNet sizes of a hybrid target's linear_attention layers:
 * in_proj_qkv yields q, k [key_heads * key_head_dim] and v [value_heads *
 * value_head_dim]; each key head serves value_heads / key_heads consecutive
 * value heads; a causal depthwise convolution of conv_kernel taps runs over
 * q, k, v first. */
typedef struct DfLinearAttnConfig {
    int num_key_heads, num_value_heads, key_head_dim, value_head_dim, conv_kernel;
} DfLinearAttnConfig;

typedef struct DfModelConfig {
    DfArchitecture arch;
    char architecture_name[64]; /* as written in config.json */
    int hidden_size;
    int intermediate_size;
    int num_layers;
    int num_heads;
    int num_kv_heads;
    int head_dim;
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    DfRopeConfig rope;
    int tie_word_embeddings;
    int has_qk_norm;
    int attention_bias;    /* only 0 supported; a config asking for bias is refused */
    int bos_token_id;      /* -1 when absent */
    int eos_token_ids[DF_MAX_EOS];
    int n_eos;
    char torch_dtype[16];  /* "bfloat16", "float16", "float32" or "" */
    char weight_prefix[32]; /* of the decoder's tensors: "model." or "model.language_model." */
    int rotary_dim;         /* RoPE turns the first rotary_dim values of a head (head_dim unless partial) */
    /* Hybrid family only (is_hybrid); zero otherwise. */
    int is_hybrid;
    unsigned char layer_is_linear[DF_MAX_LAYERS]; /* 1: linear_attention (Gated DeltaNet), 0: full_attention */
    DfLinearAttnConfig linear;
    int attn_output_gate; /* q_proj yields [query | gate] per head; attention output *= sigmoid(gate) */
    int norm_unit_offset; /* RMSNorm scales by (1 + weight) (all but the DeltaNet's gated norm) */
} DfModelConfig;

/* path: config.json or the directory that holds it. Errors name the file and
 * the field; unknown architectures are refused with their name. */
int df_model_config_load(DfModelConfig *cfg, const char *path, DfError *err);

/* Tap layers (decoder layers whose outputs feed the drafter) a run may ask for. */
#define DF_MAX_TAPS 16

/* Python-style default taps (spec section 2): n = 1 gives [L/2]; else
 * round(1 + i*(L-4)/(n-1)) with round half to even. Writes n ids. */
void df_default_target_layer_ids(int num_layers, int n, int *out);

#endif
