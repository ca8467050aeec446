/* The tensors a target checkpoint must hold, and nothing else: checked
 * before anything is allocated for the model, so that a config that counts
 * more layers than the file holds is refused naming the first missing
 * tensor, and a checkpoint with tensors the forward would skip (biases of an
 * mlp_bias model, a layer past num_hidden_layers, a misspelt name) is
 * refused naming the first such tensor instead of running without them. */
#ifndef DF_TARGET_TARGET_TENSOR_SET_H
#define DF_TARGET_TARGET_TENSOR_SET_H

#include "base/error.h"
#include "target/model_config.h"
#include "formats/safetensors.h"

/* Every tensor of every decoder layer (all num_hidden_layers, whatever a
 * run loads), the embedding, the final norm and an untied lm_head are in st;
 * every tensor of st is one of them or one the model has beside its decoder:
 * rotary_emb.inv_freq buffers (derived from config.json), a tied lm_head.weight
 * that is a byte copy of the embedding, the vision tower (model.visual.*) of
 * a Qwen3_5ForConditionalGeneration, the multi-token-prediction head (mtp.*)
 * of a hybrid checkpoint. Errors name the file and the tensor. */
int df_target_check_tensor_set(const DfModelConfig *cfg, const DfSafetensors *st, DfError *err);

#endif
