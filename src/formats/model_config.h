/* A Hugging Face target's config.json: the fields the target forward needs,
 * for the Qwen3 and Llama-3 families. */
#ifndef DF_FORMATS_MODEL_CONFIG_H
#define DF_FORMATS_MODEL_CONFIG_H

#include "base/error.h"

typedef enum DfArchitecture {
    DF_ARCH_QWEN3, /* Qwen3ForCausalLM: q_norm / k_norm per head */
    DF_ARCH_LLAMA, /* LlamaForCausalLM: no q/k norm */
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
} DfModelConfig;

/* path: config.json or the directory that holds it. Errors name the file and
 * the field; unknown architectures are refused with their name. */
int df_model_config_load(DfModelConfig *cfg, const char *path, DfError *err);

/* Python-style default taps (spec section 2): n = 1 gives [L/2]; else
 * round(1 + i*(L-4)/(n-1)) with round half to even. Writes n ids. */
void df_default_target_layer_ids(int num_layers, int n, int *out);

#endif
