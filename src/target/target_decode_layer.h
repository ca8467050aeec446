/* A dense decoder layer of the target decoder (target/target_decode.c) over
 * the fused weights (target/target.h: qkv_proj, gate_up_proj): one product
 * for q/k/v, one op for the q/k norms, rope and the cache writes, one
 * product for gate/up and one op for swiglu. */
#ifndef DF_TARGET_TARGET_DECODE_LAYER_H
#define DF_TARGET_TARGET_DECODE_LAYER_H

#include "target/target_decode.h"

/* Whether every layer of m is a dense layer with its fused owners set (as
 * the loader and the random init make them): the decoder then takes the
 * fused layer, and its workspace holds qkv/gate_up instead of k, v, up. */
int df_target_decode_can_fuse(const DfTargetModel *m);

/* Layer `layer` for the step's new rows: x += attention and MLP, the new
 * keys/values written into the layer's cache. */
void df_target_decode_fused_layer(DfTargetDecoder *d, int layer, const DfKvBatch *kb);

#endif
