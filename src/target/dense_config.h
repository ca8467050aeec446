/* The dense Qwen3 / Llama-3 fields of a config.json that change the forward
 * beyond the common sizes: the dense family's read_config (target_family.h). The forward has one
 * shape: SiLU-gated MLP, full causal attention in every layer, no biases.
 * A field asking for anything else is refused naming the file and the field,
 * so that a model is never run as another one without a word. */
#ifndef DF_TARGET_DENSE_CONFIG_H
#define DF_TARGET_DENSE_CONFIG_H

#include <cjson/cJSON.h>

#include "json/json_fields.h"
#include "target/model_config.h"

/* obj: the text model's fields, after the common sizes were read (the
 * layer count bounds layer_types). Refuses, with transformers' meaning of
 * each field: hidden_act other than silu (or its alias swish); mlp_bias
 * true (attention_bias is refused by model_config.c for every family); a
 * Qwen3 sliding window in effect (use_sliding_window true
 * with a sliding_window and a max_window_layers below num_hidden_layers, as
 * Qwen3Config derives its layer types); a layer_types list whose length is
 * not num_hidden_layers or with an entry other than full_attention. */
int df_dense_config_read(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg);

#endif
